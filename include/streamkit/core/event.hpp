#pragma once
/// @file event.hpp
/// Owning CUDA events: `event` (cheap, no timing) and `timed_event`, plus checked elapsed time.

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace streamkit {

/// GPU-measured durations, in milliseconds as float (the resolution cudaEventElapsedTime gives).
using gpu_duration = std::chrono::duration<float, std::milli>;

/// An owning, move-only CUDA event created with the cudaEventCreateWithFlags `Flags`, on one device:
/// the common interface of `event` (timing disabled) and `timed_event`. Use those two.
template <unsigned Flags>
class basic_event {
 public:
  /// Creates the event on `device_id` (default: the current device).
  explicit basic_event(int device_id) : device_(device_id)
  {
    device_guard guard(device_);
    STREAMKIT_CUDA_TRY(cudaEventCreateWithFlags(&handle_, Flags));
  }
  /// Creates the event on the current device.
  basic_event() : basic_event(current_device_id()) {}
  /// Creates the event on `stream`'s device, ready to be recorded there.
  explicit basic_event(stream_ref stream) : basic_event(stream.device()) {}

  /// Destroys the event (a pending record completes on the device regardless).
  ~basic_event() noexcept
  {
    if (handle_ != nullptr) { detail::ignore_release_error(cudaEventDestroy(handle_)); }
  }
  basic_event(basic_event const&) = delete;
  basic_event& operator=(basic_event const&) = delete;
  /// Takes `other`'s event; `other` is left without one.
  basic_event(basic_event&& other) noexcept
      : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_), recorded_(std::exchange(other.recorded_, false))
  {
  }
  /// Destroys this event and takes `other`'s.
  basic_event& operator=(basic_event&& other) noexcept
  {
    if (this != &other) {
      if (handle_ != nullptr) { detail::ignore_release_error(cudaEventDestroy(handle_)); }
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
      recorded_ = std::exchange(other.recorded_, false);
    }
    return *this;
  }

  /// Captures the work enqueued on `stream` so far. The stream must belong to the event's device.
  void record(stream_ref stream)
  {
    STREAMKIT_EXPECTS(handle_ != nullptr, std::logic_error, "record() on a moved-from event");
    int const stream_device = stream.device();
    STREAMKIT_EXPECTS(stream_device == device_, std::invalid_argument,
                      "stream: belongs to device " + std::to_string(stream_device) + " but the event to device " +
                        std::to_string(device_));
    STREAMKIT_CUDA_TRY(cudaEventRecord(handle_, stream.value()));
    recorded_ = true;
  }
  /// Blocks the host until the recorded work has completed.
  void sync() const { STREAMKIT_CUDA_TRY(cudaEventSynchronize(handle_)); }
  /// True once the recorded work has completed (also true if never recorded).
  [[nodiscard]] bool ready() const
  {
    cudaError_t const status = cudaEventQuery(handle_);
    if (status == cudaErrorNotReady) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    STREAMKIT_CUDA_TRY(status);
    return true;
  }

  /// The CUDA handle (null for a moved-from event).
  [[nodiscard]] cudaEvent_t value() const noexcept { return handle_; }
  /// The device the event belongs to.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// True once record() has been called.
  [[nodiscard]] bool recorded() const noexcept { return recorded_; }
  /// A non-owning reference to the event.
  operator event_ref() const noexcept { return event_ref(handle_); }  // NOLINT: implicit by design

 private:
  cudaEvent_t handle_{};
  int device_;
  bool recorded_ = false;
};

/// An event for ordering and completion only (timing disabled, which makes it cheaper). Its
/// interface is basic_event's.
class event : public basic_event<cudaEventDisableTiming> {
  using basic_event::basic_event;
};

/// An event that records a timestamp, for GPU timing with elapsed(). Its interface is basic_event's.
class timed_event : public basic_event<cudaEventDefault> {
  using basic_event::basic_event;
};

namespace detail {
/// Returns an explanation of why elapsed(start, stop) cannot be measured, or an empty string.
inline std::string elapsed_problem(timed_event const& start, timed_event const& stop)
{
  if (start.value() == nullptr || stop.value() == nullptr) { return "elapsed(): an event was moved from"; }
  if (!start.recorded()) { return "elapsed(): the start event was never recorded"; }
  if (!stop.recorded()) { return "elapsed(): the stop event was never recorded"; }
  if (start.device() != stop.device()) {
    return "elapsed(): start is on device " + std::to_string(start.device()) + " and stop on device " +
           std::to_string(stop.device());
  }
  if (!start.ready()) { return "elapsed(): the start event has not completed yet (call sync() first)"; }
  if (!stop.ready()) { return "elapsed(): the stop event has not completed yet (call sync() first)"; }
  return {};
}
}  // namespace detail

/// GPU time between two completed timed events of the same device.
/// @throws std::logic_error if either was never recorded or has not completed, or the devices differ.
[[nodiscard]] inline gpu_duration elapsed(timed_event const& start, timed_event const& stop)
{
  std::string const problem = detail::elapsed_problem(start, stop);
  STREAMKIT_EXPECTS(problem.empty(), std::logic_error, problem);
  float milliseconds = 0.0F;
  STREAMKIT_CUDA_TRY(cudaEventElapsedTime(&milliseconds, start.value(), stop.value()));
  return gpu_duration(milliseconds);
}

/// As elapsed(), but returns no value instead of throwing.
[[nodiscard]] inline std::optional<gpu_duration> try_elapsed(timed_event const& start, timed_event const& stop) noexcept
{
  try {
    return elapsed(start, stop);
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace streamkit
