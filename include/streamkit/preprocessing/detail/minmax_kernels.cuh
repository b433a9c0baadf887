#pragma once
// Kernels of column min-max scaling (see minmax.cuh).

#include <streamkit/preprocessing/detail/minmax_plan.hpp>
#include <streamkit/core/matrix.hpp>

#include <cooperative_groups.h>
#include <cuda/std/limits>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace streamkit::detail {

/// The unsigned integer whose order matches T's order (for atomic min/max on floating point).
template <class T>
struct ordered_bits;
template <>
struct ordered_bits<float> {
  using type = unsigned int;
};
template <>
struct ordered_bits<double> {
  using type = unsigned long long;
};
template <class T>
using ordered_t = typename ordered_bits<T>::type;

template <class T>
STREAMKIT_HOST_DEVICE inline ordered_t<T> to_ordered(T value) noexcept
{
  using U = ordered_t<T>;
  U bits;
  memcpy(&bits, &value, sizeof bits);
  U const sign = U{1} << (sizeof(U) * 8 - 1);
  return (bits & sign) != 0 ? ~bits : bits | sign;
}
template <class T>
STREAMKIT_HOST_DEVICE inline T from_ordered(ordered_t<T> bits) noexcept
{
  using U = ordered_t<T>;
  U const sign = U{1} << (sizeof(U) * 8 - 1);
  U const raw = (bits & sign) != 0 ? bits & ~sign : ~bits;
  T value;
  memcpy(&value, &raw, sizeof value);
  return value;
}

/// The target interval and clipping of a scaling.
template <class T>
struct scaling {
  T lo;
  T hi;
  bool clip;
};

/// Scale of one column: (hi - lo) / (max - min), where a range below 10 eps counts as 1 (as in
/// scikit-learn), so a constant column maps to lo. NaN for an all-NaN column.
template <class T>
__device__ inline T column_scale(T min, T max, scaling<T> const& s)
{
  T range = max - min;
  if (range < T(10) * cuda::std::numeric_limits<T>::epsilon()) { range = T(1); }
  return (s.hi - s.lo) / range;
}

template <class T>
__device__ inline T scale_value(T x, T min, T scale, scaling<T> const& s)
{
  T const y = s.lo + (x - min) * scale;
  if (!s.clip) { return y; }
  return y < s.lo ? s.lo : (y > s.hi ? s.hi : y);  // NaN stays NaN
}

template <class T>
__device__ inline T unscale_value(T y, T min, T scale, scaling<T> const& s)
{
  return (y - s.lo) / scale + min;
}

/// Folds x into a running (min, max) that ignores NaN.
template <class T>
__device__ inline void fold(T x, T& min, T& max)
{
  if (x < min) { min = x; }
  if (x > max) { max = x; }
}

/// Merges another running (min, max) into this one.
template <class T>
__device__ inline void merge(T other_min, T other_max, T& min, T& max)
{
  if (other_min < min) { min = other_min; }
  if (other_max > max) { max = other_max; }
}

/// Merges the running (min, max) of a whole warp: every lane ends with the warp's.
template <class T>
__device__ inline void merge_across_warp(T& min, T& max)
{
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    merge(__shfl_xor_sync(0xffffffffU, min, offset), __shfl_xor_sync(0xffffffffU, max, offset), min, max);
  }
}

/// (min, max) as stored: an all-NaN column, still (+inf, -inf), becomes (NaN, NaN).
template <class T>
__device__ inline void settle(T& min, T& max)
{
  if (min > max) { min = max = cuda::std::numeric_limits<T>::quiet_NaN(); }
}

/// Row-major, rows ≤ 64: each block holds 32 whole columns in registers, reduces them, and writes
/// the scaled values: one read and one write of the data.
template <class T>
__global__ void __launch_bounds__(rows_block_x * rows_block_y)
  minmax_rows_fused(matrix_ref<T const> in, matrix_ref<T> out, scaling<T> s, T* min_out, T* max_out)
{
  __shared__ T shared_min[rows_block_y][rows_block_x + 1];
  __shared__ T shared_max[rows_block_y][rows_block_x + 1];
  std::size_t const j = blockIdx.x * std::size_t{rows_block_x} + threadIdx.x;
  T const infinity = cuda::std::numeric_limits<T>::infinity();
  T values[rows_per_thread];
  T min = infinity;
  T max = -infinity;
#pragma unroll
  for (int k = 0; k < rows_per_thread; ++k) {
    std::size_t const i = threadIdx.y + std::size_t{rows_block_y} * k;
    values[k] = (i < in.rows && j < in.cols) ? in(i, j) : cuda::std::numeric_limits<T>::quiet_NaN();
    fold(values[k], min, max);
  }
  shared_min[threadIdx.y][threadIdx.x] = min;
  shared_max[threadIdx.y][threadIdx.x] = max;
  __syncthreads();
#pragma unroll
  for (int y = 0; y < rows_block_y; ++y) {
    merge(shared_min[y][threadIdx.x], shared_max[y][threadIdx.x], min, max);
  }
  settle(min, max);
  if (j >= in.cols) { return; }
  if (threadIdx.y == 0) {
    if (min_out != nullptr) { min_out[j] = min; }
    if (max_out != nullptr) { max_out[j] = max; }
  }
  T const scale = column_scale(min, max, s);
#pragma unroll
  for (int k = 0; k < rows_per_thread; ++k) {
    std::size_t const i = threadIdx.y + std::size_t{rows_block_y} * k;
    if (i < in.rows) { out(i, j) = scale_value(values[k], min, scale, s); }
  }
}

/// Column-major, rows ≤ 256: one warp per column, the column in registers, one read and one write.
template <class T>
__global__ void __launch_bounds__(cols_fused_block)
  minmax_cols_fused(matrix_ref<T const> in, matrix_ref<T> out, scaling<T> s, T* min_out, T* max_out)
{
  std::size_t const j = blockIdx.x * std::size_t{blockDim.x / 32} + threadIdx.x / 32;
  unsigned const lane = threadIdx.x % 32;
  if (j >= in.cols) { return; }
  T const infinity = cuda::std::numeric_limits<T>::infinity();
  T values[cols_per_thread];
  T min = infinity;
  T max = -infinity;
#pragma unroll
  for (int k = 0; k < cols_per_thread; ++k) {
    std::size_t const i = lane + std::size_t{32} * k;
    values[k] = i < in.rows ? in(i, j) : cuda::std::numeric_limits<T>::quiet_NaN();
    fold(values[k], min, max);
  }
  merge_across_warp(min, max);
  settle(min, max);
  if (lane == 0) {
    if (min_out != nullptr) { min_out[j] = min; }
    if (max_out != nullptr) { max_out[j] = max; }
  }
  T const scale = column_scale(min, max, s);
#pragma unroll
  for (int k = 0; k < cols_per_thread; ++k) {
    std::size_t const i = lane + std::size_t{32} * k;
    if (i < in.rows) { out(i, j) = scale_value(values[k], min, scale, s); }
  }
}

/// Column-major, cluster_min_rows to cluster_blocks × cluster_slice_bytes rows (on sm_90 and later): a
/// cluster of blocks per column, each block keeping its slice of the column in shared memory; the
/// blocks exchange their minima and maxima through distributed shared memory and scale their slices,
/// so the data is read once and written once. Launched with a cluster of 1 to cluster_blocks blocks
/// along x, one cluster per column.
template <class T>
__global__ void __launch_bounds__(cluster_block)
  minmax_cols_cluster(matrix_ref<T const> in, matrix_ref<T> out, scaling<T> s, T* min_out, T* max_out)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  extern __shared__ __align__(16) unsigned char cluster_shared[];
  T* const slice = reinterpret_cast<T*>(cluster_shared);
  __shared__ T warp_min[cluster_block / 32];
  __shared__ T warp_max[cluster_block / 32];
  __shared__ T block_min_max[2];  // read by the other blocks of the cluster
  auto const cluster = cooperative_groups::this_cluster();
  unsigned const rank = cluster.block_rank();
  unsigned const blocks = cluster.num_blocks();
  std::size_t const j = blockIdx.x / blocks;
  std::size_t const per_block = (in.rows + blocks - 1) / blocks;
  std::size_t const begin = rank * per_block;
  std::size_t const end = begin + per_block < in.rows ? begin + per_block : in.rows;
  T const* const column = in.data + j * in.ld;
  T min = cuda::std::numeric_limits<T>::infinity();
  T max = -min;
  // Loads in batches, all issued before any store to shared memory: the compiler may not move a
  // global load above a store it cannot prove does not alias it, so one at a time they would wait in turn.
  for (std::size_t first = begin + threadIdx.x; first < end; first += std::size_t{cluster_block} * cluster_batch) {
    T x[cluster_batch];
#pragma unroll
    for (int k = 0; k < cluster_batch; ++k) {
      std::size_t const i = first + std::size_t{cluster_block} * k;
      x[k] = i < end ? column[i] : cuda::std::numeric_limits<T>::quiet_NaN();
    }
#pragma unroll
    for (int k = 0; k < cluster_batch; ++k) {
      std::size_t const i = first + std::size_t{cluster_block} * k;
      if (i < end) { slice[i - begin] = x[k]; }  // read back below by this same thread only
      fold(x[k], min, max);
    }
  }
  merge_across_warp(min, max);
  if (threadIdx.x % 32 == 0) {
    warp_min[threadIdx.x / 32] = min;
    warp_max[threadIdx.x / 32] = max;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < cluster_block / 32; ++w) { merge(warp_min[w], warp_max[w], min, max); }
    block_min_max[0] = min;
    block_min_max[1] = max;
  }
  cluster.sync();  // every block's (min, max) is written
  for (unsigned r = 0; r < blocks; ++r) {
    T const* const peer = cluster.map_shared_rank(block_min_max, r);
    merge(peer[0], peer[1], min, max);
  }
  cluster.sync();  // no block leaves while another still reads its shared memory
  settle(min, max);
  if (rank == 0 && threadIdx.x == 0) {
    if (min_out != nullptr) { min_out[j] = min; }
    if (max_out != nullptr) { max_out[j] = max; }
  }
  T const scale = column_scale(min, max, s);
#pragma unroll 8
  for (std::size_t i = begin + threadIdx.x; i < end; i += cluster_block) { out(i, j) = scale_value(slice[i - begin], min, scale, s); }
#else
  __trap();  // never launched: the host checks that this kernel was compiled for sm_90 or later
#endif
}

/// Any shape: folds a block's share of the data into per-column ordered min/max with atomics.
/// Row-major: block (32, 8) takes 32 columns × `rows_per_block` rows. Column-major: block (32, 8)
/// takes 8 columns, a warp each, × `rows_per_block` rows. Loads are coalesced either way.
template <class T>
__global__ void __launch_bounds__(rows_block_x * rows_block_y)
  minmax_reduce(matrix_ref<T const> in, std::size_t rows_per_block, ordered_t<T>* min_bits, ordered_t<T>* max_bits)
{
  T const infinity = cuda::std::numeric_limits<T>::infinity();
  T min = infinity;
  T max = -infinity;
  std::size_t const row_begin = blockIdx.y * rows_per_block;
  std::size_t const row_end = row_begin + rows_per_block < in.rows ? row_begin + rows_per_block : in.rows;
  std::size_t j;
  if (in.order == layout::row_major) {
    j = blockIdx.x * std::size_t{rows_block_x} + threadIdx.x;
    if (j < in.cols) {
      for (std::size_t i = row_begin + threadIdx.y; i < row_end; i += rows_block_y) { fold(in(i, j), min, max); }
    }
    __shared__ T shared_min[rows_block_y][rows_block_x + 1];
    __shared__ T shared_max[rows_block_y][rows_block_x + 1];
    shared_min[threadIdx.y][threadIdx.x] = min;
    shared_max[threadIdx.y][threadIdx.x] = max;
    __syncthreads();
    if (threadIdx.y != 0) { return; }
    for (int y = 1; y < rows_block_y; ++y) {
      merge(shared_min[y][threadIdx.x], shared_max[y][threadIdx.x], min, max);
    }
  } else {
    j = blockIdx.x * std::size_t{rows_block_y} + threadIdx.y;
    if (j < in.cols) {
      for (std::size_t i = row_begin + threadIdx.x; i < row_end; i += 32) { fold(in(i, j), min, max); }
    }
    merge_across_warp(min, max);
    if (threadIdx.x != 0) { return; }
  }
  if (j < in.cols && min <= max) {
    atomicMin(min_bits + j, to_ordered(min));
    atomicMax(max_bits + j, to_ordered(max));
  }
}

/// Sets the ordered accumulators to "nothing seen".
template <class T>
__global__ void minmax_reset(std::size_t cols, ordered_t<T>* min_bits, ordered_t<T>* max_bits)
{
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < cols; j += std::size_t{gridDim.x} * blockDim.x) {
    min_bits[j] = to_ordered(cuda::std::numeric_limits<T>::infinity());
    max_bits[j] = to_ordered(-cuda::std::numeric_limits<T>::infinity());
  }
}

/// Decodes the accumulators into min, max (NaN for all-NaN columns) and scale (unless null).
template <class T>
__global__ void minmax_finalize(std::size_t cols, ordered_t<T> const* min_bits, ordered_t<T> const* max_bits,
                                scaling<T> s, T* min_out, T* max_out, T* scale_out)
{
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < cols; j += std::size_t{gridDim.x} * blockDim.x) {
    T min = from_ordered<T>(min_bits[j]);
    T max = from_ordered<T>(max_bits[j]);
    settle(min, max);
    min_out[j] = min;
    max_out[j] = max;
    if (scale_out != nullptr) { scale_out[j] = column_scale(min, max, s); }
  }
}

/// A position in storage order, (outer, inner) = (row, column) for row-major and (column, row) for
/// column-major, advanced by a fixed number of elements without dividing.
struct storage_cursor {
  std::size_t outer;
  std::size_t inner;
  __device__ void advance(std::size_t step_outer, std::size_t step_inner, std::size_t inner_count)
  {
    inner += step_inner;
    outer += step_outer;
    if (inner >= inner_count) {
      inner -= inner_count;
      ++outer;
    }
  }
};

/// out(i, j) = scaled (or, with Inverse, unscaled) in(i, j), from per-column min and scale. Walks
/// the elements in storage order: each block takes tiles of apply_unroll × apply_block elements with
/// a grid stride, each thread loading its apply_unroll elements of a tile before storing any (so that
/// several loads are in flight), with indices advanced incrementally (no division per element).
template <class T, bool Inverse>
__global__ void __launch_bounds__(apply_block)
  minmax_apply(matrix_ref<T const> in, matrix_ref<T> out, T const* min, T const* scale, scaling<T> s)
{
  bool const row_major = in.order == layout::row_major;
  std::size_t const inner_count = row_major ? in.cols : in.rows;
  std::size_t const total = in.rows * in.cols;
  constexpr std::size_t tile = std::size_t{apply_block} * apply_unroll;
  std::size_t const grid_step = std::size_t{gridDim.x} * tile;
  std::size_t e = blockIdx.x * tile + threadIdx.x;
  if (e >= total) { return; }
  storage_cursor at{e / inner_count, e % inner_count};
  std::size_t const lane_outer = apply_block / inner_count, lane_inner = apply_block % inner_count;
  std::size_t const grid_outer = (grid_step - tile + apply_block) / inner_count;
  std::size_t const grid_inner = (grid_step - tile + apply_block) % inner_count;
  for (; e < total; e += grid_step) {
    T x[apply_unroll];
    storage_cursor where[apply_unroll];
#pragma unroll
    for (int k = 0; k < apply_unroll; ++k) {
      where[k] = at;
      if (static_cast<std::size_t>(k) * apply_block < total - e) {
        x[k] = row_major ? in(at.outer, at.inner) : in(at.inner, at.outer);
      }
      if (k + 1 < apply_unroll) { at.advance(lane_outer, lane_inner, inner_count); }
    }
#pragma unroll
    for (int k = 0; k < apply_unroll; ++k) {
      if (static_cast<std::size_t>(k) * apply_block < total - e) {
        std::size_t const i = row_major ? where[k].outer : where[k].inner;
        std::size_t const j = row_major ? where[k].inner : where[k].outer;
        out(i, j) = Inverse ? unscale_value(x[k], min[j], scale[j], s) : scale_value(x[k], min[j], scale[j], s);
      }
    }
    at.advance(grid_outer, grid_inner, inner_count);
  }
}

/// Dense row-major matrices with few columns (cols divides 256): a flat, fully coalesced reduction
/// in which every thread always meets the same column (256 / cols rows per step).
template <class T>
__global__ void __launch_bounds__(reduce_narrow_block)
  minmax_reduce_narrow(T const* data, std::size_t rows, std::size_t cols, std::size_t rows_per_block,
                       ordered_t<T>* min_bits, ordered_t<T>* max_bits)
{
  __shared__ ordered_t<T> shared_min[reduce_narrow_block];
  __shared__ ordered_t<T> shared_max[reduce_narrow_block];
  T const infinity = cuda::std::numeric_limits<T>::infinity();
  if (threadIdx.x < cols) {
    shared_min[threadIdx.x] = to_ordered(infinity);
    shared_max[threadIdx.x] = to_ordered(-infinity);
  }
  __syncthreads();
  std::size_t const row_begin = blockIdx.x * rows_per_block;
  std::size_t const row_end = row_begin + rows_per_block < rows ? row_begin + rows_per_block : rows;
  T min = infinity;
  T max = -infinity;
  for (std::size_t e = row_begin * cols + threadIdx.x; e < row_end * cols; e += reduce_narrow_block) { fold(data[e], min, max); }
  if (min <= max) {
    atomicMin(shared_min + threadIdx.x % cols, to_ordered(min));
    atomicMax(shared_max + threadIdx.x % cols, to_ordered(max));
  }
  __syncthreads();
  if (threadIdx.x < cols && shared_min[threadIdx.x] <= shared_max[threadIdx.x]) {
    atomicMin(min_bits + threadIdx.x, shared_min[threadIdx.x]);
    atomicMax(max_bits + threadIdx.x, shared_max[threadIdx.x]);
  }
}

}  // namespace streamkit::detail
