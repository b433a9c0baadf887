#pragma once
// Host loops of the distributed search (caps, routing, merging) over the cores of the node, which its
// ranks share: per observation they cost tens of nanoseconds of trigonometry, as much as the GPU's
// search of millions of points when run on one core. The threads are started once per object (a
// host_team) and kept: a loop allocates nothing and starts no thread.

#ifdef __linux__
#include <sched.h>
#endif

#include <streamkit/multi_gpu/detail/worker_pool.hpp>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace streamkit::distributed::detail {

/// Below this many items per part a loop is not split (a thread's start costs ~10 µs).
inline constexpr std::size_t items_per_part = std::size_t{1} << 15;

/// Threads for one rank's host loops: the CPUs this process may run on. A process bound to some of
/// the node's CPUs (mpirun binds each rank to one core by default) gets those; an unbound one shares
/// the node's CPUs with the other `ranks_on_node`.
inline std::size_t host_threads(int ranks_on_node)
{
  std::size_t const node = std::max(1u, std::thread::hardware_concurrency());
#ifdef __linux__
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof allowed, &allowed) == 0) {
    auto const mine = static_cast<std::size_t>(CPU_COUNT(&allowed));
    if (mine > 0 && mine < node) { return mine; }
  }
#endif
  return std::max<std::size_t>(1, node / static_cast<std::size_t>(std::max(1, ranks_on_node)));
}

/// How many parts host_team::parallel_ranges() cuts `count` items into with `threads` threads.
inline std::size_t part_count(std::size_t count, std::size_t threads)
{
  return std::max<std::size_t>(1, std::min(threads, count / items_per_part));
}

/// The items [begin, end) of part `part` of `parts` (contiguous, in order, sizes differ by at most 1).
inline std::size_t part_begin(std::size_t count, std::size_t parts, std::size_t part)
{
  return count / parts * part + std::min(part, count % parts);
}

/// The threads of one rank's host loops: the caller's and threads − 1 kept waiting in a pool, started
/// once (a thread's start costs ~10 µs and allocates). One loop at a time (not thread-safe; loops do
/// not nest). Movable: the pool stays where it is.
class host_team {
 public:
  /// @param threads at least 1 (host_threads()).
  explicit host_team(std::size_t threads) : pool_(std::make_unique<streamkit::detail::worker_pool>(std::max<std::size_t>(1, threads) - 1)) {}

  /// The threads of a loop, the caller's included.
  [[nodiscard]] std::size_t threads() const noexcept { return pool_->size() + 1; }

  /// Runs body(begin, end, part) for the part_count(count, threads()) contiguous parts of [0, count),
  /// one thread each (part 0 on the calling thread), and rethrows the exception of the first part
  /// that threw after all end. Allocates nothing.
  template <class Body>
  void parallel_ranges(std::size_t count, Body const& body) const
  {
    std::size_t const parts = part_count(count, threads());
    std::mutex failed;
    std::exception_ptr failure;
    std::size_t failed_part = std::numeric_limits<std::size_t>::max();
    pool_->run(parts, [&](std::size_t part) {
      try {
        body(part_begin(count, parts, part), part_begin(count, parts, part + 1), part);
      } catch (...) {
        std::lock_guard<std::mutex> const lock(failed);
        if (part < failed_part) { failed_part = part, failure = std::current_exception(); }
      }
    });
    if (failure) { std::rethrow_exception(failure); }
  }

 private:
  std::unique_ptr<streamkit::detail::worker_pool> pool_;
};

/// std::copy_n of `count` values on the host threads (the own part of an exchange, host rows: one
/// thread copies about 10 GB/s, a fraction of what the node's memory moves).
template <class T>
void parallel_copy(T const* from, std::size_t count, T* to, host_team const& team)
{
  team.parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t) { std::copy(from + begin, from + end, to + begin); });
}

}  // namespace streamkit::distributed::detail

namespace streamkit::distributed::detail {

/// Items routed to ranks on the host threads: each part of the items (parallel_ranges' parts) lists,
/// per rank, its items in order; a rank's items take consecutive slots of a rank-ordered send buffer,
/// part after part. Kept between calls, so that a loop of queries of one size allocates nothing.
class routed_items {
 public:
  /// Routes items [0, count): destinations(i, part, send) calls send(rank) for every rank item i goes
  /// to (each at most once); `part` (below part_count(count, threads)) names the calling thread's part.
  /// Afterwards counts()[r] items go to rank r.
  template <class Destinations>
  void route(std::size_t count, std::size_t ranks, host_team const& team, Destinations const& destinations)
  {
    ranks_ = ranks, count_ = count, team_ = &team;
    std::size_t const parts = part_count(count, team.threads());
    lists_.resize(parts * ranks);
    for (auto& list : lists_) { list.items.clear(); }
    team.parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t part) {
      list_of* const lists = lists_.data() + part * ranks;
      for (std::size_t i = begin; i < end; ++i) {
        destinations(i, part, [&](std::size_t rank) { lists[rank].items.push_back(i); });
      }
    });
    place_.resize(parts * ranks);
    counts_.assign(ranks, 0);
    total_ = 0;
    for (std::size_t r = 0; r < ranks; ++r) {
      std::size_t const first = total_;
      for (std::size_t part = 0; part < parts; ++part) {
        place_[part * ranks + r] = total_;
        total_ += lists_[part * ranks + r].items.size();
      }
      counts_[r] = total_ - first;
    }
  }

  /// Items per rank.
  [[nodiscard]] std::vector<std::size_t> const& counts() const noexcept { return counts_; }
  /// Items over all ranks (slots of the send buffer).
  [[nodiscard]] std::size_t total() const noexcept { return total_; }

  /// Calls visit(slot, item, rank, part) for every routed item, on the host threads; the calls of one
  /// part of the items run on one thread, so no two threads see the same item. After a part's items,
  /// that thread calls part_done(begin, end) with the part's items [begin, end).
  template <class Visit, class PartDone>
  void for_each(Visit const& visit, PartDone const& part_done) const
  {
    team_->parallel_ranges(count_, [&](std::size_t begin, std::size_t end, std::size_t part) {
      for (std::size_t r = 0; r < ranks_; ++r) {
        std::size_t slot = place_[part * ranks_ + r];
        for (std::size_t i : lists_[part * ranks_ + r].items) { visit(slot++, i, r, part); }
      }
      part_done(begin, end);
    });
  }
  template <class Visit>
  void for_each(Visit const& visit) const
  {
    for_each(visit, [](std::size_t, std::size_t) {});
  }

 private:
  struct alignas(64) list_of {  // a cache line each: the parts' threads grow them side by side
    std::vector<std::size_t> items;
  };
  std::vector<list_of> lists_;      // [part * ranks + rank]
  std::vector<std::size_t> place_;  // [part * ranks + rank]: slot of the list's first item
  std::vector<std::size_t> counts_;
  host_team const* team_ = nullptr;  // route()'s
  std::size_t ranks_ = 0, count_ = 0, total_ = 0;
};

}  // namespace streamkit::distributed::detail
