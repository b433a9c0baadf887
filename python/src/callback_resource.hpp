#pragma once
// A device memory resource (CCCL's cuda::mr interface, as streamkit takes it) that allocates through
// two callbacks: how the temporaries of streamkit.nearest come from the caller's framework when the
// caller has replaced its allocator (CuPy's or PyTorch's, e.g. with RMM's). Plain C++: nvcc compiles
// its users (nearest.cu); the callbacks are the binding code's (nearest_bindings.cpp), which calls
// into Python.

#include "allocation_callbacks.hpp"

#include <streamkit/core/error.hpp>
#include <streamkit/memory/resource.hpp>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <cuda_runtime_api.h>

namespace streamkit_python {

class callback_resource {
 public:
  explicit callback_resource(allocation_callbacks const& callbacks) : callbacks_(callbacks) {}

  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream)
  {
    if (bytes == 0) { return nullptr; }
    void* const memory = callbacks_.allocate(callbacks_.context, bytes, stream.get());
    if (alignment == 0 || reinterpret_cast<std::uintptr_t>(memory) % alignment != 0) {
      callbacks_.deallocate(callbacks_.context, memory);
      throw std::invalid_argument("the framework's allocator returned memory aligned to less than " + std::to_string(alignment) +
                                  " bytes");
    }
    return memory;
  }
  void deallocate_async(void* memory, std::size_t, std::size_t, cuda::stream_ref) noexcept
  {
    if (memory != nullptr) { callbacks_.deallocate(callbacks_.context, memory); }
  }
  /// The synchronous forms (streamkit's calls use the stream-ordered ones): on the legacy default
  /// stream, and a release waits for the device first.
  void* allocate(std::size_t bytes, std::size_t alignment = streamkit::device_alignment)
  {
    void* const memory = allocate_async(bytes, alignment, cuda::stream_ref(cudaStreamLegacy));
    STREAMKIT_CUDA_TRY(cudaStreamSynchronize(cudaStreamLegacy));
    return memory;
  }
  void deallocate(void* memory, std::size_t bytes, std::size_t alignment = streamkit::device_alignment) noexcept
  {
    streamkit::detail::ignore_release_error(cudaDeviceSynchronize());
    deallocate_async(memory, bytes, alignment, cuda::stream_ref(cudaStreamLegacy));
  }
  [[nodiscard]] bool operator==(callback_resource const& other) const noexcept { return callbacks_.context == other.callbacks_.context; }
  [[nodiscard]] bool operator!=(callback_resource const& other) const noexcept { return !(*this == other); }
  friend constexpr void get_property(callback_resource const&, cuda::mr::device_accessible) noexcept {}

 private:
  allocation_callbacks callbacks_;
};

}  // namespace streamkit_python
