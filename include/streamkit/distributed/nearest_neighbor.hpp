#pragma once
/// @file nearest_neighbor.hpp
/// Exact k-nearest-neighbour search across MPI ranks. Each rank holds a part of the references and of
/// the observations; every rank gets the neighbours of its own observations among all references,
/// with global reference ids (the rank's offset in the concatenation of all ranks' parts in rank
/// order, plus the local index): the answer of one search over the concatenated references.
///
/// Two layouts of the references:
/// - replicated: update() all-gathers every rank's part, so every rank searches all references;
///   per step each rank receives all M references (16 bytes each).
/// - sharded (too many to replicate): each rank keeps its own part, and a spherical cap around it is
///   all-gathered. A query first searches the rank's own shard, which bounds each observation's k-th
///   distance; the observation is then sent only to the ranks whose cap comes within that bound,
///   searched there, and the k candidates each returns are merged with its own (ordered by distance,
///   then global id, as one search orders them). The two-phase scheme of distributed trees.
///
/// What runs each rank's own search is a template parameter (a GPU engine, or a CPU search in the
/// host tests), so the exchange is the same whatever searches. A `Searcher` has
///   void prepare(double const* latitude, double const* longitude, std::size_t count);
///   void search(double const* latitude, double const* longitude, std::size_t count, std::size_t k,
///               std::int64_t* index, double* angle);
/// with coordinates in radians (float64, packed); search writes, per observation, k pairs (local
/// index, angle in radians) nearest first, ties to the smaller index, -1 and NaN beyond the set and
/// for invalid observations.
///
/// Every call is collective over the communicator. Ranks that disagree on k or the layout all throw
/// the same std::invalid_argument; an exception in one rank's own search reaches every rank
/// (communicator.hpp).

#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/detail/parallel_ranges.hpp>
#include <streamkit/distributed/detail/sphere_cap.hpp>

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
  sharded      ///< each rank keeps its part; observations visit the shards that may hold a neighbour
};

/// What the last query or update moved between ranks (this rank's share).
struct exchange_stats {
  std::uint64_t bytes_sent = 0;           ///< payload this rank sent to other ranks
  std::uint64_t bytes_received = 0;       ///< payload this rank received from other ranks
  std::uint64_t observations_sent = 0;  ///< sharded queries: observations sent to other ranks
  double seconds = 0;                   ///< wall time in the exchange's collectives
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

/// The distributed search over one communicator (see the file's description). Not thread-safe.
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

  /// Replaces the references with this rank's part (radians, float64, packed; may be empty).
  /// Collective.
  void update(double const* latitude, double const* longitude, std::size_t count)
  {
    stats_ = {};
    double const start = MPI_Wtime();
    offsets_ = global_offsets(comm_, count);
    if (layout_ == reference_layout::replicated) {
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
      stats_.seconds = MPI_Wtime() - start;
      run_everywhere(comm_, "distributed_nearest::update", [&] { searcher_.prepare(all_latitude_.data(), all_longitude_.data(), total); });
    } else {
      detail::sphere_cap const mine = detail::cap_of(latitude, longitude, count, threads_);
      caps_.resize(static_cast<std::size_t>(info_.size));
      mpi_check(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, caps_.data(), sizeof mine, MPI_BYTE, comm_), "MPI_Allgather");
      stats_.bytes_sent = sizeof mine * static_cast<std::uint64_t>(info_.size - 1);
      stats_.bytes_received = stats_.bytes_sent;
      stats_.seconds = MPI_Wtime() - start;
      run_everywhere(comm_, "distributed_nearest::update", [&] { searcher_.prepare(latitude, longitude, count); });
    }
  }

  /// The k nearest references (global ids, angles in radians) of this rank's `count` observations
  /// (radians, float64, packed) into index and angle, k per observation (row stride k). Collective.
  void query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    expect_agreement(comm_, "distributed_nearest::query", {{"k", k}});
    if (k == 0) { throw std::invalid_argument("distributed_nearest::query: k must be at least 1"); }
    if (offsets_.empty()) { throw std::logic_error("distributed_nearest::query: no update() yet"); }
    stats_ = {};
    if (layout_ == reference_layout::replicated) {
      run_everywhere(comm_, "distributed_nearest::query", [&] { searcher_.search(latitude, longitude, count, k, index, angle); });
      return;
    }
    sharded_query(latitude, longitude, count, k, index, angle);
  }

  /// The number of references over all ranks (after an update()).
  [[nodiscard]] std::uint64_t size() const noexcept { return offsets_.empty() ? 0 : offsets_.back(); }
  /// This rank's traffic in the last update() or query().
  [[nodiscard]] exchange_stats const& last_exchange() const noexcept { return stats_; }
  /// The searcher (e.g. to read its timings).
  [[nodiscard]] Searcher& searcher() noexcept { return searcher_; }

 private:
  void sharded_query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                     double* angle)
  {
    auto const ranks = static_cast<std::size_t>(info_.size);
    auto const me = static_cast<std::size_t>(info_.rank);
    // Phase 1: the own shard; its k-th distance bounds where a nearer reference can be.
    run_everywhere(comm_, "distributed_nearest::query", [&] { searcher_.search(latitude, longitude, count, k, index, angle); });
    to_global(index, count * k, offsets_[me]);

    // Phase 2: send each observation to the other shards whose cap comes within its bound.
    std::size_t const parts = detail::part_count(count, threads_);
    std::vector<int> send_counts(ranks), receive_counts(ranks);
    std::size_t sent_observations = 0;
    run_everywhere(comm_, "distributed_nearest::query",
                   [&] { route(latitude, longitude, count, k, index, angle, send_counts, sent_observations); });
    double const start = MPI_Wtime();
    mpi_check(MPI_Alltoall(send_counts.data(), 1, MPI_INT, receive_counts.data(), 1, MPI_INT, comm_), "MPI_Alltoall");
    auto const send_at = detail::displacements(send_counts), receive_at = detail::displacements(receive_counts);
    std::size_t const visitors = static_cast<std::size_t>(receive_at.back() + receive_counts.back());
    detail::exchange(outgoing_latitude_, send_counts, send_at, visitor_latitude_, receive_counts, receive_at, comm_);
    detail::exchange(outgoing_longitude_, send_counts, send_at, visitor_longitude_, receive_counts, receive_at, comm_);
    double exchanged = MPI_Wtime() - start;

    // Phase 3: search the visitors in this shard and send their k candidates back.
    found_.resize(visitors * k);
    found_angle_.resize(visitors * k);
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      searcher_.search(visitor_latitude_.data(), visitor_longitude_.data(), visitors, k, found_.data(), found_angle_.data());
    });
    to_global(found_.data(), found_.size(), offsets_[me]);
    std::vector<int> answer_counts(ranks), returned_counts(ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
      answer_counts[r] = detail::mpi_count(static_cast<std::size_t>(receive_counts[r]) * k, "query");
      returned_counts[r] = detail::mpi_count(static_cast<std::size_t>(send_counts[r]) * k, "query");
    }
    auto const answer_at = detail::displacements(answer_counts), returned_at = detail::displacements(returned_counts);
    double const back = MPI_Wtime();
    detail::exchange(found_, answer_counts, answer_at, returned_index_, returned_counts, returned_at, comm_);
    detail::exchange(found_angle_, answer_counts, answer_at, returned_angle_, returned_counts, returned_at, comm_);
    exchanged += MPI_Wtime() - back;

    // Phase 4: merge, per observation, its own k with the k of every shard it visited (each list is
    // ordered, so a linear merge; an observation no other shard can improve is left as it is). Each
    // part merges the observations it routed: no two parts touch one row.
    merged_.resize(parts * k);
    detail::parallel_ranges(count, threads_, [&](std::size_t, std::size_t, std::size_t part) {
      for (std::size_t r = 0; r < ranks; ++r) {
        auto const& list = routed_[part * ranks + r].observations;
        std::size_t const visit = place_[part * ranks + r] - static_cast<std::size_t>(send_at[r]);  // its first, within rank r's
        std::size_t from = static_cast<std::size_t>(returned_at[r]) + visit * k;
        for (std::size_t i : list) {
          detail::merge_nearest(index + i * k, angle + i * k, returned_index_.data() + from, returned_angle_.data() + from, k,
                                merged_.data() + part * k);
          from += k;
        }
      }
    });

    stats_.observations_sent = sent_observations;
    stats_.bytes_sent = sent_observations * 2 * sizeof(double) + visitors * k * (sizeof(std::int64_t) + sizeof(double)) +
                        ranks * sizeof(int);
    stats_.bytes_received =
        visitors * 2 * sizeof(double) + returned_index_.size() * (sizeof(std::int64_t) + sizeof(double)) + ranks * sizeof(int);
    stats_.seconds = exchanged;
  }

  /// Phase 2 of a sharded query: which other shards each observation visits. The observations are
  /// cut into parts, one per host thread; each part routes its own into lists per rank, which land in
  /// the rank-ordered send buffers (outgoing_*; send_counts per rank) in part order.
  void route(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t const* index,
             double const* angle, std::vector<int>& send_counts, std::size_t& sent_observations)
  {
    auto const ranks = static_cast<std::size_t>(info_.size);
    auto const me = static_cast<std::size_t>(info_.rank);
    std::size_t const parts = detail::part_count(count, threads_);
    routed_.resize(parts * ranks);
    for (auto& list : routed_) { list.observations.clear(); }
    bool const others =
        std::any_of(caps_.begin(), caps_.end(), [&](detail::sphere_cap const& cap) { return &cap != &caps_[me] && cap.angle >= 0; });
    if (others) {
      detail::parallel_ranges(count, threads_, [&](std::size_t begin, std::size_t end, std::size_t part) {
        routed_list* lists = routed_.data() + part * ranks;
        for (std::size_t i = begin; i < end; ++i) {
          if (!std::isfinite(latitude[i]) || !std::isfinite(longitude[i])) { continue; }
          double const bound = index[i * k + k - 1] < 0 ? HUGE_VAL : angle[i * k + k - 1];
          double const cos_bound = std::cos(bound), sin_bound = std::sin(bound);
          double x, y, z;
          detail::unit_vector(latitude[i], longitude[i], x, y, z);
          for (std::size_t r = 0; r < ranks; ++r) {
            if (r != me && detail::within_reach(caps_[r], x, y, z, bound, cos_bound, sin_bound)) { lists[r].observations.push_back(i); }
          }
        }
      });
    }
    place_.resize(parts * ranks);  // place_[part * ranks + r]: where part's list for rank r starts
    sent_observations = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      std::size_t const first = sent_observations;
      for (std::size_t part = 0; part < parts; ++part) {
        place_[part * ranks + r] = sent_observations;
        sent_observations += routed_[part * ranks + r].observations.size();
      }
      send_counts[r] = detail::mpi_count(sent_observations - first, "query");
    }
    outgoing_latitude_.resize(sent_observations);
    outgoing_longitude_.resize(sent_observations);
    detail::parallel_ranges(count, threads_, [&](std::size_t, std::size_t, std::size_t part) {
      for (std::size_t r = 0; r < ranks; ++r) {
        std::size_t at = place_[part * ranks + r];
        for (std::size_t i : routed_[part * ranks + r].observations) {
          outgoing_latitude_[at] = latitude[i], outgoing_longitude_[at++] = longitude[i];
        }
      }
    });
  }

  static void to_global(std::int64_t* index, std::size_t count, std::uint64_t offset)
  {
    for (std::size_t i = 0; i < count; ++i) {
      if (index[i] >= 0) { index[i] += static_cast<std::int64_t>(offset); }
    }
  }

  MPI_Comm comm_;
  reference_layout layout_;
  Searcher searcher_;
  rank_info info_;
  std::vector<std::uint64_t> offsets_;       // global ids: offsets_[r] is rank r's first
  std::vector<double> all_latitude_;         // replicated: every rank's references
  std::vector<double> all_longitude_;
  std::vector<detail::sphere_cap> caps_;     // sharded: every rank's cap
  std::size_t threads_;                      // for the host loops: the node's cores shared by its ranks
  // Sharded queries' working memory, kept so that a loop of queries of one size allocates nothing.
  struct alignas(64) routed_list {  // a cache line each: the parts' threads grow them side by side
    std::vector<std::size_t> observations;
  };
  std::vector<routed_list> routed_;                            // [part * ranks + rank]: observations sent there
  std::vector<std::size_t> place_;                             // [part * ranks + rank]: their place in the send buffers
  std::vector<detail::candidate> merged_;                      // k per part
  std::vector<double> outgoing_latitude_, outgoing_longitude_, visitor_latitude_, visitor_longitude_;
  std::vector<std::int64_t> found_, returned_index_;
  std::vector<double> found_angle_, returned_angle_;
  exchange_stats stats_;
};

}  // namespace streamkit::distributed
