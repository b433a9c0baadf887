// Hostile inputs (issue 26): exactness of both engines (brute_force_index, tree_index) and the front
// end (nearest_index) on every class of spatial/hostile_inputs.hpp, for k = 1, 2, 16 and 32, in fast
// and exact precision, with float and double inputs, against the float64 CPU k-nearest reference of
// nearest_reference.hpp; outputs poisoned before every search. On top of the reference check, rows
// must keep identical references (identical in the input type) in index order: a row holding one
// of them holds every smaller index of its group, earlier. Host-side tests of the generators run
// without a GPU.
#include "gpu_test.hpp"
#include "spatial/hostile_inputs.hpp"
#include "spatial/knn_checks.hpp"
#include "spatial/nearest_reference.hpp"
#include "test_support.hpp"

#include <streamkit/core/stream.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/tree_index.cuh>

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

namespace hostile = streamkit_hostile;
using streamkit::angle_unit;
using streamkit::nn_precision;
using streamkit::search_engine;
using streamkit_test::brute_force_knn;
using streamkit_test::check;
using streamkit_test::engine;
using streamkit_test::host_result;
using streamkit_test::search;
using streamkit_test::knn_answer;
using streamkit_test::name_of;
using streamkit_test::options_with;
using streamkit_test::point_set;
using streamkit_test::upload;

/// k = 2 too: its walk ranks a leaf's entries warp-wide (scan_leaf_together) with the members of groups of
/// identical references, which the classes hold.
constexpr std::size_t hostile_k[] = {1, 2, 16, 32};
/// Every list size of the searches (1, 2, 4, 8, 16, 32 entries; k = 3 and 5 fill theirs only in part): for the
/// tests of near-ties and exact ties, whose leaves the float box test cannot decide (where scan_leaf takes the
/// anchored filter for lists of up to 4 entries).
constexpr std::size_t every_list_size_k[] = {1, 2, 3, 5, 16, 32};
/// The k-nearest engines every hostile class runs on.
constexpr engine hostile_engines[] = {engine::brute_force, engine::tree, engine::front_end};

point_set as_point_set(hostile::point_list const& p)
{
  point_set out;
  out.lat = p.lat;
  out.lon = p.lon;
  return out;
}

/// The first `rows` rows of a result of row stride `stride`.
template <class Index, class T>
host_result<Index, T> first_rows(host_result<Index, T> const& all, std::size_t rows, std::size_t stride)
{
  auto const end = static_cast<std::ptrdiff_t>(std::min(rows * stride, all.index.size()));
  return {std::vector<Index>(all.index.begin(), all.index.begin() + end), std::vector<T>(all.distance.begin(), all.distance.begin() + end)};
}

/// Every row keeps identical references in index order (hostile::first_tie_order_problem).
template <class Index, class T>
void expect_identical_references_in_index_order(hostile::identical_groups const& groups, host_result<Index, T> const& got, std::size_t k)
{
  std::size_t const rows = got.index.size() / k;
  std::size_t wrong = 0;
  std::string lines;
  for (std::size_t i = 0; i < rows; ++i) {
    Index const* const row = got.index.data() + i * k;
    long const slot = hostile::first_tie_order_problem(groups, row, k);
    if (slot >= 0 && wrong++ < 5) {
      auto const g = static_cast<std::size_t>(row[slot]);
      lines += "\n  row " + std::to_string(i) + " slot " + std::to_string(slot) + " holds reference " + std::to_string(g) +
               " but not, before it, reference " + std::to_string(groups.previous[g]) + " at the identical point";
    }
  }
  EXPECT_EQ(wrong, 0U) << "rows breaking the tie order of identical references (ties go to the smallest index), of " << rows
                       << " (k = " << k << "):" << lines;
}

/// Each of `engines` (default: hostile_engines), every k of hostile_k, fast and exact, on one
/// class's N observations and M references uploaded as T in degrees: the first `checked` rows of each
/// result against the CPU reference and the tie order of identical references.
template <class T, class Index>
void check_class(hostile::input_class const& c, std::size_t n, std::size_t m, std::size_t checked, std::uint64_t seed,
                 std::vector<engine> const& engines = {std::begin(hostile_engines), std::end(hostile_engines)})
{
  hostile::problem const p = hostile::generate(c, n, m, seed);
  streamkit::stream const s(0);
  auto const obs = upload<T>(as_point_set(p.observations), angle_unit::degrees, false, s);
  auto const refs = upload<T>(as_point_set(p.references), angle_unit::degrees, false, s);
  checked = std::min(checked, n);
  auto const [checked_view, checked_seen] = obs.prefix(checked);
  (void)checked_view;
  knn_answer const expected = brute_force_knn(checked_seen, refs.seen, streamkit::max_neighbors);
  auto const groups = hostile::find_identical(hostile::as<T>(p.references.lat), hostile::as<T>(p.references.lon));
  std::printf("%s: N = %zu, M = %zu (%zu distinct references as %s, largest group %zu), rows checked %zu\n", c.name, n, m, groups.distinct,
              sizeof(T) == 4 ? "float" : "double", groups.largest, checked);
  for (std::size_t const k : hostile_k) {
    for (engine const e : engines) {
      for (nn_precision const precision : {nn_precision::exact, nn_precision::fast}) {
        auto const options = options_with(precision);
        search_engine used{};
        auto const got = search<Index>(e, obs.points, refs.points, k, k, options, s, &used);
        SCOPED_TRACE(std::string(c.name) + ", " + name_of(e) + " (answered by " + name_of(used) + "), " +
                     (precision == nn_precision::exact ? "exact" : "fast") + ", k = " + std::to_string(k) + ", " +
                     (sizeof(T) == 4 ? "float" : "double"));
        auto const part = first_rows(got, checked, k);
        check(part, expected, checked_seen, refs.seen, k, k, used, options);
        expect_identical_references_in_index_order(groups, got, k);  // every row, not only the checked ones
      }
    }
  }
}

std::string test_name_of(std::string name)
{
  for (char& ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch))) { ch = '_'; }
  }
  return name;
}

std::vector<std::string> every_class_name()
{
  std::vector<std::string> names;
  for (auto const& c : hostile::input_classes()) { names.emplace_back(c.name); }
  return names;
}

class HostileExactness : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::uint64_t seed_ = streamkit_test::fresh_seed();
};

// N = 8192 observations (at M = 4000 the front end picks the tree for k = 16 and 32 from N = 8000 on,
// the brute force below), the first 2000 rows checked against the CPU reference, the tie order on all.
TEST_P(HostileExactness, FloatDegreesEveryEngineK1_2_16_32)
{
  check_class<float, std::int32_t>(hostile::find_class(GetParam()), 8192, 4000, 2000, seed_);
}

TEST_P(HostileExactness, DoubleDegreesEveryEngineK1_2_16_32)
{
  check_class<double, std::int64_t>(hostile::find_class(GetParam()), 8192, 4000, 2000, seed_);
}

INSTANTIATE_TEST_SUITE_P(HostileInputs, HostileExactness, ::testing::ValuesIn(every_class_name()),
                         [](::testing::TestParamInfo<std::string> const& info) { return test_name_of(info.param); });

class HostileCellLists : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::uint64_t seed_ = streamkit_test::fresh_seed();
};

// 2^21 observations against M = 2^12 references: the tree answers from cell lists
// (detail::use_cell_lists). Every row, index and distance, must be the tree walk's (the same index
// queried for each half of the observations, too few to use cell lists), in exact and fast mode and
// with a distance limit, but for near-ties: the lists rank every entry that can be among the k nearest,
// while a long walk may skip references within tree_near_tie of its worst entry, so a slot may hold
// another reference where the two squared chords (as the kernels compute them) are within that bound;
// the first 1500 rows also against the CPU reference, and the tie order of identical references on every row.
TEST_P(HostileCellLists, EveryRowAsTheWalkK1_2_16_32)
{
  using T = float;
  using Index = std::int32_t;
  std::size_t const m = std::size_t{1} << 12, n = streamkit::detail::cell_lists_min_observations, half = n / 2, checked = 1500;
  ASSERT_TRUE(streamkit::detail::use_cell_lists(n, m));
  ASSERT_FALSE(streamkit::detail::use_cell_lists(half, m));
  hostile::input_class const& c = hostile::find_class(GetParam());
  hostile::problem const p = hostile::generate(c, n, m, seed_);
  streamkit::stream const s(0);
  auto const obs = upload<T>(as_point_set(p.observations), angle_unit::degrees, false, s);
  auto const refs = upload<T>(as_point_set(p.references), angle_unit::degrees, false, s);
  auto const [checked_view, checked_seen] = obs.prefix(checked);
  (void)checked_view;
  knn_answer const expected = brute_force_knn(checked_seen, refs.seen, streamkit::max_neighbors);
  auto const groups = hostile::find_identical(hostile::as<T>(p.references.lat), hostile::as<T>(p.references.lon));
  auto const obs_vectors = streamkit_test::device_unit_vectors(obs.points, s);
  auto const ref_vectors = streamkit_test::device_unit_vectors(refs.points, s);
  auto limited = options_with(nn_precision::exact);
  limited.unit = streamkit::distance_unit::kilometres;
  limited.max_distance = 300.0;  // about the 16th neighbour's distance among 2^12 uniform references
  for (std::size_t const k : hostile_k) {
    for (auto const& options : {options_with(nn_precision::exact), options_with(nn_precision::fast), limited}) {
      SCOPED_TRACE(std::string(c.name) + ", k = " + std::to_string(k) + ", max_distance " + std::to_string(options.max_distance) +
                   (options.precision == nn_precision::exact ? ", exact" : ", fast"));
      streamkit::tree_index<T> index(refs.points, options, s);
      streamkit_test::poisoned_result<Index, T> cells_out(n, k, k, s), walk_out(n, k, k, s);
      index.query(obs.points, cells_out.ref(), s);
      index.query(obs.rows(0, half), walk_out.rows(0, half), s);
      index.query(obs.rows(half, n - half), walk_out.rows(half, n - half), s);
      auto const cells = streamkit_test::fetch(cells_out, s), walk = streamkit_test::fetch(walk_out, s);
      std::size_t differing = 0, first_differing = n, unwritten = 0, near_ties = 0;
      for (std::size_t at = 0; at < cells.index.size(); ++at) {
        bool const same = cells.index[at] == walk.index[at] &&
                          (cells.distance[at] == walk.distance[at] || (std::isnan(cells.distance[at]) && std::isnan(walk.distance[at])));
        bool const near_tie = !same && cells.index[at] >= 0 && walk.index[at] >= 0 &&
                              static_cast<std::size_t>(cells.index[at]) < m && static_cast<std::size_t>(walk.index[at]) < m &&
                              streamkit_test::within_near_tie(
                                streamkit_test::device_chord2(obs_vectors[at / k], ref_vectors[static_cast<std::size_t>(cells.index[at])]),
                                streamkit_test::device_chord2(obs_vectors[at / k], ref_vectors[static_cast<std::size_t>(walk.index[at])]));
        near_ties += near_tie ? 1 : 0;
        if (!same && !near_tie && differing++ == 0) { first_differing = at / k; }
        unwritten += cells.index[at] == static_cast<Index>(streamkit_test::poison_index) ? 1 : 0;
      }
      if (near_ties > 0) { std::printf("%s, k = %zu: %zu entries differ among near-ties\n", c.name, k, near_ties); }
      EXPECT_EQ(differing, 0U) << "entries where the cell lists and the walk differ (not near-ties); first in row " << first_differing;
      EXPECT_EQ(unwritten, 0U) << "entries the cell lists left poisoned";
      check(first_rows(cells, checked, k), expected, checked_seen, refs.seen, k, k, search_engine::tree, options);
      expect_identical_references_in_index_order(groups, cells, k);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HostileInputs, HostileCellLists, ::testing::ValuesIn(every_class_name()),
                         [](::testing::TestParamInfo<std::string> const& info) { return test_name_of(info.param); });

/// The float64 brute force over the kernels' own squared chords (device_chord2 over device_unit_vectors):
/// row i's k nearest, nearest first, exact ties to the smallest index.
struct kernel_chord_answer {
  std::vector<double> chord;
  std::vector<std::size_t> index;
};

kernel_chord_answer kernel_chord_knn(std::vector<streamkit::detail::vec4<double>> const& obs,
                                     std::vector<streamkit::detail::vec4<double>> const& refs, std::size_t k)
{
  kernel_chord_answer out{std::vector<double>(obs.size() * k, std::numeric_limits<double>::infinity()),
                          std::vector<std::size_t>(obs.size() * k, refs.size())};
  streamkit_test::parallel_for(
    obs.size(),
    [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        double* const row = out.chord.data() + i * k;  // sorted; ascending j keeps ties in index order
        std::size_t* const row_index = out.index.data() + i * k;
        for (std::size_t j = 0; j < refs.size(); ++j) {
          double const c = streamkit_test::device_chord2(obs[i], refs[j]);
          if (!(c < row[k - 1])) { continue; }
          std::size_t slot = k - 1;
          for (; slot > 0 && c < row[slot - 1]; --slot) {
            row[slot] = row[slot - 1];
            row_index[slot] = row_index[slot - 1];
          }
          row[slot] = c;
          row_index[slot] = j;
        }
      }
    },
    obs.size() * refs.size());
  return out;
}

// Where near-ties abound: 2^22 distinct references (float64 radians) on a circle of 1e-7 rad round the
// north pole, seen from 512 uniform observations, for which hundreds of the circle's points lie within
// float64 rounding of the nearest and every walk is long (tree_near_tie_steps). Slot j of each row must be
// a distinct valid reference whose squared chord (as the kernels compute it) is within the documented
// 2^-48 of the kernels' float64 brute force's slot j (within_near_tie); the rows that differ from it are
// counted and printed.
TEST(HostileNearTies, TreeWalkIsWithinTheNearTieBoundOfTheFloat64BruteForce)
{
  STREAMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::size_t const m = std::size_t{1} << 22, n = 512;
  point_set refs_points;
  std::uniform_real_distribution<double> longitude(-180.0, 180.0);
  double const circle_lat = 90.0 - 1e-7 * 180.0 / hostile::pi;
  for (std::size_t j = 0; j < m; ++j) { refs_points.add(circle_lat, longitude(rng)); }
  streamkit::stream const s(0);
  auto const obs = upload<double>(streamkit_test::uniform_points(n, rng), angle_unit::radians, false, s);
  auto const refs = upload<double>(refs_points, angle_unit::radians, false, s);
  auto const obs_vectors = streamkit_test::device_unit_vectors(obs.points, s);
  auto const ref_vectors = streamkit_test::device_unit_vectors(refs.points, s);
  std::vector<double> const want = kernel_chord_knn(obs_vectors, ref_vectors, streamkit::max_neighbors).chord;
  for (std::size_t const k : every_list_size_k) {
    SCOPED_TRACE("k = " + std::to_string(k));
    auto const got = search<std::int64_t>(engine::tree, obs.points, refs.points, k, k, options_with(nn_precision::exact), s);
    std::size_t beyond = 0, differing_rows = 0;
    for (std::size_t i = 0; i < n; ++i) {
      bool differs = false;
      for (std::size_t j = 0; j < k; ++j) {
        std::int64_t const g = got.index[i * k + j];
        ASSERT_TRUE(g >= 0 && static_cast<std::size_t>(g) < m) << "row " << i << " slot " << j << ": index " << g;
        for (std::size_t before = 0; before < j; ++before) { ASSERT_NE(got.index[i * k + before], g) << "row " << i; }
        double const c = streamkit_test::device_chord2(obs_vectors[i], ref_vectors[static_cast<std::size_t>(g)]);
        double const w = want[i * streamkit::max_neighbors + j];
        differs = differs || c != w;
        if (!streamkit_test::within_near_tie(c, w) && beyond++ < 5) {
          ADD_FAILURE() << "row " << i << " slot " << j << ": squared chord " << c << ", the brute force's " << w << " (relative excess "
                        << (c - w) / w << ", bound " << streamkit_test::documented_near_tie << ")";
        }
      }
      differing_rows += differs ? 1 : 0;
    }
    std::printf("k = %zu: %zu of %zu rows differ from the float64 brute force among near-ties\n", k, differing_rows, n);
    EXPECT_EQ(beyond, 0U) << "slots beyond the near-tie bound";
  }
}

// Identical references in walks that allow near-ties: pole_circle_1e-7rad at 2^22 references in float32 degrees,
// whose longitudes repeat (identical references) and whose distinct points share key cells of 4.5e-13 with them, which
// the key sort interleaves (the build's tree_order_ties puts each vector's references together), seen from 512 of its
// observations, every walk long enough to allow near-ties: every row must hold identical references in index order.
TEST(HostileNearTies, IdenticalReferencesKeepTheirIndexOrderInWalksThatAllowNearTies)
{
  STREAMKIT_REQUIRE_GPU();
  hostile::problem const p = hostile::generate("pole_circle_1e-7rad", 512, std::size_t{1} << 22, streamkit_test::fresh_seed());
  streamkit::stream const s(0);
  auto const obs = upload<float>(as_point_set(p.observations), angle_unit::degrees, false, s);
  auto const refs = upload<float>(as_point_set(p.references), angle_unit::degrees, false, s);
  auto const groups = hostile::find_identical(hostile::as<float>(p.references.lat), hostile::as<float>(p.references.lon));
  ASSERT_GT(groups.in_groups, 0U) << "no identical references to keep in order";
  for (std::size_t const k : every_list_size_k) {
    SCOPED_TRACE("k = " + std::to_string(k));
    auto const got = search<std::int32_t>(engine::tree, obs.points, refs.points, k, k, options_with(nn_precision::exact), s);
    expect_identical_references_in_index_order(groups, got, k);
  }
}

// Exact ties between distinct references, in every slot: 64 sites, each two clusters mirrored across the
// equator, of 16 points one ulp of T apart in latitude (2,048 references, shuffled), seen from 4,096
// observations on the equator. Negating a latitude negates its unit vector's z exactly, so each reference
// has a twin at the same float64 squared chord, and a cluster's neighbours share it too; a cluster's box
// lies within rounding of its points, so a walk that skipped near-ties would skip the twin's. Every slot
// of every engine, every k of every_list_size_k, float and double, must hold the float64 brute force's
// reference (device_chord2), ties to the smallest index: a tree of 2,048 entries is too small for any walk
// to reach tree_near_tie_steps.
template <class T>
void expect_exact_ties_to_the_smallest_index()
{
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  constexpr std::size_t sites = 64, cluster = 16, n = 4096;
  std::uniform_real_distribution<double> site_lat(2.0, 30.0), longitude(-180.0, 180.0);
  std::vector<std::pair<T, T>> points;
  for (std::size_t site = 0; site < sites; ++site) {
    T lat = static_cast<T>(site_lat(rng));
    T const lon = static_cast<T>(longitude(rng));
    for (std::size_t member = 0; member < cluster; ++member, lat = std::nextafter(lat, T{90})) {
      points.emplace_back(lat, lon);
      points.emplace_back(-lat, lon);
    }
  }
  std::shuffle(points.begin(), points.end(), rng);
  point_set refs_points, obs_points;
  for (auto const& [lat, lon] : points) { refs_points.add(lat, lon); }
  for (std::size_t i = 0; i < n; ++i) { obs_points.add(0.0, static_cast<T>(longitude(rng))); }
  streamkit::stream const s(0);
  auto const obs = upload<T>(obs_points, angle_unit::degrees, false, s);
  auto const refs = upload<T>(refs_points, angle_unit::degrees, false, s);
  constexpr std::size_t width = streamkit::max_neighbors + 1;  // the brute force's slots a row: every k tested, and slot 1 for the tie
  auto const want = kernel_chord_knn(streamkit_test::device_unit_vectors(obs.points, s), streamkit_test::device_unit_vectors(refs.points, s), width);
  std::size_t tied_rows = 0;  // rows whose nearest is tied
  for (std::size_t i = 0; i < n; ++i) { tied_rows += want.chord[i * width] == want.chord[i * width + 1] ? 1 : 0; }
  std::printf("%zu of %zu rows have a tied nearest reference\n", tied_rows, n);
  ASSERT_GT(tied_rows, n / 2) << "the mirrored clusters should tie most rows' nearest";
  for (engine const e : {engine::tree, engine::brute_force, engine::front_end}) {
    for (std::size_t const k : every_list_size_k) {
      SCOPED_TRACE(std::string(name_of(e)) + ", k = " + std::to_string(k));
      auto const got = search<std::int64_t>(e, obs.points, refs.points, k, k, options_with(nn_precision::exact), s);
      std::size_t differing = 0;
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = 0; j < k; ++j) {
          std::int64_t const expected = static_cast<std::int64_t>(want.index[i * width + j]);
          if (got.index[i * k + j] != expected && differing++ < 5) {
            ADD_FAILURE() << "row " << i << " slot " << j << ": " << got.index[i * k + j] << ", the brute force's " << expected;
          }
        }
      }
      EXPECT_EQ(differing, 0U) << "slots that differ from the float64 brute force";
    }
  }
}

TEST(HostileExactTies, DistinctReferencesAtOneDistanceGoToTheSmallestIndexFloat)
{
  STREAMKIT_REQUIRE_GPU();
  expect_exact_ties_to_the_smallest_index<float>();
}

TEST(HostileExactTies, DistinctReferencesAtOneDistanceGoToTheSmallestIndexDouble)
{
  STREAMKIT_REQUIRE_GPU();
  expect_exact_ties_to_the_smallest_index<double>();
}

// One query whose warps search both ways (tree_search_one, k = 1: a region, or the walk): 2^16 uniform references
// and 2^16 on a circle of 1e-7 rad round the north pole; 2^14 uniform observations (regions of a few leaves) and 2^12
// within 1e-3 rad of the pole (each sees the whole circle within rounding of its nearest point: a region of thousands
// of leaves, so the warp walks). Every row of every list size against the CPU reference, exact (k > 1 walks).
TEST(TreeRegions, WarpsThatSearchAsRegionsAndWarpsThatWalkInOneQuery)
{
  STREAMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<double> longitude(-180.0, 180.0), near_pole(0.0, 1e-3 * 180.0 / hostile::pi);
  point_set refs_points = streamkit_test::uniform_points(std::size_t{1} << 16, rng);
  double const circle_lat = 90.0 - 1e-7 * 180.0 / hostile::pi;
  for (std::size_t j = 0; j < (std::size_t{1} << 16); ++j) { refs_points.add(circle_lat, longitude(rng)); }
  point_set obs_points = streamkit_test::uniform_points(std::size_t{1} << 14, rng);
  for (std::size_t i = 0; i < (std::size_t{1} << 12); ++i) { obs_points.add(90.0 - near_pole(rng), longitude(rng)); }
  streamkit::stream const s(0);
  auto const obs = upload<float>(obs_points, angle_unit::degrees, false, s);
  auto const refs = upload<float>(refs_points, angle_unit::degrees, false, s);
  knn_answer const expected = brute_force_knn(obs.seen, refs.seen, 16);
  auto const options = options_with(nn_precision::exact);
  for (std::size_t const k : {1, 2, 3, 4, 8, 16}) {
    SCOPED_TRACE("k = " + std::to_string(k));
    auto const got = search<std::int64_t>(engine::tree, obs.points, refs.points, k, k, options, s);
    check(got, expected, obs.seen, refs.seen, k, k, search_engine::tree, options);
  }
}

// The walkers' grid (detail::walk_grid_for): the lists' grid cut by a power of two, at most
// walk_grid_refinement a side, as fine as keeps a warp of n uniform observations a cell, and no finer.
TEST(CellListsHost, WalkGridCutsListCellsByPowersOfTwoDownToAWarpOfObservations)
{
  using streamkit::detail::cube_grid;
  using streamkit::detail::walk_grid_for;
  EXPECT_EQ(walk_grid_for(cube_grid{64}, std::size_t{1} << 24).grid, 256u);  // 2^24 x 2^14: 43 observations a cell
  EXPECT_EQ(walk_grid_for(cube_grid{32}, std::size_t{1} << 21).grid, 64u);   // the HostileCellLists shape
  EXPECT_EQ(walk_grid_for(cube_grid{64}, std::size_t{1} << 21).grid, 64u);   // 86 a list cell: no cut
  EXPECT_EQ(walk_grid_for(cube_grid{1}, std::size_t{1} << 30).grid, 16u);    // the refinement's cap
  EXPECT_EQ(walk_grid_for(cube_grid{1024}, std::size_t{1} << 32).grid, 4096u);
  EXPECT_EQ(walk_grid_for(cube_grid{8}, 0).grid, 8u);
  for (std::uint32_t grid = 1; grid <= 1024; grid *= 2) {
    for (std::size_t n = 1; n <= (std::size_t{1} << 33); n = n * 3 + 1) {
      cube_grid const walk = walk_grid_for(cube_grid{grid}, n);
      SCOPED_TRACE("grid " + std::to_string(grid) + ", n " + std::to_string(n) + ": walk grid " + std::to_string(walk.grid));
      std::uint32_t const cut = walk.grid / grid;
      ASSERT_EQ(walk.grid % grid, 0u);
      EXPECT_EQ(cut & (cut - 1), 0u) << "a power of two";
      EXPECT_LE(cut, streamkit::detail::walk_grid_refinement);
      double const per_cell = static_cast<double>(n) / static_cast<double>(walk.cells());
      if (cut > 1) { EXPECT_GE(per_cell, streamkit::detail::walk_cell_observations); }
      if (cut < streamkit::detail::walk_grid_refinement) { EXPECT_LT(per_cell / 4.0, streamkit::detail::walk_cell_observations); }
    }
  }
}

// One test a class and engine (each a process of its own under the sanitizers: the five classes in one
// test did not finish in ten minutes under racecheck, nor one class with every engine).
class HostileDeepTree : public ::testing::TestWithParam<std::tuple<std::string, engine>> {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::uint64_t seed_ = streamkit_test::fresh_seed();
};

TEST_P(HostileDeepTree, LargeReferenceSetsOfTheWorstClasses)
{
  // M = 2^16 references (a tree of 4096 leaves of 16 under 12 levels of boxes) and N = 2^14
  // observations (the front end's cost model picks the tree there for every k and precision today);
  // the first 1500 rows of each result are checked against the CPU reference, the tie order on every row.
  auto const& [name, e] = GetParam();
  check_class<float, std::int32_t>(hostile::find_class(name), std::size_t{1} << 14, std::size_t{1} << 16, 1500, seed_, {e});
}

INSTANTIATE_TEST_SUITE_P(HostileInputs, HostileDeepTree,
                         ::testing::Combine(::testing::Values("refs_one_point_p0.5", "depots", "pole_circle_1e-7rad", "cell_3m",
                                                              "null_island_10pct"),
                                            ::testing::ValuesIn(hostile_engines)),
                         [](auto const& info) { return test_name_of(std::get<0>(info.param) + "_" + name_of(std::get<1>(info.param))); });

// ---- host-side checks of the generators: they run without a GPU ----------------------------------

/// How many points share each distinct (lat, lon) value.
template <class T>
std::map<std::pair<T, T>, std::size_t> multiplicities(std::vector<T> const& lat, std::vector<T> const& lon)
{
  std::map<std::pair<T, T>, std::size_t> count;
  for (std::size_t j = 0; j < lat.size(); ++j) { ++count[{lat[j], lon[j]}]; }
  return count;
}

std::size_t count_at(hostile::point_list const& p, double lat, double lon)
{
  std::size_t at = 0;
  for (std::size_t j = 0; j < p.size(); ++j) { at += p.lat[j] == lat && p.lon[j] == lon ? 1 : 0; }
  return at;
}

double radians(double degrees) { return degrees * hostile::pi / 180.0; }

TEST(HostileInputsHost, ClassListHoldsTheIssueClassesAndUnknownNamesThrow)
{
  auto const& classes = hostile::input_classes();
  ASSERT_FALSE(classes.empty());
  EXPECT_STREQ(classes.front().name, "uniform") << "the baseline comes first";
  std::set<std::string> names;
  for (auto const& c : classes) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate class name " << c.name;
    EXPECT_GT(std::string(c.description).size(), 10U) << c.name;
  }
  for (char const* wanted : {"uniform", "refs_one_point", "refs_one_point_p0.01", "refs_one_point_p0.1", "refs_one_point_p0.5",
                             "refs_one_point_p0.9", "depots", "groups_2_to_64", "pole_circle_1e-7rad", "pole_circle_5e-8rad",
                             "poles_exact", "cell_3m", "cell_3m_distinct", "cell_1cm_distinct", "one_meridian", "refs_one_meridian",
                             "antimeridian", "cube_cell_edges",
                             "antipodal_pairs", "obs_all_identical", "grid_1deg", "grid_0.01deg_region", "null_island_10pct",
                             "wrapped_longitudes"}) {
    EXPECT_EQ(names.count(wanted), 1U) << wanted;
  }
  STREAMKIT_EXPECT_THROW_WITH((void)hostile::find_class("no_such_class"), std::invalid_argument, "no_such_class");
}

TEST(HostileInputsHost, EveryClassHasItsSizesValidPointsAndIsDeterministic)
{
  for (auto const& c : hostile::input_classes()) {
    SCOPED_TRACE(c.name);
    for (auto const& [n, m] : {std::pair<std::size_t, std::size_t>{0, 1}, {1, 1}, {7, 5}, {1000, 3000}}) {
      hostile::problem const p = hostile::generate(c, n, m, 42);
      ASSERT_EQ(p.observations.size(), n);
      ASSERT_EQ(p.observations.lon.size(), n);
      ASSERT_EQ(p.references.size(), m);
      ASSERT_EQ(p.references.lon.size(), m);
      // Longitudes within ±180 (up to hostile::detail::wrapped_turns turns more for wrapped_longitudes).
      double const most_lon = 180.0 + (std::string(c.name) == "wrapped_longitudes" ? 360.0 * hostile::detail::wrapped_turns : 0.0);
      for (auto const* points : {&p.observations, &p.references}) {
        for (std::size_t j = 0; j < points->size(); ++j) {
          ASSERT_TRUE(std::isfinite(points->lat[j]) && std::abs(points->lat[j]) <= 90.0) << j << ": latitude " << points->lat[j];
          ASSERT_TRUE(std::isfinite(points->lon[j]) && std::abs(points->lon[j]) <= most_lon) << j << ": longitude " << points->lon[j];
        }
      }
      hostile::problem const again = hostile::generate(c.name, n, m, 42);
      EXPECT_TRUE(again.observations.lat == p.observations.lat && again.observations.lon == p.observations.lon &&
                  again.references.lat == p.references.lat && again.references.lon == p.references.lon)
        << "not deterministic";
      if (n == 1000) {
        hostile::problem const other = hostile::generate(c, n, m, 43);
        EXPECT_FALSE(other.references.lat == p.references.lat && other.references.lon == p.references.lon &&
                     other.observations.lat == p.observations.lat && other.observations.lon == p.observations.lon)
          << "another seed gave the same points";
      }
    }
  }
}

TEST(HostileInputsHost, ReferencesAtOnePointComeInTheStatedShares)
{
  constexpr std::size_t m = 10000;
  {
    auto const p = hostile::generate("refs_one_point", 100, m, 1);
    auto const g = hostile::find_identical(p.references.lat, p.references.lon);
    EXPECT_EQ(g.distinct, 1U);
    EXPECT_EQ(g.largest, m);
  }
  for (auto const& [name, share] : {std::pair<char const*, double>{"refs_one_point_p0.01", 0.01}, {"refs_one_point_p0.1", 0.1},
                                    {"refs_one_point_p0.5", 0.5}, {"refs_one_point_p0.9", 0.9}}) {
    SCOPED_TRACE(name);
    auto const p = hostile::generate(name, 100, m, 1);
    auto const g = hostile::find_identical(p.references.lat, p.references.lon);
    auto const want = static_cast<std::size_t>(std::llround(share * m));
    EXPECT_EQ(g.largest, want);
    EXPECT_EQ(g.in_groups, want) << "the rest is uniform: no other identical points";
    EXPECT_EQ(g.distinct, m - want + 1);
    // Spread over the indices, not a block at the start: about half of them in the first half.
    auto const count = multiplicities(p.references.lat, p.references.lon);
    auto const shared =
      std::max_element(count.begin(), count.end(), [](auto const& x, auto const& y) { return x.second < y.second; })->first;
    std::size_t first_half = 0;
    for (std::size_t j = 0; j < m / 2; ++j) {
      first_half += p.references.lat[j] == shared.first && p.references.lon[j] == shared.second ? 1 : 0;
    }
    EXPECT_NEAR(static_cast<double>(first_half), want / 2.0, want / 10.0 + 20.0)
      << "the shared point's references are not spread over the indices";
  }
  auto const island = hostile::generate("null_island_10pct", 20000, m, 1);
  EXPECT_EQ(count_at(island.references, 0.0, 0.0), m / 10);
  EXPECT_EQ(count_at(island.observations, 0.0, 0.0), 2000U);
}

TEST(HostileInputsHost, DepotsAndGroupsOfIdenticalPoints)
{
  {
    constexpr std::size_t m = std::size_t{1} << 20;
    auto const p = hostile::generate("depots", 10, m, 7);
    auto const count = multiplicities(p.references.lat, p.references.lon);
    std::size_t depots = 0, in_depots = 0, smallest = m, largest = 0;
    for (auto const& [point, how_many] : count) {
      if (how_many < 2) { continue; }
      ++depots;
      in_depots += how_many;
      smallest = std::min(smallest, how_many);
      largest = std::max(largest, how_many);
    }
    EXPECT_EQ(depots, 2000U);
    EXPECT_EQ(in_depots, static_cast<std::size_t>(std::llround(m / 3.0))) << "a third of the references";
    EXPECT_GE(smallest, 174U);
    EXPECT_LE(largest, 175U);
  }
  {
    auto const p = hostile::generate("depots", 10, 4000, 7);
    auto const g = hostile::find_identical(p.references.lat, p.references.lon);
    EXPECT_EQ(hostile::depot_count(4000), 8U) << "small M: fewer depots of ~170";
    EXPECT_EQ(g.in_groups, 1333U);
    EXPECT_GE(g.largest, 166U);
  }
  for (std::size_t const m : {std::size_t{10000}, std::size_t{4000}, std::size_t{65}, std::size_t{3}}) {
    auto const p = hostile::generate("groups_2_to_64", 10, m, 7);
    auto const count = multiplicities(p.references.lat, p.references.lon);
    std::set<std::size_t> sizes;
    for (auto const& [point, how_many] : count) {
      EXPECT_GE(how_many, 2U) << "M = " << m;
      EXPECT_LE(how_many, 64U) << "M = " << m;
      sizes.insert(how_many);
    }
    if (m == 10000) { EXPECT_GT(sizes.size(), 40U) << "group sizes spread over 2..64"; }
    auto const g = hostile::find_identical(p.references.lat, p.references.lon);
    EXPECT_EQ(g.in_groups, m);
    std::size_t next_to_its_group = 0;  // the groups are spread over the indices
    for (std::size_t j = 1; j < m; ++j) { next_to_its_group += g.previous[j] == static_cast<std::int64_t>(j - 1) ? 1 : 0; }
    if (m >= 4000) { EXPECT_LT(next_to_its_group, m / 10); }
  }
}

TEST(HostileInputsHost, PoleCirclesCollapseInFloat32AndPolesAreExact)
{
  constexpr std::size_t m = 10000;
  {
    // 1e-7 rad round the north pole: distinct in float64; in float32 degrees one latitude, 2^-17 degree
    // (1.33e-7 rad) below 90, every point within 2.7e-7 rad of every other.
    auto const p = hostile::generate("pole_circle_1e-7rad", 10, m, 3);
    float const one_latitude = std::nextafter(90.0F, 0.0F);
    ASSERT_EQ(90.0 - static_cast<double>(one_latitude), 0x1.0p-17);
    std::set<double> longitudes;
    for (std::size_t j = 0; j < m; ++j) {
      EXPECT_NEAR(radians(90.0 - p.references.lat[j]), hostile::pole_circle_radius, 1e-15);
      EXPECT_EQ(static_cast<float>(p.references.lat[j]), one_latitude) << j;
      longitudes.insert(p.references.lon[j]);
    }
    EXPECT_EQ(longitudes.size(), m) << "distinct longitudes";
    auto const lat32 = hostile::as<float>(p.references.lat);
    auto const lon32 = hostile::as<float>(p.references.lon);
    double widest = 0.0;
    for (std::size_t j = 1; j < m; j += 7) {
      widest = std::max(widest, streamkit::haversine(radians(lat32[0]), radians(lon32[0]), radians(lat32[j]), radians(lon32[j])));
    }
    EXPECT_LE(widest, 2 * 1.34e-7);
    EXPECT_GT(hostile::find_identical(lat32, lon32).distinct, m * 99 / 100) << "float32 keeps the longitudes apart";
  }
  {
    // 5e-8 rad round the south pole: distinct latitudes' point in float64, exactly -90 in float32.
    auto const p = hostile::generate("pole_circle_5e-8rad", 10, m, 3);
    for (std::size_t j = 0; j < m; ++j) {
      EXPECT_NEAR(radians(p.references.lat[j] + 90.0), hostile::pole_collapse_radius, 1e-15);
      EXPECT_NE(p.references.lat[j], -90.0);
      EXPECT_EQ(static_cast<float>(p.references.lat[j]), -90.0F) << "float32 must collapse reference " << j << " onto the pole";
    }
  }
  {
    auto const p = hostile::generate("poles_exact", 10, m, 3);
    std::size_t north = 0;
    for (std::size_t j = 0; j < m; ++j) {
      EXPECT_EQ(std::abs(p.references.lat[j]), 90.0);
      north += p.references.lat[j] > 0 ? 1 : 0;
    }
    EXPECT_GT(north, m / 3);
    EXPECT_LT(north, 2 * m / 3);
  }
}

TEST(HostileInputsHost, TinyDiscsStayInsideTheirRadius)
{
  constexpr std::size_t m = std::size_t{1} << 16;
  struct disc {
    char const* name;
    double lat, lon, radius_m;
    double float32_distinct_at_least, float32_distinct_at_most;  // shares of M
  };
  for (auto const& d : {disc{"cell_3m", 48.8566, 2.3522, 3.0, 0.0, 0.2}, disc{"cell_3m_distinct", 1e-4, 2e-4, 3.0, 0.99, 1.0},
                        disc{"cell_1cm_distinct", 1e-5, 2e-5, 0.01, 0.95, 1.0}}) {
    SCOPED_TRACE(d.name);
    auto const p = hostile::generate(d.name, 10, m, 5);
    double farthest = 0.0;
    for (std::size_t j = 0; j < m; ++j) {
      farthest = std::max(farthest, streamkit::haversine(radians(d.lat), radians(d.lon), radians(p.references.lat[j]),
                                                         radians(p.references.lon[j])) *
                                      hostile::earth_radius_m);
    }
    EXPECT_LE(farthest, d.radius_m * (1 + 1e-6));
    EXPECT_GT(farthest, d.radius_m * 0.9);
    EXPECT_EQ(hostile::find_identical(p.references.lat, p.references.lon).distinct, m) << "distinct in float64";
    auto const g32 = hostile::find_identical(hostile::as<float>(p.references.lat), hostile::as<float>(p.references.lon));
    std::printf("%s: %zu distinct of %zu in float32, largest group %zu\n", d.name, g32.distinct, m, g32.largest);
    EXPECT_GE(static_cast<double>(g32.distinct), d.float32_distinct_at_least * m);
    EXPECT_LE(static_cast<double>(g32.distinct), d.float32_distinct_at_most * m);
  }
}

TEST(HostileInputsHost, MeridiansAntipodesAndIdenticalObservations)
{
  constexpr std::size_t n = 3000, m = 5001;
  {
    auto const p = hostile::generate("one_meridian", n, m, 9);
    for (auto const* points : {&p.observations, &p.references}) {
      for (std::size_t j = 0; j < points->size(); ++j) { ASSERT_EQ(points->lon[j], 0.0) << j; }
    }
  }
  {
    auto const p = hostile::generate("antimeridian", n, m, 9);
    std::size_t east = 0;
    for (auto const* points : {&p.observations, &p.references}) {
      for (std::size_t j = 0; j < points->size(); ++j) {
        ASSERT_EQ(std::abs(points->lon[j]), 180.0) << j;
        east += points->lon[j] > 0 ? 1 : 0;
      }
    }
    EXPECT_GT(east, (n + m) / 3);
    EXPECT_LT(east, 2 * (n + m) / 3);
  }
  {
    auto const p = hostile::generate("antipodal_pairs", n, m, 9);
    auto const unit = [&](std::size_t j, double v[3]) {
      double const la = radians(p.references.lat[j]), lo = radians(p.references.lon[j]);
      v[0] = std::cos(la) * std::cos(lo);
      v[1] = std::cos(la) * std::sin(lo);
      v[2] = std::sin(la);
    };
    for (std::size_t j = 0; j + 1 < m; j += 2) {
      double a[3], b[3];
      unit(j, a);
      unit(j + 1, b);
      ASSERT_NEAR(a[0] + b[0], 0.0, 1e-12) << j;
      ASSERT_NEAR(a[1] + b[1], 0.0, 1e-12) << j;
      ASSERT_NEAR(a[2] + b[2], 0.0, 1e-12) << j;
    }
  }
  {
    auto const p = hostile::generate("obs_all_identical", n, m, 9);
    EXPECT_EQ(hostile::find_identical(p.observations.lat, p.observations.lon).largest, n);
    EXPECT_EQ(hostile::find_identical(p.references.lat, p.references.lon).distinct, m);
  }
}

TEST(HostileInputsHost, GridsRoundToTheirStepAndRepeatPoints)
{
  {
    constexpr std::size_t m = std::size_t{1} << 20;
    auto const p = hostile::generate("grid_1deg", 10, m, 11);
    for (std::size_t j = 0; j < m; ++j) {
      ASSERT_EQ(p.references.lat[j], std::round(p.references.lat[j])) << j;
      ASSERT_EQ(p.references.lon[j], std::round(p.references.lon[j])) << j;
    }
    auto const g = hostile::find_identical(p.references.lat, p.references.lon);
    EXPECT_LE(g.distinct, std::size_t{181} * 361);
    EXPECT_GT(g.in_groups, m * 9 / 10) << "most grid points are shared";
  }
  {
    constexpr std::size_t n = 4000, m = std::size_t{1} << 18;
    auto const p = hostile::generate("grid_0.01deg_region", n, m, 11);
    for (std::size_t j = 0; j < m; ++j) {
      ASSERT_NEAR(p.references.lat[j] * 100.0, std::round(p.references.lat[j] * 100.0), 1e-9) << j;
      ASSERT_NEAR(p.references.lon[j] * 100.0, std::round(p.references.lon[j] * 100.0), 1e-9) << j;
      ASSERT_TRUE(p.references.lat[j] >= 40.0 && p.references.lat[j] <= 41.0 && p.references.lon[j] >= -74.0 &&
                  p.references.lon[j] <= -73.0)
        << j;
    }
    auto const g = hostile::find_identical(hostile::as<float>(p.references.lat), hostile::as<float>(p.references.lon));
    EXPECT_LE(g.distinct, std::size_t{101} * 101) << "one float32 value per grid point";
    EXPECT_GT(g.distinct, std::size_t{100} * 100);
    std::size_t in_region = 0;
    for (std::size_t i = 0; i < n; ++i) {
      in_region += p.observations.lat[i] >= 40.0 && p.observations.lat[i] <= 41.0 && p.observations.lon[i] >= -74.0 &&
                           p.observations.lon[i] <= -73.0
                     ? 1
                     : 0;
    }
    EXPECT_GE(in_region, n / 2);
    EXPECT_LT(in_region, n / 2 + n / 50);
  }
}

TEST(HostileInputsHost, TieOrderCheckerOnAHandMadeCase)
{
  // References 0, 2 and 5 identical; 1 and 4 identical; 3 alone.
  std::vector<float> const lat{1, 7, 1, 3, 7, 1};
  std::vector<float> const lon{2, 8, 2, 4, 8, 2};
  auto const g = hostile::find_identical(lat, lon);
  EXPECT_EQ(g.distinct, 3U);
  EXPECT_EQ(g.largest, 3U);
  EXPECT_EQ(g.in_groups, 5U);
  EXPECT_EQ(g.previous, (std::vector<std::int64_t>{-1, -1, 0, -1, 1, 2}));
  auto const problem = [&](std::vector<int> const& row) { return hostile::first_tie_order_problem(g, row.data(), row.size()); };
  EXPECT_EQ(problem({0, 2, 5, 1, 4, 3}), -1);
  EXPECT_EQ(problem({3, 1, 0, 4, 2}), -1) << "groups interleaved, each in index order";
  EXPECT_EQ(problem({0, 1}), -1) << "a group cut by k keeps its smallest indices";
  EXPECT_EQ(problem({2, 0}), 0) << "2 before 0";
  EXPECT_EQ(problem({0, 5, 2}), 1) << "5 without 2 before it";
  EXPECT_EQ(problem({4}), 0) << "4 without 1";
  EXPECT_EQ(problem({-1, 0, 99}), -1) << "indices outside the set are another check's business";
  std::vector<float> const none;
  EXPECT_EQ(hostile::find_identical(none, none).largest, 0U);
}

}  // namespace
