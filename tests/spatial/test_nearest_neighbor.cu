// Haversine nearest neighbour against a float64 CPU brute force.
#include "gpu_test.hpp"
#include "spin_kernel.cuh"
#include "spatial/nearest_reference.hpp"
#include "test_support.hpp"

#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/core/stream.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

using streamkit::angle_unit;
using streamkit::nn_precision;
using streamkit_test::add_cluster;
using streamkit_test::as_seen;
using streamkit_test::converted;
using streamkit_test::point_set;
using streamkit_test::radians_set;
using streamkit_test::to_device;
using streamkit_test::uniform_points;
using streamkit_test::to_host;

struct case_options {
  nn_precision precision = nn_precision::fast;
  angle_unit unit = angle_unit::degrees;
  bool interleaved = false;
};

/// Runs the GPU search on `obs` × `refs` and checks every output against the brute force.
template <class T, class Index>
void check_search(point_set const& obs, point_set const& refs, case_options const& options)
{
  streamkit::stream const s(0);
  auto const upload = [&](point_set const& p, std::vector<streamkit::device_buffer<T>>& keep, radians_set& seen) {
    std::vector<T> const la = converted<T>(p.lat, options.unit);
    std::vector<T> const lo = converted<T>(p.lon, options.unit);
    seen = as_seen(la, lo, options.unit);
    if (options.interleaved) {
      std::vector<T> both(2 * p.size());
      for (std::size_t i = 0; i < p.size(); ++i) {
        both[2 * i] = la[i];
        both[2 * i + 1] = lo[i];
      }
      keep.push_back(to_device(both, s));
      return streamkit::points_ref<T>::interleaved(keep.back().data(), p.size(), options.unit);
    }
    keep.push_back(to_device(la, s));
    keep.push_back(to_device(lo, s));
    return streamkit::points_ref<T>::separate(keep[keep.size() - 2].data(), keep.back().data(), p.size(), options.unit);
  };
  std::vector<streamkit::device_buffer<T>> keep_obs, keep_refs;
  keep_obs.reserve(2);
  keep_refs.reserve(2);
  radians_set seen_obs, seen_refs;
  auto const obs_ref = upload(obs, keep_obs, seen_obs);
  auto const refs_ref = upload(refs, keep_refs, seen_refs);

  // Poison the outputs so unwritten elements are caught.
  auto index = to_device(std::vector<Index>(obs.size(), Index{-7}), s);
  auto distance = to_device(std::vector<T>(obs.size(), T(-12345)), s);
  streamkit::nearest_options nn;
  nn.precision = options.precision;
  streamkit::brute_force_index<T> prepared(refs_ref, nn, s);
  prepared.query(obs_ref, streamkit::neighbors_ref<Index, T>::dense(index.data(), distance.data(), obs_ref.count), s);
  std::vector<Index> const got_index = to_host(index, s);
  std::vector<T> const got_distance = to_host(distance, s);

  streamkit_test::expect_nearest(seen_obs, seen_refs, got_index, got_distance, options.precision, 1.0);
}

class NearestNeighbor : public ::testing::Test {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::mt19937_64 rng{streamkit_test::fresh_seed()};
};

TEST_F(NearestNeighbor, UniformPointsFloatFast)
{
  check_search<float, std::int32_t>(uniform_points(3037, rng), uniform_points(5013, rng), {});
}

TEST_F(NearestNeighbor, UniformPointsDoubleExactInterleavedRadians)
{
  check_search<double, std::int64_t>(uniform_points(2011, rng), uniform_points(4099, rng),
                                     {nn_precision::exact, angle_unit::radians, true});
}

TEST_F(NearestNeighbor, FloatInputsExactMode)
{
  check_search<float, std::int32_t>(uniform_points(1000, rng), uniform_points(3000, rng), {nn_precision::exact});
}

TEST_F(NearestNeighbor, DoubleInputsFastModeRadians)
{
  check_search<double, std::int32_t>(uniform_points(777, rng), uniform_points(1500, rng), {nn_precision::fast, angle_unit::radians});
}

TEST_F(NearestNeighbor, SingleObservationAndSingleReference)
{
  check_search<float, std::int32_t>(uniform_points(1, rng), uniform_points(1, rng), {});
  check_search<float, std::int32_t>(uniform_points(1, rng), uniform_points(999, rng), {});
  check_search<float, std::int32_t>(uniform_points(2049, rng), uniform_points(1, rng), {});
}

TEST_F(NearestNeighbor, FewObservationsManyReferencesUseManySlices)
{
  check_search<float, std::int32_t>(uniform_points(97, rng), uniform_points(150001, rng), {});
  check_search<double, std::int64_t>(uniform_points(33, rng), uniform_points(70001, rng), {nn_precision::exact});
}

TEST_F(NearestNeighbor, TightClustersAcrossTheAntimeridianAndAtThePoles)
{
  point_set obs, refs;
  for (auto const& [lat, lon] : std::vector<std::pair<double, double>>{{0.0, 180.0}, {51.5, -0.1}, {-33.9, 151.2},
                                                                        {89.999, 0.0}, {-90.0, 45.0}, {12.3, -179.9999}}) {
    for (double radius : {100.0, 1000.0}) {
      add_cluster(obs, lat, lon, radius, 400, rng);
      add_cluster(refs, lat, lon, radius, 500, rng);
    }
  }
  obs.add(90.0, 0.0);
  obs.add(-90.0, 123.0);
  refs.add(90.0, -77.0);
  check_search<float, std::int32_t>(obs, refs, {});
  check_search<double, std::int32_t>(obs, refs, {nn_precision::exact});
}

TEST_F(NearestNeighbor, DuplicateReferencesResolveToTheSmallestIndex)
{
  point_set refs = uniform_points(700, rng);
  for (std::size_t j = 0; j < 700; ++j) { refs.add(refs.lat[j], refs.lon[j]); }
  point_set obs = uniform_points(1500, rng);
  for (std::size_t j = 0; j < 700; j += 7) { obs.add(refs.lat[j], refs.lon[j]); }  // exactly on a reference
  for (auto precision : {nn_precision::fast, nn_precision::exact}) {
    streamkit::stream const s(0);
    auto const la = to_device(converted<float>(refs.lat, angle_unit::degrees), s);
    auto const lo = to_device(converted<float>(refs.lon, angle_unit::degrees), s);
    auto const ola = to_device(converted<float>(obs.lat, angle_unit::degrees), s);
    auto const olo = to_device(converted<float>(obs.lon, angle_unit::degrees), s);
    auto index = to_device(std::vector<std::int32_t>(obs.size(), -7), s);
    streamkit::nearest_options options;
    options.precision = precision;
    streamkit::nearest_neighbor_async(streamkit::points_ref<float>::separate(ola.data(), olo.data(), obs.size(), angle_unit::degrees),
                                      streamkit::points_ref<float>::separate(la.data(), lo.data(), refs.size(), angle_unit::degrees),
                                      streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), nullptr, obs.size()), options, s);
    auto const got = to_host(index, s);
    for (std::size_t i = 0; i < obs.size(); ++i) {
      ASSERT_GE(got[i], 0) << i;
      ASSERT_LT(got[i], 700) << "observation " << i << " got the second copy " << got[i];
    }
  }
}

TEST_F(NearestNeighbor, ResultsDoNotDependOnTheReferenceCountSplit)
{
  // Same observations against a reference set and its prefix: where the nearest lies in the
  // prefix, both answers must agree exactly (slicing differs between the two runs).
  point_set const refs = uniform_points(60000, rng);
  point_set prefix;
  for (std::size_t j = 0; j < 20000; ++j) { prefix.add(refs.lat[j], refs.lon[j]); }
  point_set const obs = uniform_points(5000, rng);
  streamkit::stream const s(0);
  auto run = [&](point_set const& r) {
    auto const la = to_device(converted<float>(r.lat, angle_unit::degrees), s);
    auto const lo = to_device(converted<float>(r.lon, angle_unit::degrees), s);
    auto const ola = to_device(converted<float>(obs.lat, angle_unit::degrees), s);
    auto const olo = to_device(converted<float>(obs.lon, angle_unit::degrees), s);
    auto index = to_device(std::vector<std::int32_t>(obs.size(), -7), s);
    streamkit::nearest_neighbor_async(streamkit::points_ref<float>::separate(ola.data(), olo.data(), obs.size(), angle_unit::degrees),
                                      streamkit::points_ref<float>::separate(la.data(), lo.data(), r.size(), angle_unit::degrees),
                                      streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), nullptr, obs.size()), {}, s);
    return to_host(index, s);
  };
  auto const full = run(refs);
  auto const part = run(prefix);
  std::size_t compared = 0;
  for (std::size_t i = 0; i < obs.size(); ++i) {
    if (full[i] < 20000) {
      EXPECT_EQ(full[i], part[i]) << i;
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000U);
}

TEST_F(NearestNeighbor, DistanceUnits)
{
  streamkit::stream const s(0);
  std::vector<double> const lat{0.0, 10.0};
  std::vector<double> const lon{0.0, 20.0};
  auto const la = to_device(lat, s);
  auto const lo = to_device(lon, s);
  for (auto unit : {streamkit::distance_unit::radians, streamkit::distance_unit::kilometres, streamkit::distance_unit::metres}) {
    auto index = to_device(std::vector<std::int32_t>(1, -7), s);
    auto distance = to_device(std::vector<double>(1, -1.0), s);
    streamkit::nearest_options options;
    options.unit = unit;
    auto const pts = streamkit::points_ref<double>::separate(la.data(), lo.data(), 2, angle_unit::degrees);
    auto const obs = streamkit::points_ref<double>::separate(la.data() + 1, lo.data() + 1, 1, angle_unit::degrees);
    streamkit::points_ref<double> const first_only{pts.latitude, pts.longitude, 1, 1, angle_unit::degrees};
    streamkit::brute_force_index<double> prepared(first_only, options, s);
    prepared.query(obs, streamkit::neighbors_ref<std::int32_t, double>::dense(index.data(), distance.data(), 1), s);
    double const radians = streamkit::haversine(0.0, 0.0, streamkit::radians_from_degrees(10.0), streamkit::radians_from_degrees(20.0));
    double const scale = unit == streamkit::distance_unit::radians ? 1.0
                       : unit == streamkit::distance_unit::kilometres ? streamkit::earth_radius_km
                                                                        : streamkit::earth_radius_km * 1000.0;
    EXPECT_EQ(to_host(index, s)[0], 0);
    EXPECT_NEAR(to_host(distance, s)[0], radians * scale, 1e-12 * scale);
  }
}

TEST_F(NearestNeighbor, InvalidPointsAreRejectedWithTheirCountOrMarked)
{
  streamkit::stream const s(0);
  std::vector<float> lat{10.0F, 95.0F, NAN, -20.0F, 0.0F};
  std::vector<float> lon{0.0F, 0.0F, 0.0F, INFINITY, 179.0F};
  auto const la = to_device(lat, s);
  auto const lo = to_device(lon, s);
  auto const bad = streamkit::points_ref<float>::separate(la.data(), lo.data(), lat.size(), angle_unit::degrees);
  auto const good = streamkit::points_ref<float>::separate(la.data(), lo.data(), 1, angle_unit::degrees);
  auto index = to_device(std::vector<std::int32_t>(lat.size(), -7), s);
  auto distance = to_device(std::vector<float>(lat.size(), -1.0F), s);
  auto const out = streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), lat.size());
  auto const first_row = streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), 1);

  // Blocking queries with reject (the default) count, wait and throw before writing anything.
  streamkit::brute_force_index<float> bad_references(bad, {}, s);
  STREAMKIT_EXPECT_THROW_WITH(bad_references.query(good, first_row, s), std::invalid_argument,
                              "references: 3 point(s) have a non-finite coordinate or a latitude outside");
  streamkit::brute_force_index<float> strict(good, {}, s);
  STREAMKIT_EXPECT_THROW_WITH(strict.query(bad, out, s), std::invalid_argument, "observations: 3 point(s)");
  EXPECT_EQ(to_host(index, s), std::vector<std::int32_t>(lat.size(), -7)) << "a rejected query wrote an index";
  STREAMKIT_EXPECT_THROW_WITH(streamkit::nearest_neighbor(bad, good, out, {}, s), std::invalid_argument, "observations: 3 point(s)");
  // query_async marks with either policy and counts on the device.
  auto count = to_device(std::vector<unsigned long long>{0}, s);
  strict.query_async(bad, streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), lat.size(), 1, count.data()), s);
  EXPECT_EQ(to_host(count, s)[0], 3U);
  EXPECT_EQ(to_host(index, s), (std::vector<std::int32_t>{0, -1, -1, -1, 0}));
  unsigned long long invalid_references = 0;
  ASSERT_EQ(cudaMemcpy(&invalid_references, bad_references.invalid_references(), sizeof invalid_references, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(invalid_references, 3U);

  streamkit::nearest_options marking;
  marking.on_invalid = streamkit::invalid_points::mark;
  streamkit::brute_force_index<float> lenient(bad, marking, s);  // references 1..3 are never chosen
  lenient.query(bad, out, s);
  auto const got_index = to_host(index, s);
  auto const got_distance = to_host(distance, s);
  std::vector<std::int32_t> const expected{0, -1, -1, -1, 4};
  for (std::size_t i = 0; i < lat.size(); ++i) {
    EXPECT_EQ(got_index[i], expected[i]) << i;
    EXPECT_EQ(std::isnan(got_distance[i]), expected[i] < 0) << i;
  }
  // Only invalid references: every observation is marked.
  streamkit::brute_force_index<float> none_valid(streamkit::points_ref<float>::separate(la.data() + 1, lo.data() + 1, 3,
                                                                                      angle_unit::degrees),
                                               marking, s);
  none_valid.query(good, first_row, s);
  EXPECT_EQ(to_host(index, s)[0], -1);
}

TEST_F(NearestNeighbor, AsyncCallsNeverWaitForTheDevice)
{
  // Behind a 200 ms kernel, with invalid points and the reject policy: preparation, query_async and
  // nearest_neighbor_async return at once (before this change they waited for the stream to count
  // the invalid points, then threw).
  streamkit::stream const s(0);
  std::vector<float> lat{10.0F, 95.0F, -20.0F};
  std::vector<float> lon{0.0F, 0.0F, 30.0F};
  auto const la = to_device(lat, s);
  auto const lo = to_device(lon, s);
  auto index = to_device(std::vector<std::int32_t>(3, -7), s);
  auto count = to_device(std::vector<unsigned long long>{0}, s);
  auto const points = streamkit::points_ref<float>::separate(la.data(), lo.data(), 3, angle_unit::degrees);
  auto const out = streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), nullptr, 3, 1, count.data());
  s.sync();
  streamkit_test::spin_then_increment<<<1, 32, 0, s.value()>>>(10 * streamkit_test::twenty_ms, nullptr);
  ASSERT_EQ(cudaPeekAtLastError(), cudaSuccess);
  auto const start = std::chrono::steady_clock::now();
  streamkit::brute_force_index<float> prepared(points, {}, s);
  prepared.query_async(points, out, s);
  streamkit::nearest_neighbor_async(points, points, out, {}, s);
  double const waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.ready()) << "the calls returned after the 200 ms kernel: they waited";
  EXPECT_LT(waited, 0.1);
  EXPECT_EQ(to_host(count, s)[0], 2U) << "one invalid observation per query";
  EXPECT_EQ(to_host(index, s), (std::vector<std::int32_t>{0, -1, 2}));
}

TEST_F(NearestNeighbor, ZeroObservationsIsANoOpAndBadArgumentsThrow)
{
  streamkit::stream const s(0);
  auto const la = to_device(std::vector<float>{1.0F}, s);
  streamkit::brute_force_index<float> prepared(streamkit::points_ref<float>::separate(la.data(), la.data(), 1), {}, s);
  prepared.query(streamkit::points_ref<float>::separate(nullptr, nullptr, 0), streamkit::neighbors_ref<std::int32_t, float>{}, s);
  STREAMKIT_EXPECT_THROW_WITH(
    prepared.query(streamkit::points_ref<float>::separate(la.data(), la.data(), 1), streamkit::neighbors_ref<std::int32_t, float>::dense(nullptr, nullptr, 1), s),
    std::invalid_argument, "result.index: null with 1 observations");
  streamkit::brute_force_index<float> moved(std::move(prepared));
  std::int32_t* const no_index = nullptr;
  STREAMKIT_EXPECT_THROW_WITH(prepared.query(streamkit::points_ref<float>::separate(la.data(), la.data(), 1),  // NOLINT: moved-from under test
                                             streamkit::neighbors_ref<std::int32_t, float>::dense(no_index, nullptr, 1), s),
                              std::logic_error, "query of a moved-from index");
  auto d_index = to_device(std::vector<std::int32_t>{-1}, s);
  moved.query(streamkit::points_ref<float>::separate(la.data(), la.data(), 1), streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), nullptr, 1), s);
  EXPECT_EQ(to_host(d_index, s), std::vector<std::int32_t>{0});
  if (streamkit::device_count() > 1) {
    streamkit::stream const other(1);
    STREAMKIT_EXPECT_THROW_WITH(moved.query(streamkit::points_ref<float>::separate(la.data(), la.data(), 1),
                                            streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), nullptr, 1), other),
                                std::invalid_argument, "stream: belongs to device 1 but the reference set to device 0");
  }
}

// Host-side checks: they run without a GPU.

TEST(NearestNeighborHost, EmptyReferenceSetIsRejectedBeforeAnyCudaCall)
{
  float const x = 0.0F;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::brute_force_index<float>(streamkit::points_ref<float>::separate(&x, &x, 0), {},
                                                                streamkit::stream_ref::per_thread_default()),
                              std::invalid_argument, "references: the reference set is empty (M = 0)");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::brute_force_index<float>(streamkit::points_ref<float>::separate(nullptr, &x, 5), {},
                                                                streamkit::stream_ref::per_thread_default()),
                              std::invalid_argument, "references: null coordinates with a count of 5");
  streamkit::nearest_options bad_radius;
  bad_radius.sphere_radius_km = -1.0;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::brute_force_index<float>(streamkit::points_ref<float>::separate(&x, &x, 1), bad_radius,
                                                                streamkit::stream_ref::per_thread_default()),
                              std::invalid_argument, "options.sphere_radius_km");
}

TEST(NearestNeighborHost, OneShotSearchOfZeroObservationsPreparesNothing)
{
  // No GPU is needed: the call returns after its checks, before any allocation, launch or stream use.
  float const x = 0.0F;
  auto const references = streamkit::points_ref<float>::separate(&x, &x, 1);
  auto const none = streamkit::points_ref<float>::separate(nullptr, nullptr, 0);
  EXPECT_NO_THROW(streamkit::nearest_neighbor(none, references, streamkit::neighbors_ref<std::int32_t, float>{}, {},
                                              streamkit::stream_ref::per_thread_default()));
  EXPECT_NO_THROW(streamkit::nearest_neighbor_async(none, references, streamkit::neighbors_ref<std::int32_t, float>::dense(nullptr, nullptr, 0, 8),
                                                    {}, streamkit::stream_ref::per_thread_default()));
}

TEST(NearestNeighborHost, IndexTypeMustHoldEveryReference)
{
  EXPECT_NO_THROW(streamkit::detail::expect_index_capacity<std::int32_t>(std::size_t{1} << 31));
  STREAMKIT_EXPECT_THROW_WITH(streamkit::detail::expect_index_capacity<std::int32_t>((std::size_t{1} << 31) + 1),
                              std::invalid_argument, "a 32-bit index cannot hold 2147483649 references; use int64");
  EXPECT_NO_THROW(streamkit::detail::expect_index_capacity<std::int64_t>((std::size_t{1} << 40)));
}

TEST(Haversine, KnownDistances)
{
  using streamkit::haversine;
  using streamkit::radians_from_degrees;
  EXPECT_DOUBLE_EQ(haversine(0, 0, 0, 0), 0.0);
  EXPECT_NEAR(haversine(0, 0, 0, streamkit::pi), streamkit::pi, 1e-15);
  EXPECT_NEAR(haversine(streamkit::pi / 2, 0, -streamkit::pi / 2, 0), streamkit::pi, 1e-15);
  EXPECT_NEAR(haversine(0, radians_from_degrees(179.5), 0, radians_from_degrees(-179.5)), radians_from_degrees(1.0), 1e-15);
  // Paris to London, about 343.9 km on the mean sphere.
  double const km = haversine(radians_from_degrees(48.8566), radians_from_degrees(2.3522), radians_from_degrees(51.5074),
                              radians_from_degrees(-0.1278)) * streamkit::earth_radius_km;
  EXPECT_NEAR(km, 343.9, 0.5);
  // 1 cm apart is still resolved.
  double const one_cm = 0.01 / (streamkit::earth_radius_km * 1000.0);
  EXPECT_NEAR(haversine(0.3, 0.4, 0.3 + one_cm, 0.4), one_cm, 1e-16);  // input rounding of 0.3 + one_cm
}

}  // namespace
