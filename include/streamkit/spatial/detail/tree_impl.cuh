#pragma once
// Host facade of tree_index: validation, memory layout, the build and the query launches.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_launch.cuh>
#include <streamkit/spatial/detail/tree_kernels.cuh>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace streamkit {
namespace detail {

/// Observations below this count (two warps) are searched in their own order; from it on they are
/// sorted, since a warp of scattered observations walks the union of their paths (1024 unsorted
/// observations took longer than 4096 sorted ones on an H100).
inline constexpr std::size_t tree_sort_threshold = 64;

/// Leaves of a tree over m references: ⌈m / tree_leaf_size⌉ rounded up to a power of two.
[[nodiscard]] inline std::size_t tree_leaf_count(std::size_t m) noexcept
{
  std::size_t const needed = (m + tree_leaf_size - 1) / tree_leaf_size;
  std::size_t leaves = 1;
  while (leaves < needed) { leaves *= 2; }
  return leaves;
}

/// Where a tree keeps its arrays in one allocation: the groups' points (float, then float64) padded to
/// whole leaves, the nodes (float, then float64, then their capsules), the coordinates by reference index, the groups'
/// keys and run starts, their count.
struct tree_layout {
  tree_layout(std::size_t m, std::size_t leaves) noexcept
      : slots((m + tree_leaf_size - 1) / tree_leaf_size * tree_leaf_size),
        precise_offset(align_up(slots * sizeof(float4))),
        nodes_offset(precise_offset + align_up(slots * sizeof(vec4<double>))),
        precise_nodes_offset(nodes_offset + align_up(2 * leaves * sizeof(tree_node))),
        capsules_offset(precise_nodes_offset + align_up(2 * leaves * sizeof(tree_precise_node))),
        coordinates_offset(capsules_offset + align_up(2 * leaves * sizeof(tree_capsule))),
        keys_offset(coordinates_offset + align_up(m * sizeof(lat_lon))),
        run_starts_offset(keys_offset + align_up(m * sizeof(std::uint64_t))),
        group_count_offset(run_starts_offset + align_up((m + 1) * sizeof(std::uint32_t))),
        bytes(group_count_offset + sizeof(std::uint32_t))
  {
  }
  template <class Byte>
  tree_view view(Byte* base, std::uint32_t const* member_ids, std::size_t leaves) const noexcept
  {
    return {reinterpret_cast<float4 const*>(base),
            reinterpret_cast<vec4<double> const*>(base + precise_offset),
            reinterpret_cast<tree_node const*>(base + nodes_offset),
            reinterpret_cast<tree_precise_node const*>(base + precise_nodes_offset),
            reinterpret_cast<tree_capsule const*>(base + capsules_offset),
            reinterpret_cast<lat_lon const*>(base + coordinates_offset),
            reinterpret_cast<std::uint64_t const*>(base + keys_offset),
            reinterpret_cast<std::uint32_t const*>(base + run_starts_offset),
            member_ids,
            reinterpret_cast<std::uint32_t const*>(base + group_count_offset),
            leaves};
  }
  std::size_t slots, precise_offset, nodes_offset, precise_nodes_offset, capsules_offset, coordinates_offset, keys_offset, run_starts_offset,
    group_count_offset, bytes;
};

/// Bytes of a radix sort of `count` key-value pairs over bits [0, end_bit), asked of CUB (no launch);
/// `bits` (CUB's decomposer) tells the bits of a key that is no arithmetic type.
template <class Key, class... Bits>
std::size_t sort_temporary_bytes(std::size_t count, int end_bit, Bits... bits)
{
  std::size_t bytes = 0;
  cub::DoubleBuffer<Key> keys(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> ids(nullptr, nullptr);
  STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, ids, static_cast<std::int64_t>(count), bits..., 0, end_bit));
  return bytes;
}

/// Where a sort left its keys and ids.
template <class Key>
struct sorted_pairs {
  Key const* keys;
  std::uint32_t const* ids;
};

/// Sorts `count` pairs held in key and id double buffers that start at `keys` and `ids` (each 2 × count),
/// with `temporary` of sort_temporary_bytes().
template <class Key, class... Bits>
sorted_pairs<Key> sort_by_key(Key* keys, std::uint32_t* ids, std::size_t count, int end_bit, std::byte* temporary,
                              std::size_t temporary_bytes, stream_ref stream, Bits... bits)
{
  cub::DoubleBuffer<Key> key_buffers(keys, keys + count);
  cub::DoubleBuffer<std::uint32_t> id_buffers(ids, ids + count);
  STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temporary, temporary_bytes, key_buffers, id_buffers,
                                                     static_cast<std::int64_t>(count), bits..., 0, end_bit, stream.value()));
  return {key_buffers.Current(), id_buffers.Current()};
}

/// Bytes of an exclusive sum of `count` 32-bit values, asked of CUB (no launch).
inline std::size_t scan_temporary_bytes(std::size_t count)
{
  std::size_t bytes = 0;
  STREAMKIT_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<std::uint32_t const*>(nullptr),
                                                   static_cast<std::uint32_t*>(nullptr), static_cast<std::int64_t>(count)));
  return bytes;
}

/// Bytes observation_order() needs for n observations (none below tree_sort_threshold).
inline std::size_t observation_order_bytes(std::size_t n)
{
  if (n < tree_sort_threshold) { return 0; }
  constexpr int key_bits = 32;  // 30 Morton bits, and the top bits that sort invalid observations last
  return 2 * align_up(2 * n * sizeof(std::uint32_t)) + sort_temporary_bytes<std::uint32_t>(n, key_bits);
}

/// The observations' indices in 30-bit Morton order, so that a warp searches neighbours, sorted on
/// `stream` in `memory` (observation_order_bytes(n)); null (their own order) below tree_sort_threshold.
template <class T>
std::uint32_t const* observation_order(points_ref<T> const& observations, std::byte* memory, stream_ref stream)
{
  std::size_t const n = observations.count;
  if (n < tree_sort_threshold) { return nullptr; }
  constexpr int key_bits = 32;
  std::size_t const sort_bytes = sort_temporary_bytes<std::uint32_t>(n, key_bits);
  std::size_t const pairs_bytes = align_up(2 * n * sizeof(std::uint32_t));
  auto* const keys = reinterpret_cast<std::uint32_t*>(memory);
  auto* const ids = reinterpret_cast<std::uint32_t*>(memory + pairs_bytes);
  tree_observation_keys<T><<<grid_size("tree_observation_keys", n, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    observations, n, keys, ids);
  STREAMKIT_CHECK_LAUNCH();
  return sort_by_key(keys, ids, n, key_bits, memory + 2 * pairs_bytes, sort_bytes, stream).ids;
}

}  // namespace detail

template <class T>
tree_index<T>::tree_index(points_ref<T> references, nearest_options const& options, stream_ref stream,
                          device_resource_ref resource)
    : core(options, resource)
{
  update(references, stream);
}

template <class T>
void tree_index<T>::update(points_ref<T> references, stream_ref stream)
{
  build(references, stream);
}

template <class T>
template <class U>
void tree_index<T>::build(points_ref<U> references, stream_ref stream)
{
  using namespace detail;
  expect_points(references, "references");
  expect_reference_count(references.count);
  int const stream_device = stream.device();
  device_guard guard(stream_device);
  std::size_t const m = references.count;
  std::size_t const leaves = tree_leaf_count(m);
  tree_layout const layout(m, leaves);
  std::size_t const sort_bytes = sort_temporary_bytes<tree_key>(m, tree_key_width, tree_key_bits{});
  std::size_t const scan_bytes = scan_temporary_bytes(m);
  std::size_t const keys_bytes = align_up(2 * m * sizeof(tree_key));
  std::size_t const ids_bytes = align_up(2 * m * sizeof(std::uint32_t));
  std::size_t const marks_bytes = align_up(2 * m * sizeof(std::uint32_t));  // group starts, then their places
  std::size_t const arrivals_bytes = align_up(leaves * sizeof(unsigned));
  std::size_t temporary_bytes = std::max(sort_bytes, scan_bytes);  // the sort's, then the scan's
  std::size_t const scratch_bytes = keys_bytes + ids_bytes + marks_bytes + arrivals_bytes + temporary_bytes;
  if (stream_device != this->device_) {
    tree_ = device_buffer<std::byte>();
    build_scratch_ = device_buffer<std::byte>();
  }
  if (tree_.size() < layout.bytes) { tree_ = device_buffer<std::byte>(layout.bytes, stream, this->resource_); }
  if (build_scratch_.size() < scratch_bytes) { build_scratch_ = device_buffer<std::byte>(scratch_bytes, stream, this->resource_); }
  core::begin_preparation(m, stream);
  leaves_ = leaves;
  tree_.set_stream(stream);
  build_scratch_.set_stream(stream);

  std::byte* const base = tree_.data();
  auto* const points = reinterpret_cast<float4*>(base);
  auto* const precise_points = reinterpret_cast<vec4<double>*>(base + layout.precise_offset);
  auto* const nodes = reinterpret_cast<tree_node*>(base + layout.nodes_offset);
  auto* const precise_nodes = reinterpret_cast<tree_precise_node*>(base + layout.precise_nodes_offset);
  auto* const capsules = reinterpret_cast<tree_capsule*>(base + layout.capsules_offset);
  auto* const coordinates = reinterpret_cast<lat_lon*>(base + layout.coordinates_offset);
  auto* const group_keys = reinterpret_cast<std::uint64_t*>(base + layout.keys_offset);
  auto* const run_starts = reinterpret_cast<std::uint32_t*>(base + layout.run_starts_offset);
  auto* const group_count = reinterpret_cast<std::uint32_t*>(base + layout.group_count_offset);
  std::byte* const scratch = build_scratch_.data();
  auto* const keys = reinterpret_cast<tree_key*>(scratch);
  auto* const ids = reinterpret_cast<std::uint32_t*>(scratch + keys_bytes);
  auto* const starts = reinterpret_cast<std::uint32_t*>(scratch + keys_bytes + ids_bytes);
  auto* const places = starts + m;
  auto* const arrivals = reinterpret_cast<unsigned*>(scratch + keys_bytes + ids_bytes + marks_bytes);
  std::byte* const temporary = scratch + keys_bytes + ids_bytes + marks_bytes + arrivals_bytes;

  STREAMKIT_CUDA_TRY(cudaMemsetAsync(arrivals, 0, leaves * sizeof(unsigned), stream.value()));
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(group_count, 0, sizeof(std::uint32_t), stream.value()));
  tree_reference_keys<U><<<grid_size("tree_reference_keys", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    references, m, coordinates, keys, ids, this->invalid_counts_.data());
  STREAMKIT_CHECK_LAUNCH();
  sorted_pairs<tree_key> const sorted =
    sort_by_key(keys, ids, m, tree_key_width, temporary, temporary_bytes, stream, tree_key_bits{});
  member_ids_ = sorted.ids;
  tree_mark_groups<<<grid_size("tree_mark_groups", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    coordinates, sorted.keys, sorted.ids, m, starts);
  STREAMKIT_CHECK_LAUNCH();
  STREAMKIT_CUDA_TRY(
    cub::DeviceScan::ExclusiveSum(temporary, temporary_bytes, starts, places, static_cast<std::int64_t>(m), stream.value()));
  tree_write_groups<<<grid_size("tree_write_groups", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    coordinates, sorted.keys, sorted.ids, m, starts, places, precise_points, group_keys, run_starts, group_count);
  STREAMKIT_CHECK_LAUNCH();
  tree_build_leaves<<<grid_size("tree_build_leaves", leaves * tree_leaf_size, 256), 256, 0, stream.value()>>>(
    group_count, run_starts, layout.slots, leaves, points, precise_points, nodes, precise_nodes, capsules);
  STREAMKIT_CHECK_LAUNCH();
  if (leaves > 1) {
    tree_build_inner<<<grid_size("tree_build_inner", leaves / 2, 256), 256, 0, stream.value()>>>(nodes, precise_nodes, capsules,
                                                                                              arrivals, leaves);
    STREAMKIT_CHECK_LAUNCH();
  }
}

template <class T>
template <class Index>
void tree_index<T>::search_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                 nearest_scratch& scratch) const
{
  detail::with_list_size(result.k, [&](auto list_size) { search<decltype(list_size)::value>(observations, result, stream, scratch); });
}

template <class T>
template <int K, class Index>
void tree_index<T>::search(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                           nearest_scratch& scratch) const
{
  using namespace detail;
  device_guard guard(this->device_);
  std::size_t const n = observations.count;
  std::size_t const bytes = observation_order_bytes(n);
  std::uint32_t const* const order =
    observation_order(observations, bytes > 0 ? scratch.reserve(bytes, this->device_, stream, this->resource_) : nullptr, stream);
  tree_view const view = tree_layout(this->count_, leaves_).view(tree_.data(), member_ids_, leaves_);
  tree_search<K, Index, T><<<grid_size("tree_search", n, tree_search_threads), tree_search_threads, 0, stream.value()>>>(
    observations, n, order, view, result, static_cast<int>(result.k), max_chord2(this->options_), distance_scale(this->options_));
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace streamkit
