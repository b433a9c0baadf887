#include "shared_dispatcher.hpp"
#include "device_memory.hpp"

namespace streamkit_python {

shared_dispatcher lock_shared_dispatcher()
{
  static std::mutex mutex;
  // Deliberately never destroyed: at interpreter exit the CUDA runtime may already be torn down, and
  // the dispatcher's destructor would join threads and free device memory after it.
  static streamkit::dispatcher* workers = nullptr;
  std::unique_lock<std::mutex> lock(mutex);
  if (workers == nullptr) {
    workers = new streamkit::dispatcher();
    for (int device : workers->devices()) { prepare_device(device); }
  }
  return {*workers, std::move(lock)};
}

}  // namespace streamkit_python
