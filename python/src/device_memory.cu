#include "device_memory.hpp"
#include "device_support.hpp"

#include <streamkit/core/error.hpp>

#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#include <cuda_runtime_api.h>

namespace streamkit_python {

void prepare_device(int device)
{
  static std::mutex mutex;
  static std::vector<bool> done;
  std::lock_guard<std::mutex> const lock(mutex);
  if (static_cast<std::size_t>(device) < done.size() && done[static_cast<std::size_t>(device)]) { return; }
  require_supported(device);
  cudaMemPool_t pool = nullptr;
  STREAMKIT_CUDA_TRY(cudaDeviceGetMemPool(&pool, device));
  std::uint64_t threshold = 0;
  STREAMKIT_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  if (threshold == 0) {
    threshold = std::numeric_limits<std::uint64_t>::max();
    STREAMKIT_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  }
  if (done.size() <= static_cast<std::size_t>(device)) { done.resize(static_cast<std::size_t>(device) + 1, false); }
  done[static_cast<std::size_t>(device)] = true;
}

}  // namespace streamkit_python
