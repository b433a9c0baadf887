#pragma once
// The one grid-size helper of streamkit: every kernel launch in the library sizes its grid here.

#include <streamkit/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace streamkit::detail {

/// CUDA's grid limits for every compute capability streamkit builds for (3.0 and later):
/// gridDim.x ≤ 2^31 − 1 blocks, gridDim.y and gridDim.z ≤ 65535.
inline constexpr std::size_t max_grid_x = 2147483647;
inline constexpr std::size_t max_grid_yz = 65535;

/// The most blocks worth launching for a kernel with a grid-stride loop: 65535 blocks of 256 threads
/// fill a 132-SM H100 (2048 threads each) 62 times over; more only adds block launches.
inline constexpr std::size_t grid_stride_blocks = 65535;

/// Blocks along one grid dimension so that `items` work items, `items_per_block` per block, are all
/// covered; at least 1.
/// - A kernel with a grid-stride loop passes `stride_cap` (the most blocks worth launching, at most
///   `dimension_limit`) and gets no more than that: its loop takes the rest.
/// - A kernel without one passes 0 (the default) and gets every block it needs. A shape that needs
///   more than `dimension_limit` blocks (max_grid_x, or max_grid_yz for y and z) throws
///   std::length_error naming `kernel`: no grid is ever silently smaller than its work.
[[nodiscard]] inline unsigned grid_size(char const* kernel, std::size_t items, std::size_t items_per_block,
                                        std::size_t stride_cap = 0, std::size_t dimension_limit = max_grid_x)
{
  STREAMKIT_EXPECTS(items_per_block > 0, std::invalid_argument, std::string(kernel) + ": zero items per block");
  std::size_t blocks = std::max<std::size_t>(items / items_per_block + (items % items_per_block != 0 ? 1 : 0), 1);
  if (stride_cap != 0) { blocks = std::min(blocks, stride_cap); }
  STREAMKIT_EXPECTS(blocks <= dimension_limit, std::length_error,
                    std::string(kernel) + ": " + std::to_string(items) + " items at " + std::to_string(items_per_block) +
                      " per block need " + std::to_string(blocks) + " blocks, above the grid limit of " +
                      std::to_string(dimension_limit));
  return static_cast<unsigned>(blocks);
}

}  // namespace streamkit::detail
