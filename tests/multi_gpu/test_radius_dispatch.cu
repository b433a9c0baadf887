// Radius queries over a dispatcher's GPUs (issue 27): multi_gpu_nearest_neighbor::radius_query() and
// dispatch_radius_neighbors(), host observations in, host compressed rows out. GPU tests compare every
// row with the float64 CPU brute force (radius_checks.hpp) and with the single-GPU radius_neighbors()
// on fresh random inputs, the outputs poisoned first; with several lanes on one GPU ({0, 0, 0}) the
// split is tested with more workers than GPUs. The host-side plan (chunk sizes, bounds over every
// chunk, offsets shifted by the chunks before) and the argument checks run without a GPU.
#include "device_memory.hpp"
#include "gpu_test.hpp"
#include "spatial/nearest_reference.hpp"
#include "spatial/radius_checks.hpp"
#include "test_support.hpp"

#include <streamkit/core/stream.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using streamkit::angle_unit;
using streamkit::radius_options;
using streamkit_test::host_csr;
using streamkit_test::options_in;
using streamkit_test::point_set;
using streamkit_test::radians_set;
using streamkit_test::uniform_points;

enum class host_layout { separate, interleaved, pinned_interleaved };

/// Host points of type T as a multi-GPU query takes them, with their separate copies (for the
/// single-GPU comparison) and the CPU's view.
template <class T>
struct host_points {
  std::vector<T> lat, lon;     // always filled
  std::vector<T> latlon;       // interleaved, pageable
  streamkit::pinned_buffer<T> pinned;  // interleaved, page-locked
  streamkit::points_ref<T> points;
  radians_set seen;
  [[nodiscard]] std::size_t size() const { return lat.size(); }
};

template <class T>
host_points<T> on_host(point_set const& p, angle_unit unit, host_layout layout)
{
  host_points<T> out;
  out.lat = streamkit_test::converted<T>(p.lat, unit);
  out.lon = streamkit_test::converted<T>(p.lon, unit);
  out.seen = streamkit_test::as_seen(out.lat, out.lon, unit);
  std::size_t const n = p.size();
  if (layout == host_layout::separate) {
    out.points = streamkit::points_ref<T>::separate(out.lat.data(), out.lon.data(), n, unit);
    return out;
  }
  T* both = nullptr;
  if (layout == host_layout::interleaved) {
    out.latlon.resize(2 * n);
    both = out.latlon.data();
  } else {
    out.pinned = streamkit::pinned_buffer<T>(2 * n);
    both = out.pinned.data();
  }
  for (std::size_t i = 0; i < n; ++i) {
    both[2 * i] = out.lat[i];
    both[2 * i + 1] = out.lon[i];
  }
  out.points = streamkit::points_ref<T>::interleaved(both, n, unit);
  return out;
}

template <class Index, class T>
host_csr<Index, T> as_csr(streamkit::host_radius_result<Index, T> const& r)
{
  return {r.offsets, r.index, r.distance};
}

/// A host result of `rows` rows and `total` elements, every element poisoned: a query of that size
/// must overwrite all of them.
template <class Index, class T>
streamkit::host_radius_result<Index, T> poisoned(std::size_t rows, std::size_t total, bool distances)
{
  streamkit::host_radius_result<Index, T> r;
  r.offsets.assign(rows + 1, -3);
  r.index.assign(total, static_cast<Index>(streamkit_test::poison_index));
  r.distance.assign(distances ? total : 0, static_cast<T>(streamkit_test::poison_distance));
  return r;
}

/// The single-GPU blocking query on device copies of the same points (sorted, with distances).
template <class Index, class T>
host_csr<Index, T> single_gpu(host_points<T> const& obs, host_points<T> const& refs, radius_options r, streamkit::nearest_options const& options,
                              std::vector<double> const& host_radii = {})
{
  streamkit::stream const s(0);
  auto const o_lat = streamkit_test::to_device(obs.lat, s), o_lon = streamkit_test::to_device(obs.lon, s);
  auto const r_lat = streamkit_test::to_device(refs.lat, s), r_lon = streamkit_test::to_device(refs.lon, s);
  auto const radii = streamkit_test::to_device(host_radii, s);
  if (!host_radii.empty()) { r.radii = radii.data(); }
  r.sorted = true;
  auto const unit = obs.points.unit;
  return streamkit_test::fetch(
    streamkit::radius_neighbors<Index>(streamkit::points_ref<T>::separate(o_lat.data(), o_lon.data(), obs.size(), unit),
                                       streamkit::points_ref<T>::separate(r_lat.data(), r_lon.data(), refs.size(), unit), r, options, true, s),
    s);
}

/// The radius of each row as the CPU check takes it (a NaN or negative radius: nothing within).
std::vector<double> checker_radii(std::size_t n, radius_options const& r, std::vector<double> const& host_radii)
{
  if (host_radii.empty()) { return std::vector<double>(n, r.radius); }
  std::vector<double> radii = host_radii;
  for (double& x : radii) { x = std::isnan(x) || x < 0 ? -1.0 : x; }
  return radii;
}

/// One multi-GPU radius query into a poisoned result of the single GPU's size, checked against the
/// float64 CPU brute force and the single GPU's rows (identical when sorted, the same sets otherwise).
template <class Index, class T>
void check_query(streamkit::multi_gpu_nearest_neighbor<T>& search, host_points<T> const& obs, host_points<T> const& refs, radius_options const& r,
                 bool distances, host_csr<Index, T> const& single, std::size_t chunk_items, std::vector<double> const& host_radii = {})
{
  auto result = poisoned<Index, T>(obs.size(), single.index.size(), distances);
  search.radius_query(obs.points, r, result, distances, chunk_items);
  auto const got = as_csr(result);
  double const scale = streamkit::detail::distance_scale(search.options());
  streamkit_test::expect_radius(got, obs.seen, refs.seen, checker_radii(obs.size(), r, host_radii), scale, r.sorted, distances);
  if (r.sorted) {
    EXPECT_EQ(got.offsets, single.offsets) << "offsets differ from the single GPU's";
    EXPECT_EQ(got.index, single.index) << "sorted rows differ from the single GPU's";
  } else {
    streamkit_test::expect_same_sets(got, single, "unsorted multi-GPU rows vs the single GPU's");
  }
}

std::vector<std::vector<int>> lane_sets()
{
  std::vector<std::vector<int>> sets{{0}, {0, 0, 0}};  // three lanes on one GPU: more workers than GPUs
  if (streamkit::device_count() >= 2) {
    sets.emplace_back();
    for (int g = 0; g < streamkit::device_count(); ++g) { sets.back().push_back(g); }
  }
  return sets;
}

class RadiusDispatch : public ::testing::Test {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::mt19937_64 rng{streamkit_test::fresh_seed()};
};

template <class T, class Index>
void any_lanes_and_chunks(std::mt19937_64& rng, host_layout layout, angle_unit unit)
{
  point_set const obs_points = uniform_points(6007, rng), ref_points = uniform_points(2003, rng);
  auto const obs = on_host<T>(obs_points, unit, layout);
  auto const refs = on_host<T>(ref_points, unit, host_layout::separate);
  auto const options = options_in(streamkit::distance_unit::kilometres);
  radius_options r;
  r.radius = 700.0;  // about 6 of 2003 references per row
  auto const single = single_gpu<Index>(obs, refs, r, options);
  ASSERT_GT(single.index.size(), obs.size());
  for (auto const& devices : lane_sets()) {
    streamkit::dispatcher d({devices, 2});
    streamkit::multi_gpu_nearest_neighbor<T> search(d, refs.points, options);
    for (std::size_t chunk : {std::size_t{0}, std::size_t{997}, std::size_t{2 * 6007}}) {  // default, uneven, one chunk
      SCOPED_TRACE(std::to_string(devices.size()) + " lanes, chunk " + std::to_string(chunk));
      check_query<Index>(search, obs, refs, r, true, single, chunk);
      radius_options unsorted = r;
      unsorted.sorted = false;
      check_query<Index>(search, obs, refs, unsorted, false, single, chunk);
      check_query<Index>(search, obs, refs, unsorted, true, single, chunk);
    }
  }
}

TEST_F(RadiusDispatch, MatchesTheFloat64ReferenceForAnyLanesAndChunks)
{
  {
    SCOPED_TRACE("float, int32, separate pageable observations in degrees");
    any_lanes_and_chunks<float, std::int32_t>(rng, host_layout::separate, angle_unit::degrees);
  }
  {
    SCOPED_TRACE("double, int64, interleaved pinned observations in radians");
    any_lanes_and_chunks<double, std::int64_t>(rng, host_layout::pinned_interleaved, angle_unit::radians);
  }
}

TEST_F(RadiusDispatch, OneShotAndPerObservationRadiiInHostMemory)
{
  point_set const obs_points = uniform_points(3001, rng), ref_points = uniform_points(2500, rng);
  auto const obs = on_host<double>(obs_points, angle_unit::degrees, host_layout::interleaved);
  auto const refs = on_host<double>(ref_points, angle_unit::degrees, host_layout::interleaved);
  auto const options = options_in(streamkit::distance_unit::radians);
  std::uniform_real_distribution<double> u(0.0, 0.15);
  std::vector<double> radii(obs.size());
  for (double& x : radii) { x = u(rng); }
  radii[0] = std::numeric_limits<double>::quiet_NaN();  // empty rows
  radii[1] = -1.0;
  radii[2] = 0.0;
  radii[1500] = std::numeric_limits<double>::infinity();  // every reference
  radii[3000] = streamkit::pi;
  radius_options r;
  r.radius = -5.0;  // ignored with radii
  auto const single = single_gpu<std::int64_t>(obs, refs, r, options, radii);
  streamkit::pinned_buffer<double> pinned_radii(radii.size());
  std::copy(radii.begin(), radii.end(), pinned_radii.begin());
  streamkit::dispatcher d({{0, 0}, 2});
  for (bool pinned : {false, true}) {
    SCOPED_TRACE(pinned ? "pinned radii" : "pageable radii");
    r.radii = pinned ? pinned_radii.data() : radii.data();
    streamkit::multi_gpu_nearest_neighbor<double> search(d, refs.points, options);
    check_query<std::int64_t>(search, obs, refs, r, true, single, 701, radii);
    // The one-shot form gives the same rows.
    auto const once = streamkit::dispatch_radius_neighbors(d, obs.points, refs.points, r, options, true, 1000);
    EXPECT_EQ(once.offsets, single.offsets);
    EXPECT_EQ(once.index, single.index);
    for (std::size_t i : {std::size_t{0}, std::size_t{1}}) { EXPECT_EQ(once.offsets[i + 1], once.offsets[i]) << "row " << i; }
    EXPECT_EQ(once.offsets[1501] - once.offsets[1500], 2500);
    EXPECT_EQ(once.offsets[3001] - once.offsets[3000], 2500);
  }
  // Radii in device memory are refused before any work.
  streamkit::stream const s(0);
  auto const device_radii = streamkit_test::to_device(radii, s);
  r.radii = device_radii.data();
  auto untouched = poisoned<std::int64_t, double>(obs.size(), 3, true);
  auto const before = untouched.offsets;
  streamkit::multi_gpu_nearest_neighbor<double> search(d, refs.points, options);
  STREAMKIT_EXPECT_THROW_WITH(search.radius_query(obs.points, r, untouched, true), std::invalid_argument,
                              "radius.radii: device memory; a multi-GPU radius query takes one radius per observation in host memory");
  EXPECT_EQ(untouched.offsets, before);
}

TEST_F(RadiusDispatch, FewerObservationsThanWorkersAndNone)
{
  point_set const ref_points = uniform_points(1200, rng);
  auto const refs = on_host<float>(ref_points, angle_unit::degrees, host_layout::separate);
  auto const options = options_in(streamkit::distance_unit::kilometres);
  radius_options r;
  r.radius = 3000.0;
  streamkit::dispatcher d({{0, 0, 0}, 2});  // six workers
  streamkit::multi_gpu_nearest_neighbor<float> search(d, refs.points, options);
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{5}}) {
    auto const obs = on_host<float>(uniform_points(n, rng), angle_unit::degrees, host_layout::separate);
    auto const single = single_gpu<std::int32_t>(obs, refs, r, options);
    for (std::size_t chunk : {std::size_t{0}, std::size_t{1}, std::size_t{2}}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", chunk " + std::to_string(chunk));
      check_query<std::int32_t>(search, obs, refs, r, true, single, chunk);
    }
  }
  // No observations: one offset, no rows' elements, whatever the result held before.
  streamkit::host_radius_result<std::int32_t, float> none;
  none.offsets = {5, 5, 5};
  none.index = {1, 2};
  none.distance = {1.0F, 2.0F};
  search.radius_query(streamkit::points_ref<float>::separate(nullptr, nullptr, 0), r, none, true);
  EXPECT_EQ(none.offsets, std::vector<std::int64_t>{0});
  EXPECT_TRUE(none.index.empty());
  EXPECT_TRUE(none.distance.empty());
  EXPECT_EQ(none.rows(), 0U);
  auto const once = streamkit::dispatch_radius_neighbors(d, streamkit::points_ref<float>::separate(nullptr, nullptr, 0), refs.points, r, options, false);
  EXPECT_EQ(once.offsets, std::vector<std::int64_t>{0});
  EXPECT_EQ(once.total(), 0U);
}

TEST_F(RadiusDispatch, ZeroRadiusAndHalfATurn)
{
  point_set ref_points = uniform_points(1000, rng);
  point_set obs_points = uniform_points(2000, rng);
  for (std::size_t i = 0; i < 600; ++i) {  // observations on references, some references repeated
    std::size_t const j = rng() % 200;
    obs_points.lat[3 * i] = ref_points.lat[j];
    obs_points.lon[3 * i] = ref_points.lon[j];
    ref_points.lat[200 + i] = ref_points.lat[j];
    ref_points.lon[200 + i] = ref_points.lon[j];
  }
  streamkit::dispatcher d({{0, 0}, 2});
  {
    SCOPED_TRACE("r = 0");
    auto const obs = on_host<double>(obs_points, angle_unit::degrees, host_layout::separate);
    auto const refs = on_host<double>(ref_points, angle_unit::degrees, host_layout::separate);
    auto const options = options_in(streamkit::distance_unit::metres);
    radius_options r;
    r.radius = 0.0;
    auto const single = single_gpu<std::int64_t>(obs, refs, r, options);
    ASSERT_GE(single.index.size(), 600U);
    streamkit::multi_gpu_nearest_neighbor<double> search(d, refs.points, options);
    check_query<std::int64_t>(search, obs, refs, r, true, single, 333);
  }
  // Half a turn and more: every valid reference (two invalid ones, marked).
  ref_points.lat[5] = std::numeric_limits<double>::quiet_NaN();
  ref_points.lat[77] = 95.0;
  auto const obs = on_host<float>(obs_points, angle_unit::degrees, host_layout::pinned_interleaved);
  auto const refs = on_host<float>(ref_points, angle_unit::degrees, host_layout::separate);
  auto const options = options_in(streamkit::distance_unit::kilometres, streamkit::invalid_points::mark);
  streamkit::multi_gpu_nearest_neighbor<float> search(d, refs.points, options);
  for (double const radius : {streamkit::pi * options.sphere_radius_km, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(radius);
    radius_options r;
    r.radius = radius;
    auto const single = single_gpu<std::int64_t>(obs, refs, r, options);
    check_query<std::int64_t>(search, obs, refs, r, true, single, 777);
    auto const got = search.radius_query(obs.points, r, false, 777);
    for (std::size_t i = 0; i < obs.size(); ++i) { ASSERT_EQ(got.offsets[i + 1] - got.offsets[i], 998) << "row " << i; }
  }
}

TEST_F(RadiusDispatch, BoundsAreCheckedOverEveryChunkBeforeAnyFill)
{
  point_set const obs_points = uniform_points(4000, rng), ref_points = uniform_points(2000, rng);
  auto const obs = on_host<double>(obs_points, angle_unit::degrees, host_layout::separate);
  auto const refs = on_host<double>(ref_points, angle_unit::degrees, host_layout::separate);
  auto const options = options_in(streamkit::distance_unit::kilometres);
  radius_options r;
  r.radius = 1500.0;
  streamkit::dispatcher d({{0, 0}, 2});
  streamkit::multi_gpu_nearest_neighbor<double> search(d, refs.points, options);
  std::size_t const chunk = 500;  // 8 chunks
  auto const full = search.radius_query(obs.points, r, true, chunk);
  std::size_t largest = 0, largest_chunk = 0;
  for (std::size_t i = 0; i < obs.size(); ++i) {
    largest = std::max<std::size_t>(largest, static_cast<std::size_t>(full.offsets[i + 1] - full.offsets[i]));
  }
  for (std::size_t c = 0; c < obs.size(); c += chunk) {
    largest_chunk = std::max<std::size_t>(largest_chunk, static_cast<std::size_t>(full.offsets[c + chunk] - full.offsets[c]));
  }
  std::size_t const total = full.total();
  ASSERT_GT(largest, 1U);
  ASSERT_LT(largest_chunk, total - 1) << "every chunk alone stays within max_total: only the sum over chunks exceeds it";

  auto result = poisoned<std::int64_t, double>(obs.size(), 11, true);
  auto const before = as_csr(result);
  radius_options bounded = r;
  bounded.max_per_row = largest - 1;
  STREAMKIT_EXPECT_THROW_WITH(search.radius_query(obs.points, bounded, result, true, chunk), std::length_error,
                              "radius query: a row would hold " + std::to_string(largest) + " references within the radius, above max_per_row = " +
                                std::to_string(largest - 1) + " (" + std::to_string(total) + " in all over 4000 rows); nothing was returned");
  bounded.max_per_row = largest;
  bounded.max_total = total - 1;
  STREAMKIT_EXPECT_THROW_WITH(search.radius_query(obs.points, bounded, result, true, chunk), std::length_error,
                              "radius query: " + std::to_string(total) + " references within the radius in all (4000 rows, the largest " +
                                std::to_string(largest) + "), above max_total = " + std::to_string(total - 1) + "; nothing was returned");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_radius_neighbors(d, obs.points, refs.points, bounded, options, false), std::length_error,
                              std::to_string(total) + " references within the radius in all");
  EXPECT_EQ(result.offsets, before.offsets) << "a query over its bounds wrote its result";
  EXPECT_EQ(result.index, before.index);
  EXPECT_EQ(result.distance, before.distance);
  bounded.max_total = total;
  search.radius_query(obs.points, bounded, result, true, chunk);
  EXPECT_EQ(result.offsets, full.offsets);
  EXPECT_EQ(result.index, full.index);
  EXPECT_EQ(result.distance, full.distance);
}

TEST_F(RadiusDispatch, InvalidPointsAreRejectedBeforeAnythingIsWrittenOrMarked)
{
  point_set ref_points = uniform_points(900, rng);
  point_set obs_points = uniform_points(3000, rng);
  obs_points.lat[0] = std::numeric_limits<double>::quiet_NaN();  // in the first and the last chunk
  obs_points.lon[2999] = std::numeric_limits<double>::infinity();
  auto const obs = on_host<double>(obs_points, angle_unit::degrees, host_layout::separate);
  auto const refs = on_host<double>(ref_points, angle_unit::degrees, host_layout::separate);
  radius_options r;
  r.radius = 2000.0;
  streamkit::dispatcher d({{0, 0}, 2});
  {
    auto const reject = options_in(streamkit::distance_unit::kilometres);
    streamkit::multi_gpu_nearest_neighbor<double> search(d, refs.points, reject);
    auto result = poisoned<std::int64_t, double>(obs.size(), 5, true);
    auto const before = as_csr(result);
    STREAMKIT_EXPECT_THROW_WITH(search.radius_query(obs.points, r, result, true, 1000), std::invalid_argument,
                                "observations: 2 point(s) have a non-finite coordinate or a latitude outside [-90, 90] degrees");
    EXPECT_EQ(result.offsets, before.offsets) << "a rejected query wrote its result";
    EXPECT_EQ(result.index, before.index);
    EXPECT_EQ(result.distance, before.distance);
    STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_radius_neighbors(d, obs.points, refs.points, r, reject, true), std::invalid_argument,
                                "observations: 2 point(s)");
    // Invalid references are rejected when they are prepared.
    point_set bad_refs = ref_points;
    bad_refs.lat[3] = -91.0;
    auto const bad = on_host<double>(bad_refs, angle_unit::degrees, host_layout::separate);
    STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_radius_neighbors(d, refs.points, bad.points, r, reject, true), std::invalid_argument,
                                "references: 1 point(s)");
  }
  {
    SCOPED_TRACE("marked: empty rows");
    ref_points.lon[10] = std::numeric_limits<double>::quiet_NaN();
    auto const marked_refs = on_host<double>(ref_points, angle_unit::degrees, host_layout::separate);
    auto const mark = options_in(streamkit::distance_unit::kilometres, streamkit::invalid_points::mark);
    auto const single = single_gpu<std::int64_t>(obs, marked_refs, r, mark);
    streamkit::multi_gpu_nearest_neighbor<double> search(d, marked_refs.points, mark);
    check_query<std::int64_t>(search, obs, marked_refs, r, true, single, 1000);
    EXPECT_EQ(single.offsets[1], single.offsets[0]);
    EXPECT_EQ(single.offsets[3000], single.offsets[2999]);
  }
}

TEST_F(RadiusDispatch, TimeStepsAndSteadyStateQueriesReuseMemory)
{
  // References replaced per time step (smaller, then larger than the first), answered over two lanes
  // of two streams. Within a step, repeated queries of the same data allocate nothing (workspaces,
  // scratch, pinned memory, the result's vectors): shown on one stream of one GPU, where every query
  // fills every chunk on the same stream (with several, chunks go to whichever stream is free).
  std::size_t const n = 8009;
  streamkit::dispatcher d({{0, 0}, 2});
  streamkit::dispatcher one({{0}, 1});
  auto refs = on_host<float>(uniform_points(1500, rng), angle_unit::degrees, host_layout::interleaved);
  auto const options = options_in(streamkit::distance_unit::kilometres);
  streamkit::multi_gpu_nearest_neighbor<float> search(d, refs.points, options);
  streamkit::multi_gpu_nearest_neighbor<float> steady(one, refs.points, options);
  radius_options r;
  r.radius = 900.0;
  for (std::size_t step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::size_t const m = step == 1 ? 700 : step == 2 ? 2900 : 1500;
    if (step > 0) {
      refs = on_host<float>(uniform_points(m, rng), angle_unit::degrees, step == 1 ? host_layout::separate : host_layout::interleaved);
      search.update(refs.points);
      steady.update(refs.points);
    }
    ASSERT_EQ(search.size(), m);
    auto const obs = on_host<float>(uniform_points(n, rng), angle_unit::degrees, host_layout::pinned_interleaved);
    auto const single = single_gpu<std::int32_t>(obs, refs, r, options);
    check_query<std::int32_t>(search, obs, refs, r, true, single, 1999);
    check_query<std::int32_t>(steady, obs, refs, r, true, single, 1999);
    streamkit::host_radius_result<std::int32_t, float> result;
    steady.radius_query(obs.points, r, result, true, 1999);
    std::size_t const allocations = one.workspace_allocations();
    std::size_t const pinned = streamkit::pinned_bytes_in_use();
    std::size_t const free_before = streamkit_test::settled_free_memory();
    auto const* const index_memory = result.index.data();
    auto const* const offsets_memory = result.offsets.data();
    for (int again = 0; again < 3; ++again) {
      std::fill(result.index.begin(), result.index.end(), static_cast<std::int32_t>(streamkit_test::poison_index));
      steady.radius_query(obs.points, r, result, true, 1999);
      EXPECT_EQ(result.index, single.index);
    }
    EXPECT_EQ(one.workspace_allocations(), allocations) << "repeated radius queries allocate no workspace";
    EXPECT_EQ(streamkit::pinned_bytes_in_use(), pinned);
    if (streamkit_test::free_memory_is_measurable()) { EXPECT_EQ(streamkit_test::settled_free_memory(), free_before); }
    EXPECT_EQ(result.index.data(), index_memory) << "the result's vectors keep their memory";
    EXPECT_EQ(result.offsets.data(), offsets_memory);
  }
}

// ---- host side: the plan and the argument checks, run in CI without a GPU -------------------------

TEST(RadiusDispatchHost, ChunkSizes)
{
  using streamkit::detail::radius_chunk_items;
  EXPECT_EQ(radius_chunk_items(5, 6, 0), 4096U);  // fewer observations than workers: one chunk
  EXPECT_EQ(radius_chunk_items(1'000'000, 4, 0), 62'500U);
  EXPECT_EQ(radius_chunk_items(1'000'001, 4, 0), 62'501U);
  EXPECT_EQ(radius_chunk_items(1'000'000, 0, 0), 250'000U);
  EXPECT_EQ(radius_chunk_items(1'000'000, 4, 997), 997U);
  EXPECT_EQ(radius_chunk_items(std::size_t{1} << 40, 1, 0), std::size_t{1} << 31);  // a chunk is one GPU query
  EXPECT_EQ(radius_chunk_items(10, 1, std::size_t{1} << 40), std::size_t{1} << 31);
}

TEST(RadiusDispatchHost, BoundsAreCheckedOverEveryChunkTogether)
{
  using streamkit::detail::radius_chunk_rows;
  std::vector<radius_chunk_rows> const chunks{{5, 3}, {7, 4}, {0, 0}};
  std::vector<std::uint64_t> bases{99};
  radius_options r;
  r.max_total = 11;  // each chunk alone is within it, not their sum
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::radius_chunk_bases(chunks, r, 30, bases), std::length_error,
                              "radius query: 12 references within the radius in all (30 rows, the largest 4), above max_total = 11; nothing was returned");
  r.max_total = 12;
  r.max_per_row = 3;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::radius_chunk_bases(chunks, r, 30, bases), std::length_error,
                              "radius query: a row would hold 4 references within the radius, above max_per_row = 3 (12 in all over 30 rows)");
  EXPECT_EQ(bases, std::vector<std::uint64_t>{99}) << "bases written before the bounds held";
  r.max_per_row = 4;
  EXPECT_EQ(streamkit::detail::radius_chunk_bases(chunks, r, 30, bases), 12U);
  EXPECT_EQ(bases, (std::vector<std::uint64_t>{0, 5, 12}));
}

TEST(RadiusDispatchHost, OffsetsAreShiftedByTheChunksBefore)
{
  // Random row sizes cut into uneven chunks (empty rows and chunks of empty rows included): the
  // chunks' row ends, rows, bases and shifted offsets give the plain prefix sum of the rows.
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{17}, std::size_t{1000}}) {
    for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{64}, std::size_t{5000}}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", chunk " + std::to_string(chunk));
      std::vector<std::int64_t> rows(n), expected(n + 1, 0);
      for (std::size_t i = 0; i < n; ++i) {
        rows[i] = (i / 7) % 3 == 1 ? 0 : static_cast<std::int64_t>(rng() % 9);
        expected[i + 1] = expected[i] + rows[i];
      }
      std::size_t const chunks = streamkit::detail::chunk_count(n, chunk);
      std::vector<std::int64_t> row_ends(n);
      std::vector<streamkit::detail::radius_chunk_rows> per_chunk(chunks);
      for (std::size_t c = 0; c < chunks; ++c) {
        auto const items = streamkit::detail::chunk_at(n, chunk, c);
        std::int64_t end = 0;
        std::uint64_t largest = 0;
        for (std::size_t i = items.begin; i < items.end; ++i) {
          end += rows[i];
          row_ends[i] = end;
          largest = std::max(largest, static_cast<std::uint64_t>(rows[i]));
        }
        per_chunk[c] = streamkit::detail::radius_rows_of(row_ends.data() + items.begin, items.size());
        EXPECT_EQ(per_chunk[c].total, static_cast<std::uint64_t>(end));
        EXPECT_EQ(per_chunk[c].largest, largest);
      }
      std::vector<std::uint64_t> bases;
      EXPECT_EQ(streamkit::detail::radius_chunk_bases(per_chunk, radius_options{}, n, bases), static_cast<std::uint64_t>(expected[n]));
      std::vector<std::int64_t> offsets(n + 1, -3);
      offsets[0] = 0;
      for (std::size_t c = chunks; c-- > 0;) {  // any order, as the workers take them
        streamkit::detail::radius_global_offsets(offsets.data(), row_ends.data(), streamkit::detail::chunk_at(n, chunk, c), bases[c]);
      }
      EXPECT_EQ(offsets, expected);
    }
  }
}

TEST(RadiusDispatchHost, BadArgumentsAreRejectedBeforeAnyCudaWork)
{
  using streamkit::detail::expect_host_radius_query;
  float const lat[2] = {0.1F, 0.2F};
  radius_options r;
  r.radius = 1.0;
  STREAMKIT_EXPECT_THROW_WITH(expect_host_radius_query(streamkit::points_ref<float>::separate(nullptr, lat, 2), r), std::invalid_argument,
                              "observations: null coordinates with a count of 2");
  streamkit::points_ref<float> zero_stride = streamkit::points_ref<float>::separate(lat, lat, 2);
  zero_stride.stride = 0;
  STREAMKIT_EXPECT_THROW_WITH(expect_host_radius_query(zero_stride, r), std::invalid_argument, "observations: stride must be positive");
  auto const obs = streamkit::points_ref<float>::separate(lat, lat, 2);
  r.radius = -1.0;
  STREAMKIT_EXPECT_THROW_WITH(expect_host_radius_query(obs, r), std::invalid_argument,
                              "radius.radius: must be at least 0 (infinity for every reference), got -1");
  r.radius = std::numeric_limits<double>::quiet_NaN();
  STREAMKIT_EXPECT_THROW_WITH(expect_host_radius_query(obs, r), std::invalid_argument, "radius.radius");
  std::vector<double> const radii{1.0, 2.0};
  r.radii = radii.data();  // host radii: the scalar is ignored
  EXPECT_NO_THROW(expect_host_radius_query(obs, r));
  EXPECT_NO_THROW(expect_host_radius_query(streamkit::points_ref<float>::separate(nullptr, nullptr, 0), r));
  streamkit::host_radius_result<std::int32_t, float> const empty;
  EXPECT_EQ(empty.rows(), 0U);
  EXPECT_EQ(empty.total(), 0U);
}

}  // namespace
