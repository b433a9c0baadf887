#pragma once
/// @file stream.hpp
/// Owning CUDA streams and a per-device pool of them.

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace streamkit {

/// Whether a new stream synchronises with the legacy default stream.
enum class stream_sync_mode : unsigned {
  non_blocking = cudaStreamNonBlocking,  ///< independent of the legacy default stream (the default)
  blocking = cudaStreamDefault,          ///< implicitly ordered with the legacy default stream
};

/// An owning, move-only CUDA stream that remembers its device.
class stream {
 public:
  /// A non-blocking stream of default priority on the current device.
  stream() : stream(current_device_id()) {}

  /// A stream on `device_id`. `priority` must lie in that device's range, between
  /// device(device_id).stream_priority_range().second (greatest) and .first (least, usually 0).
  /// @throws std::out_of_range for a bad device id or priority.
  explicit stream(int device_id, int priority = 0, stream_sync_mode mode = stream_sync_mode::non_blocking)
      : device_(streamkit::device(device_id).id())
  {
    auto const [least, greatest] = streamkit::device(device_).stream_priority_range();
    STREAMKIT_EXPECTS(priority >= greatest && priority <= least, std::out_of_range,
                      "priority " + std::to_string(priority) + " is outside device " + std::to_string(device_) +
                        "'s range [" + std::to_string(greatest) + ", " + std::to_string(least) + "]");
    device_guard guard(device_);
    STREAMKIT_CUDA_TRY(cudaStreamCreateWithPriority(&handle_, static_cast<unsigned>(mode), priority));
  }

  ~stream() noexcept { release(); }
  stream(stream const&) = delete;
  stream& operator=(stream const&) = delete;
  /// Takes over `other`'s stream; `other` becomes invalid (valid() is false).
  stream(stream&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)), device_(other.device_) {}
  /// Destroys the stream it owns (if any), then takes over `other`'s; `other` becomes invalid.
  stream& operator=(stream&& other) noexcept
  {
    if (this != &other) {
      release();
      handle_ = std::exchange(other.handle_, nullptr);
      device_ = other.device_;
    }
    return *this;
  }

  /// The non-owning view; use it to pass the stream around.
  [[nodiscard]] stream_ref ref() const
  {
    STREAMKIT_EXPECTS(handle_ != nullptr, std::logic_error, "use of a moved-from streamkit::stream");
    return stream_ref(handle_);
  }
  /// Implicit ref(), so a stream goes wherever a stream_ref is taken.
  /// @throws std::logic_error for a moved-from stream.
  operator stream_ref() const { return ref(); }  // NOLINT: implicit by design
  /// The CUDA stream handle. @throws std::logic_error for a moved-from stream.
  [[nodiscard]] cudaStream_t value() const { return ref().value(); }
  /// The device the stream was created on.
  [[nodiscard]] int device() const noexcept { return device_; }
  /// False for a moved-from stream.
  [[nodiscard]] bool valid() const noexcept { return handle_ != nullptr; }

  /// Blocks the host until all work enqueued so far has finished.
  void sync() const { ref().sync(); }
  /// True if all work enqueued so far has finished; never waits.
  [[nodiscard]] bool ready() const { return ref().ready(); }
  /// Work enqueued after this call waits until `event` has completed; the host does not wait.
  void wait(event_ref event) const { ref().wait(event); }
  /// Work enqueued after this call waits for all work enqueued on `other` so far; the host does not wait.
  void wait(stream_ref other) const { ref().wait(other); }
  /// Runs `callback()` on a runtime thread once all earlier work on the stream has finished
  /// (see stream_ref::host_callback()).
  template <class Callback>
  void host_callback(Callback&& callback) const
  {
    ref().host_callback(std::forward<Callback>(callback));
  }

 private:
  void release() noexcept
  {
    if (handle_ == nullptr) { return; }
    // cudaStreamDestroy does not need the stream's device to be current, so no guard (which could throw).
    detail::ignore_release_error(cudaStreamDestroy(handle_));
    handle_ = nullptr;
  }

  cudaStream_t handle_{};
  int device_ = -1;
};

/// A fixed set of streams on one device, handed out round-robin (next()) or by index.
class stream_pool {
 public:
  /// @throws std::invalid_argument if `count` is 0.
  stream_pool(int device_id, std::size_t count, int priority = 0)
  {
    STREAMKIT_EXPECTS(count > 0, std::invalid_argument, "count: a stream_pool needs at least one stream");
    streams_.reserve(count);
    for (std::size_t i = 0; i < count; ++i) { streams_.emplace_back(device_id, priority); }
  }

  /// The number of streams.
  [[nodiscard]] std::size_t size() const noexcept { return streams_.size(); }
  /// The device of the pool's streams.
  [[nodiscard]] int device() const noexcept { return streams_.front().device(); }
  /// The next stream in round-robin order; safe to call from several threads.
  [[nodiscard]] stream_ref next() noexcept { return streams_[next_.fetch_add(1) % streams_.size()].ref(); }
  /// @throws std::out_of_range for an index past the end.
  [[nodiscard]] stream_ref at(std::size_t index) const
  {
    STREAMKIT_EXPECTS(index < streams_.size(), std::out_of_range,
                      "index " + std::to_string(index) + " is out of range for a pool of " +
                        std::to_string(streams_.size()) + " streams");
    return streams_[index].ref();
  }
  /// Same as at(). @throws std::out_of_range for an index past the end.
  [[nodiscard]] stream_ref operator[](std::size_t index) const { return at(index); }
  /// Blocks until every stream of the pool is idle.
  void sync_all() const
  {
    for (auto const& s : streams_) { s.sync(); }
  }

 private:
  std::vector<stream> streams_;
  std::atomic<std::size_t> next_{0};
};

}  // namespace streamkit
