#pragma once
// Free device memory as seen after all work has finished and the stream-ordered pool has returned
// what it keeps unused, so that only live allocations count (shared by the tests and the soak).

#include <streamkit/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace streamkit_test {

inline std::size_t settled_free_memory(int device = 0)
{
  STREAMKIT_CUDA_TRY(cudaDeviceSynchronize());
  cudaMemPool_t pool = nullptr;
  STREAMKIT_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
  STREAMKIT_CUDA_TRY(cudaMemPoolTrimTo(pool, 0));
  std::size_t free = 0, total = 0;
  STREAMKIT_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return free;
}

}  // namespace streamkit_test
