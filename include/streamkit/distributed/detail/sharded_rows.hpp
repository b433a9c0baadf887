#pragma once
// The sharded query's work per row (sharded layout, several ranks; distributed_nearest runs it):
// each step is a function of one row, a STREAMKIT_HOST_DEVICE functor below, run over all rows by
// an engine. host_row_engine (here) keeps the rows in host memory and runs the steps on the host
// threads: distributed_nearest's own query of host arrays with any Searcher, what CI runs.
// device_row_engine (device_rows.cuh) keeps them in the memory of the rank's GPU and runs the same
// functors as kernels: distributed_gpu_nearest's query, whose rows then cross PCIe only to and from
// MPI. The exchanges between ranks and the rare steps (the cell walk of the visitors whose
// neighbourhood leaves their owner's range, merging other ranks' candidates) are
// distributed_nearest's, the same for both engines.
//
// An engine has
//   template <class T> using buffer = ...;        // storage where the rows are
//   template <class T> using host_buffer = ...;   // host storage that MPI sends from and receives into
//   template <class T> T* reserve(buffer<T>&, std::size_t n);       // (and for host_buffer) at least n
//                                                                   // elements, grown only, contents not kept
//   template <class Step> void for_each(std::size_t n, Step const& step);  // step(i) for every i < n
//   void partition(std::uint32_t const* bin, std::size_t n, std::size_t bins, std::uint32_t* order, std::size_t* sizes);
//       // a stable counting sort: order lists the rows by bin (a row's bin below `bins`), rows of a
//       // bin in their order; sizes[b] (host) the rows in bin b
//   std::size_t select(std::uint8_t const* flag, std::size_t n, std::uint32_t* selected);
//       // the rows whose flag is set, in order, into selected; returns how many
//   template <class T> void to_host(T const* from, std::size_t n, T* host);   // buffer to host_buffer
//   template <class T> void from_host(T const* host, std::size_t n, T* to);   // host_buffer to buffer
//   template <class T> void copy(T const* from, std::size_t n, T* to);        // within buffers
//   void wait();  // returns once everything enqueued above is done
// for_each and the copies may return before they are done (in order among themselves); partition
// and select wait. Row numbers are 32-bit (distributed_nearest checks).

#include <streamkit/core/config.hpp>
#include <streamkit/distributed/detail/parallel_ranges.hpp>
#include <streamkit/distributed/detail/space_partition.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace streamkit::distributed::detail {

/// Points in an engine's memory (radians): row i at latitude[i * stride], longitude[i * stride].
struct point_rows {
  double const* latitude;
  double const* longitude;
  std::size_t stride;
};

/// k candidates per row in an engine's memory: row i's j-th at index[i * stride + j] and
/// angle[i * stride + j] (angle null: not wanted).
struct neighbor_rows {
  std::int64_t* index;
  double* angle;
  std::size_t stride;
};

/// The angle of a missing candidate: the quiet NaN (the bits std::numeric_limits gives on the host).
STREAMKIT_HOST_DEVICE inline double missing_angle()
{
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(0x7ff8000000000000LL);
#else
  return std::numeric_limits<double>::quiet_NaN();
#endif
}

/// owner[i]: the rank whose range holds row i's key under the ranks − 1 splitters, or `ranks` for an
/// invalid point (it goes nowhere and is answered "none" where it is).
struct find_owners {
  point_rows points;
  keyed_id const* splitters;
  std::size_t ranks;
  std::uint32_t* owner;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t i) const
  {
    std::uint64_t const key = space_key(points.latitude[i * points.stride], points.longitude[i * points.stride]);
    owner[i] = static_cast<std::uint32_t>(key == nowhere ? ranks : rank_of(splitters, ranks - 1, keyed_id{key, 0}));
  }
};

/// owner[i]: the rank whose range holds reference i, whose global id is first_id + i, under the
/// ranks − 1 splitters (an invalid reference too: its key is `nowhere`, and no search returns it).
struct reference_owners {
  point_rows points;
  std::uint64_t first_id;
  keyed_id const* splitters;
  std::size_t ranks;
  std::uint32_t* owner;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t i) const
  {
    std::uint64_t const key = space_key(points.latitude[i * points.stride], points.longitude[i * points.stride]);
    owner[i] = static_cast<std::uint32_t>(rank_of(splitters, ranks - 1, keyed_id{key, first_id + i}));
  }
};

/// Slot s of the send order (order[s]: the rows by rank, each rank's in order; a query's valid rows,
/// an update's references): its row's coordinates into the packed send buffers, and the row's slot
/// into slot_of (queries) or its global id, first_id + the row, into id (updates); either may be null.
struct fill_slots {
  point_rows points;
  std::uint32_t const* order;
  double* latitude;
  double* longitude;
  std::uint32_t* slot_of;
  std::uint64_t first_id;
  std::int64_t* id;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t s) const
  {
    std::size_t const i = order[s];
    latitude[s] = points.latitude[i * points.stride];
    longitude[s] = points.longitude[i * points.stride];
    if (slot_of != nullptr) { slot_of[i] = static_cast<std::uint32_t>(s); }
    if (id != nullptr) { id[s] = static_cast<std::int64_t>(first_id + i); }
  }
};

/// key[s]: the key of the row of sample s of `count` rows (sample_row()), for the next splitters.
struct sample_keys_of {
  point_rows points;
  std::size_t count;
  std::uint64_t* key;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t s) const
  {
    std::size_t const i = sample_row(s, count);
    key[s] = space_key(points.latitude[i * points.stride], points.longitude[i * points.stride]);
  }
};

/// The shard's local ids made global: index[e] ≥ 0 becomes shard_id[index[e]].
struct global_ids {
  std::int64_t* index;
  std::int64_t const* shard_id;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t e) const
  {
    if (index[e] >= 0) { index[e] = shard_id[index[e]]; }
  }
};

/// flag[v]: whether visitor v (packed coordinates, its owner's k candidates) may have a nearer
/// reference on another rank: fewer than k here (any rank may hold one), or a neighbourhood within
/// its k-th angle that reaches beyond the keys this rank holds alone (reaches_beyond()). Never set
/// when no other rank holds a reference.
struct flag_reach {
  double const* latitude;
  double const* longitude;
  std::int64_t const* index;
  double const* angle;
  std::size_t k;
  key_span alone;
  bool others_hold_references;
  std::uint8_t* flag;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t v) const
  {
    std::size_t const last = v * k + k - 1;
    bool const beyond = index[last] < 0 || reaches_beyond(latitude[v], longitude[v], angle[last], alone);
    flag[v] = others_hold_references && beyond ? 1 : 0;
  }
};

/// Row f of the flagged visitors (visitor selected[f]): its coordinates and k candidates into
/// packed rows, for the host's cell walk and merge.
struct gather_flagged {
  std::uint32_t const* selected;
  double const* latitude;
  double const* longitude;
  std::int64_t const* index;
  double const* angle;
  std::size_t k;
  double* flagged_latitude;
  double* flagged_longitude;
  std::int64_t* flagged_index;
  double* flagged_angle;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t f) const
  {
    std::size_t const v = selected[f];
    flagged_latitude[f] = latitude[v];
    flagged_longitude[f] = longitude[v];
    for (std::size_t j = 0; j < k; ++j) {
      flagged_index[f * k + j] = index[v * k + j];
      flagged_angle[f * k + j] = angle[v * k + j];
    }
  }
};

/// Candidate e of the flagged rows (row e / k, merged on the host) back into its visitor's row.
struct scatter_flagged {
  std::uint32_t const* selected;
  std::int64_t const* flagged_index;
  double const* flagged_angle;
  std::size_t k;
  std::int64_t* index;
  double* angle;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t e) const
  {
    std::size_t const to = selected[e / k] * k + e % k;
    index[to] = flagged_index[e];
    angle[to] = flagged_angle[e];
  }
};

/// Candidate e of the caller's rows (row i = e / k): from slot slot_of[i] of `home` (the answers in
/// send order), or −1 and NaN for an invalid point (owner `invalid`).
struct place_rows {
  std::uint32_t const* owner;
  std::uint32_t invalid;
  std::uint32_t const* slot_of;
  std::int64_t const* home_index;
  double const* home_angle;
  std::size_t k;
  neighbor_rows result;

  STREAMKIT_HOST_DEVICE void operator()(std::size_t e) const
  {
    std::size_t const i = e / k, j = e % k;
    bool const valid = owner[i] != invalid;
    std::size_t const from = valid ? std::size_t{slot_of[i]} * k + j : 0;
    result.index[i * result.stride + j] = valid ? home_index[from] : -1;
    if (result.angle != nullptr) { result.angle[i * result.stride + j] = valid ? home_angle[from] : missing_angle(); }
  }
};

/// The engine of rows in host memory, its steps on the host threads (see the file's description).
class host_row_engine {
 public:
  template <class T>
  using buffer = std::vector<T>;
  template <class T>
  using host_buffer = std::vector<T>;

  /// @param team the host threads; must outlive the engine.
  explicit host_row_engine(host_team const& team) : team_(&team) {}

  template <class T>
  static T* reserve(std::vector<T>& storage, std::size_t count)
  {
    if (storage.size() < count) { storage.resize(count); }
    return storage.data();
  }

  template <class Step>
  void for_each(std::size_t count, Step const& step) const
  {
    team_->parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t) {
      for (std::size_t i = begin; i < end; ++i) { step(i); }
    });
  }

  /// A counting sort: each part of the rows counts its bins, the parts' places follow bin by bin,
  /// part after part, and each part writes its rows in order.
  void partition(std::uint32_t const* bin, std::size_t count, std::size_t bins, std::uint32_t* order, std::size_t* sizes)
  {
    std::size_t const parts = part_count(count, team_->threads());
    place_.assign(parts * bins, 0);
    team_->parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t part) {
      std::size_t* const counts = place_.data() + part * bins;
      for (std::size_t i = begin; i < end; ++i) { ++counts[bin[i]]; }
    });
    std::size_t total = 0;
    for (std::size_t b = 0; b < bins; ++b) {
      sizes[b] = 0;
      for (std::size_t part = 0; part < parts; ++part) {
        std::size_t const rows = place_[part * bins + b];
        place_[part * bins + b] = total;
        total += rows, sizes[b] += rows;
      }
    }
    team_->parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t part) {
      std::size_t* const place = place_.data() + part * bins;
      for (std::size_t i = begin; i < end; ++i) { order[place[bin[i]]++] = static_cast<std::uint32_t>(i); }
    });
  }

  static std::size_t select(std::uint8_t const* flag, std::size_t count, std::uint32_t* selected)
  {
    std::size_t found = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (flag[i] != 0) { selected[found++] = static_cast<std::uint32_t>(i); }
    }
    return found;
  }

  template <class T>
  void to_host(T const* from, std::size_t count, T* to) const
  {
    parallel_copy(from, count, to, *team_);
  }
  template <class T>
  void from_host(T const* from, std::size_t count, T* to) const
  {
    parallel_copy(from, count, to, *team_);
  }
  template <class T>
  void copy(T const* from, std::size_t count, T* to) const
  {
    parallel_copy(from, count, to, *team_);
  }
  static void wait() {}

 private:
  host_team const* team_;
  std::vector<std::size_t> place_;  // [part * bins + bin]
};

/// The sharded layout's working memory on one engine, kept between updates and queries so that a loop
/// of steps no larger than before allocates nothing.
template <class Engine>
struct sharded_rows {
  template <class T>
  using buffer = typename Engine::template buffer<T>;
  template <class T>
  using host_buffer = typename Engine::template host_buffer<T>;

  // The partition of the update that partition_stamp names (distributed_nearest's count of
  // update()s; 0: none): its splitters and the global ids of the shard's references, in the
  // engine's memory. sharded_query_on() refreshes them when they are another update()'s.
  buffer<keyed_id> splitters;
  buffer<std::int64_t> shard_id;
  std::uint64_t partition_stamp = 0;
  // The shard's coordinates (by global id), where the searcher prepared from.
  buffer<double> shard_latitude, shard_longitude;

  // In the engine's memory.
  buffer<std::uint32_t> owner, order, slot_of, selected;
  buffer<std::uint8_t> flag;
  buffer<std::uint64_t> sample_key;
  buffer<double> send_latitude, send_longitude;        // the valid rows (references: all) in send order (by owner)
  buffer<std::int64_t> send_id;                        // update(): the references' global ids in send order
  buffer<double> visitor_latitude, visitor_longitude;  // the rows this rank owns, by sending rank
  buffer<std::int64_t> found_index, home_index, flagged_index;
  buffer<double> found_angle, home_angle, flagged_angle, flagged_latitude, flagged_longitude;
  // On the host, for MPI (the parts of the rows above that go to or come from other ranks).
  host_buffer<std::uint64_t> sample_key_host;
  host_buffer<double> outgoing_latitude, outgoing_longitude, incoming_latitude, incoming_longitude;
  host_buffer<std::int64_t> outgoing_id, incoming_id;  // update(): the references' global ids
  host_buffer<std::int64_t> answer_index_out, answer_index_in, flagged_index_host;
  host_buffer<double> answer_angle_out, answer_angle_in, flagged_angle_host, flagged_latitude_host, flagged_longitude_host;
  std::vector<std::size_t> bins;  // rows per owner (queries: and invalid), from partition()
};

}  // namespace streamkit::distributed::detail
