#pragma once
/// @file device.hpp
/// Devices: how many there are, what each one is, and a scoped guard that makes one current.

#include <streamkit/core/error.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

namespace streamkit {

/// The number of visible CUDA devices. Returns 0 (never throws) when there is no driver, no GPU, or
/// the driver is older than the runtime, so programs can decide to skip GPU work.
[[nodiscard]] inline int device_count() noexcept
{
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return 0;
  }
  return count;
}

/// The current device of the calling host thread.
[[nodiscard]] inline int current_device_id()
{
  int id = 0;
  STREAMKIT_CUDA_TRY(cudaGetDevice(&id));
  return id;
}

/// A handle to one device, validated on construction, with its properties read on demand.
class device {
 public:
  /// @throws std::out_of_range if `id` is not in [0, device_count()).
  explicit device(int id) : id_(id)
  {
    int const count = device_count();
    STREAMKIT_EXPECTS(id >= 0 && id < count, std::out_of_range,
                      "device id " + std::to_string(id) + " is out of range [0, " + std::to_string(count) +
                        ")" + (count == 0 ? " (no CUDA device is visible)" : ""));
  }

  /// The calling thread's current device.
  [[nodiscard]] static device current() { return device(current_device_id()); }

  /// The device id.
  [[nodiscard]] int id() const noexcept { return id_; }
  /// The product name (cudaDeviceProp::name).
  [[nodiscard]] std::string name() const
  {
    cudaDeviceProp properties{};
    STREAMKIT_CUDA_TRY(cudaGetDeviceProperties(&properties, id_));
    return properties.name;
  }
  /// Number of streaming multiprocessors.
  [[nodiscard]] int sm_count() const { return attribute(cudaDevAttrMultiProcessorCount); }
  /// Compute capability as (major, minor), e.g. (9, 0) for Hopper.
  [[nodiscard]] std::pair<int, int> compute_capability() const
  {
    return {attribute(cudaDevAttrComputeCapabilityMajor), attribute(cudaDevAttrComputeCapabilityMinor)};
  }
  /// Number of asynchronous copy engines (copies that can run at once with kernels and each other).
  [[nodiscard]] int copy_engine_count() const { return attribute(cudaDevAttrAsyncEngineCount); }
  /// Total device memory in bytes.
  [[nodiscard]] std::size_t total_memory() const { return memory_info().second; }
  /// Free device memory in bytes at the time of the call (cudaMemGetInfo).
  [[nodiscard]] std::size_t free_memory() const { return memory_info().first; }
  /// Size of the L2 cache in bytes.
  [[nodiscard]] std::size_t l2_cache_bytes() const { return static_cast<std::size_t>(attribute(cudaDevAttrL2CacheSize)); }
  /// Stream priorities as (least, greatest). Greater priority is the numerically smaller value.
  [[nodiscard]] std::pair<int, int> stream_priority_range() const;

  /// Any device attribute.
  [[nodiscard]] int attribute(cudaDeviceAttr which) const
  {
    int value = 0;
    STREAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&value, which, id_));
    return value;
  }

 private:
  [[nodiscard]] std::pair<std::size_t, std::size_t> memory_info() const;

  int id_;
};

/// Makes a device current for the guard's lifetime and restores the previous one afterwards.
/// Calls cudaSetDevice only when the device differs, so it is cheap in loops.
class device_guard {
 public:
  /// Makes `id` current (if it is not already) and remembers the previous device.
  /// @throws cuda_error if cudaSetDevice fails (e.g. for an invalid id).
  explicit device_guard(int id) : previous_(current_device_id())
  {
    if (id != previous_) {
      STREAMKIT_CUDA_TRY(cudaSetDevice(id));
      switched_ = true;
    }
  }
  ~device_guard() noexcept
  {
    if (switched_) { detail::ignore_release_error(cudaSetDevice(previous_)); }
  }
  device_guard(device_guard const&) = delete;
  device_guard& operator=(device_guard const&) = delete;
  device_guard(device_guard&&) = delete;
  device_guard& operator=(device_guard&&) = delete;

 private:
  int previous_;
  bool switched_ = false;
};

inline std::pair<int, int> device::stream_priority_range() const
{
  device_guard guard(id_);
  int least = 0;
  int greatest = 0;
  STREAMKIT_CUDA_TRY(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return {least, greatest};
}

inline std::pair<std::size_t, std::size_t> device::memory_info() const
{
  device_guard guard(id_);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  STREAMKIT_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
  return {free_bytes, total_bytes};
}

}  // namespace streamkit
