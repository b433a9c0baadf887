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
///   The work per reference of the update (its key and rank, the send order) and per observation of
///   the query (its key and owner, the partition into send buffers, the test whether its
///   neighbourhood leaves the owner's range, placing its answer) runs on an engine
///   (detail/sharded_rows.hpp): the host threads here, the GPU in distributed_gpu_nearest; the
///   exchanges, the splitters, the cell walk of the few observations that leave their owner's range
///   and the merges are the same for both. A rank's own part never goes through MPI.
///
/// What runs each rank's own search is a template parameter (a GPU engine, or a CPU search in the
/// host tests), so the exchange is the same whatever searches. A `Searcher` has
///   void prepare(double const* latitude, double const* longitude, std::size_t count);
///   void search(double const* latitude, double const* longitude, std::size_t count, std::size_t k,
///               std::int64_t* index, double* angle);
/// with coordinates in radians (float64, packed): host arrays, but for prepare() after a sharded
/// update on another engine (repartition_on()), which passes the shard where that engine keeps its
/// rows (distributed_gpu_nearest: the GPU's memory); search writes, per observation, k pairs (local
/// index, angle in radians) nearest first, ties to the smaller index, -1 and NaN beyond the set and
/// for invalid observations (and never returns an invalid reference).
///
/// Every call is collective over the communicator. Ranks that disagree on k or the layout all throw
/// the same std::invalid_argument; an exception in one rank's own search reaches every rank
/// (communicator.hpp).

#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/detail/parallel_ranges.hpp>
#include <streamkit/distributed/detail/sharded_rows.hpp>
#include <streamkit/distributed/detail/space_partition.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
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
  /// in the routing: keys, splitters, owners, packing, reach tests, merging, placing results (host
  /// threads; distributed_gpu_nearest's sharded layout: the GPU's kernels, and its copies of the rows
  /// between the GPU and MPI's host buffers)
  double host_seconds = 0;
  /// distributed_gpu_nearest: host arrays and device views copied between host and GPU (through
  /// page-locked buffers), not hidden behind other work
  double staging_seconds = 0;
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

/// @throws std::length_error where rows of one rank cannot be numbered in 32 bits (the engines' row numbers).
inline void expect_row_numbers(std::size_t count, char const* what)
{
  if (count > std::numeric_limits<std::uint32_t>::max()) {
    throw std::length_error(std::string(what) + ": " + std::to_string(count) + " rows; the sharded query numbers a rank's rows in 32 bits");
  }
}

/// A buffer's parts by rank, in rank order: rank r's items are [at[r], at[r] + size[r]).
struct segments {
  std::vector<std::size_t> size;
  std::vector<std::size_t> at;  // ranks + 1 entries: at.back() is the total

  /// at from size.
  void place()
  {
    at.assign(size.size() + 1, 0);
    for (std::size_t r = 0; r < size.size(); ++r) { at[r + 1] = at[r] + size[r]; }
  }
  [[nodiscard]] std::size_t total() const { return at.back(); }
};

/// Calls part(begin, count) for the items of `s` that go to or come from ranks other than `me`: the
/// two ranges before and after `me`'s part (either may be empty), so that the rows that cross
/// between memories move in two copies whatever the number of ranks.
template <class Part>
void other_ranks_parts(segments const& s, std::size_t me, Part const& part)
{
  part(std::size_t{0}, s.at[me]);
  part(s.at[me + 1], s.total() - s.at[me + 1]);
}

/// MPI's counts and displacements of an all-to-all, kept by the caller so that a loop of exchanges
/// allocates nothing.
struct alltoall_counts {
  std::vector<int> send_count, send_at, receive_count, receive_at;
};

/// The all-to-all of the parts' sizes (MPI ints; collective): in.size[r] items come from rank r for
/// out.size[r] going to it; both placed.
inline void exchange_sizes(segments& out, segments& in, alltoall_counts& counts, MPI_Comm comm)
{
  std::size_t const ranks = out.size.size();
  counts.send_count.resize(ranks), counts.receive_count.resize(ranks);
  for (std::size_t r = 0; r < ranks; ++r) { counts.send_count[r] = mpi_count(out.size[r], "distributed_nearest"); }
  mpi_check(MPI_Alltoall(counts.send_count.data(), 1, MPI_INT, counts.receive_count.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  in.size.assign(counts.receive_count.begin(), counts.receive_count.end());
  out.place(), in.place();
}

/// One MPI_Alltoallv of the parts `out` of `send` into the parts `in` of `receive`, `per_item` values
/// an item, but for rank `me`'s own part, which stays where it is (the caller moves it if needed).
template <class T>
void exchange_segments(T const* send, segments const& out, T* receive, segments const& in, std::size_t per_item, std::size_t me,
                       alltoall_counts& counts, MPI_Comm comm)
{
  std::size_t const ranks = out.size.size();
  counts.send_count.resize(ranks), counts.send_at.resize(ranks), counts.receive_count.resize(ranks), counts.receive_at.resize(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    counts.send_count[r] = r == me ? 0 : mpi_count(out.size[r] * per_item, "distributed_nearest");
    counts.send_at[r] = mpi_count(out.at[r] * per_item, "distributed_nearest");
    counts.receive_count[r] = r == me ? 0 : mpi_count(in.size[r] * per_item, "distributed_nearest");
    counts.receive_at[r] = mpi_count(in.at[r] * per_item, "distributed_nearest");
  }
  mpi_check(MPI_Alltoallv(send, counts.send_count.data(), counts.send_at.data(), mpi_type<T>(), receive, counts.receive_count.data(),
                          counts.receive_at.data(), mpi_type<T>(), comm),
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
        team_(std::make_unique<detail::host_team>(detail::host_threads(info_.local_size))),
        host_engine_(*team_)
  {
    expect_agreement(comm_, "distributed_nearest", {{"the reference layout", static_cast<std::uint64_t>(layout_)}});
  }

  /// Moves the object: the communicator, the searcher and the kept buffers go with it.
  distributed_nearest(distributed_nearest&&) = default;
  /// Moves `other` into this object (see the move constructor).
  distributed_nearest& operator=(distributed_nearest&&) = default;
  virtual ~distributed_nearest() = default;

  /// Replaces the references with this rank's part (radians, float64, packed host arrays; may be
  /// empty). Replicated: all-gathers every part. Sharded: repartitions all parts by space (one
  /// all-gather of key samples, one all-to-all of the references). Collective. Not virtual: it calls
  /// replace_references(), which a derived class overrides, so that an update through a reference
  /// to this class does what the derived class's own does.
  void update(double const* latitude, double const* longitude, std::size_t count) { replace_references(latitude, longitude, count); }

  /// The k nearest references (global ids, angles in radians) of this rank's `count` observations
  /// (radians, float64, packed host arrays) into index and angle (host), k per observation (row stride
  /// k), in the observations' order. Collective. Not virtual: it calls search_observations(), as
  /// update() calls replace_references().
  void query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    search_observations(latitude, longitude, count, k, index, angle);
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
  /// update()'s work: the references in packed host arrays, through the host threads. A derived
  /// class whose rows live elsewhere overrides it (and search_observations()) with its own path.
  virtual void replace_references(double const* latitude, double const* longitude, std::size_t count)
  {
    update_in_parts(latitude, longitude, count, detail::host_rows{});
  }

  /// query()'s work: packed host arrays, the sharded query's work per observation on the host
  /// threads.
  virtual void search_observations(double const* latitude, double const* longitude, std::size_t count, std::size_t k,
                                   std::int64_t* index, double* angle)
  {
    if (routes_rows()) {
      begin_query(k);
      sharded_query_on(host_engine_, host_rows_, detail::point_rows{latitude, longitude, 1}, count, k, detail::neighbor_rows{index, angle, k},
                       [&](double const* lat, double const* lon, std::size_t n, std::int64_t* found, double* found_angle) {
                         searcher_.search(lat, lon, n, k, found, found_angle);
                       });
      return;
    }
    query_in_parts(latitude, longitude, count, k, index, angle, detail::host_rows{});
  }

  /// update() for a caller that moves the rows into the host arrays while the call runs (device
  /// views staged through page-locked buffers): `staging.arrive(begin, end)` returns once rows
  /// [begin, end) are there, and is called before they are read, on the host threads (several at
  /// once), inside a collective (an exception in it reaches every rank).
  template <class Staging>
  void update_in_parts(double const* latitude, double const* longitude, std::size_t count, Staging const& staging)
  {
    if (layout_ == reference_layout::replicated) {
      replicate(latitude, longitude, count, staging);
      return;
    }
    repartition_on(host_engine_, host_rows_, count, [&] {
      team_->parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t) { staging.arrive(begin, end); });
      return detail::point_rows{latitude, longitude, 1};
    });
  }

  /// Whether a query routes its observations between ranks (sharded, several ranks):
  /// sharded_query_on(); otherwise each rank searches its own (query_in_parts()).
  [[nodiscard]] bool routes_rows() const noexcept { return layout_ == reference_layout::sharded && info_.size > 1; }

  /// query() where no observation changes rank (!routes_rows()) for a caller that moves rows between
  /// memories while the call runs: as in update_in_parts(), `staging.arrive(begin, end)` before
  /// observation rows [begin, end) are read, and `staging.leave(begin, end)` once result rows
  /// [begin, end) are final in the host arrays (inside a collective). Each row arrives once and
  /// leaves once.
  template <class Staging>
  void query_in_parts(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                      double* angle, Staging const& staging)
  {
    if (routes_rows()) { throw std::logic_error("distributed_nearest::query_in_parts: the sharded layout at several ranks routes rows"); }
    begin_query(k);
    if (layout_ == reference_layout::replicated) {
      replicated_query(count, [&] {
        staging.arrive(0, count);
        searcher_.search(latitude, longitude, count, k, index, angle);
        staging.leave(0, count);
      });
      return;
    }
    // Sharded at one rank: one shard holding every reference, nothing to route.
    double mark = MPI_Wtime();
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      staging.arrive(0, count);
      search_with_global_ids(latitude, longitude, count, k, index, angle);
      staging.leave(0, count);
    });
    detail::lap(mark, stats_.search_seconds);
    stats_.observations_searched = count;
  }

  /// The record of the call in progress, for what a derived class adds (its staging time).
  [[nodiscard]] exchange_stats& stats() noexcept { return stats_; }
  /// The number of ranks.
  [[nodiscard]] int ranks() const noexcept { return info_.size; }
  /// The threads of this rank's host loops (detail::host_threads() of them).
  [[nodiscard]] detail::host_team const& team() const noexcept { return *team_; }

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
  /// What every update does first (collective): a fresh record, every rank's offset of global ids.
  void begin_update(std::size_t count)
  {
    stats_ = {};
    global_offsets(comm_, count, offsets_);
  }

  template <class Staging>
  void replicate(double const* latitude, double const* longitude, std::size_t count, Staging const& staging)
  {
    begin_update(count);
    run_everywhere(comm_, "distributed_nearest::update", [&] { staging.arrive(0, count); });
    double mark = MPI_Wtime();
    auto const ranks = static_cast<std::size_t>(info_.size);
    std::vector<int>& counts = counts_.receive_count;
    std::vector<int>& at = counts_.receive_at;
    counts.resize(ranks), at.resize(ranks);
    for (std::size_t r = 0; r < ranks; ++r) {
      counts[r] = detail::mpi_count(offsets_[r + 1] - offsets_[r], "update");
      at[r] = detail::mpi_count(offsets_[r], "update");
    }
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

  /// The shard's global ids on `engine` (rows.shard_id), with the splitters (rows.splitters), stamped
  /// with this update's count: from the host's copies, when the rows hold another update's partition
  /// (a query on rows that the last update did not write). Inside a collective.
  template <class Engine>
  void mirror_partition(Engine& engine, detail::sharded_rows<Engine>& rows)
  {
    engine.from_host(splitters_.data(), splitters_.size(), engine.reserve(rows.splitters, splitters_.size()));
    engine.from_host(shard_id_.data(), shard_id_.size(), engine.reserve(rows.shard_id, shard_id_.size()));
    engine.wait();
    rows.partition_stamp = partition_stamp_;
  }

 protected:
  /// The sharded layout's update (collective): this rank's `count` references repartitioned by space,
  /// the work per reference (its key and rank, the send order) on `engine` with the working memory
  /// `rows`. `points_there()` returns the references in the engine's memory; it is called once, inside
  /// a collective, before any of them is read, and its time is staging. Afterwards the shard is in
  /// `rows` on the engine (the searcher prepared from its coordinates there: on a GPU engine they
  /// never cross to the host but for the parts other ranks send or receive) and, stamped with this
  /// update, its ids and the splitters (what sharded_query_on() on the same rows reads); its ids also
  /// in host memory (shard_ids()).
  template <class Engine, class PointsThere>
  void repartition_on(Engine& engine, detail::sharded_rows<Engine>& rows, std::size_t count, PointsThere const& points_there)
  {
    if (layout_ != reference_layout::sharded) { throw std::logic_error("distributed_nearest::repartition_on: the layout is replicated"); }
    begin_update(count);
    auto const ranks = static_cast<std::size_t>(info_.size);
    auto const me = static_cast<std::size_t>(info_.rank);
    std::uint64_t const first_id = offsets_[me];
    std::size_t const taken = detail::sample_count(count);
    double mark = MPI_Wtime();
    detail::point_rows points{};
    run_everywhere(comm_, "distributed_nearest::update", [&] {
      detail::expect_row_numbers(count, "distributed_nearest::update: references");
      points = points_there();
      detail::lap(mark, stats_.staging_seconds);
      engine.for_each(taken, detail::sample_keys_of{points, count, engine.reserve(rows.sample_key, taken)});
      engine.to_host(rows.sample_key.data(), taken, engine.reserve(rows.sample_key_host, taken));
      engine.wait();
    });
    // Splitters from every rank's samples of its references and of its last query's observations.
    samples_.assign(observation_samples_.begin(), observation_samples_.end());
    std::uint64_t const* const sample_key = rows.sample_key_host.data();
    detail::sample_keys(
      count, true, [&](std::size_t s) { return sample_key[s]; }, [&](std::size_t s) { return first_id + detail::sample_row(s, count); },
      samples_);
    detail::lap(mark, stats_.host_seconds);
    int const mine = detail::mpi_count(samples_.size() * sizeof(detail::key_sample), "update");
    counts_.receive_count.resize(ranks), counts_.receive_at.resize(ranks);
    mpi_check(MPI_Allgather(&mine, 1, MPI_INT, counts_.receive_count.data(), 1, MPI_INT, comm_), "MPI_Allgather");
    std::size_t sample_total = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      counts_.receive_at[r] = detail::mpi_count(sample_total, "update");
      sample_total += static_cast<std::size_t>(counts_.receive_count[r]);
    }
    all_samples_.resize(sample_total / sizeof(detail::key_sample));
    mpi_check(MPI_Allgatherv(samples_.data(), mine, MPI_BYTE, all_samples_.data(), counts_.receive_count.data(), counts_.receive_at.data(),
                             MPI_BYTE, comm_),
              "MPI_Allgatherv");
    detail::lap(mark, stats_.seconds);
    detail::choose_splitters(all_samples_, ranks, splitters_);
    ++partition_stamp_;

    // Each reference to the rank of its range, in order, so that a shard holds its references by
    // global id: the send order on the engine, and the other ranks' parts of it to the host for MPI.
    detail::segments& out = shards_out_;
    detail::segments& in = shards_in_;
    run_everywhere(comm_, "distributed_nearest::update", [&] {
      detail::keyed_id* const splitters = engine.reserve(rows.splitters, splitters_.size());
      engine.from_host(splitters_.data(), splitters_.size(), splitters);
      std::uint32_t* const owner = engine.reserve(rows.owner, count);
      engine.for_each(count, detail::reference_owners{points, first_id, splitters, ranks, owner});
      rows.bins.resize(ranks);
      engine.partition(owner, count, ranks, engine.reserve(rows.order, count), rows.bins.data());
      out.size.assign(rows.bins.begin(), rows.bins.end());
      out.place();
      double* const latitude = engine.reserve(rows.send_latitude, count);
      double* const longitude = engine.reserve(rows.send_longitude, count);
      std::int64_t* const id = engine.reserve(rows.send_id, count);
      engine.for_each(count, detail::fill_slots{points, rows.order.data(), latitude, longitude, nullptr, first_id, id});
      double* const outgoing_latitude = engine.reserve(rows.outgoing_latitude, count);
      double* const outgoing_longitude = engine.reserve(rows.outgoing_longitude, count);
      std::int64_t* const outgoing_id = engine.reserve(rows.outgoing_id, count);
      detail::other_ranks_parts(out, me, [&](std::size_t begin, std::size_t n) {
        engine.to_host(latitude + begin, n, outgoing_latitude + begin);
        engine.to_host(longitude + begin, n, outgoing_longitude + begin);
        engine.to_host(id + begin, n, outgoing_id + begin);
      });
      engine.wait();
    });
    detail::lap(mark, stats_.host_seconds);
    detail::exchange_sizes(out, in, counts_, comm_);
    std::size_t const held = in.total();
    double* incoming_latitude = nullptr;
    double* incoming_longitude = nullptr;
    std::int64_t* incoming_id = nullptr;
    run_everywhere(comm_, "distributed_nearest::update", [&] {
      incoming_latitude = engine.reserve(rows.incoming_latitude, held);
      incoming_longitude = engine.reserve(rows.incoming_longitude, held);
      incoming_id = engine.reserve(rows.incoming_id, held);
    });
    detail::exchange_segments(rows.outgoing_latitude.data(), out, incoming_latitude, in, 1, me, counts_, comm_);
    detail::exchange_segments(rows.outgoing_longitude.data(), out, incoming_longitude, in, 1, me, counts_, comm_);
    detail::exchange_segments(rows.outgoing_id.data(), out, incoming_id, in, 1, me, counts_, comm_);
    std::uint64_t const held_here = held;
    shard_sizes_.resize(ranks);
    mpi_check(MPI_Allgather(&held_here, 1, MPI_UINT64_T, shard_sizes_.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
    detail::lap(mark, stats_.seconds);

    // The shard on the engine: the own part from its send order there, the other ranks' parts from
    // MPI's buffers; its ids also on the host.
    run_everywhere(comm_, "distributed_nearest::update", [&] {
      double* const latitude = engine.reserve(rows.shard_latitude, held);
      double* const longitude = engine.reserve(rows.shard_longitude, held);
      std::int64_t* const ids_there = engine.reserve(rows.shard_id, held);
      shard_id_.resize(held);
      engine.copy(rows.send_latitude.data() + out.at[me], out.size[me], latitude + in.at[me]);
      engine.copy(rows.send_longitude.data() + out.at[me], out.size[me], longitude + in.at[me]);
      engine.copy(rows.send_id.data() + out.at[me], out.size[me], ids_there + in.at[me]);
      engine.to_host(rows.send_id.data() + out.at[me], out.size[me], shard_id_.data() + in.at[me]);
      detail::other_ranks_parts(in, me, [&](std::size_t begin, std::size_t n) {
        engine.from_host(incoming_latitude + begin, n, latitude + begin);
        engine.from_host(incoming_longitude + begin, n, longitude + begin);
        engine.from_host(incoming_id + begin, n, ids_there + begin);
        detail::parallel_copy(incoming_id + begin, n, shard_id_.data() + begin, *team_);
      });
      engine.wait();
      rows.partition_stamp = partition_stamp_;
    });
    detail::lap(mark, stats_.host_seconds);

    std::uint64_t const kept = out.size[me];
    std::uint64_t const samples_in = all_samples_.size() - samples_.size();
    stats_.bytes_sent = (count - kept) * reference_bytes + samples_.size() * sizeof(detail::key_sample) * (ranks - 1);
    stats_.bytes_received = (held - kept) * reference_bytes + samples_in * sizeof(detail::key_sample);
    stats_.references_held = held;
    run_everywhere(comm_, "distributed_nearest::update", [&] { searcher_.prepare(rows.shard_latitude.data(), rows.shard_longitude.data(), held); });
    detail::lap(mark, stats_.search_seconds);
  }

  /// The sharded query at several ranks (routes_rows()), its work per observation on `engine`
  /// (detail/sharded_rows.hpp) with the working memory `rows`: the observations `points` and the
  /// result rows `result` (k per row) in the engine's memory; `search_rows(latitude, longitude, count,
  /// index, angle)` searches `count` packed rows there in this rank's shard (local ids, k per row), and
  /// may throw. The partition comes from `rows` when the last update wrote it there
  /// (repartition_on() on the same rows), else from the host's copies. After begin_query().
  /// Collective.
  template <class Engine, class SearchRows>
  void sharded_query_on(Engine& engine, detail::sharded_rows<Engine>& rows, detail::point_rows points, std::size_t count, std::size_t k,
                        detail::neighbor_rows result, SearchRows const& search_rows)
  {
    auto const ranks = static_cast<std::size_t>(info_.size);
    auto const me = static_cast<std::size_t>(info_.rank);
    auto const invalid = static_cast<std::uint32_t>(ranks);  // the owner of an invalid observation
    double mark = MPI_Wtime();
    detail::segments& out = owners_out_;  // the valid observations by owner (the send order)
    detail::segments& in = owners_in_;    // the observations this rank owns (visitors), by sending rank

    // Phase 1: each observation's owner (the rank of its key; invalid ones are answered where they
    // are); the valid ones by owner, in order, their coordinates packed; the parts for other ranks to
    // the host; samples of the keys for the next update's splitters.
    std::size_t const taken = detail::sample_count(count);
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      detail::expect_row_numbers(count, "distributed_nearest::query: observations");
      if (rows.partition_stamp != partition_stamp_) { mirror_partition(engine, rows); }
      std::uint32_t* const owner = engine.reserve(rows.owner, count);
      engine.for_each(count, detail::find_owners{points, rows.splitters.data(), ranks, owner});
      rows.bins.resize(ranks + 1);
      engine.partition(owner, count, ranks + 1, engine.reserve(rows.order, count), rows.bins.data());
      out.size.assign(rows.bins.begin(), rows.bins.begin() + static_cast<std::ptrdiff_t>(ranks));
      out.place();
      std::size_t const valid = out.total();
      engine.for_each(valid, detail::fill_slots{points, rows.order.data(), engine.reserve(rows.send_latitude, valid),
                                                engine.reserve(rows.send_longitude, valid), engine.reserve(rows.slot_of, count), 0, nullptr});
      engine.for_each(taken, detail::sample_keys_of{points, count, engine.reserve(rows.sample_key, taken)});
      engine.to_host(rows.sample_key.data(), taken, engine.reserve(rows.sample_key_host, taken));
      double* const outgoing_latitude = engine.reserve(rows.outgoing_latitude, valid);
      double* const outgoing_longitude = engine.reserve(rows.outgoing_longitude, valid);
      detail::other_ranks_parts(out, me, [&](std::size_t begin, std::size_t n) {
        engine.to_host(rows.send_latitude.data() + begin, n, outgoing_latitude + begin);
        engine.to_host(rows.send_longitude.data() + begin, n, outgoing_longitude + begin);
      });
      engine.wait();
    });
    observation_samples_.clear();  // for the next update's splitters
    std::uint64_t const* const sample_key = rows.sample_key_host.data();
    detail::sample_keys(count, false, [&](std::size_t s) { return sample_key[s]; }, [](std::size_t) { return std::uint64_t{0}; },
                        observation_samples_);
    observation_samples_.erase(std::remove_if(observation_samples_.begin(), observation_samples_.end(),
                                              [](detail::key_sample const& s) { return s.key == detail::nowhere; }),
                               observation_samples_.end());
    detail::lap(mark, stats_.host_seconds);
    detail::exchange_sizes(out, in, counts_, comm_);
    std::size_t const visitors = in.total();
    double* incoming_latitude = nullptr;
    double* incoming_longitude = nullptr;
    std::int64_t* answer_index_out = nullptr;
    double* answer_angle_out = nullptr;
    std::int64_t* answer_index_in = nullptr;
    double* answer_angle_in = nullptr;
    run_everywhere(comm_, "distributed_nearest::query", [&] {  // the host side of the exchanges
      incoming_latitude = engine.reserve(rows.incoming_latitude, visitors);
      incoming_longitude = engine.reserve(rows.incoming_longitude, visitors);
      answer_index_out = engine.reserve(rows.answer_index_out, visitors * k);
      answer_angle_out = engine.reserve(rows.answer_angle_out, visitors * k);
      answer_index_in = engine.reserve(rows.answer_index_in, out.total() * k);
      answer_angle_in = engine.reserve(rows.answer_angle_in, out.total() * k);
    });
    detail::exchange_segments(rows.outgoing_latitude.data(), out, incoming_latitude, in, 1, me, counts_, comm_);
    detail::exchange_segments(rows.outgoing_longitude.data(), out, incoming_longitude, in, 1, me, counts_, comm_);
    detail::lap(mark, stats_.seconds);

    // The owner's search of its visitors (its own part, and what the others sent); the k-th angle
    // found bounds where a nearer reference can be.
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      detail::expect_row_numbers(visitors, "distributed_nearest::query: observations owned by one rank");
      double* const latitude = engine.reserve(rows.visitor_latitude, visitors);
      double* const longitude = engine.reserve(rows.visitor_longitude, visitors);
      engine.copy(rows.send_latitude.data() + out.at[me], out.size[me], latitude + in.at[me]);
      engine.copy(rows.send_longitude.data() + out.at[me], out.size[me], longitude + in.at[me]);
      detail::other_ranks_parts(in, me, [&](std::size_t begin, std::size_t n) {
        engine.from_host(incoming_latitude + begin, n, latitude + begin);
        engine.from_host(incoming_longitude + begin, n, longitude + begin);
      });
      engine.wait();
      std::int64_t* const found = engine.reserve(rows.found_index, visitors * k);
      double* const found_angle = engine.reserve(rows.found_angle, visitors * k);
      search_rows(latitude, longitude, visitors, found, found_angle);
      engine.for_each(visitors * k, detail::global_ids{found, rows.shard_id.data()});
      engine.wait();
    });
    detail::lap(mark, stats_.search_seconds);

    // Phase 2: the visitors whose neighbourhood may hold a nearer reference on another rank (a test
    // per visitor on the engine; few pass it), to the host, which walks the cells of their
    // neighbourhood and sends each on to the ranks within reach.
    std::size_t flagged = 0;
    bool others_hold_references = false;
    for (std::size_t r = 0; r < ranks; ++r) { others_hold_references = others_hold_references || (r != me && shard_sizes_[r] > 0); }
    detail::key_span const mine_alone = detail::keys_held_alone(splitters_, me);
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      std::uint8_t* const flag = engine.reserve(rows.flag, visitors);
      engine.for_each(visitors, detail::flag_reach{rows.visitor_latitude.data(), rows.visitor_longitude.data(), rows.found_index.data(),
                                                   rows.found_angle.data(), k, mine_alone, others_hold_references, flag});
      flagged = engine.select(flag, visitors, engine.reserve(rows.selected, visitors));
      engine.for_each(flagged, detail::gather_flagged{rows.selected.data(), rows.visitor_latitude.data(), rows.visitor_longitude.data(),
                                                      rows.found_index.data(), rows.found_angle.data(), k,
                                                      engine.reserve(rows.flagged_latitude, flagged), engine.reserve(rows.flagged_longitude, flagged),
                                                      engine.reserve(rows.flagged_index, flagged * k), engine.reserve(rows.flagged_angle, flagged * k)});
      engine.to_host(rows.flagged_latitude.data(), flagged, engine.reserve(rows.flagged_latitude_host, flagged));
      engine.to_host(rows.flagged_longitude.data(), flagged, engine.reserve(rows.flagged_longitude_host, flagged));
      engine.to_host(rows.flagged_index.data(), flagged * k, engine.reserve(rows.flagged_index_host, flagged * k));
      engine.to_host(rows.flagged_angle.data(), flagged * k, engine.reserve(rows.flagged_angle_host, flagged * k));
      engine.wait();
    });
    double const* const flagged_latitude = rows.flagged_latitude_host.data();
    double const* const flagged_longitude = rows.flagged_longitude_host.data();
    std::int64_t* const flagged_index = rows.flagged_index_host.data();
    double* const flagged_angle = rows.flagged_angle_host.data();
    std::size_t const parts = detail::part_count(flagged, team_->threads());
    seen_.assign(parts * ranks, std::numeric_limits<std::size_t>::max());
    helpers_.route(flagged, ranks, *team_, [&](std::size_t f, std::size_t part, auto&& send) {
      std::size_t* const seen = seen_.data() + part * ranks;
      auto const visit = [&](std::size_t r) {
        if (r != me && shard_sizes_[r] > 0 && seen[r] != f) { seen[r] = f, send(r); }
      };
      if (flagged_index[f * k + k - 1] < 0) {  // fewer than k here: any rank may hold one
        for (std::size_t r = 0; r < ranks; ++r) { visit(r); }
        return;
      }
      detail::cell_box boxes[2];
      int const box_count = detail::neighbourhood_boxes(flagged_latitude[f], flagged_longitude[f], flagged_angle[f * k + k - 1], boxes);
      for (int b = 0; b < box_count; ++b) {
        if (!detail::cell_within(boxes[b], mine_alone)) { detail::reachable_ranks(splitters_, boxes[b], visit); }
      }
    });
    gather_points(helpers_, flagged_latitude, flagged_longitude, to_helpers_);
    detail::lap(mark, stats_.host_seconds);
    detail::segments& helped = helpers_out_;  // the visits by rank
    detail::segments& hosted = helpers_in_;   // the guests this rank searches, by owner
    helped.size = helpers_.counts();
    detail::exchange_sizes(helped, hosted, counts_, comm_);
    std::size_t const guests = hosted.total();
    guest_latitude_.resize(guests), guest_longitude_.resize(guests);
    detail::exchange_segments(to_helpers_.latitude.data(), helped, guest_latitude_.data(), hosted, 1, me, counts_, comm_);
    detail::exchange_segments(to_helpers_.longitude.data(), helped, guest_longitude_.data(), hosted, 1, me, counts_, comm_);
    detail::lap(mark, stats_.seconds);
    guest_found_.resize(guests * k);
    guest_angle_.resize(guests * k);
    search_shard(guest_latitude_, guest_longitude_, k, guest_found_, guest_angle_);
    detail::lap(mark, stats_.search_seconds);
    answer_index_.resize(helpers_.total() * k), answer_angle_.resize(helpers_.total() * k);
    detail::exchange_segments(guest_found_.data(), hosted, answer_index_.data(), helped, k, me, counts_, comm_);
    detail::exchange_segments(guest_angle_.data(), hosted, answer_angle_.data(), helped, k, me, counts_, comm_);
    detail::lap(mark, stats_.seconds);

    // The owner keeps the k nearest of its own and the returned lists (each ordered, so a linear
    // merge), back into the visitors' rows on the engine, and sends every visitor's answer home.
    merged_.resize(parts * k);
    helpers_.for_each([&](std::size_t slot, std::size_t f, std::size_t, std::size_t part) {
      detail::merge_nearest(flagged_index + f * k, flagged_angle + f * k, answer_index_.data() + slot * k, answer_angle_.data() + slot * k, k,
                            merged_.data() + part * k);
    });
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      engine.from_host(flagged_index, flagged * k, rows.flagged_index.data());
      engine.from_host(flagged_angle, flagged * k, rows.flagged_angle.data());
      engine.for_each(flagged * k, detail::scatter_flagged{rows.selected.data(), rows.flagged_index.data(), rows.flagged_angle.data(), k,
                                                           rows.found_index.data(), rows.found_angle.data()});
      detail::other_ranks_parts(in, me, [&](std::size_t begin, std::size_t n) {
        engine.to_host(rows.found_index.data() + begin * k, n * k, answer_index_out + begin * k);
        engine.to_host(rows.found_angle.data() + begin * k, n * k, answer_angle_out + begin * k);
      });
      engine.wait();
    });
    detail::lap(mark, stats_.host_seconds);
    detail::exchange_segments(answer_index_out, in, answer_index_in, out, k, me, counts_, comm_);
    detail::exchange_segments(answer_angle_out, in, answer_angle_in, out, k, me, counts_, comm_);
    detail::lap(mark, stats_.seconds);

    // Each observation's answer into its row (the own part straight from the visitors' rows).
    run_everywhere(comm_, "distributed_nearest::query", [&] {
      std::int64_t* const home_index = engine.reserve(rows.home_index, out.total() * k);
      double* const home_angle = engine.reserve(rows.home_angle, out.total() * k);
      engine.copy(rows.found_index.data() + in.at[me] * k, in.size[me] * k, home_index + out.at[me] * k);
      engine.copy(rows.found_angle.data() + in.at[me] * k, in.size[me] * k, home_angle + out.at[me] * k);
      detail::other_ranks_parts(out, me, [&](std::size_t begin, std::size_t n) {
        engine.from_host(answer_index_in + begin * k, n * k, home_index + begin * k);
        engine.from_host(answer_angle_in + begin * k, n * k, home_angle + begin * k);
      });
      engine.for_each(count * k, detail::place_rows{rows.owner.data(), invalid, rows.slot_of.data(), home_index, home_angle, k, result});
      engine.wait();
    });
    detail::lap(mark, stats_.host_seconds);

    std::uint64_t const sent = out.total() - out.size[me], received = visitors - in.size[me];
    std::uint64_t const answer_bytes = k * (sizeof(std::int64_t) + sizeof(double));
    stats_.observations_sent = sent + helpers_.total();
    stats_.visits = helpers_.total();
    stats_.observations_searched = visitors + guests;
    stats_.bytes_sent = (sent + helpers_.total()) * point_bytes + (guests + received) * answer_bytes + 2 * ranks * sizeof(int);
    stats_.bytes_received = (received + guests) * point_bytes + (helpers_.total() + sent) * answer_bytes + 2 * ranks * sizeof(int);
  }

 private:
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
    team_->parallel_ranges(count * k, [&](std::size_t begin, std::size_t end, std::size_t) {
      for (std::size_t e = begin; e < end; ++e) {
        if (index[e] >= 0) { index[e] = shard_id_[static_cast<std::size_t>(index[e])]; }
      }
    });
  }
  static constexpr std::uint64_t point_bytes = 2 * sizeof(double);
  static constexpr std::uint64_t reference_bytes = point_bytes + sizeof(std::int64_t);

  MPI_Comm comm_;
  reference_layout layout_;
  Searcher searcher_;
  rank_info info_;
  std::unique_ptr<detail::host_team> team_;  // the host loops' threads (the node's cores shared by its ranks); stable: the engine refers to it
  std::vector<std::uint64_t> offsets_;     // global ids: offsets_[r] is rank r's first
  exchange_stats stats_;
  // Replicated: every rank's references.
  std::vector<double> all_latitude_, all_longitude_;
  // Sharded: the partition and this rank's shard (by global id).
  std::vector<detail::keyed_id> splitters_;
  std::uint64_t partition_stamp_ = 0;                 // the sharded update()s so far: which one the rows' copies hold
  std::vector<std::uint64_t> shard_sizes_;            // every rank's
  std::vector<std::int64_t> shard_id_;
  std::vector<detail::key_sample> observation_samples_;  // of the last query, for the next splitters
  // Working memory, kept so that a loop of steps of one size allocates nothing; one buffer per use, so
  // that none shrinks and grows again (a vector's growth writes every new element, on one thread).
  std::vector<detail::key_sample> samples_, all_samples_;  // the update's splitter samples: this rank's, every rank's
  detail::alltoall_counts counts_;
  detail::routed_items helpers_;
  detail::segments shards_out_, shards_in_, owners_out_, owners_in_, helpers_out_, helpers_in_;
  std::vector<std::size_t> seen_;                     // [part * ranks + rank]: last flagged visitor sent there
  std::vector<detail::candidate> merged_;             // k per part
  outgoing_points to_helpers_;
  std::vector<double> guest_latitude_, guest_longitude_;
  std::vector<std::int64_t> guest_found_, answer_index_;
  std::vector<double> guest_angle_, answer_angle_;
  detail::host_row_engine host_engine_;               // the rows of update() and query() here: host arrays, the host threads
  detail::sharded_rows<detail::host_row_engine> host_rows_;
};

}  // namespace streamkit::distributed
