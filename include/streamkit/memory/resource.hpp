#pragma once
/// @file resource.hpp
/// Where streamkit's device memory comes from: any stream-ordered memory resource of CCCL's
/// `cuda::mr` interface, passed by reference (`device_resource_ref`). An RMM resource
/// (`rmm::device_async_resource_ref` of RMM 25.10, built on CCCL 3.0, derives from
/// `device_resource_ref` and converts implicitly) or one of the caller's own drops in; the default
/// is the device's stream-ordered pool (cudaMallocAsync).
///
/// CCCL 3.0 keeps `cuda::mr` behind LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE; the streamkit
/// CMake target defines it (as RMM's does), and this header defines it when nothing else has.

#if !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#  if defined(_CUDA_MEMORY_RESOURCE)
#    error "streamkit: define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE before <cuda/memory_resource> is first included (the streamkit CMake target does)"
#  endif
#  define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#include <streamkit/core/error.hpp>

#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace streamkit {

/// A non-owning reference to a stream-ordered resource of device-accessible memory.
using device_resource_ref = cuda::mr::async_resource_ref<cuda::mr::device_accessible>;

/// Alignment of every device allocation streamkit asks for (that of cudaMalloc).
inline constexpr std::size_t device_alignment = 256;

/// The default device memory resource: the memory pool of the stream's device, through
/// cudaMallocAsync and cudaFreeAsync (cudaMalloc and cudaFree for the synchronous calls). Stateless:
/// all instances are equal.
class stream_ordered_resource {
 public:
  /// Allocates `bytes` on the current device, synchronously.
  /// @throws bad_alloc on failure; std::invalid_argument for an alignment above device_alignment.
  void* allocate(std::size_t bytes, std::size_t alignment = device_alignment)
  {
    expect_alignment(alignment);
    void* memory = nullptr;
    STREAMKIT_CUDA_TRY_ALLOC(cudaMalloc(&memory, bytes));
    return memory;
  }
  /// Frees memory from allocate().
  void deallocate(void* memory, std::size_t, std::size_t = device_alignment) noexcept
  {
    detail::ignore_release_error(cudaFree(memory));
  }
  /// Allocates `bytes` from the pool of `stream`'s device, ordered on `stream`; never waits.
  /// @throws bad_alloc on failure; std::invalid_argument for an alignment above device_alignment.
  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream)
  {
    expect_alignment(alignment);
    void* memory = nullptr;
    STREAMKIT_CUDA_TRY_ALLOC(cudaMallocAsync(&memory, bytes, stream.get()));
    return memory;
  }
  /// Returns memory to the pool, ordered on `stream`.
  void deallocate_async(void* memory, std::size_t, std::size_t, cuda::stream_ref stream) noexcept
  {
    detail::ignore_release_error(cudaFreeAsync(memory, stream.get()));
  }
  /// All instances are interchangeable.
  [[nodiscard]] bool operator==(stream_ordered_resource const&) const noexcept { return true; }
  /// All instances are interchangeable.
  [[nodiscard]] bool operator!=(stream_ordered_resource const&) const noexcept { return false; }
  /// The memory is device accessible.
  friend constexpr void get_property(stream_ordered_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  static void expect_alignment(std::size_t alignment)
  {
    STREAMKIT_EXPECTS(alignment > 0 && alignment <= device_alignment && (alignment & (alignment - 1)) == 0, std::invalid_argument,
                      "alignment: " + std::to_string(alignment) + " is not a power of two up to " + std::to_string(device_alignment));
  }
};

/// The resource streamkit allocates from when a call is given none: a process-wide
/// stream_ordered_resource.
[[nodiscard]] inline device_resource_ref default_device_resource() noexcept
{
  static stream_ordered_resource resource;
  return device_resource_ref(resource);
}

}  // namespace streamkit
