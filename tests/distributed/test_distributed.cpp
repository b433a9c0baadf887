// Host logic of streamkit/distributed under mpirun (CTest runs it with 2 and 3 ranks): communicator
// description, device assignment, global ids, agreement checks and failures that reach every rank,
// and the per-column extrema reduction against one pass over the concatenation of all ranks' rows.
#include <streamkit/distributed/column_extrema.hpp>
#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/nearest_neighbor.hpp>

#include "distributed_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace distributed_test;

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

/// Angle between unit vectors, by atan2 (accurate near 0 and π, where acos is not).
double angle_between(double ax, double ay, double az, double bx, double by, double bz)
{
  double const cx = ay * bz - az * by, cy = az * bx - ax * bz, cz = ax * by - ay * bx;
  return std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), ax * bx + ay * by + az * bz);
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
  auto const offsets = dist::global_offsets(world, share(info.rank));
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
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, dist::detail::items_per_part * 5 + 3}) {
    std::size_t const parts = dist::detail::part_count(count, 4);
    std::vector<int> seen(count, 0);
    std::vector<std::size_t> first(parts, count), last(parts, 0);
    dist::detail::parallel_ranges(count, 4, [&](std::size_t begin, std::size_t end, std::size_t part) {
      first[part] = begin, last[part] = end;
      for (std::size_t i = begin; i < end; ++i) { ++seen[i]; }
    });
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), static_cast<std::ptrdiff_t>(count));
    for (std::size_t part = 1; part < parts; ++part) { EXPECT_EQ(first[part], last[part - 1]); }  // contiguous, in order
    EXPECT_EQ(parts, count > 4 * dist::detail::items_per_part ? 4u : std::max<std::size_t>(1, count / dist::detail::items_per_part));
  }
  EXPECT_THROW(dist::detail::parallel_ranges(dist::detail::items_per_part * 4, 4,
                                             [](std::size_t, std::size_t, std::size_t part) {
                                               if (part == 2) { throw std::runtime_error("part 2"); }
                                             }),
               std::runtime_error);
}

TEST(DistributedNearest, RoutingNeverMissesAShardWithinReach)
{
  // cap_of holds its points, and within_reach agrees with the exact test (the angle to the cap's
  // centre, by atan2, at most radius + bound), for random caps and points, many of them placed at the boundary of the reach, where the
  // dot-product test's rounding matters: it may add a visit there, never lose one.
  std::mt19937_64 rng(20261123);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto const random_point = [&](double& latitude, double& longitude) {
    latitude = std::asin(2 * unit(rng) - 1), longitude = M_PI * (2 * unit(rng) - 1);
  };
  std::size_t extra_elsewhere = 0, boundary = 0;
  for (int trial = 0; trial < 200000; ++trial) {
    // A cap of 1..64 points within a random spread (1e-7 to 3 rad) of a random centre.
    double centre_lat, centre_lon;
    random_point(centre_lat, centre_lon);
    double const spread = std::pow(10.0, -7 + 7.5 * unit(rng));
    std::size_t const count = 1 + static_cast<std::size_t>(64 * unit(rng));
    std::vector<double> latitude(count), longitude(count);
    for (std::size_t i = 0; i < count; ++i) {
      latitude[i] = std::clamp(centre_lat + spread * (2 * unit(rng) - 1), -M_PI / 2, M_PI / 2);
      longitude[i] = centre_lon + spread * (2 * unit(rng) - 1);
    }
    dist::detail::sphere_cap const cap = dist::detail::cap_of(latitude.data(), longitude.data(), count);
    for (std::size_t i = 0; i < count; ++i) {  // the cap holds its points
      double px, py, pz;
      dist::detail::unit_vector(latitude[i], longitude[i], px, py, pz);
      ASSERT_LE(angle_between(cap.x, cap.y, cap.z, px, py, pz), cap.angle) << "point " << i << " of " << count << ", spread " << spread;
    }
    double lat, lon, x, y, z;
    random_point(lat, lon);
    dist::detail::unit_vector(lat, lon, x, y, z);
    double const to_centre = angle_between(cap.x, cap.y, cap.z, x, y, z);
    // Half the trials put the bound at the exact reach, give or take a few ulps.
    double bound = std::pow(10.0, -9 + 9.5 * unit(rng));
    if (trial % 2 == 0) {
      bound = std::max(0.0, to_centre - cap.angle);
      for (int step = static_cast<int>(8 * unit(rng)) - 4; step != 0; step += step < 0 ? 1 : -1) {
        bound = std::nextafter(bound, step < 0 ? 0.0 : HUGE_VAL);
      }
      ++boundary;
    }
    bool const exact = to_centre <= cap.angle + bound;
    bool const routed = dist::detail::within_reach(cap, x, y, z, bound, std::cos(bound), std::sin(bound));
    ASSERT_TRUE(routed || !exact) << "missed: to_centre " << to_centre << " radius " << cap.angle << " bound " << bound;
    if (trial % 2 != 0) { extra_elsewhere += routed && !exact; }
  }
  // A wider test costs only visits: at the boundary they are expected, elsewhere (random bounds) rare.
  EXPECT_LE(extra_elsewhere, boundary / 1000) << extra_elsewhere << " extra visits away from the boundary";
  // cap_of on four threads (parts of 2^15 points and more), a clustered set with invalid points.
  std::vector<double> latitude(300001), longitude(latitude.size());
  for (std::size_t i = 0; i < latitude.size(); ++i) { latitude[i] = 0.4 + 0.01 * unit(rng), longitude[i] = -1.0 + 0.02 * unit(rng); }
  latitude[12345] = std::numeric_limits<double>::quiet_NaN(), longitude[200000] = HUGE_VAL;
  dist::detail::sphere_cap const threaded = dist::detail::cap_of(latitude.data(), longitude.data(), latitude.size(), 4);
  EXPECT_LT(threaded.angle, 0.02);
  for (std::size_t i = 0; i < latitude.size(); ++i) {
    if (i == 12345 || i == 200000) { continue; }
    double x, y, z;
    dist::detail::unit_vector(latitude[i], longitude[i], x, y, z);
    ASSERT_LE(angle_between(threaded.x, threaded.y, threaded.z, x, y, z), threaded.angle) << "point " << i;
  }
  // An empty shard is never visited; an unbounded observation visits every other one.
  dist::detail::sphere_cap const empty = dist::detail::cap_of(nullptr, nullptr, 0);
  EXPECT_FALSE(dist::detail::within_reach(empty, 0, 0, 1, HUGE_VAL, std::cos(1.0), std::sin(1.0)));
  double const one_lat = 0.3, one_lon = -2.0;
  dist::detail::sphere_cap const point = dist::detail::cap_of(&one_lat, &one_lon, 1);
  EXPECT_TRUE(dist::detail::within_reach(point, 0, 0, -1, HUGE_VAL, std::cos(1.0), std::sin(1.0)));
}

namespace {

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
  if (layout == dist::reference_layout::sharded && clustered) {
    // Compact shards far apart: few observations need another shard.
    EXPECT_LT(search.last_exchange().observations_sent, n * static_cast<std::size_t>(info.size - 1));
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

TEST(DistributedNearest, RanksThatDisagreeOnKAllThrow)
{
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
  auto const layout = me().rank == 0 ? dist::reference_layout::sharded : dist::reference_layout::replicated;
  EXPECT_THROW(dist::distributed_nearest<cpu_search>(world, layout), std::invalid_argument);
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
