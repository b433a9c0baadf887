#pragma once
/// @file timer.hpp
/// A scoped GPU timer: records a start event on construction and a stop event when it ends.

#include <streamkit/core/event.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cmath>
#include <limits>
#include <optional>

namespace streamkit {

/// Times the GPU work enqueued on one stream during the timer's lifetime.
///
///     gpu_duration t;
///     { scoped_timer timer(stream, t); launch(stream); }  // t holds the GPU time
///
/// or call stop() for the value directly. Both wait for the stop event (a host sync on that event).
class scoped_timer {
 public:
  /// Starts timing on `stream`; if `result` is given, the destructor writes the elapsed time there
  /// (NaN if it could not be measured, since a destructor cannot throw).
  explicit scoped_timer(stream_ref stream, gpu_duration* result = nullptr)
      : stream_(stream), start_(stream), stop_(stream), result_(result)
  {
    start_.record(stream_);
  }
  /// Starts timing on `stream`; the destructor writes the elapsed time to `result` (NaN if it could
  /// not be measured).
  scoped_timer(stream_ref stream, gpu_duration& result) : scoped_timer(stream, &result) {}

  ~scoped_timer() noexcept
  {
    if (result_ == nullptr) { return; }
    try {
      *result_ = stop();
    } catch (...) {
      *result_ = gpu_duration(std::numeric_limits<float>::quiet_NaN());
    }
  }
  scoped_timer(scoped_timer const&) = delete;
  scoped_timer& operator=(scoped_timer const&) = delete;
  scoped_timer(scoped_timer&&) = delete;
  scoped_timer& operator=(scoped_timer&&) = delete;

  /// Records the stop event (the first time only), waits for it and returns the elapsed GPU time.
  gpu_duration stop()
  {
    if (!stopped_) {
      stop_.record(stream_);
      stopped_ = true;
    }
    stop_.sync();
    return elapsed(start_, stop_);
  }

 private:
  stream_ref stream_;
  timed_event start_;
  timed_event stop_;
  gpu_duration* result_;
  bool stopped_ = false;
};

}  // namespace streamkit
