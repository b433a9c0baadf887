// Host logic of streamkit/distributed under mpirun (CTest runs it with 2 and 3 ranks): communicator
// description, device assignment, global ids, agreement checks and failures that reach every rank,
// and the per-column extrema reduction against one pass over the concatenation of all ranks' rows.
#include <streamkit/distributed/column_extrema.hpp>
#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/nearest_neighbor.hpp>

#include "distributed_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace distributed_test;

// The global operator new, counted (host_allocations()): malloc and free underneath, as the default.
namespace {
std::atomic<std::size_t> allocation_count{0};

void* counted_allocation(std::size_t bytes, std::size_t alignment)
{
  ++allocation_count;
  std::size_t const rounded = (std::max<std::size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
  void* const memory = alignment <= alignof(std::max_align_t) ? std::malloc(rounded) : std::aligned_alloc(alignment, rounded);
  if (memory == nullptr) { throw std::bad_alloc(); }
  return memory;
}
}  // namespace

std::size_t distributed_test::host_allocations() noexcept { return allocation_count.load(); }

void* operator new(std::size_t bytes) { return counted_allocation(bytes, alignof(std::max_align_t)); }
void* operator new[](std::size_t bytes) { return counted_allocation(bytes, alignof(std::max_align_t)); }
void* operator new(std::size_t bytes, std::align_val_t alignment) { return counted_allocation(bytes, static_cast<std::size_t>(alignment)); }
void* operator new[](std::size_t bytes, std::align_val_t alignment) { return counted_allocation(bytes, static_cast<std::size_t>(alignment)); }
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete[](void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }
void operator delete[](void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }

namespace {

/// The same bits on every rank? (all-gathers `value` and compares.)
template <class T>
bool same_on_every_rank(T value)
{
  int const size = me().size;
  std::vector<T> all(static_cast<std::size_t>(size));
  dist::mpi_check(MPI_Allgather(&value, sizeof value, MPI_BYTE, all.data(), sizeof value, MPI_BYTE, world), "MPI_Allgather");
  for (T const& other : all) {
    if (std::memcmp(&other, &value, sizeof value) != 0) { return false; }
  }
  return true;
}

std::uint64_t text_hash(std::string const& text) { return std::hash<std::string>{}(text); }

}  // namespace

TEST(Distributed, DescribesTheCommunicatorAndTheNode)
{
  auto const info = me();
  int size = 0;
  MPI_Comm_size(world, &size);
  EXPECT_EQ(info.size, size);
  EXPECT_GE(info.rank, 0);
  EXPECT_LT(info.rank, size);
  EXPECT_GE(info.local_rank, 0);
  EXPECT_LT(info.local_rank, info.local_size);
  EXPECT_LE(info.local_size, size);
}

TEST(Distributed, DefaultDeviceIsTheLocalRankModuloTheVisibleDevices)
{
  dist::rank_info info;
  info.local_rank = 5;
  EXPECT_EQ(dist::default_device(info, 2), 1);
  EXPECT_EQ(dist::default_device(info, 8), 5);
  EXPECT_EQ(dist::default_device(info, 1), 0);
  EXPECT_THROW(dist::default_device(info, 0), std::invalid_argument);
}

TEST(Distributed, GlobalOffsetsFollowRankOrderWithUnevenShares)
{
  auto const info = me();
  // Rank r holds 3r + 1 items; rank 1 none when there are 3 ranks (an empty share).
  auto const share = [&](int r) -> std::size_t { return info.size == 3 && r == 1 ? 0 : 3 * static_cast<std::size_t>(r) + 1; };
  std::vector<std::uint64_t> offsets(7, 99);  // more room than needed: resized
  dist::global_offsets(world, share(info.rank), offsets);
  ASSERT_EQ(offsets.size(), static_cast<std::size_t>(info.size) + 1);
  std::uint64_t expected = 0;
  for (int r = 0; r < info.size; ++r) {
    EXPECT_EQ(offsets[static_cast<std::size_t>(r)], expected);
    expected += share(r);
  }
  EXPECT_EQ(offsets.back(), expected);
}

TEST(Distributed, AgreementPassesWhenEveryRankAgrees)
{
  EXPECT_NO_THROW(dist::expect_agreement(world, "search", {{"k", 8}, {"the dtype", 2}}));
}

TEST(Distributed, DisagreementThrowsTheSameExceptionOnEveryRank)
{
  if (me().size == 1) { GTEST_SKIP() << "one rank: no other rank to disagree with"; }
  auto const info = me();
  std::string message;
  try {
    // The ranks agree on k and disagree on the column count: every rank must name the column count.
    dist::expect_agreement(world, "fit", {{"k", 4}, {"the column count", 10 + static_cast<std::uint64_t>(info.rank)}});
  } catch (std::invalid_argument const& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "fit: the ranks disagree on the column count (values from 10 to " + std::to_string(9 + info.size) + ")");
  EXPECT_TRUE(same_on_every_rank(text_hash(message)));
}

TEST(Distributed, AFailureOnOneRankReachesEveryRank)
{
  auto const info = me();
  int const failing = info.size - 1;
  std::string message;
  try {
    dist::run_everywhere(world, "query", [&] {
      if (info.rank == failing) { throw std::invalid_argument("observations: latitude 95 out of range"); }
    });
  } catch (std::invalid_argument const& e) {
    message = std::string("own: ") + e.what();
  } catch (std::runtime_error const& e) {
    message = std::string("other: ") + e.what();
  }
  if (info.rank == failing) {
    EXPECT_EQ(message, "own: observations: latitude 95 out of range");
  } else {
    EXPECT_EQ(message, "other: query: failed on rank " + std::to_string(failing) + " (see that rank's exception)");
  }
  // And the ranks are still in step: a collective after it completes.
  EXPECT_TRUE(dist::all_succeed(world, true));
  EXPECT_FALSE(dist::all_succeed(world, info.rank != 0));
}

namespace {

template <class T>
void check_column_extrema()
{
  auto const info = me();
  std::size_t const columns = 6;
  T const nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> min(columns, nan), max(columns, nan);
  extrema(rows_of<T>(info.rank, info.size, columns), columns, min, max);
  dist::allreduce_column_extrema(world, min.data(), max.data(), columns);

  std::vector<T> const all = all_rows<T>(info.size, columns);
  std::vector<T> want_min(columns, nan), want_max(columns, nan);
  extrema(all, columns, want_min, want_max);
  for (std::size_t j = 0; j < columns; ++j) {
    EXPECT_EQ(std::memcmp(&min[j], &want_min[j], sizeof(T)), 0) << "column " << j << ": " << min[j] << " vs " << want_min[j];
    EXPECT_EQ(std::memcmp(&max[j], &want_max[j], sizeof(T)), 0) << "column " << j << ": " << max[j] << " vs " << want_max[j];
  }
  EXPECT_TRUE(std::isnan(min[1]) && std::isnan(max[1]));    // NaN on every rank
  EXPECT_FALSE(std::isnan(min[2]) || std::isnan(max[2]));  // a value on one rank only
  EXPECT_TRUE(std::isinf(min[3]) && min[3] < 0 && std::isinf(max[3]) && max[3] > 0);
}

}  // namespace

TEST(Distributed, ColumnExtremaEqualOnePassOverTheConcatenationFloat) { check_column_extrema<float>(); }
TEST(Distributed, ColumnExtremaEqualOnePassOverTheConcatenationDouble) { check_column_extrema<double>(); }

TEST(Distributed, ColumnExtremaRejectRanksThatDisagreeOnTheColumnCount)
{
  if (me().size == 1) { GTEST_SKIP() << "one rank: no other rank to disagree with"; }
  auto const info = me();
  std::size_t const columns = info.rank == 0 ? 3 : 4;
  std::vector<double> min(columns, 0.0), max(columns, 1.0);
  EXPECT_THROW(dist::allreduce_column_extrema(world, min.data(), max.data(), columns), std::invalid_argument);
  EXPECT_EQ(min, std::vector<double>(columns, 0.0));  // nothing written
}

TEST(Distributed, HostLoopsCoverEveryItemOnceAndPassOnFailures)
{
  std::size_t const threads = dist::detail::host_threads(me().local_size);
  EXPECT_GE(threads, 1u);
  EXPECT_LE(threads, std::max(1u, std::thread::hardware_concurrency()));
  dist::detail::host_team const team(4);
  EXPECT_EQ(team.threads(), 4u);
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, dist::detail::items_per_part * 5 + 3}) {
    std::size_t const parts = dist::detail::part_count(count, 4);
    std::vector<int> seen(count, 0);
    std::vector<std::size_t> first(parts, count), last(parts, 0);
    team.parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t part) {
      first[part] = begin, last[part] = end;
      for (std::size_t i = begin; i < end; ++i) { ++seen[i]; }
    });
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(count));
    for (std::size_t part = 1; part < parts; ++part) { EXPECT_EQ(first[part], last[part - 1]); }  // contiguous, in order
    EXPECT_EQ(parts, count > 4 * dist::detail::items_per_part ? 4u : std::max<std::size_t>(1, count / dist::detail::items_per_part));
  }
  // The first failed part's exception, after every part ran; the team runs the next loop.
  std::atomic<int> ran{0};
  try {
    team.parallel_ranges(dist::detail::items_per_part * 4, [&](std::size_t, std::size_t, std::size_t part) {
      ++ran;
      if (part >= 2) { throw std::runtime_error("part " + std::to_string(part)); }
    });
    ADD_FAILURE() << "no exception";
  } catch (std::runtime_error const& e) {
    EXPECT_STREQ(e.what(), "part 2");
  }
  EXPECT_EQ(ran, 4);
  std::atomic<std::size_t> covered{0};
  team.parallel_ranges(dist::detail::items_per_part * 4,
                                [&](std::size_t begin, std::size_t end, std::size_t) { covered += end - begin; });
  EXPECT_EQ(covered, dist::detail::items_per_part * 4);
}

TEST(Distributed, HostRowEnginePartitionsStablyAndSelectsInOrder)
{
  // The sharded query's engine on the host: a stable counting sort over several parts of the rows
  // (bins left empty among them) against std::stable_sort, and the selection of flagged rows.
  std::mt19937_64 rng(20261125);
  dist::detail::host_team const team(4);
  dist::detail::host_row_engine engine(team);
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, dist::detail::items_per_part * 5 + 3}) {
    for (std::size_t bins : {1, 3, 9}) {
      std::vector<std::uint32_t> bin(count);
      for (auto& b : bin) { b = static_cast<std::uint32_t>(rng() % bins) / 2 * 2; }  // the odd bins empty
      std::vector<std::uint32_t> order(count, 0xffffffffu);
      std::vector<std::size_t> sizes(bins, 99);
      engine.partition(bin.data(), count, bins, order.data(), sizes.data());
      std::vector<std::uint32_t> want(count);
      std::iota(want.begin(), want.end(), 0u);
      std::stable_sort(want.begin(), want.end(), [&](std::uint32_t a, std::uint32_t b) { return bin[a] < bin[b]; });
      EXPECT_EQ(order, want) << count << " rows, " << bins << " bins";
      for (std::size_t b = 0; b < bins; ++b) {
        EXPECT_EQ(sizes[b], static_cast<std::size_t>(std::count(bin.begin(), bin.end(), b))) << "bin " << b;
      }
    }
    std::vector<std::uint8_t> flag(count);
    std::vector<std::uint32_t> want;
    for (std::size_t i = 0; i < count; ++i) {
      flag[i] = rng() % 10 == 0 ? static_cast<std::uint8_t>(1 + rng() % 255) : 0;
      if (flag[i] != 0) { want.push_back(static_cast<std::uint32_t>(i)); }
    }
    std::vector<std::uint32_t> selected(count, 0xffffffffu);
    std::size_t const found = engine.select(flag.data(), count, selected.data());
    selected.resize(found);
    EXPECT_EQ(selected, want);
  }
}

TEST(DistributedNearest, RoutingNeverMissesARankWithinReach)
{
  // Splitters from random references (uniform, or bunched at a pole, on the ±π meridian or at one
  // point), then random observations and bounds, half of them exactly a reference's distance: every
  // reference within the bound (float64 haversine) must be on a rank that reachable_ranks() reports,
  // and on the observation's owner where reaches_beyond() (the test per observation that the GPU
  // runs too) says the neighbourhood stays in the keys the owner holds alone.
  std::mt19937_64 rng(20261124);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::size_t reported = 0, needed = 0, stayed = 0;
  for (int round = 0; round < 40; ++round) {
    std::size_t const ranks = 2 + round % 9, count = 3000;
    int const shape = round % 4;  // 0 uniform, 1 near the north pole, 2 around lon = ±π, 3 one point and its neighbours
    std::vector<double> latitude(count), longitude(count);
    std::vector<dist::detail::key_sample> samples;
    for (std::size_t i = 0; i < count; ++i) {
      double lat = std::asin(2 * unit(rng) - 1), lon = M_PI * (2 * unit(rng) - 1);
      if (shape == 1) { lat = M_PI / 2 - 0.05 * unit(rng); }
      if (shape == 2) { lon = M_PI + 0.1 * (2 * unit(rng) - 1) + (unit(rng) < 0.3 ? -2 * M_PI : 0.0); }
      if (shape == 3 && i % 3 != 0) { lat = 0.3, lon = -1.2; }
      latitude[i] = lat, longitude[i] = lon;
    }
    dist::detail::sample_keys(
      count, true,
      [&](std::size_t s) {
        std::size_t const i = dist::detail::sample_row(s, count);
        return dist::detail::space_key(latitude[i], longitude[i]);
      },
      [&](std::size_t s) { return std::uint64_t{dist::detail::sample_row(s, count)}; }, samples);
    auto const splitters = splitters_of(samples, ranks);
    ASSERT_EQ(splitters.size(), ranks - 1);
    std::vector<std::size_t> rank(count);
    for (std::size_t i = 0; i < count; ++i) {
      rank[i] = dist::detail::rank_of(splitters, {dist::detail::space_key(latitude[i], longitude[i]), i});
    }
    for (int trial = 0; trial < 300; ++trial) {
      std::size_t const near = static_cast<std::size_t>(unit(rng) * count);
      double lat = std::clamp(latitude[near] + 0.02 * (2 * unit(rng) - 1), -M_PI / 2, M_PI / 2), lon = longitude[near] + 0.02 * (2 * unit(rng) - 1);
      if (trial % 7 == 0) { lat = std::asin(2 * unit(rng) - 1), lon = 3 * M_PI * (2 * unit(rng) - 1); }
      double bound = std::pow(10.0, -9 + 9.6 * unit(rng));
      if (trial % 2 == 0) { bound = streamkit::haversine(lat, lon, latitude[near], longitude[near]); }  // a reference at the bound
      std::vector<char> reach(ranks, 0);
      std::size_t const owner = dist::detail::rank_of(splitters, {dist::detail::space_key(lat, lon), 0});
      bool const beyond = dist::detail::reaches_beyond(lat, lon, bound, dist::detail::keys_held_alone(splitters, owner));
      dist::detail::cell_box boxes[2];
      int const box_count = dist::detail::neighbourhood_boxes(lat, lon, bound, boxes);
      for (int b = 0; b < box_count; ++b) {
        dist::detail::reachable_ranks(splitters, boxes[b], [&](std::size_t r) {
          ASSERT_LT(r, ranks);
          reach[r] = 1;
        });
      }
      for (std::size_t i = 0; i < count; ++i) {
        if (streamkit::haversine(lat, lon, latitude[i], longitude[i]) <= bound) {
          ++needed;
          ASSERT_TRUE(reach[rank[i]]) << "missed rank " << rank[i] << ": observation (" << lat << ", " << lon << "), bound " << bound
                                      << ", reference " << i << " at (" << latitude[i] << ", " << longitude[i] << "), shape " << shape;
          ASSERT_TRUE(beyond || rank[i] == owner) << "reaches_beyond() said no, yet reference " << i << " within the bound is on rank "
                                                  << rank[i] << ", the owner " << owner;
        }
      }
      reported += static_cast<std::size_t>(std::count(reach.begin(), reach.end(), 1));
      stayed += beyond ? 0 : 1;
    }
  }
  EXPECT_GT(stayed, 40u * 300u / 10);  // and it does say no (most small bounds stay inside)
  EXPECT_GT(needed, 100000u);  // the bounds did hold references
  EXPECT_LT(reported, 40u * 300u * 5u);  // and the routing is not "every rank"
}

TEST(DistributedNearest, KeysAndSplitters)
{
  // Keys: invalid points last; a cell's keys nest (a point's key lies in the range of each enclosing
  // cell); longitudes equal modulo 2π share a key.
  EXPECT_EQ(dist::detail::space_key(std::nan(""), 0.1), dist::detail::nowhere);
  EXPECT_EQ(dist::detail::space_key(0.1, HUGE_VAL), dist::detail::nowhere);
  EXPECT_EQ(dist::detail::space_key(1.6, 0.1), dist::detail::nowhere);
  EXPECT_EQ(dist::detail::space_key(0.2, 0.5 + 4 * M_PI), dist::detail::space_key(0.2, 0.5 + 4 * M_PI - 4 * M_PI));
  EXPECT_LT(dist::detail::space_key(M_PI / 2, M_PI), dist::detail::nowhere);
  EXPECT_EQ(dist::detail::cell_key(0x7fffffffu, 0x7fffffffu), (std::uint64_t{1} << 62) - 1);
  EXPECT_EQ(dist::detail::cell_key(1, 0), 2u);
  EXPECT_EQ(dist::detail::cell_key(0, 1), 1u);
  // Splitters: equal keys split by id, evenly; weights count; with no reference sample past a cut
  // the remaining ranges are empty.
  std::vector<dist::detail::key_sample> same;
  for (std::uint64_t id = 0; id < 400; ++id) { same.push_back({77, id, 1.0, 1}); }
  auto const even = splitters_of(same, 4);
  ASSERT_EQ(even.size(), 3u);
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(even[j].key, 77u);
    EXPECT_NEAR(static_cast<double>(even[j].id), 100.0 * static_cast<double>(j + 1), 1.0);
  }
  // Four references of weight 1 and observations (scaled to weigh 4 × 4 together) at key 30: half
  // of 20 is passed inside the observations' weight, and the cut moves to the next reference.
  std::vector<dist::detail::key_sample> weighted{{10, 0, 1.0, 1}, {20, 1, 1.0, 1}, {30, 0, 3.0, 0}, {40, 2, 1.0, 1}, {50, 3, 1.0, 1}};
  auto const cut = splitters_of(weighted, 2);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0].key, 40u);
  auto const few = splitters_of({{10, 0, 1.0, 1}}, 3);
  EXPECT_EQ(few[1].key, dist::detail::nowhere);
}

namespace {

std::uint64_t max_over_ranks(std::uint64_t value)
{
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_UINT64_T, MPI_MAX, world);
  return value;
}

std::uint64_t sum_over_ranks(std::uint64_t value)
{
  MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_UINT64_T, MPI_SUM, world);
  return value;
}

void check_distributed_search(streamkit::distributed::reference_layout layout, bool clustered, std::size_t k)
{
  auto const info = me();
  // Uneven shares; with 3 ranks, rank 1 holds no reference.
  auto const reference_count = [&](int r) -> std::size_t { return info.size == 3 && r == 1 ? 0 : 150 + 70 * static_cast<std::size_t>(r); };
  point_set const refs = points_of(info.rank, info.size, reference_count(info.rank), clustered, 1);
  point_set obs = points_of(info.rank, info.size, 90 + 13 * static_cast<std::size_t>(info.rank), clustered, 2);
  obs.latitude[0] = std::numeric_limits<double>::quiet_NaN();  // an invalid observation

  dist::distributed_nearest<cpu_search> search(world, layout);
  search.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
  std::size_t const n = obs.latitude.size();
  std::vector<std::int64_t> index(n * k, -7);
  std::vector<double> angle(n * k, -7.0);
  search.query(obs.latitude.data(), obs.longitude.data(), n, k, index.data(), angle.data());

  cpu_search single;  // one search over the concatenation of every rank's references, in rank order
  point_set const all = all_points(info.size, reference_count, clustered, 1);
  single.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
  std::vector<std::int64_t> want(n * k);
  std::vector<double> want_angle(n * k);
  single.search(obs.latitude.data(), obs.longitude.data(), n, k, want.data(), want_angle.data());

  EXPECT_EQ(search.size(), all.latitude.size());
  EXPECT_EQ(index, want);
  for (std::size_t e = 0; e < n * k; ++e) {
    EXPECT_TRUE(angle[e] == want_angle[e] || (std::isnan(angle[e]) && std::isnan(want_angle[e]))) << "entry " << e;
  }
  EXPECT_EQ(index[0], -1);  // the invalid observation
  if (layout == dist::reference_layout::sharded && k == 1) {
    // Spatial shards: far fewer visits than every observation to every other rank (with a few
    // hundred references per rank the nearest is ~0.1 rad away, so a fair share lies near a border).
    std::uint64_t const visits = sum_over_ranks(search.last_exchange().visits), everywhere = sum_over_ranks(n) * (info.size - 1);
    EXPECT_LE(visits, everywhere / 2) << visits << " visits";
  }
}

}  // namespace

TEST(DistributedNearest, ReplicatedEqualsOneSearchOverTheConcatenation)
{
  for (std::size_t k : {1, 5}) { check_distributed_search(dist::reference_layout::replicated, false, k); }
}

TEST(DistributedNearest, ShardedEqualsOneSearchOverTheConcatenationUniform)
{
  for (std::size_t k : {1, 5, 40}) { check_distributed_search(dist::reference_layout::sharded, false, k); }
}

TEST(DistributedNearest, ShardedEqualsOneSearchOverTheConcatenationClustered)
{
  for (std::size_t k : {1, 5}) { check_distributed_search(dist::reference_layout::sharded, true, k); }
}

namespace {

/// Every rank's shard ids, all-gathered.
std::vector<std::int64_t> all_shard_ids(std::vector<std::int64_t> const& mine)
{
  int const size = me().size;
  int const count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), at(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, world);
  for (std::size_t r = 1; r < counts.size(); ++r) { at[r] = at[r - 1] + counts[r - 1]; }
  std::vector<std::int64_t> all(static_cast<std::size_t>(at.back() + counts.back()));
  MPI_Allgatherv(mine.data(), count, MPI_INT64_T, all.data(), counts.data(), at.data(), MPI_INT64_T, world);
  return all;
}

/// The distributed search of `obs` against the one search over `all` (every rank's references in rank
/// order): same ids, same angles bit for bit. Returns the search for its statistics.
void expect_one_search(dist::distributed_nearest<cpu_search>& search, point_set const& all, point_set const& obs, std::size_t k)
{
  std::size_t const n = obs.latitude.size();
  std::vector<std::int64_t> index(n * k, -7);
  std::vector<double> angle(n * k, -7.0);
  search.query(obs.latitude.data(), obs.longitude.data(), n, k, index.data(), angle.data());
  cpu_search single;
  single.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
  std::vector<std::int64_t> want(n * k);
  std::vector<double> want_angle(n * k);
  single.search(obs.latitude.data(), obs.longitude.data(), n, k, want.data(), want_angle.data());
  EXPECT_EQ(index, want);
  for (std::size_t e = 0; e < n * k; ++e) {
    EXPECT_TRUE(angle[e] == want_angle[e] || (std::isnan(angle[e]) && std::isnan(want_angle[e]))) << "entry " << e;
  }
}

}  // namespace

TEST(DistributedNearest, ShardedUpdatePartitionsEveryReferenceOnceByKeyRange)
{
  auto const info = me();
  auto const reference_count = [&](int r) -> std::size_t { return info.size == 3 && r == 1 ? 0 : 4000 + 1500 * static_cast<std::size_t>(r); };
  point_set refs = points_of(info.rank, info.size, reference_count(info.rank), false, 21);
  if (!refs.latitude.empty()) { refs.longitude.back() = std::numeric_limits<double>::quiet_NaN(); }  // an invalid reference
  dist::distributed_nearest<cpu_search> search(world, dist::reference_layout::sharded);
  search.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
  point_set all = all_points(info.size, reference_count, false, 21);
  for (std::size_t r = 0, end = 0; r < static_cast<std::size_t>(info.size); ++r) {
    end += reference_count(static_cast<int>(r));
    if (reference_count(static_cast<int>(r)) > 0) { all.longitude[end - 1] = std::numeric_limits<double>::quiet_NaN(); }
  }

  // Every global id exactly once over the shards, ascending within each, in its rank's key range.
  auto const& ids = search.shard_ids();
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  auto ids_everywhere = all_shard_ids(ids);
  std::sort(ids_everywhere.begin(), ids_everywhere.end());
  std::vector<std::int64_t> every(all.latitude.size());
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(ids_everywhere, every);
  auto const& splitters = search.splitters();
  ASSERT_EQ(splitters.size(), static_cast<std::size_t>(info.size - 1));
  std::size_t elsewhere = 0;  // counted, not asserted: every rank must reach the collectives below
  for (std::int64_t id : ids) {
    auto const g = static_cast<std::size_t>(id);
    std::uint64_t const key = dist::detail::space_key(all.latitude[g], all.longitude[g]);
    elsewhere += dist::detail::rank_of(splitters, {key, static_cast<std::uint64_t>(id)}) != static_cast<std::size_t>(info.rank);
  }
  EXPECT_EQ(elsewhere, 0u);
  // Even counts (sampled splitters: within 15 % of the mean), reported; the shard's searcher holds them.
  std::uint64_t const held = search.last_exchange().references_held;
  EXPECT_EQ(held, ids.size());
  EXPECT_EQ(search.searcher().latitude.size(), ids.size());
  double const mean = static_cast<double>(all.latitude.size()) / info.size;
  EXPECT_LT(static_cast<double>(max_over_ranks(held)), 1.15 * mean);
  // Bytes: the references that moved, 24 bytes each, and the samples.
  EXPECT_EQ(sum_over_ranks(search.last_exchange().bytes_sent), sum_over_ranks(search.last_exchange().bytes_received));
}

TEST(DistributedNearest, ShardedAllReferencesAtOnePoint)
{
  // Every reference of every rank at one point: ties everywhere, broken by the global id; the
  // partition still splits them evenly (by id).
  auto const info = me();
  std::size_t const m = 300;
  point_set refs{std::vector<double>(m, 0.7), std::vector<double>(m, -2.9)};
  point_set all{std::vector<double>(m * static_cast<std::size_t>(info.size), 0.7), std::vector<double>(m * static_cast<std::size_t>(info.size), -2.9)};
  point_set obs = points_of(info.rank, info.size, 40, false, 22);
  obs.latitude[2] = 0.7, obs.longitude[2] = -2.9;  // at the point
  dist::distributed_nearest<cpu_search> search(world, dist::reference_layout::sharded);
  search.update(refs.latitude.data(), refs.longitude.data(), m);
  EXPECT_LT(static_cast<double>(max_over_ranks(search.last_exchange().references_held)), 1.2 * m);
  for (std::size_t k : {1, 7}) { expect_one_search(search, all, obs, k); }
}

TEST(DistributedNearest, ShardedWithFewerReferencesThanKOrNone)
{
  auto const info = me();
  // One reference on the last rank only, then none at all: -1 and NaN beyond the set.
  for (std::size_t total : {1, 0}) {
    std::size_t const mine = info.rank == info.size - 1 ? total : 0;
    point_set const refs = points_of(info.rank, info.size, mine, false, 23);
    point_set const all = points_of(info.size - 1, info.size, total, false, 23);
    point_set const obs = points_of(info.rank, info.size, 10 * static_cast<std::size_t>(info.rank), false, 24);  // rank 0: none
    dist::distributed_nearest<cpu_search> search(world, dist::reference_layout::sharded);
    search.update(refs.latitude.data(), refs.longitude.data(), mine);
    EXPECT_EQ(search.size(), total);
    expect_one_search(search, all, obs, 3);
  }
}

TEST(DistributedNearest, ShardedHotSpotOfObservationsIsSpreadOverRanks)
{
  // Every rank's observations in one region: the first query's owners are the rank(s) of that region;
  // the next update weighs the observations, cuts the region into more ranges, and the busiest
  // rank's share of the owners' searches falls. Answers stay exact.
  auto const info = me();
  if (info.size == 1) { GTEST_SKIP() << "one rank: nothing to spread over"; }
  std::size_t const m = 3000, n = 1500;
  point_set const refs = points_of(info.rank, info.size, m, false, 25);
  point_set const all = all_points(info.size, [&](int) { return m; }, false, 25);
  std::mt19937_64 rng(26 + static_cast<unsigned>(info.rank));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  point_set obs;
  for (std::size_t i = 0; i < n; ++i) { obs.latitude.push_back(0.5 + 0.3 * unit(rng)), obs.longitude.push_back(1.0 + 0.3 * unit(rng)); }
  dist::distributed_nearest<cpu_search> search(world, dist::reference_layout::sharded);
  std::uint64_t busiest[2];
  for (int round = 0; round < 2; ++round) {
    search.update(refs.latitude.data(), refs.longitude.data(), m);
    expect_one_search(search, all, obs, 2);
    busiest[round] = max_over_ranks(search.last_exchange().observations_searched);
  }
  double const total = static_cast<double>(n) * info.size;
  EXPECT_GT(static_cast<double>(busiest[0]), 0.9 * total) << "the region was expected on one rank before the weighting";
  EXPECT_LT(static_cast<double>(busiest[1]), 0.75 * total) << busiest[1] << " of " << total << " searched by the busiest rank";
}

TEST(DistributedNearest, RanksThatDisagreeOnKAllThrow)
{
  if (me().size == 1) { GTEST_SKIP() << "one rank: no other rank to disagree with"; }
  auto const info = me();
  dist::distributed_nearest<cpu_search> search(world, dist::reference_layout::sharded);
  point_set const refs = points_of(info.rank, info.size, 20, false, 3);
  search.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
  std::vector<std::int64_t> index(8, -7);
  std::vector<double> angle(8, -7.0);
  std::size_t const k = info.rank == 0 ? 2 : 4;
  EXPECT_THROW(search.query(refs.latitude.data(), refs.longitude.data(), 2, k, index.data(), angle.data()), std::invalid_argument);
  EXPECT_EQ(index, std::vector<std::int64_t>(8, -7));  // nothing written
  EXPECT_EQ(search.searcher().searches, 0U);
}

TEST(DistributedNearest, RanksThatDisagreeOnTheLayoutAllThrow)
{
  if (me().size == 1) { GTEST_SKIP() << "one rank: no other rank to disagree with"; }
  auto const layout = me().rank == 0 ? dist::reference_layout::sharded : dist::reference_layout::replicated;
  EXPECT_THROW(dist::distributed_nearest<cpu_search>(world, layout), std::invalid_argument);
}

namespace {

/// distributed_nearest's staging hooks, as distributed_gpu_nearest uses them.
class staged_search : public dist::distributed_nearest<cpu_search> {
 public:
  using distributed_nearest::distributed_nearest;
  using distributed_nearest::query_in_parts;
  using distributed_nearest::routes_rows;
  using distributed_nearest::update_in_parts;
};

/// Rows that land in the arrays the search reads only when arrive() asks for them (NaN until then: an
/// invalid point, so a row read before it arrives gives a wrong answer), and results copied out when
/// leave() says they are final; every row's arrivals and departures counted.
struct copying_rows {
  point_set const* from;
  point_set* to;
  std::int64_t const* index;
  double const* angle;
  std::int64_t* index_out;
  double* angle_out;
  std::size_t k;
  std::vector<std::atomic<int>>* arrived;
  std::vector<std::atomic<int>>* left;

  void arrive(std::size_t begin, std::size_t end) const
  {
    for (std::size_t i = begin; i < end; ++i) {
      to->latitude[i] = from->latitude[i], to->longitude[i] = from->longitude[i];
      ++(*arrived)[i];
    }
  }
  void leave(std::size_t begin, std::size_t end) const
  {
    for (std::size_t i = begin; i < end; ++i) {
      std::copy_n(index + i * k, k, index_out + i * k);
      std::copy_n(angle + i * k, k, angle_out + i * k);
      ++(*left)[i];
    }
  }
};

std::vector<std::atomic<int>> counters(std::size_t count)
{
  std::vector<std::atomic<int>> c(count);
  for (auto& x : c) { x = 0; }
  return c;
}

std::size_t rows_not_once(std::vector<std::atomic<int>> const& c)
{
  return static_cast<std::size_t>(std::count_if(c.begin(), c.end(), [](std::atomic<int> const& x) { return x != 1; }));
}

}  // namespace

TEST(DistributedNearest, StagedRowsArriveBeforeTheyAreReadAndLeaveFinal)
{
  auto const info = me();
  std::size_t const k = 3;
  auto const reference_count = [&](int r) -> std::size_t { return info.size == 3 && r == 1 ? 0 : 140 + 50 * static_cast<std::size_t>(r); };
  point_set const refs = points_of(info.rank, info.size, reference_count(info.rank), false, 5);
  point_set obs = points_of(info.rank, info.size, 80 + 9 * static_cast<std::size_t>(info.rank), false, 6);
  obs.latitude[0] = std::numeric_limits<double>::quiet_NaN();  // an invalid observation
  std::size_t const n = obs.latitude.size(), m = refs.latitude.size();
  double const nan = std::numeric_limits<double>::quiet_NaN();
  for (auto layout : {dist::reference_layout::replicated, dist::reference_layout::sharded}) {
    SCOPED_TRACE(static_cast<int>(layout));
    staged_search search(world, layout);
    point_set landed_refs{std::vector<double>(m, nan), std::vector<double>(m, nan)};
    auto ref_arrivals = counters(m), unused = counters(0);
    search.update_in_parts(landed_refs.latitude.data(), landed_refs.longitude.data(), m,
                           copying_rows{&refs, &landed_refs, nullptr, nullptr, nullptr, nullptr, 0, &ref_arrivals, &unused});
    EXPECT_EQ(rows_not_once(ref_arrivals), 0u);

    point_set landed{std::vector<double>(n, nan), std::vector<double>(n, nan)};
    std::vector<std::int64_t> index(n * k, -7), index_out(n * k, -9);
    std::vector<double> angle(n * k, -7.0), angle_out(n * k, -9.0);
    if (search.routes_rows()) {  // the sharded query at several ranks moves rows on its engine, not through these hooks
      EXPECT_THROW(search.query_in_parts(landed.latitude.data(), landed.longitude.data(), n, k, index.data(), angle.data(), dist::detail::host_rows{}),
                   std::logic_error);
      search.query(obs.latitude.data(), obs.longitude.data(), n, k, index_out.data(), angle_out.data());
    } else {
      auto arrivals = counters(n), departures = counters(n);
      search.query_in_parts(landed.latitude.data(), landed.longitude.data(), n, k, index.data(), angle.data(),
                            copying_rows{&obs, &landed, index.data(), angle.data(), index_out.data(), angle_out.data(), k, &arrivals, &departures});
      EXPECT_EQ(rows_not_once(arrivals), 0u);
      EXPECT_EQ(rows_not_once(departures), 0u);
      EXPECT_EQ(index_out, index);  // final when they left
      for (std::size_t e = 0; e < n * k; ++e) {
        EXPECT_TRUE(angle_out[e] == angle[e] || (std::isnan(angle_out[e]) && std::isnan(angle[e]))) << "entry " << e;
      }
    }
    cpu_search single;  // and they are the one search's over the concatenation
    point_set const all = all_points(info.size, reference_count, false, 5);
    single.prepare(all.latitude.data(), all.longitude.data(), all.latitude.size());
    std::vector<std::int64_t> want(n * k);
    std::vector<double> want_angle(n * k);
    single.search(obs.latitude.data(), obs.longitude.data(), n, k, want.data(), want_angle.data());
    EXPECT_EQ(index_out, want);
  }
}

namespace {

/// A derived class with rows of its own on the host engine, as distributed_gpu_nearest keeps its rows
/// on the GPU: its query always runs on its own rows; its update repartitions on its own rows, or
/// (`own_update` false) leaves the update to the base class, whose rows are not the ones the query
/// reads. Counts the calls that reach its hooks.
class own_rows_search : public dist::distributed_nearest<cpu_search> {
 public:
  own_rows_search(MPI_Comm comm, bool own_update)
      : distributed_nearest(comm, dist::reference_layout::sharded), own_update_(own_update), team_(2), engine_(team_)
  {
  }
  int updates = 0, queries = 0;

 protected:
  void replace_references(double const* latitude, double const* longitude, std::size_t count) override
  {
    ++updates;
    if (!own_update_) {
      distributed_nearest::replace_references(latitude, longitude, count);
      return;
    }
    repartition_on(engine_, rows_, count, [&] { return dist::detail::point_rows{latitude, longitude, 1}; });
  }
  void search_observations(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                           double* angle) override
  {
    ++queries;
    if (!routes_rows()) {
      distributed_nearest::search_observations(latitude, longitude, count, k, index, angle);
      return;
    }
    begin_query(k);
    sharded_query_on(engine_, rows_, dist::detail::point_rows{latitude, longitude, 1}, count, k, dist::detail::neighbor_rows{index, angle, k},
                     [&](double const* lat, double const* lon, std::size_t n, std::int64_t* found, double* found_angle) {
                       searcher().search(lat, lon, n, k, found, found_angle);
                     });
  }

 private:
  bool own_update_;
  dist::detail::host_team team_;
  dist::detail::host_row_engine engine_;
  dist::detail::sharded_rows<dist::detail::host_row_engine> rows_;
};

}  // namespace

// Updates and queries through a reference to the base class reach the derived class's hooks, and a
// query on rows that the last update did not write (the derived class's rows after the base class's
// update) reads that update's partition, not the one its rows held: two updates of different
// references (different splitters and shards), each followed by queries through the base reference.
TEST(DistributedNearest, EveryUpdatePathLeavesTheQueryRowsCurrent)
{
  auto const info = me();
  std::size_t const k = 3;
  for (bool own_update : {true, false}) {
    SCOPED_TRACE(own_update ? "the derived class repartitions on its rows" : "the base class repartitions on its rows");
    own_rows_search search(world, own_update);
    dist::distributed_nearest<cpu_search>& base = search;
    for (unsigned salt : {31u, 32u}) {
      SCOPED_TRACE(salt);
      auto const reference_count = [&](int r) -> std::size_t {
        return info.size == 3 && r == 1 ? 0 : 300 + 40 * static_cast<std::size_t>(r) + 200 * (salt % 2);
      };
      point_set const refs = points_of(info.rank, info.size, reference_count(info.rank), salt % 2 == 0, salt);
      point_set const obs = points_of(info.rank, info.size, 120 + 7 * static_cast<std::size_t>(info.rank), false, salt + 100);
      base.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
      expect_one_search(base, all_points(info.size, reference_count, salt % 2 == 0, salt), obs, k);
      expect_one_search(base, all_points(info.size, reference_count, salt % 2 == 0, salt), obs, k);  // rows current: nothing to refresh
    }
    EXPECT_EQ(search.updates, 2);
    EXPECT_EQ(search.queries, 4);
  }
}

// A loop of updates and queries whose shapes were all seen before allocates nothing on the host:
// the object keeps every buffer (growing only), its host loops' threads are started once, the
// agreement checks and offsets use no temporary. Two inputs alternate, A and a smaller B (fewer
// references and observations on every rank, clustered references: other shards); the next update's
// splitters weigh the last query's observations, so A after B is a state of its own: A, B, A warm
// up, then B, A, B, A are counted. References of two host-loop parts' worth on every rank, so that
// where the node has the cores the loops run on several threads.
TEST(DistributedNearest, StepsNoLargerThanBeforeAllocateNothing)
{
  auto const info = me();
  std::size_t const k = 3;
  std::size_t const m = 2 * dist::detail::items_per_part + 100 * static_cast<std::size_t>(info.rank);
  std::size_t const n = 40 + 5 * static_cast<std::size_t>(info.rank);
  struct step_data {
    point_set references, observations;
  };
  step_data const a{points_of(info.rank, info.size, m, false, 41), points_of(info.rank, info.size, n, false, 42)};
  step_data const b{points_of(info.rank, info.size, m / 2, true, 43), points_of(info.rank, info.size, n / 2, false, 44)};
  std::vector<std::int64_t> index(n * k);
  std::vector<double> angle(n * k);
  for (auto const layout : {dist::reference_layout::replicated, dist::reference_layout::sharded}) {
    SCOPED_TRACE(layout == dist::reference_layout::sharded ? "sharded" : "replicated");
    dist::distributed_nearest<cpu_search> search(world, layout);
    auto const step = [&](step_data const& d) {
      search.update(d.references.latitude.data(), d.references.longitude.data(), d.references.latitude.size());
      search.query(d.observations.latitude.data(), d.observations.longitude.data(), d.observations.latitude.size(), k, index.data(),
                   angle.data());
    };
    step(a), step(b), step(a);
    std::size_t const before = host_allocations();
    step(b), step(a), step(b), step(a);
    std::size_t const allocated = host_allocations() - before;
    EXPECT_EQ(allocated, 0u) << "operator new calls in four steps on rank " << info.rank;
    EXPECT_EQ(max_over_ranks(allocated), 0u);
  }
}

namespace {

struct throws_on_last_rank : cpu_search {
  void search(double const* lat, double const* lon, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    if (me().rank == me().size - 1) { throw std::runtime_error("the device ran out of memory"); }
    cpu_search::search(lat, lon, count, k, index, angle);
  }
};

}  // namespace

TEST(DistributedNearest, AFailingSearchOnOneRankReachesEveryRank)
{
  auto const info = me();
  dist::distributed_nearest<throws_on_last_rank> search(world, dist::reference_layout::sharded);
  point_set const refs = points_of(info.rank, info.size, 20, false, 4);
  search.update(refs.latitude.data(), refs.longitude.data(), refs.latitude.size());
  std::vector<std::int64_t> index(2);
  std::vector<double> angle(2);
  EXPECT_THROW(search.query(refs.latitude.data(), refs.longitude.data(), 2, 1, index.data(), angle.data()), std::runtime_error);
  EXPECT_TRUE(dist::all_succeed(world, true));  // still in step
}

int main(int argc, char** argv)
{
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int const failed = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
