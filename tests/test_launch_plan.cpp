// Launch planning on the host: for any shape, every kernel's grid covers all of its work within
// CUDA's grid limits, or the call throws. Plain C++: runs in CI without a GPU.
#include "gpu_test.hpp"

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/preprocessing/detail/minmax_plan.hpp>
#include <streamkit/spatial/detail/nearest_neighbor_plan.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using streamkit::layout;
using streamkit::matrix_ref;
namespace detail = streamkit::detail;

TEST(LaunchPlan, GridSizeCoversTheWorkOrThrows)
{
  EXPECT_EQ(detail::grid_size("k", 0, 256), 1U) << "at least one block";
  EXPECT_EQ(detail::grid_size("k", 1, 256), 1U);
  EXPECT_EQ(detail::grid_size("k", 256, 256), 1U);
  EXPECT_EQ(detail::grid_size("k", 257, 256), 2U);
  // Without a grid-stride loop every block is launched: 2^23 + 1000 columns at 8 per block need
  // 1,048,701 blocks, above the 2^20 that the column-major fused path was capped at.
  EXPECT_EQ(detail::grid_size("k", (std::size_t{1} << 23) + 1000, 8), 1048701U);
  EXPECT_EQ(detail::grid_size("k", detail::max_grid_x, 1), 2147483647U);
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(detail::grid_size("minmax_rows_fused", detail::max_grid_x + 1, 1)), std::length_error,
                              "minmax_rows_fused: 2147483648 items at 1 per block need 2147483648 blocks, above the grid limit of 2147483647");
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(detail::grid_size("k", 65536, 1, 0, detail::max_grid_yz)), std::length_error,
                              "above the grid limit of 65535");
  // No overflow near the top of size_t.
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(detail::grid_size("k", std::numeric_limits<std::size_t>::max(), 256)),
                              std::length_error, "k: ");
  // With a grid-stride loop: capped, never above the work.
  EXPECT_EQ(detail::grid_size("k", std::size_t{1} << 40, 256, detail::grid_stride_blocks), 65535U);
  EXPECT_EQ(detail::grid_size("k", 1000, 256, detail::grid_stride_blocks), 4U);
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(detail::grid_size("k", 10, 0)), std::invalid_argument, "zero items per block");
}

struct shape {
  std::size_t rows, cols;
};

/// Shapes at the thresholds of the min-max launch code and far beyond what fits in memory.
std::vector<shape> minmax_shapes()
{
  std::vector<shape> shapes;
  std::size_t const past_old_cap = (std::size_t{1} << 23) + 1000;
  std::vector<std::size_t> const extents{1, 2, 63, 64, 65, 255, 256, 257, 1535, 1536, 8192, 8193, 114688, 114689, 229376, 229377,
                                         past_old_cap, (std::size_t{1} << 31) + 5, std::size_t{1} << 36};
  for (std::size_t r : extents) {
    for (std::size_t c : extents) { shapes.push_back({r, c}); }
  }
  return shapes;
}

template <class T>
void expect_normalize_plans_cover_every_element()
{
  for (auto [rows, cols] : minmax_shapes()) {
    for (layout order : {layout::row_major, layout::column_major}) {
      for (bool clusters : {false, true}) {
        // Never dereferenced: planning reads the shape only.
        auto const x = matrix_ref<T const>::dense(reinterpret_cast<T const*>(alignof(T)), rows, cols, order);
        SCOPED_TRACE(::testing::Message() << rows << " x " << cols << (order == layout::row_major ? " row" : " column")
                                          << "-major, clusters " << clusters);
        if (rows > std::numeric_limits<std::size_t>::max() / cols) {
          STREAMKIT_EXPECT_THROW_WITH(detail::expect_matrix(x, "x"), std::invalid_argument, "span more than std::size_t can address");
          continue;
        }
        EXPECT_NO_THROW(detail::expect_matrix(x, "x"));
        detail::minmax_plan plan;
        detail::reduce_plan reduce;
        try {
          plan = detail::plan_normalize(x, [&] { return clusters; });
          if (plan.path == detail::minmax_path::two_pass) { reduce = detail::plan_reduce(x, 132); }
        } catch (std::length_error const& error) {
          // Only for a grid beyond CUDA's limits: a block covers at least one column.
          EXPECT_GT(cols, detail::max_grid_x) << error.what();
          EXPECT_NE(std::string(error.what()).find("above the grid limit"), std::string::npos) << error.what();
          continue;
        }
        switch (plan.path) {
          case detail::minmax_path::rows_fused:
            EXPECT_EQ(order, layout::row_major);
            EXPECT_LE(rows, static_cast<std::size_t>(detail::rows_fused_limit));
            EXPECT_GE(std::size_t{plan.grid_x} * detail::rows_block_x, cols) << "every column has a block";
            break;
          case detail::minmax_path::cols_fused:
            EXPECT_EQ(order, layout::column_major);
            EXPECT_LE(rows, static_cast<std::size_t>(detail::cols_fused_limit));
            EXPECT_GE(std::size_t{plan.grid_x} * (detail::cols_fused_block / 32), cols) << "every column has a warp";
            break;
          case detail::minmax_path::cols_cluster:
            EXPECT_TRUE(clusters);
            EXPECT_EQ(std::size_t{plan.grid_x}, cols * plan.cluster_blocks) << "one cluster per column";
            EXPECT_GE(plan.cluster_blocks, 1U);
            EXPECT_LE(plan.cluster_blocks, static_cast<unsigned>(detail::cluster_blocks));
            EXPECT_LE((rows + plan.cluster_blocks - 1) / plan.cluster_blocks * sizeof(T), detail::cluster_slice_bytes);
            break;
          case detail::minmax_path::two_pass: {
            if (reduce.narrow) {
              EXPECT_GE(std::size_t{reduce.grid_x} * reduce.rows_per_block, rows) << "every row has a block";
            } else {
              std::size_t const per_block = order == layout::row_major ? detail::rows_block_x : detail::rows_block_y;
              EXPECT_GE(std::size_t{reduce.grid_x} * per_block, cols) << "every column has a block";
              EXPECT_GE(std::size_t{reduce.grid_y} * reduce.rows_per_block, rows) << "every row has a block";
              EXPECT_LE(reduce.grid_y, detail::max_grid_yz);
            }
            EXPECT_GE(detail::column_grid(cols), 1U);  // grid-stride kernels: any positive grid covers the work
            EXPECT_LE(detail::column_grid(cols), detail::grid_stride_blocks);
            EXPECT_GE(detail::apply_grid(rows, cols, 132), 1U);
            EXPECT_LE(detail::apply_grid(rows, cols, 132), 132U * 32U);
            break;
          }
        }
      }
    }
  }
}

TEST(LaunchPlan, MinMaxGridsCoverEveryElementOfAnyShape)
{
  expect_normalize_plans_cover_every_element<float>();
  expect_normalize_plans_cover_every_element<double>();
}

TEST(LaunchPlan, MinMaxPathsAtTheirThresholds)
{
  auto const path = [](std::size_t rows, std::size_t cols, layout order) {
    return detail::plan_normalize(matrix_ref<double const>::dense(nullptr, rows, cols, order), [] { return true; }).path;
  };
  EXPECT_EQ(path(64, 10, layout::row_major), detail::minmax_path::rows_fused);
  EXPECT_EQ(path(65, 10, layout::row_major), detail::minmax_path::two_pass);
  EXPECT_EQ(path(256, 10, layout::column_major), detail::minmax_path::cols_fused);
  EXPECT_EQ(path(257, 10, layout::column_major), detail::minmax_path::two_pass);
  EXPECT_EQ(path(1535, 10, layout::column_major), detail::minmax_path::two_pass);
  EXPECT_EQ(path(1536, 10, layout::column_major), detail::minmax_path::cols_cluster);
  EXPECT_EQ(path(114688, 10, layout::column_major), detail::minmax_path::cols_cluster);
  EXPECT_EQ(path(114689, 10, layout::column_major), detail::minmax_path::two_pass);
  // A cluster grid beyond 2^31 - 1 blocks takes the two-pass path instead of a clipped grid.
  EXPECT_EQ(path(100000, std::size_t{1} << 28, layout::column_major), detail::minmax_path::two_pass);
  // The cluster predicate is asked only where clusters could run.
  bool asked = false;
  static_cast<void>(detail::plan_normalize(matrix_ref<float const>::dense(nullptr, 100, 10, layout::column_major), [&] {
    asked = true;
    return true;
  }));
  EXPECT_FALSE(asked);
  // The 2^23 + 1000-column case of the bug report: a block for every one of its columns.
  auto const wide = detail::plan_normalize(matrix_ref<float const>::dense(nullptr, 1, (std::size_t{1} << 23) + 1000, layout::column_major),
                                           [] { return true; });
  EXPECT_EQ(wide.grid_x, 1048701U);
}

TEST(LaunchPlan, ClusterSizeGivesSixteenValuesPerThreadWithinSharedMemory)
{
  using detail::cluster_size;
  // 512 threads x 16 values = 8192 rows per block; a block's slice holds 14336 doubles or 28672 floats.
  EXPECT_EQ(cluster_size<double>(1536), 1U);
  EXPECT_EQ(cluster_size<double>(8192), 1U);
  EXPECT_EQ(cluster_size<double>(8193), 2U);
  EXPECT_EQ(cluster_size<double>(16385), 3U);
  EXPECT_EQ(cluster_size<double>(65536), 8U);
  EXPECT_EQ(cluster_size<double>(114688), 8U);
  EXPECT_EQ(cluster_size<float>(16384), 2U);
  EXPECT_EQ(cluster_size<float>(229376), 8U);
  for (std::size_t rows = 1536; rows <= 114688; rows += 977) {
    unsigned const blocks = cluster_size<double>(rows);
    EXPECT_LE((rows + blocks - 1) / blocks * sizeof(double), detail::cluster_slice_bytes) << rows;
  }
}

TEST(LaunchPlan, NearestPlanFillsTheDeviceAndCoversEveryPair)
{
  std::size_t const per_block = 1024, tile = 512, resident = 132 * 8;
  for (auto const [n, m] : {shape{1 << 24, 1 << 14}, shape{1 << 16, 1 << 13}, shape{1 << 10, 1 << 22}, shape{1, 1}, shape{1, 1 << 22},
                            shape{12345, 678}, shape{(std::size_t{1} << 31) + 5, 3}, shape{3, std::size_t{65535} * 512 + 7},
                            shape{1, std::size_t{1} << 40}, shape{std::size_t{1} << 40, 1}}) {
    SCOPED_TRACE(::testing::Message() << n << " x " << m);
    auto const plan = detail::plan_nearest(n, m, per_block, tile, resident);
    EXPECT_EQ(plan.obs_blocks, (n + per_block - 1) / per_block);
    EXPECT_GE(plan.slices, 1U);
    EXPECT_LE(plan.slices, detail::max_grid_yz);
    EXPECT_EQ(plan.slice_length % tile, 0U);
    EXPECT_GE(std::size_t{plan.slices} * plan.slice_length, m) << "every reference is covered";
    EXPECT_LT((std::size_t{plan.slices} - 1) * plan.slice_length, m) << "no empty slice";
    std::size_t const blocks = std::size_t{plan.obs_blocks} * plan.slices;
    if (m >= tile * 2 * resident) { EXPECT_GE(blocks, resident); }
  }
  auto const wide = detail::plan_nearest(1 << 10, 1 << 22, per_block, tile, resident);
  EXPECT_GE(wide.slices, resident);
  auto const tall = detail::plan_nearest(1 << 24, 1 << 14, per_block, tile, resident);
  EXPECT_EQ(tall.slices, 1U);
  // More observation blocks than a grid holds: an error, not a clipped grid.
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(detail::plan_nearest(std::size_t{1} << 42, 1, per_block, tile, resident)),
                              std::length_error, "nearest_pass1: ");
}

}  // namespace
