#pragma once
// Host facade of the nearest-neighbour search: validation, planning and launches.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace streamkit {
namespace detail {

template <class T>
void expect_points(points_ref<T> const& points, char const* argument)
{
  STREAMKIT_EXPECTS((points.latitude != nullptr && points.longitude != nullptr) || points.count == 0, std::invalid_argument,
                    std::string(argument) + ": null coordinates with a count of " + std::to_string(points.count));
  STREAMKIT_EXPECTS(points.stride > 0, std::invalid_argument, std::string(argument) + ": stride must be positive");
}

/// Throws std::invalid_argument naming the field unless `result` is a well-formed table of `n` rows
/// of k neighbours, 1 ≤ k ≤ `max_k`.
template <class Index, class T>
void expect_neighbors(neighbors_ref<Index, T> const& result, std::size_t n, std::size_t max_k)
{
  STREAMKIT_EXPECTS(result.count == n, std::invalid_argument,
                    "result.count: " + std::to_string(result.count) + " rows for " + std::to_string(n) + " observations");
  STREAMKIT_EXPECTS(result.k >= 1 && result.k <= max_k, std::invalid_argument,
                    "result.k: " + std::to_string(result.k) + " neighbours asked; this search answers k from 1 to " + std::to_string(max_k));
  STREAMKIT_EXPECTS(result.stride >= result.k || n <= 1, std::invalid_argument,
                    "result.stride: " + std::to_string(result.stride) + " is less than k = " + std::to_string(result.k));
  STREAMKIT_EXPECTS(result.index != nullptr || n == 0, std::invalid_argument,
                    "result.index: null with " + std::to_string(n) + " observations");
}

/// Throws unless every index of `m` references fits in Index.
template <class Index>
void expect_index_capacity(std::size_t m)
{
  STREAMKIT_EXPECTS(m == 0 || m - 1 <= static_cast<std::size_t>(std::numeric_limits<Index>::max()), std::invalid_argument,
                    "result.index: a " + std::to_string(sizeof(Index) * 8) + "-bit index cannot hold " + std::to_string(m) +
                      " references; use int64");
}

/// With invalid_points::reject, throws std::invalid_argument naming `argument` unless `invalid` is 0.
inline void expect_valid_points(nearest_options const& options, unsigned long long invalid, char const* argument)
{
  STREAMKIT_EXPECTS(options.on_invalid != invalid_points::reject || invalid == 0, std::invalid_argument,
                    std::string(argument) + ": " + std::to_string(invalid) +
                      " point(s) have a non-finite coordinate or a latitude outside [-90, 90] degrees");
}

inline std::size_t align_up(std::size_t bytes) noexcept { return (bytes + 255) / 256 * 256; }

/// Where a prepared reference set keeps its arrays in one allocation: float unit vectors, double ones
/// (exact mode only), double coordinates.
struct reference_layout {
  reference_layout(std::size_t m, bool exact) noexcept
      : precise_offset(align_up(m * sizeof(vec4<float>))),
        coordinates_offset(precise_offset + (exact ? align_up(m * sizeof(vec4<double>)) : 0)),
        bytes(coordinates_offset + m * sizeof(lat_lon)),
        exact(exact)
  {
  }
  template <class Byte>
  auto vectors(Byte* base) const noexcept
  {
    return reinterpret_cast<std::conditional_t<std::is_const_v<Byte>, vec4<float> const, vec4<float>>*>(base);
  }
  template <class Byte>
  auto precise(Byte* base) const noexcept
  {
    using vector = std::conditional_t<std::is_const_v<Byte>, vec4<double> const, vec4<double>>;
    return exact ? reinterpret_cast<vector*>(base + precise_offset) : nullptr;
  }
  template <class Byte>
  auto coordinates(Byte* base) const noexcept
  {
    return reinterpret_cast<std::conditional_t<std::is_const_v<Byte>, lat_lon const, lat_lon>*>(base + coordinates_offset);
  }
  std::size_t precise_offset;
  std::size_t coordinates_offset;
  std::size_t bytes;
  bool exact;
};

inline double distance_scale(nearest_options const& options)
{
  switch (options.unit) {
    case distance_unit::kilometres: return options.sphere_radius_km;
    case distance_unit::metres: return options.sphere_radius_km * 1000.0;
    default: return 1.0;
  }
}

}  // namespace detail

template <class T>
brute_force_index<T>::brute_force_index(points_ref<T> references, nearest_options const& options, stream_ref stream,
                                        device_resource_ref resource)
    : options_(options), resource_(resource)
{
  STREAMKIT_EXPECTS(options.sphere_radius_km > 0 && std::isfinite(options.sphere_radius_km), std::invalid_argument,
                    "options.sphere_radius_km: must be positive and finite, got " + std::to_string(options.sphere_radius_km));
  update(references, stream);
}

template <class T>
void brute_force_index<T>::update(points_ref<T> references, stream_ref stream)
{
  detail::expect_points(references, "references");
  STREAMKIT_EXPECTS(references.count > 0, std::invalid_argument, "references: the reference set is empty (M = 0)");
  using namespace detail;
  int const stream_device = stream.device();
  device_guard guard(stream_device);
  std::size_t const m = references.count;
  reference_layout const layout(m, options_.precision == nn_precision::exact);
  if (references_.size() < layout.bytes || stream_device != device_) {
    references_ = device_buffer<std::byte>(layout.bytes, stream, resource_);
    invalid_counts_ = device_buffer<unsigned long long>(2, stream, resource_);
    scratch_ = nearest_scratch();
  }
  device_ = stream_device;
  references_.set_stream(stream);
  invalid_counts_.set_stream(stream);
  count_ = m;
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(invalid_counts_.data(), 0, sizeof(unsigned long long), stream.value()));
  std::byte* const base = references_.data();
  prepare_references<T><<<grid_size("prepare_references", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    references, m, layout.vectors(base), layout.precise(base), layout.coordinates(base), invalid_counts_.data());
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
template <class Index>
void brute_force_index<T>::query_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream)
{
  query_async(observations, result, stream, scratch_);
  references_.set_stream(stream);  // the index's memory is released after its last query
}

template <class T>
template <class Index>
void brute_force_index<T>::query_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                       nearest_scratch& scratch) const
{
  expect_query(observations, result, stream);
  if (observations.count == 0) { return; }
  if (!scratch.partials_.empty() && scratch.partials_.device() != device_) { scratch.partials_ = device_buffer<std::byte>(); }
  if (options_.precision == nn_precision::exact) {
    search<double>(observations, result, stream, scratch);
  } else {
    search<float>(observations, result, stream, scratch);
  }
}

template <class T>
template <class V, class Index>
void brute_force_index<T>::search(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                  nearest_scratch& scratch) const
{
  using namespace detail;
  using shape = pass1_shape<V>;
  device_guard guard(device_);
  std::size_t const n = observations.count;

  int blocks_per_sm = 0;
  STREAMKIT_CUDA_TRY(
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, nearest_pass1<V, Index, T>, shape::threads, 0));
  int sm_count = 0;
  STREAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device_));
  nearest_plan const plan = plan_nearest(n, count_, std::size_t{shape::threads} * shape::obs_per_thread, shape::tile,
                                         static_cast<std::size_t>(blocks_per_sm) * static_cast<std::size_t>(sm_count));

  std::size_t const values_bytes = align_up(plan.slices * n * sizeof(V));
  std::size_t const scratch_bytes = values_bytes + plan.slices * n * sizeof(Index);
  if (scratch.partials_.size() < scratch_bytes) { scratch.partials_ = device_buffer<std::byte>(scratch_bytes, stream, resource_); }
  scratch.partials_.set_stream(stream);
  auto* partial_value = reinterpret_cast<V*>(scratch.partials_.data());
  auto* partial_index = reinterpret_cast<Index*>(scratch.partials_.data() + values_bytes);
  reference_layout const layout(count_, options_.precision == nn_precision::exact);
  std::byte const* const base = references_.data();

  dim3 const grid(plan.obs_blocks, plan.slices);
  nearest_pass1<V, Index, T><<<grid, shape::threads, 0, stream.value()>>>(
    observations, n, layout.vectors(base), layout.precise(base), count_, plan.slice_length, partial_value, partial_index);
  STREAMKIT_CHECK_LAUNCH();
  nearest_pass2<V, Index, T><<<grid_size("nearest_pass2", n, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    observations, n, layout.coordinates(base), plan.slices, partial_value, partial_index, result, distance_scale(options_));
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
template <class Index>
void brute_force_index<T>::expect_query(points_ref<T> const& observations, neighbors_ref<Index, T> const& result,
                                        stream_ref stream) const
{
  STREAMKIT_EXPECTS(count_ > 0, std::logic_error, "brute_force_index: query of a moved-from index");
  detail::expect_points(observations, "observations");
  detail::expect_neighbors(result, observations.count, 1);
  detail::expect_index_capacity<Index>(count_);
  if (observations.count == 0) { return; }
  int const stream_device = stream.device();
  STREAMKIT_EXPECTS(stream_device == device_, std::invalid_argument,
                    "stream: belongs to device " + std::to_string(stream_device) + " but the reference set to device " +
                      std::to_string(device_));
}

template <class T>
template <class Index>
void brute_force_index<T>::query(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream)
{
  expect_query(observations, result, stream);
  if (options_.on_invalid == invalid_points::reject && observations.count > 0) {
    // The one place that waits before the search: reject means nothing is written.
    using namespace detail;
    device_guard guard(device_);
    unsigned long long* const observations_count = invalid_counts_.data() + 1;
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(observations_count, 0, sizeof(unsigned long long), stream.value()));
    count_invalid_points<T><<<grid_size("count_invalid_points", observations.count, 256, grid_stride_blocks), 256, 0,
                              stream.value()>>>(observations, observations.count, observations_count);
    STREAMKIT_CHECK_LAUNCH();
    unsigned long long invalid[2] = {0, 0};
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(invalid, invalid_counts_.data(), sizeof invalid, cudaMemcpyDeviceToHost, stream.value()));
    stream.sync();
    detail::expect_valid_points(options_, invalid[0], "references");
    detail::expect_valid_points(options_, invalid[1], "observations");
  }
  query_async(observations, result, stream);
  stream.sync();
}

template <class T, class Index>
void nearest_neighbor_async(points_ref<T> observations, points_ref<T> references, neighbors_ref<Index, T> result,
                            nearest_options const& options, stream_ref stream, device_resource_ref resource)
{
  brute_force_index<T> index(references, options, stream, resource);
  index.query_async(observations, result, stream);
}

template <class T, class Index>
void nearest_neighbor(points_ref<T> observations, points_ref<T> references, neighbors_ref<Index, T> result,
                      nearest_options const& options, stream_ref stream, device_resource_ref resource)
{
  brute_force_index<T> index(references, options, stream, resource);
  index.query(observations, result, stream);
}

}  // namespace streamkit
