#pragma once
/// @file nearest_neighbor.hpp
/// Exact k-nearest-neighbour search across MPI ranks. Each rank holds a part of the references and of
/// the observations; every rank gets the neighbours of its own observations among all references,
/// in its own order, with global reference ids (the rank's offset in the concatenation of all ranks'
/// parts in rank order, plus the local index): the answer of one search over the concatenated
/// references, ties to the smaller global id, −1 and NaN beyond the set and for invalid observations
/// (a non-finite coordinate or |latitude| > π/2; an invalid reference is never a neighbour).
///
/// Two layouts of the references:
/// - replicated: update() all-gathers every rank's part, so every rank searches all references;
///   per step each rank receives all M references (16 bytes each).
/// - sharded (too many to replicate, or many observations): update() repartitions the references
///   by space. Each reference's key on a space-filling curve (a Morton order of latitude-longitude
///   cells, detail/space_partition.hpp) and its global id order the references; splitters chosen
///   from a sample of every rank's keys cut that order into one contiguous range per rank, and one
///   all-to-all moves each reference to the rank of its range (keeping its global id). Each rank's
///   shard is then a compact region. The sample weighs the references and the observations of the
///   previous query alike, so that a region with many observations is cut into more, smaller ranges
///   (a hot spot of observations is spread over several ranks rather than queued on one).
///   A query is the two-phase search of distributed trees: each observation goes to the rank whose
///   range holds its key (its owner), which searches its shard; the k-th distance found bounds where a
///   nearer reference can be, and the owner sends the observation on only to the ranks whose range
///   meets the latitude-longitude cells within that bound (an owner with fewer than k references:
///   to every rank). Those return their k candidates to the owner, which keeps the k nearest (by
///   angle, then global id) and returns them to the observation's own rank, into its row.
///
/// What runs each rank's own search is a template parameter (a GPU engine, or a CPU search in the
/// host tests), so the exchange is the same whatever searches. A `Searcher` has
///   void prepare(double const* latitude, double const* longitude, std::size_t count);
///   void search(double const* latitude, double const* longitude, std::size_t count, std::size_t k,
///               std::int64_t* index, double* angle);
/// with coordinates in radians (float64, packed); search writes, per observation, k pairs (local
/// index, angle in radians) nearest first, ties to the smaller index, -1 and NaN beyond the set and
/// for invalid observations (and never returns an invalid reference).
///
/// Every call is collective over the communicator. Ranks that disagree on k or the layout all throw
/// the same std::invalid_argument; an exception in one rank's own search reaches every rank
/// (communicator.hpp).

#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/detail/parallel_ranges.hpp>
#include <streamkit/distributed/detail/space_partition.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace streamkit::distributed {

/// How the references are spread over the ranks.
enum class reference_layout : std::uint8_t {
  replicated,  ///< all-gathered: every rank searches every reference
  sharded      ///< repartitioned by space; observations visit their key's rank and the ranks within reach
};

/// What the last query or update moved between ranks and searched (this rank's share; compare the
/// ranks' values for the load imbalance).
struct exchange_stats {
  std::uint64_t bytes_sent = 0;             ///< payload this rank sent to other ranks
  std::uint64_t bytes_received = 0;         ///< payload this rank received from other ranks
  std::uint64_t observations_sent = 0;      ///< sharded queries: observations sent to other ranks (to their owner, and visits)
  std::uint64_t visits = 0;                 ///< sharded queries: of those, sent on by this rank as owner to other ranks within reach
  std::uint64_t observations_searched = 0;  ///< queries: observations this rank's searcher searched (own, owned, visiting)
  std::uint64_t references_held = 0;        ///< references this rank searches (its shard; replicated: all)
  // Where this rank's wall time went (seconds; their sum is the call's time but for the agreement checks):
  double seconds = 0;                       ///< in the exchange's collectives (waiting for slower ranks included)
  double search_seconds = 0;                ///< in this rank's searcher: update, its prepare(); query, its searches
  double host_seconds = 0;                  ///< in the host loops: keys, splitters, routing, packing, merging, placing results
  double staging_seconds = 0;               ///< distributed_gpu_nearest: device views copied to and from page-locked buffers, not hidden behind other work
};

namespace detail {

/// (angle, global id) of a candidate neighbour; missing ones (id −1, angle NaN) order last.
struct candidate {
  double angle;
  std::int64_t id;
};

/// Whether `a` ranks before `b`: smaller angle, then smaller id; missing ones last.
inline bool nearer(candidate const& a, candidate const& b)
{
  bool const a_missing = a.id < 0, b_missing = b.id < 0;
  if (a_missing != b_missing) { return b_missing; }
  if (a_missing) { return false; }
  return a.angle < b.angle || (a.angle == b.angle && a.id < b.id);
}

/// The staging of callers whose rows are already in the host arrays (see distributed_nearest's
/// update_in_parts()): nothing to wait for, nothing to send back.
struct host_rows {
  void arrive(std::size_t, std::size_t) const {}
  void leave(std::size_t, std::size_t) const {}
};

/// Merges `other` (k candidates, nearest first, from another shard) into `index`/`angle` (k, nearest
/// first) in place, keeping the k nearest: both lists are ordered as nearer() orders, and no id is in
/// both, so this is the k smallest of their union.
inline void merge_nearest(std::int64_t* index, double* angle, std::int64_t const* other_index, double const* other_angle,
                          std::size_t k, candidate* merged)
{
  std::size_t a = 0, b = 0;
  for (std::size_t j = 0; j < k; ++j) {
    candidate const mine{angle[a], index[a]}, theirs{other_angle[b], other_index[b]};
    merged[j] = nearer(theirs, mine) ? (++b, theirs) : (++a, mine);
  }
  for (std::size_t j = 0; j < k; ++j) {
    bool const found = merged[j].id >= 0;
    index[j] = found ? merged[j].id : -1;
    angle[j] = found ? merged[j].angle : std::numeric_limits<double>::quiet_NaN();
  }
}

/// Adds the wall time since `mark` to `into` and moves `mark` to now (the phases of exchange_stats).
inline void lap(double& mark, double& into)
{
  double const now = MPI_Wtime();
  into += now - mark;
  mark = now;
}

/// `count` as an MPI count. @throws std::length_error beyond 2^31 - 1.
inline int mpi_count(std::size_t count, char const* what)
{
  if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::length_error(std::string(what) + ": " + std::to_string(count) + " elements in one message; MPI counts stop at 2^31 - 1");
  }
  return static_cast<int>(count);
}

/// Exclusive prefix sums of `counts` (MPI displacements).
inline std::vector<int> displacements(std::vector<int> const& counts)
{
  std::vector<int> at(counts.size(), 0);
  for (std::size_t r = 1; r < counts.size(); ++r) { at[r] = at[r - 1] + counts[r - 1]; }
  return at;
}

/// The per-rank counts as MPI counts, each times `per_item`.
inline std::vector<int> mpi_counts(std::vector<std::size_t> const& counts, std::size_t per_item, char const* what)
{
  std::vector<int> out(counts.size());
  for (std::size_t r = 0; r < counts.size(); ++r) { out[r] = mpi_count(counts[r] * per_item, what); }
  return out;
}

/// One MPI_Alltoallv of `send` (send_counts[r] values for rank r, from send_at[r]) into `receive`,
/// resized to what arrives (receive_counts[r] values from rank r, at receive_at[r]).
template <class T>
void exchange(std::vector<T> const& send, std::vector<int> const& send_counts, std::vector<int> const& send_at, std::vector<T>& receive,
              std::vector<int> const& receive_counts, std::vector<int> const& receive_at, MPI_Comm comm)
{
  receive.resize(static_cast<std::size_t>(receive_at.back() + receive_counts.back()));
  mpi_check(MPI_Alltoallv(send.data(), send_counts.data(), send_at.data(), mpi_type<T>(), receive.data(), receive_counts.data(),
                          receive_at.data(), mpi_type<T>(), comm),
            "MPI_Alltoallv");
}

}  // namespace detail

/// The distributed search over one communicator (see the file's description). Movable, not
/// thread-safe.
template <class Searcher>
class distributed_nearest {
 public:
  /// @param comm the caller's communicator; must outlive the object.
  /// @param layout the same on every rank (checked).
  /// @param searcher runs this rank's own searches (see the file's description).
  distributed_nearest(MPI_Comm comm, reference_layout layout, Searcher searcher = Searcher())
      : comm_(comm),
        layout_(layout),
        searcher_(std::move(searcher)),
        info_(describe(comm)),
        threads_(detail::host_threads(info_.local_size))
  {
    expect_agreement(comm_, "distributed_nearest", {{"the reference layout", static_cast<std::uint64_t>(layout_)}});
  }

  /// Replaces the references with this rank's part (radians, float64, packed host arrays; may be
  /// empty). Replicated: all-gathers every part. Sharded: repartitions all parts by space (one
  /// all-gather of key samples, one all-to-all of the references). Collective.
  void update(double const* latitude, double const* longitude, std::size_t count)
  {
    update_in_parts(latitude, longitude, count, detail::host_rows{});
  }

  /// The k nearest references (global ids, angles in radians) of this rank's `count` observations
  /// (radians, float64, packed host arrays) into index and angle (host), k per observation (row stride
  /// k), in the observations' order. Collective.
  void query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    query_in_parts(latitude, longitude, count, k, index, angle, detail::host_rows{});
  }

  /// The number of references over all ranks (after an update()).
  [[nodiscard]] std::uint64_t size() const noexcept { return offsets_.empty() ? 0 : offsets_.back(); }
  /// The layout.
  [[nodiscard]] reference_layout layout() const noexcept { return layout_; }
  /// This rank's traffic and work in the last update() or query().
  [[nodiscard]] exchange_stats const& last_exchange() const noexcept { return stats_; }
  /// The searcher (e.g. to read its timings).
  [[nodiscard]] Searcher& searcher() noexcept { return searcher_; }
  /// The communicator.
  [[nodiscard]] MPI_Comm communicator() const noexcept { return comm_; }

  /// Sharded: the global ids of the references in this rank's shard (ascending), in the order its
  /// searcher holds them. Empty in the replicated layout.
  [[nodiscard]] std::vector<std::int64_t> const& shard_ids() const noexcept { return shard_id_; }
  /// Sharded: the ranks − 1 splitters of the last update(): rank r holds the references whose
  /// (key, global id) lies in [splitters[r − 1], splitters[r]) (detail/space_partition.hpp).
  [[nodiscard]] std::vector<detail::keyed_id> const& splitters() const noexcept { return splitters_; }

 protected:
  /// update() for a caller that moves the rows into the host arrays while the call runs (device
  /// views staged through page-locked buffers): `staging.arrive(begin, end)` returns once rows
  /// [begin, end) are there, and is called before they are read, on the host threads (several at
  /// once), inside a collective (an exception in it reaches every rank).
  template <class Staging>
  void update_in_parts(double const* latitude, double const* longitude, std::size_t count, Staging const& staging)
  {
    stats_ = {};
    offsets_ = global_offsets(comm_, count);
    if (layout_ == reference_layout::replicated) {
      replicate(latitude, longitude, count, staging);
    } else {
      repartition(latitude, longitude, count, staging);
    }
  }

  /// query() for a caller that moves rows between memories while the call runs: as in
  /// update_in_parts(), `staging.arrive(begin, end)` before observation rows [begin, end) are read,
  /// and `staging.leave(begin, end)` once result rows [begin, end) are final in the host arrays (on
  /// the host threads, several at once, inside a collective). Each row arrives once and leaves once.
  template <class Staging>
  void query_in_parts(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                      double* angle, Staging const& staging)
  {
    begin_query(k);
    if (layout_ == reference_layout::replicated) {
      replicated_query(count, [&] {
        staging.arrive(0, count);
        searcher_.search(latitude, longitude, count, k, index, angle);
        staging.leave(0, count);
      });
      return;
    }
    if (info_.size == 1) {  // one shard holding every reference: nothing to route
      double mark = MPI_Wtime();
      run_everywhere(comm_, "distributed_nearest::query", [&] {
        staging.arrive(0, count);
        search_with_global_ids(latitude, longitude, count, k, index, angle);
        staging.leave(0, count);
      });
      detail::lap(mark, stats_.search_seconds);
      stats_.observations_searched = count;
      return;
    }
    sharded_query(latitude, longitude, count, k, index, angle, staging);
  }

  /// The record of the call in progress, for what a derived class adds (its staging time).
  [[nodiscard]] exchange_stats& stats() noexcept { return stats_; }
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return info_.size; }

  /// What every query does first (collective): the ranks agree on k, k ≥ 1, an update() was made;
  /// a fresh record of the exchange.
  void begin_query(std::size_t k)
  {
    expect_agreement(comm_, "distributed_nearest::query", {{"k", k}});
    if (k == 0) { throw std::invalid_argument("distributed_nearest::query: k must be at least 1"); }
    if (offsets_.empty()) { throw std::logic_error("distributed_nearest::query: no update() yet"); }
    std::uint64_t const held = stats_.references_held;
    stats_ = {};
    stats_.references_held = held;
  }
  /// The replicated layout's query of this rank's `count` observations: `search` runs the searcher
  /// over all references, whose local ids are the global ones (collective).
  template <class Search>
  void replicated_query(std::size_t count, Search const& search)
  {
    double mark = MPI_Wtime();
    run_everywhere(comm_, "distributed_nearest::query", search);
    detail::lap(mark, stats_.search_seconds);
    stats_.observations_searched = count;
  }

 private:
  template <class Staging>
  void replicate(double const* latitude, double const* longitude, std::size_t count, Staging const& staging)
  {
    run_everywhere(comm_, "distributed_nearest::update", [&] { staging.arrive(0, count); });
    double mark = MPI_Wtime();
    std::vector<int> counts(static_cast<std::size_t>(info_.size));
    for (std::size_t r = 0; r < counts.size(); ++r) { counts[r] = detail::mpi_count(offsets_[r + 1] - offsets_[r], "update"); }
    auto const at = detail::displacements(counts);
    std::size_t const total = offsets_.back();
    all_latitude_.resize(total);
    all_longitude_.resize(total);
    int const mine = detail::mpi_count(count, "update");
    mpi_check(MPI_Allgatherv(latitude, mine, MPI_DOUBLE, all_latitude_.data(), counts.data(), at.data(), MPI_DOUBLE, comm_),
              "MPI_Allgatherv");
    mpi_check(MPI_Allgatherv(longitude, mine, MPI_DOUBLE, all_longitude_.data(), counts.data(), at.data(), MPI_DOUBLE, comm_),
              "MPI_Allgatherv");
    stats_.bytes_sent = 2 * sizeof(double) * count * static_cast<std::uint64_t>(info_.size - 1);
    stats_.bytes_received = 2 * sizeof(double) * (total - count);
    stats_.references_held = total;
    detail::lap(mark, stats_.seconds);
    run_everywhere(comm_, "distributed_nearest::update", [&] { searcher_.prepare(all_latitude_.data(), all_longitude_.data(), total); });
    detail::lap(mark, stats_.search_seconds);
  }

  template <class Staging>
  void repartition(double const* latitude, double const* longitude, std::size_t count, Staging const& staging)
  {
    auto const ranks = static_cast<std::size_t>(info_.size);
    auto const me = static_cast<std::size_t>(info_.rank);
    auto const first_id = offsets_[me];
    double mark = MPI_Wtime();
    reference_keys_.resize(count);
    run_everywhere(comm_, "distributed_nearest::update", [&] {
      detail::parallel_ranges(count, threads_, [&](std::size_t begin, std::size_t end, std::size_t) {
        staging.arrive(begin, end);
        for (std::size_t i = begin; i < end; ++i) { reference_keys_[i] = detail::space_key(latitude[i], longitude[i]); }
      });
    });
    // Splitters from every rank's samples of its references and of its last query's observations.
    std::vector<detail::key_sample> samples = observation_samples_;
    detail::sample_keys(count, true, [&](std::size_t i) { return reference_keys_[i]; }, [&](std::size_t i) { return first_id + i; },
                        samples);
    detail::lap(mark, stats_.host_seconds);
    int const mine = detail::mpi_count(samples.size() * sizeof(detail::key_sample), "update");
    std::vector<int> sample_bytes(ranks);
    mpi_check(MPI_Allgather(&mine, 1, MPI_INT, sample_bytes.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    auto const sample_at = detail::displacements(sample_bytes);
    std::vector<detail::key_sample> all_samples(static_cast<std::size_t>(sample_at.back() + sample_bytes.back()) / sizeof(detail::key_sample));
    mpi_check(MPI_Allgatherv(samples.data(), mine, MPI_BYTE, all_samples.data(), sample_bytes.data(), sample_at.data(), MPI_BYTE, comm_),
              "MPI_Allgatherv");
    detail::lap(mark, stats_.seconds);
    splitters_ = detail::choose_splitters(std::move(all_samples), ranks);

    // Each reference to the rank of its range, in order: a shard holds its references by global id.
    routes_.route(count, ranks, threads_, [&](std::size_t i, std::size_t, auto&& send) {
      send(detail::rank_of(splitters_, {reference_keys_[i], first_id + i}));
    });
    gather_points(routes_, latitude, longitude, to_shards_);
    outgoing_id_.resize(routes_.total());
    routes_.for_each([&](std::size_t slot, std::size_t i, std::size_t, std::size_t) { outgoing_id_[slot] = static_cast<std::int64_t>(first_id + i); });
    detail::lap(mark, stats_.host_seconds);
    transfer counts = exchange_counts(routes_.counts());
    detail::exchange(to_shards_.latitude, counts.send, counts.send_at, shard_latitude_, counts.receive, counts.receive_at, comm_);
    detail::exchange(to_shards_.longitude, counts.send, counts.send_at, shard_longitude_, counts.receive, counts.receive_at, comm_);
    detail::exchange(outgoing_id_, counts.send, counts.send_at, shard_id_, counts.receive, counts.receive_at, comm_);
    std::uint64_t const held = shard_id_.size();
    shard_sizes_.resize(ranks);
    mpi_check(MPI_Allgather(&held, 1, MPI_UINT64_T, shard_sizes_.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
    detail::lap(mark, stats_.seconds);

    std::uint64_t const kept = routes_.counts()[me];
    std::uint64_t const samples_in = all_sample_count(sample_bytes) - samples.size();
    stats_.bytes_sent = (count - kept) * reference_bytes + samples.size() * sizeof(detail::key_sample) * (ranks - 1);
    stats_.bytes_received = (held - kept) * reference_bytes + samples_in * sizeof(detail::key_sample);
    stats_.references_held = held;
    run_everywhere(comm_, "distributed_nearest::update",
                   [&] { searcher_.prepare(shard_latitude_.data(), shard_longitude_.data(), shard_latitude_.size()); });
    detail::lap(mark, stats_.search_seconds);
  }

  template <class Staging>
  void sharded_query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                     double* angle, Staging const& staging)
  {
    auto const ranks = static_cast<std::size_t>(info_.size);
    auto const me = static_cast<std::size_t>(info_.rank);
    double const nan = std::numeric_limits<double>::quiet_NaN();
    double mark = MPI_Wtime();

    // Phase 1: each valid observation to its owner (the rank of its key); invalid ones answered here.
    std::vector<std::uint64_t>& keys = observation_keys_;
    keys.resize(count);
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      detail::parallel_ranges(count, threads_, [&](std::size_t begin, std::size_t end, std::size_t) {
        staging.arrive(begin, end);
        for (std::size_t i = begin; i < end; ++i) {
          keys[i] = detail::space_key(latitude[i], longitude[i]);
          if (keys[i] == detail::nowhere) { std::fill_n(index + i * k, k, std::int64_t{-1}), std::fill_n(angle + i * k, k, nan); }
        }
      });
    });
    observation_samples_.clear();  // for the next update's splitters
    detail::sample_keys(count, false, [&](std::size_t i) { return keys[i]; }, [](std::size_t) { return std::uint64_t{0}; },
                        observation_samples_);
    observation_samples_.erase(std::remove_if(observation_samples_.begin(), observation_samples_.end(),
                                              [](detail::key_sample const& s) { return s.key == detail::nowhere; }),
                               observation_samples_.end());
    routes_.route(count, ranks, threads_, [&](std::size_t i, std::size_t, auto&& send) {
      if (keys[i] != detail::nowhere) { send(detail::rank_of(splitters_, {keys[i], 0})); }
    });
    gather_points(routes_, latitude, longitude, to_owners_);
    detail::lap(mark, stats_.host_seconds);
    transfer const owned = exchange_counts(routes_.counts());
    detail::exchange(to_owners_.latitude, owned.send, owned.send_at, visitor_latitude_, owned.receive, owned.receive_at, comm_);
    detail::exchange(to_owners_.longitude, owned.send, owned.send_at, visitor_longitude_, owned.receive, owned.receive_at, comm_);
    detail::lap(mark, stats_.seconds);

    // The owner's search; its k-th distance bounds where a nearer reference can be.
    std::size_t const visitors = visitor_latitude_.size();
    found_.resize(visitors * k);
    found_angle_.resize(visitors * k);
    search_shard(visitor_latitude_, visitor_longitude_, k, found_, found_angle_);
    detail::lap(mark, stats_.search_seconds);

    // Phase 2: on to the other ranks within reach.
    std::size_t const parts = detail::part_count(visitors, threads_);
    seen_.assign(parts * ranks, std::numeric_limits<std::size_t>::max());
    detail::key_span const mine_alone = detail::keys_held_alone(splitters_, me);
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      helpers_.route(visitors, ranks, threads_, [&](std::size_t v, std::size_t part, auto&& send) {
        std::size_t* const seen = seen_.data() + part * ranks;
        auto const visit = [&](std::size_t r) {
          if (r != me && shard_sizes_[r] > 0 && seen[r] != v) { seen[r] = v, send(r); }
        };
        if (found_[v * k + k - 1] < 0) {  // fewer than k here: any rank may hold one
          for (std::size_t r = 0; r < ranks; ++r) { visit(r); }
          return;
        }
        detail::cell_box boxes[2];
        int const box_count = detail::neighbourhood_boxes(visitor_latitude_[v], visitor_longitude_[v], found_angle_[v * k + k - 1], boxes);
        for (int b = 0; b < box_count; ++b) {
          if (!detail::cell_within(boxes[b], mine_alone)) { detail::reachable_ranks(splitters_, boxes[b], visit); }
        }
      });
    });
    gather_points(helpers_, visitor_latitude_.data(), visitor_longitude_.data(), to_helpers_);
    detail::lap(mark, stats_.host_seconds);
    transfer const helped = exchange_counts(helpers_.counts());
    detail::exchange(to_helpers_.latitude, helped.send, helped.send_at, guest_latitude_, helped.receive, helped.receive_at, comm_);
    detail::exchange(to_helpers_.longitude, helped.send, helped.send_at, guest_longitude_, helped.receive, helped.receive_at, comm_);
    detail::lap(mark, stats_.seconds);
    std::size_t const guests = guest_latitude_.size();
    guest_found_.resize(guests * k);
    guest_angle_.resize(guests * k);
    search_shard(guest_latitude_, guest_longitude_, k, guest_found_, guest_angle_);
    detail::lap(mark, stats_.search_seconds);
    transfer const answers = scaled(helped, k).reversed();
    detail::exchange(guest_found_, answers.send, answers.send_at, answer_index_, answers.receive, answers.receive_at, comm_);
    detail::exchange(guest_angle_, answers.send, answers.send_at, answer_angle_, answers.receive, answers.receive_at, comm_);
    detail::lap(mark, stats_.seconds);

    // The owner keeps the k nearest of its own and the returned lists (each ordered, so a linear merge),
    // and sends them home.
    merged_.resize(parts * k);
    helpers_.for_each([&](std::size_t slot, std::size_t v, std::size_t, std::size_t part) {
      detail::merge_nearest(found_.data() + v * k, found_angle_.data() + v * k, answer_index_.data() + slot * k,
                            answer_angle_.data() + slot * k, k, merged_.data() + part * k);
    });
    detail::lap(mark, stats_.host_seconds);
    transfer const results = scaled(owned, k).reversed();
    detail::exchange(found_, results.send, results.send_at, home_index_, results.receive, results.receive_at, comm_);
    detail::exchange(found_angle_, results.send, results.send_at, home_angle_, results.receive, results.receive_at, comm_);
    detail::lap(mark, stats_.seconds);
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      routes_.for_each(
        [&](std::size_t slot, std::size_t i, std::size_t, std::size_t) {
          std::copy_n(home_index_.data() + slot * k, k, index + i * k);
          std::copy_n(home_angle_.data() + slot * k, k, angle + i * k);
        },
        [&](std::size_t begin, std::size_t end) { staging.leave(begin, end); });
    });
    detail::lap(mark, stats_.host_seconds);

    std::uint64_t const sent = routes_.total() - routes_.counts()[me], received = visitors - owned.receive[me];
    std::uint64_t const answer_bytes = k * (sizeof(std::int64_t) + sizeof(double));
    stats_.observations_sent = sent + helpers_.total();
    stats_.visits = helpers_.total();
    stats_.observations_searched = visitors + guests;
    stats_.bytes_sent = (sent + helpers_.total()) * point_bytes + (guests + received) * answer_bytes + 2 * ranks * sizeof(int);
    stats_.bytes_received = (received + guests) * point_bytes + (helpers_.total() + sent) * answer_bytes + 2 * ranks * sizeof(int);
  }

  /// Send and receive counts of one all-to-all (in items) with their displacements.
  struct transfer {
    std::vector<int> send, send_at, receive, receive_at;
    [[nodiscard]] transfer reversed() const { return {receive, receive_at, send, send_at}; }
  };
  static transfer scaled(transfer const& t, std::size_t factor)
  {
    transfer out;
    for (auto [from, to] : {std::pair{&t.send, &out.send}, std::pair{&t.receive, &out.receive}}) {
      to->resize(from->size());
      for (std::size_t r = 0; r < from->size(); ++r) { (*to)[r] = detail::mpi_count(static_cast<std::size_t>((*from)[r]) * factor, "query"); }
    }
    out.send_at = detail::displacements(out.send), out.receive_at = detail::displacements(out.receive);
    return out;
  }
  /// The all-to-all of the counts (collective).
  transfer exchange_counts(std::vector<std::size_t> const& items)
  {
    transfer t;
    t.send = detail::mpi_counts(items, 1, "distributed_nearest");
    t.receive.resize(t.send.size());
    mpi_check(MPI_Alltoall(t.send.data(), 1, MPI_INT, t.receive.data(), 1, MPI_INT, comm_), "MPI_Alltoall");
    t.send_at = detail::displacements(t.send), t.receive_at = detail::displacements(t.receive);
    return t;
  }
  /// Coordinates in a send buffer.
  struct outgoing_points {
    std::vector<double> latitude, longitude;
  };
  /// The routed items' coordinates into the send buffer `out`.
  static void gather_points(detail::routed_items const& routes, double const* latitude, double const* longitude, outgoing_points& out)
  {
    out.latitude.resize(routes.total());
    out.longitude.resize(routes.total());
    routes.for_each([&](std::size_t slot, std::size_t i, std::size_t, std::size_t) {
      out.latitude[slot] = latitude[i], out.longitude[slot] = longitude[i];
    });
  }
  /// This rank's search of `latitude`/`longitude` in its shard, with global ids (collective: a failure
  /// reaches every rank).
  void search_shard(std::vector<double> const& latitude, std::vector<double> const& longitude, std::size_t k,
                    std::vector<std::int64_t>& index, std::vector<double>& angle)
  {
    run_everywhere(comm_, "distributed_nearest::query",
                   [&] { search_with_global_ids(latitude.data(), longitude.data(), latitude.size(), k, index.data(), angle.data()); });
  }
  /// The searcher over this rank's shard, its local ids made global (not collective).
  void search_with_global_ids(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                              double* angle)
  {
    searcher_.search(latitude, longitude, count, k, index, angle);
    detail::parallel_ranges(count * k, threads_, [&](std::size_t begin, std::size_t end, std::size_t) {
      for (std::size_t e = begin; e < end; ++e) {
        if (index[e] >= 0) { index[e] = shard_id_[static_cast<std::size_t>(index[e])]; }
      }
    });
  }
  static std::size_t all_sample_count(std::vector<int> const& bytes)
  {
    std::size_t total = 0;
    for (int b : bytes) { total += static_cast<std::size_t>(b) / sizeof(detail::key_sample); }
    return total;
  }

  static constexpr std::uint64_t point_bytes = 2 * sizeof(double);
  static constexpr std::uint64_t reference_bytes = point_bytes + sizeof(std::int64_t);

  MPI_Comm comm_;
  reference_layout layout_;
  Searcher searcher_;
  rank_info info_;
  std::size_t threads_;                    // for the host loops: the node's cores shared by its ranks
  std::vector<std::uint64_t> offsets_;     // global ids: offsets_[r] is rank r's first
  exchange_stats stats_;
  // Replicated: every rank's references.
  std::vector<double> all_latitude_, all_longitude_;
  // Sharded: the partition and this rank's shard (by global id).
  std::vector<detail::keyed_id> splitters_;
  std::vector<std::uint64_t> shard_sizes_;            // every rank's
  std::vector<double> shard_latitude_, shard_longitude_;
  std::vector<std::int64_t> shard_id_;
  std::vector<detail::key_sample> observation_samples_;  // of the last query, for the next splitters
  // Working memory, kept so that a loop of steps of one size allocates nothing; one buffer per use, so
  // that none shrinks and grows again (a vector's growth writes every new element, on one thread).
  std::vector<std::uint64_t> reference_keys_, observation_keys_;
  detail::routed_items routes_, helpers_;
  std::vector<std::size_t> seen_;                     // [part * ranks + rank]: last visitor sent there
  std::vector<detail::candidate> merged_;             // k per part
  outgoing_points to_shards_, to_owners_, to_helpers_;
  std::vector<double> visitor_latitude_, visitor_longitude_, guest_latitude_, guest_longitude_;
  std::vector<std::int64_t> outgoing_id_, found_, guest_found_, answer_index_, home_index_;
  std::vector<double> found_angle_, guest_angle_, answer_angle_, home_angle_;
};

}  // namespace streamkit::distributed
