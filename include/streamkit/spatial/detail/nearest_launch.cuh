#pragma once
// Launch helpers shared by the nearest-neighbour engines.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>

#include <cstddef>

namespace streamkit::detail {

/// Counts the invalid observations on `stream` into `counter`, copies `counts` (invalid references,
/// then observations) to the host, waits, and throws for either under invalid_points::reject.
template <class T>
void reject_invalid_points(points_ref<T> const& observations, nearest_options const& options, unsigned long long* counts,
                           stream_ref stream)
{
  unsigned long long* const observations_count = counts + 1;
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(observations_count, 0, sizeof(unsigned long long), stream.value()));
  count_invalid_points<T><<<grid_size("count_invalid_points", observations.count, 256, grid_stride_blocks), 256, 0,
                            stream.value()>>>(observations, observations.count, observations_count);
  STREAMKIT_CHECK_LAUNCH();
  unsigned long long invalid[2] = {0, 0};
  STREAMKIT_CUDA_TRY(cudaMemcpyAsync(invalid, counts, sizeof invalid, cudaMemcpyDeviceToHost, stream.value()));
  stream.sync();
  expect_valid_points(options, invalid[0], "references");
  expect_valid_points(options, invalid[1], "observations");
}

/// Resident blocks of `kernel` at `threads` per block on `device`.
template <class Kernel>
std::size_t resident_blocks(Kernel kernel, int threads, int device)
{
  int blocks_per_sm = 0;
  STREAMKIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, kernel, threads, 0));
  int sm_count = 0;
  STREAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
  return static_cast<std::size_t>(blocks_per_sm) * static_cast<std::size_t>(sm_count);
}

}  // namespace streamkit::detail
