#pragma once
/// @file stream_ref.hpp
/// Non-owning views of a CUDA stream and a CUDA event.

#include <streamkit/core/error.hpp>

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

namespace streamkit {

/// A non-owning view of a CUDA event; what streams wait on. `event` and `timed_event` convert to it.
class event_ref {
 public:
  /// Views `handle` without taking ownership.
  constexpr explicit event_ref(cudaEvent_t handle) noexcept : handle_(handle) {}
  /// The CUDA event handle.
  [[nodiscard]] constexpr cudaEvent_t value() const noexcept { return handle_; }

 private:
  cudaEvent_t handle_;
};

/// A non-owning, trivially copyable view of a CUDA stream. It cannot be built from `0` or `nullptr`:
/// name the default streams with legacy_default() or per_thread_default() so that a launch on the
/// (synchronising) legacy stream is always visible in the code.
class stream_ref {
 public:
  /// Views `handle` without taking ownership; implicit, so a raw cudaStream_t converts.
  constexpr stream_ref(cudaStream_t handle) noexcept : handle_(handle) {}  // NOLINT: implicit by design
  stream_ref(int) = delete;
  stream_ref(std::nullptr_t) = delete;

  /// The legacy default stream, which synchronises with every blocking stream of its device.
  [[nodiscard]] static stream_ref legacy_default() noexcept { return stream_ref(cudaStreamLegacy); }
  /// The calling host thread's default stream (does not synchronise with other streams).
  [[nodiscard]] static stream_ref per_thread_default() noexcept { return stream_ref(cudaStreamPerThread); }

  /// The CUDA stream handle.
  [[nodiscard]] constexpr cudaStream_t value() const noexcept { return handle_; }
  /// The CUDA stream handle, for runtime calls and kernel launches.
  constexpr operator cudaStream_t() const noexcept { return handle_; }  // NOLINT: implicit by design
  /// Drops into libcu++ / CUB / Thrust APIs that take a `cuda::stream_ref`.
  operator cuda::stream_ref() const noexcept { return cuda::stream_ref(handle_); }  // NOLINT

  /// True for the legacy default stream (including the `0` handle) and the per-thread default stream.
  [[nodiscard]] bool is_default() const noexcept
  {
    return handle_ == nullptr || handle_ == cudaStreamLegacy || handle_ == cudaStreamPerThread;
  }

  /// The device the stream belongs to.
  [[nodiscard]] int device() const
  {
    int id = 0;
    STREAMKIT_CUDA_TRY(cudaStreamGetDevice(handle_, &id));
    return id;
  }

  /// Blocks the host until all work enqueued so far has finished.
  void sync() const { STREAMKIT_CUDA_TRY(cudaStreamSynchronize(handle_)); }

  /// True if all work enqueued so far has finished.
  [[nodiscard]] bool ready() const
  {
    cudaError_t const status = cudaStreamQuery(handle_);
    if (status == cudaErrorNotReady) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    STREAMKIT_CUDA_TRY(status);
    return true;
  }

  /// Work enqueued after this call waits until `event` has completed (the event may be of another device).
  void wait(event_ref event) const { STREAMKIT_CUDA_TRY(cudaStreamWaitEvent(handle_, event.value(), 0)); }

  /// Work enqueued after this call waits for all work enqueued on `other` so far.
  void wait(stream_ref other) const
  {
    cudaEvent_t marker{};
    STREAMKIT_CUDA_TRY(cudaEventCreateWithFlags(&marker, cudaEventDisableTiming));
    // The runtime defers the event's destruction until it completes, so it can go at once.
    std::unique_ptr<CUevent_st, decltype(&cudaEventDestroy)> const owner(marker, &cudaEventDestroy);
    STREAMKIT_CUDA_TRY(cudaEventRecord(marker, other.handle_));
    STREAMKIT_CUDA_TRY(cudaStreamWaitEvent(handle_, marker, 0));
  }

  /// Runs `callback()` on a runtime thread once all earlier work on the stream has finished. The
  /// callback must not call CUDA and must not throw (an escaping exception terminates the program).
  template <class Callback>
  void host_callback(Callback&& callback) const
  {
    using stored_type = std::decay_t<Callback>;
    auto owned = std::make_unique<stored_type>(std::forward<Callback>(callback));
    auto trampoline = [](void* data) {
      std::unique_ptr<stored_type> const callable(static_cast<stored_type*>(data));
      (*callable)();
    };
    STREAMKIT_CUDA_TRY(cudaLaunchHostFunc(handle_, trampoline, owned.get()));
    static_cast<void>(owned.release());
  }

  /// True if both view the same stream handle.
  friend constexpr bool operator==(stream_ref a, stream_ref b) noexcept { return a.handle_ == b.handle_; }
  /// True if the views hold different stream handles.
  friend constexpr bool operator!=(stream_ref a, stream_ref b) noexcept { return a.handle_ != b.handle_; }

 private:
  cudaStream_t handle_;
};

}  // namespace streamkit
