#pragma once
// Device-side helpers of the k-nearest-neighbour tests (test_knn.cu, test_hostile.cu): points uploaded
// with the CPU view of them, poisoned result tables, one search through each engine or the front end,
// and the checks of a result against the float64 CPU reference of nearest_reference.hpp.

#include "gpu_test.hpp"
#include "spatial/nearest_reference.hpp"
#include "test_support.hpp"

#include <streamkit/core/stream.hpp>
#include <streamkit/spatial/detail/engine_choice.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace streamkit_test {

using streamkit::angle_unit;
using streamkit::nn_precision;
using streamkit::search_engine;

/// Points on the device and as the kernels see them.
template <class T>
struct uploaded {
  std::vector<streamkit::device_buffer<T>> buffers;
  streamkit::points_ref<T> points;
  radians_set seen;

  [[nodiscard]] std::size_t size() const { return points.count; }
  /// The first `count` points: a sub-view of the same device memory, with its CPU view.
  [[nodiscard]] std::pair<streamkit::points_ref<T>, radians_set> prefix(std::size_t count) const
  {
    streamkit::points_ref<T> view = points;
    view.count = count;
    radians_set part{std::vector<double>(seen.lat.begin(), seen.lat.begin() + static_cast<std::ptrdiff_t>(count)),
                     std::vector<double>(seen.lon.begin(), seen.lon.begin() + static_cast<std::ptrdiff_t>(count)),
                     std::vector<char>(seen.valid.begin(), seen.valid.begin() + static_cast<std::ptrdiff_t>(count))};
    return {view, std::move(part)};
  }
  /// Points [first, first + count) as a sub-view.
  [[nodiscard]] streamkit::points_ref<T> rows(std::size_t first, std::size_t count) const
  {
    streamkit::points_ref<T> view = points;
    view.latitude += first * view.stride;
    view.longitude += first * view.stride;
    view.count = count;
    return view;
  }
};

template <class T>
uploaded<T> upload(point_set const& p, angle_unit unit, bool interleaved, streamkit::stream const& s)
{
  std::vector<T> const la = converted<T>(p.lat, unit);
  std::vector<T> const lo = converted<T>(p.lon, unit);
  uploaded<T> out;
  out.seen = as_seen(la, lo, unit);
  if (interleaved) {
    std::vector<T> both(2 * p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      both[2 * i] = la[i];
      both[2 * i + 1] = lo[i];
    }
    out.buffers.push_back(to_device(both, s));
    out.points = streamkit::points_ref<T>::interleaved(out.buffers[0].data(), p.size(), unit);
  } else {
    out.buffers.push_back(to_device(la, s));
    out.buffers.push_back(to_device(lo, s));
    out.points = streamkit::points_ref<T>::separate(out.buffers[0].data(), out.buffers[1].data(), p.size(), unit);
  }
  return out;
}

/// A result table of n rows of k (row stride `stride`) on the device, poisoned.
template <class Index, class T>
struct poisoned_result {
  poisoned_result(std::size_t n, std::size_t k_, std::size_t stride_, streamkit::stream const& s)
      : index(to_device(std::vector<Index>(n * stride_, static_cast<Index>(streamkit_test::poison_index)), s)),
        distance(to_device(std::vector<T>(n * stride_, static_cast<T>(streamkit_test::poison_distance)), s)),
        count(n),
        k(k_),
        stride(stride_)
  {
  }
  [[nodiscard]] streamkit::neighbors_ref<Index, T> ref(unsigned long long* invalid_count = nullptr)
  {
    return {index.data(), distance.data(), count, k, stride, invalid_count};
  }
  /// Rows [first, first + rows) as a sub-view.
  [[nodiscard]] streamkit::neighbors_ref<Index, T> rows(std::size_t first, std::size_t rows_)
  {
    return {index.data() + first * stride, distance.data() + first * stride, rows_, k, stride, nullptr};
  }
  streamkit::device_buffer<Index> index;
  streamkit::device_buffer<T> distance;
  std::size_t count, k, stride;
};

template <class Index, class T>
struct host_result {
  std::vector<Index> index;
  std::vector<T> distance;
};

template <class Index, class T>
host_result<Index, T> fetch(poisoned_result<Index, T> const& result, streamkit::stream const& s)
{
  return {to_host(result.index, s), to_host(result.distance, s)};
}

enum class engine { brute_force, tree, front_end, one_shot };

inline char const* name_of(engine e)
{
  switch (e) {
    case engine::brute_force: return "brute_force_index";
    case engine::tree: return "tree_index";
    case engine::front_end: return "nearest_index";
    case engine::one_shot: return "nearest_neighbor";
  }
  return "?";
}

inline char const* name_of(search_engine e) { return e == search_engine::tree ? "tree" : "brute_force"; }

/// The engine that answers a search of n × m with k neighbours through `e`.
inline search_engine engine_behind(engine e, std::size_t n, std::size_t m, std::size_t k, nn_precision precision)
{
  switch (e) {
    case engine::brute_force: return search_engine::brute_force;
    case engine::tree: return search_engine::tree;
    default: return streamkit::detail::choose_engine(n, m, k, precision);
  }
}

inline streamkit::nearest_options options_with(nn_precision precision)
{
  streamkit::nearest_options options;
  options.precision = precision;
  return options;
}

/// One blocking search of `observations` against `references` through `e`, into a fresh poisoned table;
/// `answered_by`, when given, receives the engine that answered (for the front end, its engine_for()).
template <class Index, class T>
host_result<Index, T> search(engine e, streamkit::points_ref<T> observations, streamkit::points_ref<T> references, std::size_t k,
                             std::size_t stride, streamkit::nearest_options const& options, streamkit::stream const& s,
                             search_engine* answered_by = nullptr)
{
  poisoned_result<Index, T> out(observations.count, k, stride, s);
  search_engine used = streamkit::detail::choose_engine(observations.count, references.count, k, options.precision);
  switch (e) {
    case engine::brute_force: {
      streamkit::brute_force_index<T> index(references, options, s);
      index.query(observations, out.ref(), s);
      used = search_engine::brute_force;
      break;
    }
    case engine::tree: {
      streamkit::tree_index<T> index(references, options, s);
      index.query(observations, out.ref(), s);
      used = search_engine::tree;
      break;
    }
    case engine::front_end: {
      streamkit::nearest_index<T> index(references, options, s);
      EXPECT_STREQ(name_of(index.engine_for(observations.count, k)), name_of(used));
      used = index.engine_for(observations.count, k);
      index.query(observations, out.ref(), s);
      break;
    }
    case engine::one_shot: streamkit::nearest_neighbor(observations, references, out.ref(), options, s); break;
  }
  if (answered_by != nullptr) { *answered_by = used; }
  return fetch(out, s);
}

/// Checks a result answered by the engine `answered_by` against the CPU reference: expect_knn, or for
/// k = 1 answered by the brute force in fast mode (float32 ranking) the fast-mode bound of
/// expect_nearest on the first column.
template <class Index, class T>
void check(host_result<Index, T> const& got, knn_answer const& expected, radians_set const& obs, radians_set const& refs,
           std::size_t k, std::size_t stride, search_engine answered_by, streamkit::nearest_options const& options)
{
  double const scale = streamkit::detail::distance_scale(options);
  double const max_angle = options.max_distance / scale;
  if (k == 1 && options.precision == nn_precision::fast && answered_by == search_engine::brute_force) {
    ASSERT_EQ(options.max_distance, std::numeric_limits<double>::infinity()) << "fast k = 1 is checked without a distance limit";
    std::vector<Index> column_index(obs.size());
    std::vector<T> column_distance(obs.size());
    for (std::size_t i = 0; i < obs.size(); ++i) {
      column_index[i] = got.index[i * stride];
      column_distance[i] = got.distance[i * stride];
    }
    streamkit_test::expect_nearest(obs, refs, column_index, column_distance, nn_precision::fast, scale);
    streamkit_test::expect_padding_untouched(got.index, got.distance, k, stride);
    return;
  }
  expect_knn(expected, obs, refs, got.index, got.distance, k, stride, scale, max_angle);
}

/// Checks a result of `e` against the CPU reference (check() above, with the engine the cost model
/// puts behind `e` for the shape).
template <class Index, class T>
void check(host_result<Index, T> const& got, knn_answer const& expected, radians_set const& obs, radians_set const& refs,
           std::size_t k, std::size_t stride, engine e, streamkit::nearest_options const& options)
{
  check(got, expected, obs, refs, k, stride, engine_behind(e, obs.size(), refs.size(), k, options.precision), options);
}

/// Writes the float64 unit vector of each point as the search kernels compute it (load_point, unit_vector).
template <class T>
__global__ void device_unit_vectors_kernel(streamkit::points_ref<T> points, streamkit::detail::vec4<double>* out)
{
  std::size_t const i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i >= points.count) { return; }
  double lat = 0.0, lon = 0.0;
  bool const valid = streamkit::detail::load_point(points, i, lat, lon);
  out[i] = streamkit::detail::unit_vector<double>(lat, lon, valid);
}

/// The float64 unit vectors the search kernels rank `points` with, on the host.
template <class T>
std::vector<streamkit::detail::vec4<double>> device_unit_vectors(streamkit::points_ref<T> const& points, streamkit::stream const& s)
{
  streamkit::device_buffer<streamkit::detail::vec4<double>> out(points.count, s);
  if (points.count > 0) {
    device_unit_vectors_kernel<T><<<static_cast<unsigned>((points.count + 255) / 256), 256, 0, s.value()>>>(points, out.data());
    STREAMKIT_CHECK_LAUNCH();
  }
  return to_host(out, s);
}

/// The float64 squared chord between two such vectors, bit for bit as the kernels' chord2 computes it.
inline double device_chord2(streamkit::detail::vec4<double> const& p, streamkit::detail::vec4<double> const& q)
{
  double const dx = p.x - q.x, dy = p.y - q.y, dz = p.z - q.z;
  return std::fma(dx, dx, std::fma(dy, dy, dz * dz));
}

/// The near-tie bound tree_index.cuh documents (a relative 2^-48 in squared chord), written out rather
/// than read from the kernels' tree_near_tie, so that a walk that skips more fails the tests.
inline constexpr double documented_near_tie = 0x1.0p-48;

/// Whether squared chords a and b are within documented_near_tie of each other (a long walk skips a box
/// only when every reference in it lies above (1 − tree_near_tie) times its worst entry, that product
/// rounded once).
inline bool within_near_tie(double a, double b)
{
  double const low = std::min(a, b), high = std::max(a, b);
  return high * (1.0 - documented_near_tie) * (1.0 - 0x1.0p-52) <= low;
}

/// Requires the same indices in the same slots (the engines rank by the same float64 values).
template <class Index, class T>
void expect_same_indices(host_result<Index, T> const& a, host_result<Index, T> const& b, char const* what)
{
  ASSERT_EQ(a.index.size(), b.index.size()) << what;
  std::size_t differ = 0;
  for (std::size_t e = 0; e < a.index.size(); ++e) {
    if (a.index[e] != b.index[e] && differ++ < 10) {
      ADD_FAILURE() << what << ": element " << e << " is " << a.index[e] << " and " << b.index[e];
    }
  }
  EXPECT_EQ(differ, 0U) << what << ": indices differ";
}

/// Requires identical indices and bit-identical distances (NaN where NaN).
template <class Index, class T>
void expect_identical(host_result<Index, T> const& a, host_result<Index, T> const& b, char const* what)
{
  expect_same_indices(a, b, what);
  ASSERT_EQ(a.distance.size(), b.distance.size()) << what;
  std::size_t differ = 0;
  for (std::size_t e = 0; e < a.distance.size(); ++e) {
    bool const same = (std::isnan(a.distance[e]) && std::isnan(b.distance[e])) || a.distance[e] == b.distance[e];
    if (!same && differ++ < 10) { ADD_FAILURE() << what << ": distance " << e << " is " << a.distance[e] << " and " << b.distance[e]; }
  }
  EXPECT_EQ(differ, 0U) << what << ": distances differ";
}

}  // namespace streamkit_test
