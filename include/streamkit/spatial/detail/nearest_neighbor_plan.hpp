#pragma once
// Launch planning of the nearest-neighbour search: the pass-1 kernel's shape and its grid for N
// observations and M references. Plain C++ (no CUDA call), so that the grids of any shape can be
// checked on a machine without a GPU.

#include <streamkit/core/detail/launch.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>

namespace streamkit::detail {

/// Compile-time shape of the pass-1 kernel; V is the type of its partial minima: float for
/// nn_precision::fast, double for nn_precision::exact (whose float loop is refined in double).
template <class V>
struct pass1_shape {
  static constexpr int threads = 128;
  // Independent accumulators per thread; amortises each shared load. Exact mode keeps double vectors
  // and minima beside the float ones (164 registers at 8): 4 measured 101 ms against 182 ms for
  // 2^24 x 2^14 on an H100.
  static constexpr int obs_per_thread = std::is_same_v<V, double> ? 4 : 8;
  static constexpr int group = 32;  // references between index updates
  static constexpr int tile = 512;  // references per shared-memory tile (8 KiB of float vectors)
};

/// How pass 1 is laid out: observation blocks (grid x) × reference slices (grid y).
struct nearest_plan {
  std::size_t obs_per_block = 0;
  unsigned obs_blocks = 0;
  std::size_t slice_length = 0;  ///< references per slice, a multiple of the tile (except the last slice)
  unsigned slices = 0;
};

/// Splits the reference set into just enough slices that observation blocks × slices fills the
/// device about twice over (`resident_blocks` = SMs × blocks per SM), whatever N and M are; at most
/// max_grid_yz slices. Throws std::length_error when N needs more observation blocks than a grid holds.
[[nodiscard]] inline nearest_plan plan_nearest(std::size_t n, std::size_t m, std::size_t obs_per_block, std::size_t tile,
                                               std::size_t resident_blocks)
{
  nearest_plan plan;
  plan.obs_per_block = obs_per_block;
  plan.obs_blocks = grid_size("nearest_pass1", n, obs_per_block);
  std::size_t const target_blocks = 2 * std::max<std::size_t>(resident_blocks, 1);
  std::size_t const max_slices = std::max<std::size_t>((m + tile - 1) / tile, 1);
  std::size_t const wanted = (target_blocks + plan.obs_blocks - 1) / plan.obs_blocks;
  std::size_t const slices = std::clamp<std::size_t>(wanted, 1, std::min(max_slices, max_grid_yz));
  std::size_t const per_slice = (m + slices - 1) / slices;
  plan.slice_length = std::max<std::size_t>((per_slice + tile - 1) / tile * tile, tile);
  plan.slices = grid_size("nearest_pass1", m, plan.slice_length, 0, max_grid_yz);
  return plan;
}

}  // namespace streamkit::detail
