// Radius queries (issue 27): every reference within a distance of each observation, on both engines
// (brute_force_index, tree_index), the front end (nearest_index) and the one-shot radius_neighbors,
// against a float64 CPU brute force over every pair, on fresh random inputs; outputs poisoned first.
#include "gpu_test.hpp"
#include "spin_kernel.cuh"
#include "spatial/hostile_inputs.hpp"
#include "spatial/knn_checks.hpp"
#include "spatial/nearest_reference.hpp"
#include "spatial/radius_checks.hpp"
#include "test_support.hpp"

#include <streamkit/core/stream.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/radius.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using streamkit::angle_unit;
using streamkit::radius_options;
using streamkit_test::add_cluster;
using streamkit_test::expect_radius;
using streamkit_test::expect_same_sets;
using streamkit_test::fetch;
using streamkit_test::host_csr;
using streamkit_test::options_in;
using streamkit_test::point_set;
using streamkit_test::radians_set;
using streamkit_test::to_device;
using streamkit_test::to_host;
using streamkit_test::uniform_points;
using streamkit_test::upload;

enum class radius_engine { brute_force, tree, front_end, one_shot };

char const* name_of(radius_engine e)
{
  switch (e) {
    case radius_engine::brute_force: return "brute_force_index";
    case radius_engine::tree: return "tree_index";
    case radius_engine::front_end: return "nearest_index";
    case radius_engine::one_shot: return "radius_neighbors";
  }
  return "?";
}

constexpr radius_engine every_engine[] = {radius_engine::brute_force, radius_engine::tree, radius_engine::front_end,
                                          radius_engine::one_shot};

/// The blocking query of `e`.
template <class Index, class T>
host_csr<Index, T> radius_blocking(radius_engine e, streamkit::points_ref<T> obs, streamkit::points_ref<T> refs, radius_options const& r,
                                   streamkit::nearest_options const& options, bool distances, streamkit::stream const& s)
{
  switch (e) {
    case radius_engine::brute_force:
      return fetch(streamkit::brute_force_index<T>(refs, options, s).template radius_query<Index>(obs, r, distances, s), s);
    case radius_engine::tree: return fetch(streamkit::tree_index<T>(refs, options, s).template radius_query<Index>(obs, r, distances, s), s);
    case radius_engine::front_end:
      return fetch(streamkit::nearest_index<T>(refs, options, s).template radius_query<Index>(obs, r, distances, s), s);
    case radius_engine::one_shot: return fetch(streamkit::radius_neighbors<Index>(obs, refs, r, options, distances, s), s);
  }
  return {};
}

constexpr std::size_t spare = 7;  // poisoned elements past the total, which a fill must leave alone

/// The two-call form: radius_offsets_async, the total read by the test, storage of total + `spare`
/// poisoned elements, radius_fill_async; checks the count-only form agrees and the spare is untouched.
/// `tell_largest` (not 0): the storage says the largest row is its true length / tell_largest (a sorted
/// fill then sorts rows of up to radius_small_row one warp each instead of radix-sorting everything;
/// above 1, it understates, and the rows longer than it said must still come back sorted).
template <class Index, class T, class Engine>
host_csr<Index, T> radius_two_calls(Engine& index, streamkit::points_ref<T> obs, radius_options const& r, bool distances,
                                    streamkit::stream const& s, std::size_t tell_largest = 0)
{
  std::size_t const n = obs.count;
  auto offsets = to_device(std::vector<std::int64_t>(n + 1, -3), s);
  index.radius_offsets_async(obs, r, offsets.data(), s);
  std::vector<std::int64_t> const host_offsets = to_host(offsets, s);
  std::size_t const total = static_cast<std::size_t>(host_offsets[n]);
  auto out_index = to_device(std::vector<Index>(total + spare, static_cast<Index>(streamkit_test::poison_index)), s);
  auto out_distance = to_device(std::vector<T>(total + spare, static_cast<T>(streamkit_test::poison_distance)), s);
  streamkit::radius_neighbors_ref<Index, T> view{offsets.data(), out_index.data(), distances ? out_distance.data() : nullptr, n,
                                                 total + spare, nullptr, 0};
  for (std::size_t i = 0; tell_largest > 0 && i < n; ++i) {
    view.largest_row = std::max<std::size_t>(view.largest_row, static_cast<std::size_t>(host_offsets[i + 1] - host_offsets[i]));
  }
  if (tell_largest > 0) { view.largest_row = std::max<std::size_t>(view.largest_row / tell_largest, 1); }
  index.radius_fill_async(obs, r, view, s);
  host_csr<Index, T> out{host_offsets, to_host(out_index, s), distances ? to_host(out_distance, s) : std::vector<T>{}};
  for (std::size_t e = total; e < total + spare; ++e) {
    EXPECT_EQ(out.index[e], static_cast<Index>(streamkit_test::poison_index)) << "element " << e << " past the total was written";
    if (distances) { EXPECT_EQ(out.distance[e], static_cast<T>(streamkit_test::poison_distance)) << "distance " << e << " past the total"; }
  }
  out.index.resize(total);
  if (distances) { out.distance.resize(total); }
  // The count-only form gives the rows' sizes.
  auto counts = to_device(std::vector<std::int64_t>(std::max<std::size_t>(n, 1), -5), s);
  index.radius_count_async(obs, r, n == 0 ? nullptr : counts.data(), s);
  std::vector<std::int64_t> const host_counts = to_host(counts, s);
  for (std::size_t i = 0; i < n; ++i) {
    if (host_counts[i] != host_offsets[i + 1] - host_offsets[i]) {
      ADD_FAILURE() << "row " << i << ": count " << host_counts[i] << ", offsets give " << host_offsets[i + 1] - host_offsets[i];
      break;
    }
  }
  return out;
}


enum class index_kind { brute_force, tree, front_end };

std::string name_of(index_kind kind)
{
  switch (kind) {
    case index_kind::brute_force: return "brute_force_index";
    case index_kind::tree: return "tree_index";
    case index_kind::front_end: return "nearest_index";
  }
  return "?";
}

/// Calls f(index) with the index of `kind` over `refs` (the front end readied for radius queries of
/// `observations` rows, for the const forms), under its name.
template <class T, class F>
void with_index(index_kind kind, streamkit::points_ref<T> refs, streamkit::nearest_options const& options, std::size_t observations,
                streamkit::stream const& s, F&& f)
{
  SCOPED_TRACE(name_of(kind));
  if (kind == index_kind::brute_force) {
    streamkit::brute_force_index<T> index(refs, options, s);
    f(index);
  } else if (kind == index_kind::tree) {
    streamkit::tree_index<T> index(refs, options, s);
    f(index);
  } else {
    streamkit::nearest_index<T> index(refs, options, s);
    index.prepare_radius(observations, s);
    f(index);
  }
}

/// Calls f(index) with each of brute_force_index, tree_index and, unless `engines_only`, nearest_index.
template <class T, class F>
void for_each_index(streamkit::points_ref<T> refs, streamkit::nearest_options const& options, std::size_t observations,
                    streamkit::stream const& s, F&& f, bool engines_only = false)
{
  for (index_kind const kind : {index_kind::brute_force, index_kind::tree, index_kind::front_end}) {
    if (!(engines_only && kind == index_kind::front_end)) { with_index(kind, refs, options, observations, s, f); }
  }
}

double scale_of(streamkit::nearest_options const& options)
{
  switch (options.unit) {
    case streamkit::distance_unit::kilometres: return options.sphere_radius_km;
    case streamkit::distance_unit::metres: return options.sphere_radius_km * 1000.0;
    default: return 1.0;
  }
}

/// Every engine, blocking (sorted, with distances) and the two-call form (sorted, and unsorted without
/// distances), each against the CPU brute force; the sorted rows identical on every engine. `understate`:
/// also a sorted fill told a third of the largest row.
template <class T, class Index = std::int64_t>
void check_every_engine(point_set const& obs_points, point_set const& ref_points, radius_options const& r,
                        streamkit::nearest_options const& options, std::vector<double> const& row_radii = {},
                        angle_unit unit = angle_unit::degrees, bool understate = false)
{
  streamkit::stream const s(0);
  auto const obs = upload<T>(obs_points, unit, false, s);
  auto const refs = upload<T>(ref_points, unit, true, s);
  std::vector<double> const radii = row_radii.empty() ? std::vector<double>(obs.size(), r.radius) : row_radii;
  double const scale = scale_of(options);
  host_csr<Index, T> first;
  for (radius_engine const e : every_engine) {
    SCOPED_TRACE(name_of(e));
    auto const got = radius_blocking<Index>(e, obs.points, refs.points, r, options, true, s);
    expect_radius(got, obs.seen, refs.seen, radii, scale, true, true);
    if (e == radius_engine::brute_force) {
      first = got;
    } else {
      EXPECT_EQ(got.offsets, first.offsets) << "offsets differ from the brute force's";
      EXPECT_EQ(got.index, first.index) << "sorted rows differ from the brute force's";
    }
  }
  auto const two_calls = [&](auto& index) {
    auto const sorted = radius_two_calls<Index, T>(index, obs.points, r, true, s);
    expect_radius(sorted, obs.seen, refs.seen, radii, scale, true, true);
    EXPECT_EQ(sorted.index, first.index) << "two calls vs blocking";
    auto const told = radius_two_calls<Index, T>(index, obs.points, r, true, s, 1);
    expect_radius(told, obs.seen, refs.seen, radii, scale, true, true);
    EXPECT_EQ(told.index, first.index) << "two calls, largest row told, vs blocking";
    EXPECT_EQ(told.distance, sorted.distance) << "distances: largest row told or not";
    if (understate) {  // rows longer than told: sorted in place in global memory by a warp (slower: one test does it)
      auto const understated = radius_two_calls<Index, T>(index, obs.points, r, true, s, 3);
      EXPECT_EQ(understated.index, first.index) << "two calls, largest row understated 3 times, vs blocking";
      EXPECT_EQ(understated.distance, sorted.distance) << "distances: largest row understated or not";
    }
    radius_options unsorted = r;
    unsorted.sorted = false;
    auto const any_order = radius_two_calls<Index, T>(index, obs.points, unsorted, false, s);
    expect_radius(any_order, obs.seen, refs.seen, radii, scale, false, false);
    expect_same_sets(any_order, first, "unsorted vs sorted");
    auto const unsorted_distances = radius_two_calls<Index, T>(index, obs.points, unsorted, true, s);
    expect_radius(unsorted_distances, obs.seen, refs.seen, radii, scale, false, true);
  };
  SCOPED_TRACE("two calls");
  for_each_index(refs.points, options, obs.size(), s, two_calls);
}

class Radius : public ::testing::Test {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::mt19937_64 rng{streamkit_test::fresh_seed()};
};

point_set clustered(std::size_t per_cluster, std::size_t noise, double radius_m, std::mt19937_64& rng)
{
  point_set points;
  for (auto const& [lat, lon] : std::vector<std::pair<double, double>>{{48.8566, 2.3522}, {0.0, 180.0}, {89.9999, 0.0}}) {
    add_cluster(points, lat, lon, radius_m, per_cluster, rng);
  }
  point_set const scattered = uniform_points(noise, rng);
  for (std::size_t i = 0; i < scattered.size(); ++i) { points.add(scattered.lat[i], scattered.lon[i]); }
  return points;
}

TEST_F(Radius, UniformKilometresEveryEngine)
{
  radius_options r;
  r.radius = 700.0;  // about 12 of 4000 references per row
  check_every_engine<float>(uniform_points(3000, rng), uniform_points(4000, rng), r, options_in(streamkit::distance_unit::kilometres));
  check_every_engine<double>(uniform_points(2500, rng), uniform_points(3000, rng), r, options_in(streamkit::distance_unit::kilometres));
}

TEST_F(Radius, UniformRadiansInt32AndEmptyRows)
{
  radius_options r;
  r.radius = 0.01;  // most rows empty
  check_every_engine<double, std::int32_t>(uniform_points(2000, rng), uniform_points(3000, rng), r,
                                           options_in(streamkit::distance_unit::radians), {}, angle_unit::radians);
}

TEST_F(Radius, RowsOfHundredsSortedByAWarp)
{
  // Rows of a few hundred (sorted in registers by a warp when the largest row is told, in place in
  // global memory when it is understated), small enough for the sanitizers.
  radius_options r;
  r.radius = 1.5;  // radians: about 46 % of the references per row
  check_every_engine<float>(uniform_points(40, rng), uniform_points(700, rng), r, options_in(streamkit::distance_unit::radians), {},
                            angle_unit::radians, true);
}

TEST_F(Radius, ClusteredMetres)
{
  radius_options r;
  r.radius = 40.0;  // metres, in clusters of 100 m
  point_set const refs = clustered(1500, 500, 100.0, rng);
  point_set const obs = clustered(700, 300, 100.0, rng);
  check_every_engine<double>(obs, refs, r, options_in(streamkit::distance_unit::metres));
  check_every_engine<float>(obs, refs, r, options_in(streamkit::distance_unit::metres));
}

// One test a class (each a process of its own under the sanitizers, which take minutes over all of them).
class RadiusHostileClass : public ::testing::TestWithParam<char const*> {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::mt19937_64 rng{streamkit_test::fresh_seed()};
};

TEST_P(RadiusHostileClass, IdenticalReferencesEveryMemberOfAGroup)
{
  auto const& classes = streamkit_hostile::input_classes();
  auto const c = std::find_if(classes.begin(), classes.end(), [](auto const& k) { return std::string(k.name) == GetParam(); });
  ASSERT_NE(c, classes.end()) << GetParam();
  auto const p = streamkit_hostile::generate(*c, 1000, 2000, rng());  // n, m
  point_set obs, refs;
  obs.lat = p.observations.lat;
  obs.lon = p.observations.lon;
  refs.lat = p.references.lat;
  refs.lon = p.references.lon;
  radius_options r;
  r.radius = 300.0;  // km
  check_every_engine<double>(obs, refs, r, options_in(streamkit::distance_unit::kilometres));
  r.radius = 0.002;  // 2 m: inside the piles of cell_3m and cell_1cm_distinct
  check_every_engine<double>(obs, refs, r, options_in(streamkit::distance_unit::kilometres));
  r.radius = 0.0;
  check_every_engine<float>(obs, refs, r, options_in(streamkit::distance_unit::kilometres));
  // References as observations: rows inside the piles.
  point_set on_refs;
  for (std::size_t i = 0; i < 400; ++i) { on_refs.add(refs.lat[i * 5], refs.lon[i * 5]); }
  for (double const radius : {0.0, 0.002}) {
    r.radius = radius;
    check_every_engine<double>(on_refs, refs, r, options_in(streamkit::distance_unit::kilometres));
  }
}

INSTANTIATE_TEST_SUITE_P(HostileInputs, RadiusHostileClass,
                         ::testing::Values("refs_one_point", "depots", "groups_2_to_64", "poles_exact", "cell_3m", "cell_1cm_distinct",
                                           "antipodal_pairs", "obs_all_identical", "grid_1deg", "null_island_10pct"),
                         [](auto const& info) { return std::string(info.param); });

TEST_F(Radius, ZeroRadiusKeepsOnlyReferencesAtTheObservation)
{
  point_set refs = uniform_points(1000, rng);
  point_set obs = uniform_points(600, rng);
  for (std::size_t i = 0; i < 300; ++i) {  // observations on references, some of them repeated
    std::size_t const j = rng() % 200;
    obs.lat[i] = refs.lat[j];
    obs.lon[i] = refs.lon[j];
    refs.lat[200 + i] = refs.lat[j];
    refs.lon[200 + i] = refs.lon[j];
  }
  radius_options r;
  r.radius = 0.0;
  check_every_engine<double>(obs, refs, r, options_in(streamkit::distance_unit::radians));
  check_every_engine<float>(obs, refs, r, options_in(streamkit::distance_unit::metres));
}

TEST_F(Radius, HalfATurnAndInfinityReturnEveryValidReference)
{
  point_set refs = uniform_points(700, rng);
  refs.lat[5] = std::numeric_limits<double>::quiet_NaN();
  refs.lat[77] = 95.0;
  point_set const obs = uniform_points(300, rng);
  auto const options = options_in(streamkit::distance_unit::kilometres, streamkit::invalid_points::mark);
  for (double const radius : {streamkit::pi * options.sphere_radius_km, std::numeric_limits<double>::infinity(), 1e9}) {
    SCOPED_TRACE(radius);
    radius_options r;
    r.radius = radius;
    check_every_engine<double>(obs, refs, r, options);
    streamkit::stream const s(0);
    auto const o = upload<double>(obs, angle_unit::degrees, false, s);
    auto const f = upload<double>(refs, angle_unit::degrees, false, s);
    auto const got = radius_blocking<std::int64_t>(radius_engine::tree, o.points, f.points, r, options, true, s);
    for (std::size_t i = 0; i < obs.size(); ++i) { ASSERT_EQ(got.offsets[i + 1] - got.offsets[i], 698) << "row " << i; }
  }
}

TEST_F(Radius, PointsExactlyAtThePerObservationRadiusAreIn)
{
  // Each row's radius is the distance the k-nearest search reports for its 3rd nearest: the same
  // float64 haversine, so that reference (and every one as near) must be in the row.
  point_set const refs = uniform_points(2000, rng);
  point_set const obs = uniform_points(1200, rng);
  streamkit::stream const s(0);
  for (auto const unit : {streamkit::distance_unit::radians, streamkit::distance_unit::kilometres}) {
    auto const options = options_in(unit);
    auto const o = upload<double>(obs, angle_unit::degrees, false, s);
    auto const f = upload<double>(refs, angle_unit::degrees, false, s);
    std::size_t const k = 3;
    auto index = to_device(std::vector<std::int64_t>(obs.size() * k, -1), s);
    auto distance = to_device(std::vector<double>(obs.size() * k, 0.0), s);
    streamkit::nearest_options exact = options;
    exact.precision = streamkit::nn_precision::exact;
    streamkit::brute_force_index<double>(f.points, exact, s)
      .query(o.points, streamkit::neighbors_ref<std::int64_t, double>::dense(index.data(), distance.data(), obs.size(), k), s);
    std::vector<double> const knn_distance = to_host(distance, s);
    std::vector<std::int64_t> const knn_index = to_host(index, s);
    std::vector<double> radii(obs.size());
    for (std::size_t i = 0; i < obs.size(); ++i) { radii[i] = knn_distance[i * k + k - 1]; }
    radii[7] = std::numeric_limits<double>::quiet_NaN();  // empty rows
    radii[8] = -1.0;
    auto const device_radii = to_device(radii, s);
    radius_options r;
    r.radii = device_radii.data();
    radii[7] = -1.0;  // the checker's view of a NaN radius: nothing within
    check_every_engine<double>(obs, refs, r, options, radii);
    auto const got = radius_blocking<std::int64_t>(radius_engine::tree, o.points, f.points, r, options, true, s);
    for (std::size_t i = 0; i < obs.size(); ++i) {
      if (i == 7 || i == 8) {
        EXPECT_EQ(got.offsets[i + 1], got.offsets[i]) << "row " << i << " with a NaN or negative radius";
        continue;
      }
      // The row's first k entries are the k nearest (the order of the k-nearest search).
      ASSERT_GE(got.offsets[i + 1] - got.offsets[i], static_cast<std::int64_t>(k)) << "row " << i;
      for (std::size_t j = 0; j < k; ++j) {
        EXPECT_EQ(got.index[static_cast<std::size_t>(got.offsets[i]) + j], knn_index[i * k + j]) << "row " << i << " entry " << j;
      }
    }
  }
}

TEST_F(Radius, SingleReferenceSingleObservationAndNoObservations)
{
  radius_options r;
  r.radius = 5000.0;
  check_every_engine<double>(uniform_points(500, rng), uniform_points(1, rng), r, options_in(streamkit::distance_unit::kilometres));
  check_every_engine<float>(uniform_points(1, rng), uniform_points(900, rng), r, options_in(streamkit::distance_unit::kilometres));
  check_every_engine<double>(point_set{}, uniform_points(100, rng), r, options_in(streamkit::distance_unit::kilometres));
}

TEST_F(Radius, InvalidPointsAreMarkedOrRejected)
{
  point_set refs = uniform_points(900, rng);
  point_set obs = uniform_points(400, rng);
  refs.lon[3] = std::numeric_limits<double>::infinity();
  refs.lat[10] = -91.0;
  obs.lat[0] = std::numeric_limits<double>::quiet_NaN();
  obs.lat[17] = 90.5;
  radius_options r;
  r.radius = 2000.0;
  check_every_engine<double>(obs, refs, r, options_in(streamkit::distance_unit::kilometres, streamkit::invalid_points::mark));
  streamkit::stream const s(0);
  auto const o = upload<double>(obs, angle_unit::degrees, false, s);
  auto const f = upload<double>(refs, angle_unit::degrees, false, s);
  auto const reject = options_in(streamkit::distance_unit::kilometres);
  for (radius_engine const e : every_engine) {
    SCOPED_TRACE(name_of(e));
    STREAMKIT_EXPECT_THROW_WITH((radius_blocking<std::int64_t>(e, o.points, f.points, r, reject, true, s)), std::invalid_argument,
                                "references: 2 point(s)");
  }
  // Valid references, invalid observations: the observations are named.
  point_set good_refs = uniform_points(300, rng);
  auto const g = upload<double>(good_refs, angle_unit::degrees, false, s);
  streamkit::tree_index<double> tree(g.points, reject, s);
  STREAMKIT_EXPECT_THROW_WITH(tree.radius_query(o.points, r, true, s), std::invalid_argument, "observations: 2 point(s)");
  auto counts = to_device(std::vector<std::int64_t>(obs.size(), -1), s);
  STREAMKIT_EXPECT_THROW_WITH(tree.radius_count(o.points, r, counts.data(), s), std::invalid_argument, "observations: 2 point(s)");
  EXPECT_EQ(to_host(counts, s)[5], -1) << "a rejected count wrote its output";
  // Marked: counted through the result's counter.
  auto invalid = to_device(std::vector<unsigned long long>{0}, s);
  streamkit::tree_index<double> marking(g.points, options_in(streamkit::distance_unit::kilometres, streamkit::invalid_points::mark), s);
  auto offsets = to_device(std::vector<std::int64_t>(obs.size() + 1), s);
  marking.radius_offsets_async(o.points, r, offsets.data(), s);
  std::size_t const total = static_cast<std::size_t>(to_host(offsets, s).back());
  streamkit::device_buffer<std::int64_t> idx(total, s);
  marking.radius_fill_async(o.points, r, streamkit::radius_neighbors_ref<std::int64_t, double>{offsets.data(), idx.data(), nullptr, obs.size(), total, invalid.data(), 0}, s);
  EXPECT_EQ(to_host(invalid, s)[0], 2U);
}

TEST_F(Radius, BoundsThrowSayingHowManyWouldHaveComeBack)
{
  streamkit::stream const s(0);
  point_set const refs = uniform_points(2000, rng);
  point_set const obs = uniform_points(500, rng);
  auto const o = upload<double>(obs, angle_unit::degrees, false, s);
  auto const f = upload<double>(refs, angle_unit::degrees, false, s);
  auto const options = options_in(streamkit::distance_unit::kilometres);
  radius_options r;
  r.radius = 1500.0;
  for (radius_engine const e : {radius_engine::brute_force, radius_engine::tree, radius_engine::front_end}) {
    SCOPED_TRACE(name_of(e));
    auto const full = radius_blocking<std::int64_t>(e, o.points, f.points, r, options, false, s);
    std::size_t largest = 0;
    for (std::size_t i = 0; i < obs.size(); ++i) {
      largest = std::max<std::size_t>(largest, static_cast<std::size_t>(full.offsets[i + 1] - full.offsets[i]));
    }
    std::size_t const total = full.index.size();
    ASSERT_GT(largest, 1U);
    radius_options bounded = r;
    bounded.max_per_row = largest - 1;
    STREAMKIT_EXPECT_THROW_WITH((radius_blocking<std::int64_t>(e, o.points, f.points, bounded, options, false, s)), std::length_error,
                                "a row would hold " + std::to_string(largest) + " references within the radius, above max_per_row = " +
                                  std::to_string(largest - 1) + " (" + std::to_string(total) + " in all");
    bounded.max_per_row = largest;
    bounded.max_total = total - 1;
    STREAMKIT_EXPECT_THROW_WITH((radius_blocking<std::int64_t>(e, o.points, f.points, bounded, options, false, s)), std::length_error,
                                std::to_string(total) + " references within the radius in all");
    bounded.max_total = total;
    EXPECT_EQ(radius_blocking<std::int64_t>(e, o.points, f.points, bounded, options, false, s).index, full.index);
  }
}

TEST_F(Radius, AsyncFormsNeverWaitAndConstFormsTakeTheCallersScratch)
{
  streamkit::stream const s(0);
  point_set const refs = uniform_points(5000, rng);
  point_set const obs = uniform_points(100000, rng);
  auto const o = upload<float>(obs, angle_unit::degrees, false, s);
  auto const f = upload<float>(refs, angle_unit::degrees, false, s);
  auto const options = options_in(streamkit::distance_unit::kilometres);
  streamkit::nearest_index<float> index(f.points, options, s);
  radius_options r;
  r.radius = 300.0;
  index.prepare_radius(obs.size(), s);
  streamkit::nearest_scratch scratch;
  auto offsets = to_device(std::vector<std::int64_t>(obs.size() + 1), s);
  index.radius_offsets_async(o.points, r, offsets.data(), s, scratch);
  std::size_t const total = static_cast<std::size_t>(to_host(offsets, s).back());
  streamkit::device_buffer<std::int64_t> idx(total, s);
  streamkit::device_buffer<float> dist(total, s);
  index.radius_fill_async(o.points, r, streamkit::radius_neighbors_ref<std::int64_t, float>{offsets.data(), idx.data(), dist.data(), obs.size(), total, nullptr, 0}, s, scratch);
  host_csr<std::int64_t, float> got{to_host(offsets, s), to_host(idx, s), to_host(dist, s)};
  std::vector<double> const radii(obs.size(), r.radius);
  expect_radius(got, o.seen, f.seen, radii, options.sphere_radius_km, true, true);
  // Behind a 200 ms kernel, the async calls return at once.
  s.sync();
  streamkit_test::spin_then_increment<<<1, 32, 0, s.value()>>>(10 * streamkit_test::twenty_ms, nullptr);
  ASSERT_EQ(cudaPeekAtLastError(), cudaSuccess);
  auto const start = std::chrono::steady_clock::now();
  index.radius_count_async(o.points, r, offsets.data(), s);
  index.radius_offsets_async(o.points, r, offsets.data(), s);
  index.radius_fill_async(o.points, r,
                          streamkit::radius_neighbors_ref<std::int64_t, float>{offsets.data(), idx.data(), dist.data(), obs.size(), total, nullptr, 0}, s);
  double const waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.ready()) << "the calls returned after the 200 ms kernel: they waited";
  EXPECT_LT(waited, 0.1);
  s.sync();
}

// ---- the rows an offsets pass keeps for the fill that follows (radius_kept) -----------------------

/// Offsets of `obs` within `r` on `index` (the const form, with `scratch`), on the device and the host.
template <class T, class Engine>
std::pair<streamkit::device_buffer<std::int64_t>, std::vector<std::int64_t>> offsets_with(Engine const& index, streamkit::points_ref<T> obs,
                                                                                          radius_options const& r, streamkit::nearest_scratch& scratch,
                                                                                          streamkit::stream const& s)
{
  auto offsets = to_device(std::vector<std::int64_t>(obs.count + 1, -3), s);
  index.radius_offsets_async(obs, r, offsets.data(), s, scratch);
  std::vector<std::int64_t> host = to_host(offsets, s);
  return {std::move(offsets), std::move(host)};
}

/// The fill of `obs` into poisoned storage of `offsets` (+ spare), with `scratch` (the const form) or the
/// index's own (null), the largest row told; checks the spare is untouched and the invalid count.
template <class T, class Engine>
host_csr<std::int64_t, T> fill_with(Engine& index, streamkit::points_ref<T> obs, radius_options const& r,
                                    std::pair<streamkit::device_buffer<std::int64_t>, std::vector<std::int64_t>> const& offsets,
                                    streamkit::nearest_scratch* scratch, streamkit::stream const& s, std::size_t invalid = 0)
{
  std::size_t const n = obs.count;
  std::vector<std::int64_t> const& host = offsets.second;
  std::size_t const total = static_cast<std::size_t>(host[n]);
  auto out_index = to_device(std::vector<std::int64_t>(total + spare, streamkit_test::poison_index), s);
  auto out_distance = to_device(std::vector<T>(total + spare, static_cast<T>(streamkit_test::poison_distance)), s);
  auto invalid_count = to_device(std::vector<unsigned long long>{0}, s);
  streamkit::radius_neighbors_ref<std::int64_t, T> view{offsets.first.data(), out_index.data(), out_distance.data(), n, total + spare,
                                                        invalid_count.data(), 1};
  for (std::size_t i = 0; i < n; ++i) { view.largest_row = std::max<std::size_t>(view.largest_row, static_cast<std::size_t>(host[i + 1] - host[i])); }
  if (scratch != nullptr) {
    std::as_const(index).radius_fill_async(obs, r, view, s, *scratch);
  } else {
    index.radius_fill_async(obs, r, view, s);
  }
  host_csr<std::int64_t, T> out{host, to_host(out_index, s), to_host(out_distance, s)};
  for (std::size_t e = total; e < total + spare; ++e) {
    EXPECT_EQ(out.index[e], streamkit_test::poison_index) << "element " << e << " past the total was written";
    EXPECT_EQ(out.distance[e], static_cast<T>(streamkit_test::poison_distance)) << "distance " << e << " past the total";
  }
  out.index.resize(total);
  out.distance.resize(total);
  EXPECT_EQ(to_host(invalid_count, s)[0], invalid) << "result.invalid_count";
  return out;
}

/// Observations whose rows hold 0, 1, a few (up to the 32 an offsets pass keeps) and many (hundreds)
/// references, and their radii (metres): clustered observations among clustered references within 60 m,
/// scattered ones within 200 to 1500 km of 4000 scattered references; 5 % invalid.
struct kept_rows_data {
  point_set obs, refs;
  std::vector<double> radii;
  std::size_t invalid = 0;
};

kept_rows_data kept_rows_data_of(std::mt19937_64& rng)
{
  kept_rows_data d;
  d.refs = clustered(400, 4000, 100.0, rng);
  d.obs = clustered(60, 500, 100.0, rng);
  std::uniform_real_distribution<double> far(200e3, 1500e3);
  for (std::size_t i = 0; i < d.obs.size(); ++i) { d.radii.push_back(i < 180 ? 60.0 : far(rng)); }
  for (std::size_t i = 3; i < d.obs.size(); i += 20) {
    d.obs.lat[i] = i % 40 == 3 ? std::numeric_limits<double>::quiet_NaN() : 91.0;
    ++d.invalid;
  }
  return d;
}

TEST_F(Radius, FillCopiesTheRowsTheOffsetsPassKeptAndSearchesTheOthers)
{
  // Kept rows (up to 32 entries) are copied, longer ones searched again: the same rows, entry for
  // entry, as a fill on a scratch that kept nothing (which searches every row), and the CPU's.
  streamkit::stream const s(0);
  kept_rows_data const d = kept_rows_data_of(rng);
  auto const options = options_in(streamkit::distance_unit::metres, streamkit::invalid_points::mark);
  auto const check = [&](auto type) {
    using T = decltype(type);
    auto const obs = upload<T>(d.obs, angle_unit::degrees, false, s);
    auto const refs = upload<T>(d.refs, angle_unit::degrees, true, s);
    auto const radii = to_device(d.radii, s);
    radius_options r;
    r.radii = radii.data();
    auto const with_index = [&](auto& index) {
      streamkit::nearest_scratch kept, fresh;
      auto const offsets = offsets_with(index, obs.points, r, kept, s);
      std::size_t few = 0, many = 0;
      for (std::size_t i = 0; i < obs.size(); ++i) {
        std::int64_t const row = offsets.second[i + 1] - offsets.second[i];
        few += row >= 2 && row <= 32 ? 1 : 0;
        many += row > 32 ? 1 : 0;
      }
      ASSERT_GT(few, 50U) << "rows that fit in the kept entries";
      ASSERT_GT(many, 50U) << "rows longer than the kept entries";
      for (bool const sorted : {true, false}) {
        SCOPED_TRACE(sorted ? "sorted" : "unsorted");
        radius_options pass = r;
        pass.sorted = sorted;
        auto const copied = fill_with(index, obs.points, pass, offsets, &kept, s, d.invalid);
        auto const searched = fill_with(index, obs.points, pass, offsets, &fresh, s, d.invalid);
        expect_radius(copied, obs.seen, refs.seen, d.radii, 1000.0 * options.sphere_radius_km, sorted, true);
        if (sorted) {
          EXPECT_EQ(copied.index, searched.index) << "kept rows vs every row searched";
          EXPECT_EQ(copied.distance, searched.distance) << "kept rows vs every row searched";
        } else {
          expect_same_sets(copied, searched, "kept rows vs every row searched");
        }
      }
      // The index's own scratch: the two non-const calls.
      streamkit::device_buffer<std::int64_t> own(obs.size() + 1, s);
      index.radius_offsets_async(obs.points, r, own.data(), s);
      EXPECT_EQ(to_host(own, s), offsets.second);
      auto const own_fill = fill_with(index, obs.points, r, offsets, nullptr, s, d.invalid);
      auto const searched = fill_with(index, obs.points, r, offsets, &fresh, s, d.invalid);
      EXPECT_EQ(own_fill.index, searched.index) << "the index's own scratch";
    };
    for_each_index(refs.points, options, obs.size(), s, with_index);
  };
  check(float{});
  check(double{});
}

TEST_F(Radius, KeptRowsOfOtherObservationsRadiiOrReferencesAreSearchedAgain)
{
  // What an offsets pass kept belongs to its own observations, radii and references: a fill on the
  // same scratch for others (the same row count) must search them, not copy.
  streamkit::stream const s(0);
  kept_rows_data const d = kept_rows_data_of(rng);
  kept_rows_data moved = d;  // every third observation elsewhere
  point_set const elsewhere = uniform_points(d.obs.size(), rng);
  for (std::size_t i = 0; i < d.obs.size(); i += 3) {
    moved.obs.lat[i] = elsewhere.lat[i];
    moved.obs.lon[i] = elsewhere.lon[i];
  }
  point_set const other_refs = clustered(400, 4000, 100.0, rng);
  auto const options = options_in(streamkit::distance_unit::metres, streamkit::invalid_points::mark);
  double const scale = 1000.0 * options.sphere_radius_km;
  auto const obs = upload<double>(d.obs, angle_unit::degrees, false, s);
  auto const obs_moved = upload<double>(moved.obs, angle_unit::degrees, false, s);
  auto const refs = upload<double>(d.refs, angle_unit::degrees, true, s);
  auto const refs_other = upload<double>(other_refs, angle_unit::degrees, true, s);
  auto const radii = to_device(d.radii, s);
  std::vector<double> half = d.radii;
  for (double& radius : half) { radius /= 2.0; }
  auto const radii_half = to_device(half, s);
  radius_options r, r_half;
  r.radii = radii.data();
  r_half.radii = radii_half.data();
  std::size_t moved_invalid = 0;
  for (char const valid : obs_moved.seen.valid) { moved_invalid += valid ? 0 : 1; }
  auto const check = [&](auto& index) {
    using engine = std::decay_t<decltype(index)>;
    streamkit::nearest_scratch kept, fresh;
    auto const offsets = offsets_with(index, obs.points, r, kept, s);
    auto const expected = fill_with(index, obs.points, r, offsets, &fresh, s, d.invalid);
    expect_radius(expected, obs.seen, refs.seen, d.radii, scale, true, true);
    {
      SCOPED_TRACE("other observations counted in between");
      auto const other = offsets_with(index, obs_moved.points, r, kept, s);
      EXPECT_EQ(fill_with(index, obs.points, r, offsets, &kept, s, d.invalid).index, expected.index);
      auto const got = fill_with(index, obs_moved.points, r, other, &kept, s, moved_invalid);
      expect_radius(got, obs_moved.seen, refs.seen, moved.radii, scale, true, true);
    }
    {
      SCOPED_TRACE("other radii counted in between");
      static_cast<void>(offsets_with(index, obs.points, r_half, kept, s));
      EXPECT_EQ(fill_with(index, obs.points, r, offsets, &kept, s, d.invalid).index, expected.index);
    }
    {
      SCOPED_TRACE("counted on other references");
      engine other(refs_other.points, options, s);
      streamkit::nearest_scratch other_scratch;
      static_cast<void>(offsets_with(other, obs.points, r, kept, s));
      auto const mine = offsets_with(index, obs.points, r, other_scratch, s);
      EXPECT_EQ(fill_with(index, obs.points, r, mine, &kept, s, d.invalid).index, expected.index);
    }
    {
      SCOPED_TRACE("references updated in between");
      streamkit::device_buffer<std::int64_t> own(obs.size() + 1, s);
      index.radius_offsets_async(obs.points, r, own.data(), s);  // kept in the index's own scratch
      index.update(refs_other.points, s);
      auto const updated = offsets_with(index, obs.points, r, fresh, s);
      streamkit::nearest_scratch another;
      auto const expected_other = fill_with(index, obs.points, r, updated, &another, s, d.invalid);
      expect_radius(expected_other, obs.seen, refs_other.seen, d.radii, scale, true, true);
      EXPECT_EQ(fill_with(index, obs.points, r, updated, nullptr, s, d.invalid).index, expected_other.index);
    }
  };
  for_each_index(refs.points, options, d.obs.size(), s, check, true);  // the front end forwards to these engines
}

// ---- rows of every length the sorts and copies treat apart ---------------------------------------

/// The row lengths whose handling changes between them (radius_sort_* and write_short_rows): one entry
/// (a lane alone), groups of 2 … 32 lanes for rows of up to 32, registers of 2 … 16 keys a lane up to
/// 512, shared memory of room 1024 … 4096 (radius_small_row); each boundary and both sides of it.
constexpr std::size_t class_lengths[] = {1,   2,   3,   4,   5,   7,   8,    9,    15,   16,   17,   31,   32,   33,  63,   64,   65,  127,
                                         128, 129, 255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096};

/// References in clusters of exactly each of class_lengths (within 430 m of their centre, every fifth a
/// copy of the one before: identical references, ordered by index), centres hundreds of kilometres
/// apart; observations within 50 m of a centre (within r = 1 km: rows of exactly the cluster's size).
struct class_rows_data {
  point_set refs;
  std::vector<point_set> near;  // near[c]: observation positions of cluster c (its centre first)
};

class_rows_data class_rows_data_of(std::size_t per_cluster, std::mt19937_64& rng)
{
  class_rows_data d;
  std::size_t c = 0;
  for (std::size_t const length : class_lengths) {
    double const lat = -75.0 + 4.5 * static_cast<double>(c), lon = -170.0 + 10.0 * static_cast<double>(c);
    point_set cluster;
    add_cluster(cluster, lat, lon, 300.0, length, rng);
    for (std::size_t j = 0; j < length; ++j) {
      std::size_t const from = j % 5 == 4 ? j - 1 : j;
      d.refs.add(cluster.lat[from], cluster.lon[from]);
    }
    point_set near;
    near.add(lat, lon);
    add_cluster(near, lat, lon, 35.0, per_cluster - 1, rng);
    d.near.push_back(near);
    ++c;
  }
  return d;
}

/// Observations at `positions` of d.near, cluster c's position p at (c, p), and the length each row must have.
point_set observations_at(class_rows_data const& d, std::vector<std::pair<std::size_t, std::size_t>> const& positions,
                          std::vector<std::int64_t>& lengths)
{
  point_set obs;
  lengths.clear();
  for (auto const& [c, p] : positions) {
    obs.add(d.near[c].lat[p], d.near[c].lon[p]);
    lengths.push_back(static_cast<std::int64_t>(class_lengths[c]));
  }
  return obs;
}

void expect_lengths(std::vector<std::int64_t> const& offsets, std::vector<std::int64_t> const& lengths)
{
  ASSERT_EQ(offsets.size(), lengths.size() + 1);
  for (std::size_t i = 0; i < lengths.size(); ++i) { ASSERT_EQ(offsets[i + 1] - offsets[i], lengths[i]) << "row " << i; }
}

TEST_F(Radius, RowsOfEveryLengthClassSortedAndCopied)
{
  // Rows of each length class and both sides of every boundary, several of a class and of different
  // classes in each warp, on every engine: blocking, two calls (kept rows copied, the others searched
  // again; largest row told or unknown; unsorted), a fill that searches every row and sorts every
  // class; each against the CPU float64 brute force, and the same rows everywhere; on the tree, the
  // largest row understated (the rows above 2048 sorted in place in global memory by a warp).
  class_rows_data const d = class_rows_data_of(3, rng);
  std::vector<std::pair<std::size_t, std::size_t>> positions;
  for (std::size_t c = 0; c < d.near.size(); ++c) {
    for (std::size_t p = 0; p < 3; ++p) { positions.emplace_back(c, p); }
  }
  std::shuffle(positions.begin(), positions.end(), rng);
  std::vector<std::int64_t> lengths;
  point_set obs_points = observations_at(d, positions, lengths);
  obs_points.add(0.0, 0.0);  // an empty row, far from every cluster
  lengths.push_back(0);
  radius_options r;
  r.radius = 1000.0;
  auto const options = options_in(streamkit::distance_unit::metres);
  check_every_engine<float>(obs_points, d.refs, r, options);

  streamkit::stream const s(0);
  auto const obs = upload<double>(obs_points, angle_unit::degrees, false, s);
  auto const refs = upload<double>(d.refs, angle_unit::degrees, true, s);
  std::vector<double> const radii(obs.size(), r.radius);
  double const scale = 1000.0 * options.sphere_radius_km;
  host_csr<std::int64_t, double> first;
  auto const every_path = [&](auto& index) {
    streamkit::nearest_scratch kept, fresh;
    auto const offsets = offsets_with(index, obs.points, r, kept, s);
    expect_lengths(offsets.second, lengths);
    auto const searched = fill_with(index, obs.points, r, offsets, &fresh, s);  // every row searched, every class sorted
    expect_radius(searched, obs.seen, refs.seen, radii, scale, true, true);
    auto const copied = fill_with(index, obs.points, r, offsets, &kept, s);
    EXPECT_EQ(copied.index, searched.index) << "kept rows vs every row searched";
    EXPECT_EQ(copied.distance, searched.distance) << "kept rows vs every row searched";
    if (first.offsets.empty()) {
      first = searched;
    } else {
      EXPECT_EQ(searched.index, first.index) << "rows differ from the first engine's";
    }
    if constexpr (std::is_same_v<std::decay_t<decltype(index)>, streamkit::tree_index<double>>) {
      auto const understated = radius_two_calls<std::int64_t, double>(index, obs.points, r, true, s, 3);
      EXPECT_EQ(understated.index, searched.index) << "largest row understated 3 times";
      EXPECT_EQ(understated.distance, searched.distance) << "largest row understated 3 times";
    }
  };
  for_each_index(refs.points, options, obs.size(), s, every_path);
}

// One test an engine (each a process of its own under the sanitizers: the three took over ten minutes under synccheck).
class RadiusManyRows : public ::testing::TestWithParam<index_kind> {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::mt19937_64 rng{streamkit_test::fresh_seed()};
};

TEST_P(RadiusManyRows, RowsOfEveryLengthClassForManyObservations)
{
  // Past radius_tree_few_rows rows (searched and searched again one thread a row, each writing where
  // its row ended), most of them longer than the kept entries: every row equal to the row of its
  // position among few observations (checked against the CPU float64 brute force).
  class_rows_data const d = class_rows_data_of(4, rng);
  std::vector<std::size_t> clusters;  // of lengths 1, 17, 32, 33, 64, 65, 128, 129, 256, 257
  for (std::size_t c = 0; c < d.near.size(); ++c) {
    std::size_t const length = class_lengths[c];
    if (length == 1 || length == 17 || (length >= 32 && length <= 257 && length % 32 <= 1)) { clusters.push_back(c); }
  }
  ASSERT_EQ(clusters.size(), 10U);
  std::vector<std::pair<std::size_t, std::size_t>> few_positions;
  for (std::size_t const c : clusters) {
    for (std::size_t p = 0; p < 4; ++p) { few_positions.emplace_back(c, p); }
  }
  std::size_t const n = std::size_t{1} << 17;
  ASSERT_GT(n * 7 / 10, streamkit::detail::radius_tree_few_rows) << "rows searched again, one thread each";
  std::vector<std::size_t> which(n);
  std::uniform_int_distribution<std::size_t> pick(0, few_positions.size() - 1);
  std::vector<std::pair<std::size_t, std::size_t>> positions;
  for (std::size_t i = 0; i < n; ++i) {
    which[i] = pick(rng);
    positions.push_back(few_positions[which[i]]);
  }
  std::vector<std::int64_t> few_lengths, lengths;
  point_set const few_points = observations_at(d, few_positions, few_lengths);
  point_set const obs_points = observations_at(d, positions, lengths);
  radius_options r;
  r.radius = 1000.0;
  auto const options = options_in(streamkit::distance_unit::metres);
  double const scale = 1000.0 * options.sphere_radius_km;
  streamkit::stream const s(0);
  auto const few = upload<float>(few_points, angle_unit::degrees, false, s);
  auto const obs = upload<float>(obs_points, angle_unit::degrees, false, s);
  auto const refs = upload<float>(d.refs, angle_unit::degrees, true, s);
  host_csr<std::int64_t, float> expected;
  {
    streamkit::brute_force_index<float> index(refs.points, options, s);
    streamkit::nearest_scratch scratch;
    auto const offsets = offsets_with(index, few.points, r, scratch, s);
    expect_lengths(offsets.second, few_lengths);
    expected = fill_with(index, few.points, r, offsets, &scratch, s);
    expect_radius(expected, few.seen, refs.seen, std::vector<double>(few.size(), r.radius), scale, true, true);
  }
  // Row i must be row which[i] of the few, entry for entry (as a set of pairs when unsorted).
  auto const row_of = [](host_csr<std::int64_t, float> const& csr, std::size_t i, bool sorted) {
    std::vector<std::pair<std::int64_t, float>> row;
    for (auto e = static_cast<std::size_t>(csr.offsets[i]); e < static_cast<std::size_t>(csr.offsets[i + 1]); ++e) {
      row.emplace_back(csr.index[e], csr.distance[e]);
    }
    if (!sorted) { std::sort(row.begin(), row.end()); }
    return row;
  };
  auto const expect_rows = [&](host_csr<std::int64_t, float> const& got, bool sorted) {
    ASSERT_EQ(got.offsets.size(), n + 1);
    for (std::size_t i = 0; i < n; ++i) {
      if (row_of(got, i, sorted) != row_of(expected, which[i], sorted)) {
        ADD_FAILURE() << "row " << i << " (" << got.offsets[i + 1] - got.offsets[i] << " entries) differs from row " << which[i]
                      << " of the few";
        return;
      }
    }
  };
  auto const every_path = [&](auto& index) {
    streamkit::nearest_scratch kept, fresh;
    auto const offsets = offsets_with(index, obs.points, r, kept, s);
    expect_lengths(offsets.second, lengths);
    for (bool const sorted : {true, false}) {
      SCOPED_TRACE(sorted ? "sorted" : "unsorted");
      radius_options pass = r;
      pass.sorted = sorted;
      expect_rows(fill_with(index, obs.points, pass, offsets, &kept, s), sorted);
      expect_rows(fill_with(index, obs.points, pass, offsets, &fresh, s), sorted);
    }
  };
  with_index(GetParam(), refs.points, options, obs.size(), s, every_path);
}

INSTANTIATE_TEST_SUITE_P(Radius, RadiusManyRows, ::testing::Values(index_kind::brute_force, index_kind::tree, index_kind::front_end),
                         [](auto const& info) { return name_of(info.param); });

// ---- host side: argument checks, run in CI without a GPU -----------------------------------------

TEST(RadiusHost, BoundErrorsSayHowManyWouldHaveComeBack)
{
  radius_options r;
  r.max_per_row = 10;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::expect_radius_bounds(r, 11, 500, 40), std::length_error,
                              "a row would hold 11 references within the radius, above max_per_row = 10 (500 in all over 40 rows)");
  r.max_per_row = 100;
  r.max_total = 499;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::expect_radius_bounds(r, 11, 500, 40), std::length_error,
                              "500 references within the radius in all (40 rows, the largest 11), above max_total = 499");
  r.max_total = 500;
  EXPECT_NO_THROW(streamkit::detail::expect_radius_bounds(r, 11, 500, 40));
}

TEST(RadiusHost, BadRadiusAndViewsAreRejectedBeforeAnyCudaCall)
{
  radius_options r;
  r.radius = -1.0;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::expect_radius_options(r), std::invalid_argument, "radius.radius: must be at least 0");
  r.radius = std::numeric_limits<double>::quiet_NaN();
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::expect_radius_options(r), std::invalid_argument, "radius.radius");
  r.radius = std::numeric_limits<double>::infinity();
  EXPECT_NO_THROW(streamkit::detail::expect_radius_options(r));
  double const radii = 1.0;
  r.radius = -1.0;
  r.radii = &radii;  // per observation: the scalar is ignored
  EXPECT_NO_THROW(streamkit::detail::expect_radius_options(r));
  // The one-shot query checks its arguments before it touches a device.
  float const lat[1] = {0.f};
  auto const refs = streamkit::points_ref<float>::separate(lat, lat, 1);
  auto const empty = streamkit::points_ref<float>::separate(nullptr, nullptr, 0);
  auto const obs = streamkit::points_ref<float>::separate(nullptr, nullptr, 5);
  radius_options good;
  good.radius = 1.0;
  streamkit::nearest_options options;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::radius_neighbors(obs, refs, good, options, true, streamkit::stream_ref::legacy_default()),
                              std::invalid_argument, "observations: null coordinates with a count of 5");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::radius_neighbors(empty, empty, good, options, true, streamkit::stream_ref::legacy_default()),
                              std::invalid_argument, "references: the reference set is empty");
  options.sphere_radius_km = -1;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::radius_neighbors(empty, refs, good, options, true, streamkit::stream_ref::legacy_default()),
                              std::invalid_argument, "options.sphere_radius_km");
  radius_options negative;
  negative.radius = -2.0;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::radius_neighbors(empty, refs, negative, streamkit::nearest_options{}, true,
                                                          streamkit::stream_ref::legacy_default()),
                              std::invalid_argument, "radius.radius: must be at least 0 (infinity for every reference), got -2");
}

TEST(RadiusHost, EmptyResultHasNoRows)
{
  streamkit::radius_result<std::int32_t, float> r;
  EXPECT_EQ(r.rows(), 0U);
  EXPECT_EQ(r.total(), 0U);
}

}  // namespace
