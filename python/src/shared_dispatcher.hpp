#pragma once
// One dispatcher over every visible GPU for the whole process, made on first use: the host-array
// paths (NumPy inputs) of nearest, NearestIndex and normalize_many share its streams, threads and
// staging memory, so repeated calls allocate nothing new.

#include <streamkit/multi_gpu/dispatcher.hpp>

#include <mutex>

namespace streamkit_python {

/// The dispatcher and the lock its users hold for a whole batch (it runs one batch at a time).
struct shared_dispatcher {
  streamkit::dispatcher& workers;
  std::unique_lock<std::mutex> lock;
};

/// The process's dispatcher (every visible device, its default streams per device), locked.
/// @throws std::runtime_error without a CUDA device.
shared_dispatcher lock_shared_dispatcher();

}  // namespace streamkit_python
