#pragma once
// Launch planning of column min-max scaling: which kernels a shape takes and their grids. Plain C++
// (no CUDA call), so that the grids of any shape can be checked on a machine without a GPU.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/matrix.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>

namespace streamkit::detail {

inline constexpr int rows_block_x = 32;        // columns per block of the row-major kernels
inline constexpr int rows_block_y = 8;         // thread rows per block
inline constexpr int rows_per_thread = 8;      // values each thread keeps in registers
inline constexpr int rows_fused_limit = rows_block_y * rows_per_thread;  // 64 rows: fit + transform in one read
inline constexpr int cols_per_thread = 8;
inline constexpr int cols_fused_limit = 32 * cols_per_thread;  // 256 rows: one warp per column
inline constexpr int cols_fused_block = 256;                   // 8 warps, so 8 columns per block

inline constexpr int cluster_blocks = 8;          // the most blocks per cluster (the portable maximum) of minmax_cols_cluster
inline constexpr int cluster_block = 512;         // threads per block of minmax_cols_cluster
inline constexpr int cluster_batch = 16;          // loads in flight per thread
inline constexpr std::size_t cluster_slice_bytes = 112 * 1024;  // shared memory per block: two blocks fit on an SM
// Values per thread that the cluster size aims at, and the shortest column given to clusters. Measured
// on an H100 with 47 MB of column-major doubles: clusters sized for 16 values per thread took 39 to 43 us
// from 8000 to 32000 rows, where 8-block clusters took 97 to 49 us; below about 1500 rows (3 values per
// thread of a one-block cluster) the two-pass path (60 us) is faster.
inline constexpr std::size_t cluster_values = 16;
inline constexpr std::size_t cluster_min_rows = 3 * cluster_block;

inline constexpr int reduce_narrow_block = 256;  // threads of minmax_reduce_narrow: cols must divide it
inline constexpr int column_block = 256;         // threads of the per-column kernels (reset, finalize)
inline constexpr int apply_block = 256;
inline constexpr int apply_unroll = 4;  // independent loads in flight per thread

/// The kernels a minmax_normalize call runs.
enum class minmax_path {
  rows_fused,    ///< row-major, rows ≤ rows_fused_limit: minmax_rows_fused
  cols_fused,    ///< column-major, rows ≤ cols_fused_limit: minmax_cols_fused
  cols_cluster,  ///< column-major columns held in a cluster's shared memory (sm_90+): minmax_cols_cluster
  two_pass,      ///< any shape: reset, reduce, finalize and apply
};

/// Blocks per cluster for columns of `rows`: cluster_values per thread, as many as shared memory needs.
template <class T>
[[nodiscard]] unsigned cluster_size(std::size_t rows) noexcept
{
  std::size_t const for_values = (rows + cluster_block * cluster_values - 1) / (cluster_block * cluster_values);
  std::size_t const for_memory = (rows * sizeof(T) + cluster_slice_bytes - 1) / cluster_slice_bytes;
  return static_cast<unsigned>(std::clamp<std::size_t>(std::max(for_values, for_memory), 1, cluster_blocks));
}

/// Which path a minmax_normalize of `in` takes, and its grid along x for the one-kernel paths.
struct minmax_plan {
  minmax_path path = minmax_path::two_pass;
  unsigned grid_x = 0;          ///< rows_fused, cols_fused: blocks; cols_cluster: columns × cluster_blocks
  unsigned cluster_blocks = 0;  ///< cols_cluster: blocks per cluster (one cluster per column)
};

/// `clusters_available()` says whether minmax_cols_cluster can run (compiled for sm_90 or later); it is
/// asked only for shapes that clusters could take. Throws std::length_error for a shape whose grid
/// exceeds CUDA's limits.
template <class T, class ClustersAvailable>
[[nodiscard]] minmax_plan plan_normalize(matrix_ref<T const> const& in, ClustersAvailable&& clusters_available)
{
  minmax_plan plan;
  if (in.order == layout::row_major && in.rows <= static_cast<std::size_t>(rows_fused_limit)) {
    plan.path = minmax_path::rows_fused;
    plan.grid_x = grid_size("minmax_rows_fused", in.cols, rows_block_x);
    return plan;
  }
  if (in.order == layout::column_major && in.rows <= static_cast<std::size_t>(cols_fused_limit)) {
    plan.path = minmax_path::cols_fused;
    plan.grid_x = grid_size("minmax_cols_fused", in.cols, cols_fused_block / 32);
    return plan;
  }
  if (in.order == layout::column_major && in.rows >= cluster_min_rows &&
      (in.rows + cluster_blocks - 1) / cluster_blocks * sizeof(T) <= cluster_slice_bytes && clusters_available()) {
    unsigned const blocks = cluster_size<T>(in.rows);
    // The kernel covers exactly one column per cluster; wider matrices take the two-pass path.
    if (in.cols <= max_grid_x / blocks) {
      plan.path = minmax_path::cols_cluster;
      plan.cluster_blocks = blocks;
      plan.grid_x = grid_size("minmax_cols_cluster", in.cols * blocks, 1);
      return plan;
    }
  }
  plan.path = minmax_path::two_pass;
  return plan;
}

/// Grid of the reduction of the two-pass path (and of fits).
struct reduce_plan {
  bool narrow = false;             ///< minmax_reduce_narrow: dense row-major, cols divides 256; 1-D grid over rows
  std::size_t rows_per_block = 0;  ///< rows each block folds
  unsigned grid_x = 0;             ///< narrow: row blocks; otherwise column blocks
  unsigned grid_y = 1;             ///< row chunks (≤ max_grid_yz)
};

/// One block per 32 columns (row-major) or 8 columns (column-major) per row chunk, with chunks sized
/// for 32 (row-major) or 4 (column-major) blocks per SM; a dense row-major matrix whose width divides
/// 256 is reduced flat. Throws std::length_error for a shape whose grid exceeds CUDA's limits.
template <class T>
[[nodiscard]] reduce_plan plan_reduce(matrix_ref<T const> const& x, int sm_count)
{
  reduce_plan plan;
  bool const row_major = x.order == layout::row_major;
  // Column-major blocks read 8 whole columns each, so fewer, longer blocks: 4 per SM measured fastest
  // for 98450 x 60 doubles on an H100 (reduce 22.5 us, against 31.8 us at 32 per SM).
  std::size_t const wanted_blocks = static_cast<std::size_t>(std::max(sm_count, 1)) * (row_major ? 32 : 4);
  if (row_major && x.ld == x.cols && x.cols > 0 && reduce_narrow_block % x.cols == 0) {
    plan.narrow = true;
    plan.rows_per_block = std::max<std::size_t>((x.rows + wanted_blocks - 1) / wanted_blocks, reduce_narrow_block / x.cols);
    plan.grid_x = grid_size("minmax_reduce_narrow", x.rows, plan.rows_per_block);
    return plan;
  }
  std::size_t const columns_per_block = row_major ? rows_block_x : rows_block_y;
  plan.grid_x = grid_size("minmax_reduce", x.cols, columns_per_block);
  std::size_t const row_chunks = std::clamp<std::size_t>(wanted_blocks / plan.grid_x, 1, max_grid_yz);
  std::size_t const minimum_rows = row_major ? 64 : 256;
  plan.rows_per_block = std::max({(x.rows + row_chunks - 1) / row_chunks, minimum_rows, (x.rows + max_grid_yz - 1) / max_grid_yz});
  plan.grid_y = grid_size("minmax_reduce", x.rows, plan.rows_per_block, 0, max_grid_yz);
  return plan;
}

/// Blocks of the per-column kernels (minmax_reset, minmax_finalize), which have grid-stride loops.
[[nodiscard]] inline unsigned column_grid(std::size_t cols)
{
  return grid_size("minmax_reset/finalize", cols, column_block, grid_stride_blocks);
}

/// Blocks of minmax_apply, which has a grid-stride loop: 32 per SM at most.
[[nodiscard]] inline unsigned apply_grid(std::size_t rows, std::size_t cols, int sm_count)
{
  return grid_size("minmax_apply", rows * cols, std::size_t{apply_block} * apply_unroll,
                   static_cast<std::size_t>(std::max(sm_count, 1)) * 32);
}

}  // namespace streamkit::detail
