#pragma once
// The brute-force engine's memory and passes (brute_force_index.cuh): validation, planning and launches.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/spatial/detail/brute_force_knn_kernels.cuh>
#include <streamkit/spatial/detail/index_core.cuh>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_launch.cuh>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius_queries.cuh>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace streamkit {
namespace detail {

/// Where a prepared reference set keeps its arrays in one allocation: float unit vectors, double ones
/// (exact k = 1 and every k > 1 rank in float64), double coordinates.
struct reference_layout {
  explicit reference_layout(std::size_t m) noexcept
      : precise_offset(align_up(m * sizeof(vec4<float>))),
        coordinates_offset(precise_offset + align_up(m * sizeof(vec4<double>))),
        bytes(coordinates_offset + m * sizeof(lat_lon))
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
    return reinterpret_cast<std::conditional_t<std::is_const_v<Byte>, vec4<double> const, vec4<double>>*>(base + precise_offset);
  }
  template <class Byte>
  auto coordinates(Byte* base) const noexcept
  {
    return reinterpret_cast<std::conditional_t<std::is_const_v<Byte>, lat_lon const, lat_lon>*>(base + coordinates_offset);
  }
  std::size_t precise_offset;
  std::size_t coordinates_offset;
  std::size_t bytes;
};

/// The brute-force engine (brute_force_index) on engine_core: its prepared references and the passes
/// of its queries.
template <class T>
class brute_force_engine : public index_core<T> {
 protected:
  static constexpr char const* name = "brute_force_index";
  static constexpr std::size_t max_query_observations = static_cast<std::size_t>(-1);

  brute_force_engine(nearest_options const& options, device_resource_ref resource) : index_core<T>(options, resource) {}
  /// Prepares `references` on `stream`: unit vectors and float64 coordinates.
  void prepare(points_ref<T> references, stream_ref stream);

  // k-nearest queries (nearest_queries.cuh): the engine's search.
  template <class Index>
  void search_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream, nearest_scratch& scratch) const;
  template <class V, class Index>
  void search(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream, nearest_scratch& scratch) const;
  template <int K, class Index>
  void search_k(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream, nearest_scratch& scratch) const;
  /// A query ran on `stream`: the index's memory is released after its last query.
  void used(stream_ref stream) noexcept { references_.set_stream(stream); }
  /// The prepared references as float64 radians (NaN for invalid ones), from which the front end builds a tree.
  [[nodiscard]] points_ref<double> prepared_points() const noexcept
  {
    return points_ref<double>::interleaved(&this->coordinates_->lat, this->count_);
  }

  // Radius queries (radius_queries.cuh, detail/radius_impl.cuh): the engine's pass.
  [[nodiscard]] std::size_t radius_scratch_bytes(std::size_t) const { return 0; }
  template <class Index>
  void radius_run(points_ref<T> const& observations, radius_pass<Index, T> pass, stream_ref stream, std::byte* memory) const;

  device_buffer<std::byte> references_;  // float and double unit vectors, double coordinates
};

template <class T>
void brute_force_engine<T>::prepare(points_ref<T> references, stream_ref stream)
{
  expect_points(references, "references");
  expect_reference_count(references.count);
  device_guard guard(stream.device());
  std::size_t const m = references.count;
  reference_layout const layout(m);
  if (references_.size() < layout.bytes || stream.device() != this->device_) {
    references_ = device_buffer<std::byte>(layout.bytes, stream, this->resource_);
  }
  this->begin_preparation(m, stream);
  references_.set_stream(stream);
  std::byte* const base = references_.data();
  this->coordinates_ = layout.coordinates(base);
  prepare_references<T><<<grid_size("prepare_references", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    references, m, layout.vectors(base), layout.precise(base), layout.coordinates(base), this->invalid_counts_.data());
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
template <class Index>
void brute_force_engine<T>::search_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                         nearest_scratch& scratch) const
{
  if (result.k > 1) {
    with_list_size(result.k, [&](auto list_size) { search_k<decltype(list_size)::value>(observations, result, stream, scratch); });
  } else if (this->options_.precision == nn_precision::exact) {
    search<double>(observations, result, stream, scratch);
  } else {
    search<float>(observations, result, stream, scratch);
  }
}

template <class T>
template <class V, class Index>
void brute_force_engine<T>::search(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                   nearest_scratch& scratch) const
{
  using shape = pass1_shape<V>;
  device_guard guard(this->device_);
  std::size_t const n = observations.count;
  nearest_plan const plan = plan_nearest(n, this->count_, std::size_t{shape::threads} * shape::obs_per_thread, shape::tile,
                                         resident_blocks(nearest_pass1<V, Index, T>, shape::threads, this->device_));

  std::size_t const values_bytes = align_up(plan.slices * n * sizeof(V));
  std::byte* const partials = scratch.reserve(values_bytes + plan.slices * n * sizeof(Index), this->device_, stream, this->resource_);
  auto* partial_value = reinterpret_cast<V*>(partials);
  auto* partial_index = reinterpret_cast<Index*>(partials + values_bytes);
  reference_layout const layout(this->count_);
  std::byte const* const base = references_.data();

  dim3 const grid(plan.obs_blocks, plan.slices);
  nearest_pass1<V, Index, T><<<grid, shape::threads, 0, stream.value()>>>(
    observations, n, layout.vectors(base), std::is_same_v<V, double> ? layout.precise(base) : nullptr, this->count_,
    plan.slice_length, partial_value, partial_index);
  STREAMKIT_CHECK_LAUNCH();
  nearest_pass2<V, Index, T><<<grid_size("nearest_pass2", n, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    observations, n, layout.coordinates(base), plan.slices, partial_value, partial_index, result, max_angle(this->options_),
    distance_scale(this->options_));
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
template <int K, class Index>
void brute_force_engine<T>::search_k(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                     nearest_scratch& scratch) const
{
  using shape = knn_pass1_shape;
  device_guard guard(this->device_);
  std::size_t const n = observations.count;
  std::size_t const k = result.k;
  nearest_plan const plan =
    plan_nearest(n, this->count_, shape::threads, shape::tile, resident_blocks(knn_pass1<K, T>, shape::threads, this->device_));

  std::size_t const entries = plan.slices * n * k;
  std::size_t const chord_bytes = align_up(entries * sizeof(double));
  std::byte* const partials = scratch.reserve(chord_bytes + entries * sizeof(std::uint32_t), this->device_, stream, this->resource_);
  auto* partial_chord2 = reinterpret_cast<double*>(partials);
  auto* partial_id = reinterpret_cast<std::uint32_t*>(partials + chord_bytes);
  reference_layout const layout(this->count_);
  std::byte const* const base = references_.data();
  double const limit = max_chord2(this->options_);

  dim3 const grid(plan.obs_blocks, plan.slices);
  knn_pass1<K, T><<<grid, shape::threads, 0, stream.value()>>>(observations, n, layout.vectors(base), layout.precise(base),
                                                             this->count_, plan.slice_length, static_cast<int>(k), limit,
                                                             partial_chord2, partial_id);
  STREAMKIT_CHECK_LAUNCH();
  knn_pass2<K, Index, T><<<grid_size("knn_pass2", n, 128, grid_stride_blocks), 128, 0, stream.value()>>>(
    observations, n, layout.coordinates(base), plan.slices, static_cast<int>(k), partial_chord2, partial_id, result, limit,
    distance_scale(this->options_));
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace streamkit
