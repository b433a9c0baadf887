#pragma once
// Allocation through the caller's code, as plain C++ (callback_resource.hpp makes a streamkit memory
// resource of it; nearest_bindings.cpp fills it with calls into Python).

#include <cstddef>

#include <cuda_runtime_api.h>

namespace streamkit_python {

/// allocate() returns memory ordered on `stream` (or throws); deallocate() gives it back in the order
/// of the stream it was allocated on (the temporaries of one call live on one stream).
struct allocation_callbacks {
  void* context = nullptr;
  void* (*allocate)(void* context, std::size_t bytes, cudaStream_t stream) = nullptr;
  void (*deallocate)(void* context, void* memory) noexcept = nullptr;
};

}  // namespace streamkit_python
