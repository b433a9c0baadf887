#pragma once
/// @file device_buffer.hpp
/// An owning array in device memory, allocated and freed in stream order through a memory resource.

#include <streamkit/memory/detail/size_check.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace streamkit {

/// An owning, move-only array of `T` in device memory. Memory comes from a memory resource (by
/// default the device's stream-ordered pool) on the buffer's stream and goes back to it on that
/// stream, so allocation and release are ordered with the work that uses the buffer. Elements are
/// not initialised. The resource must outlive the buffer.
template <class T>
class device_buffer {
 public:
  /// An empty buffer (no memory, size 0).
  device_buffer() = default;
  /// Allocates `count` elements from `resource` on `stream`'s device, ordered on `stream`; never waits.
  /// @throws std::invalid_argument if the byte size overflows; bad_alloc (or the resource's own
  /// exception) if allocation fails.
  device_buffer(std::size_t count, stream_ref stream, device_resource_ref resource = default_device_resource())
      : size_((static_cast<void>(detail::checked_bytes<T>(count, "count")), count)),
        stream_(stream),
        device_(stream.device()),
        resource_(resource)
  {
    if (size_ > 0) {
      device_guard guard(device_);
      data_ = static_cast<T*>(resource_.allocate_async(size_ * sizeof(T), device_alignment, stream_));
    }
  }
  ~device_buffer() noexcept { release(); }
  device_buffer(device_buffer const&) = delete;
  device_buffer& operator=(device_buffer const&) = delete;
  /// Takes over `other`'s memory, with its stream, device and resource; `other` becomes empty.
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_),
        device_(other.device_),
        resource_(other.resource_)
  {
  }
  /// Releases the memory it owns (in stream order, on its stream), then takes over `other`'s;
  /// `other` becomes empty.
  device_buffer& operator=(device_buffer&& other) noexcept
  {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      stream_ = other.stream_;
      device_ = other.device_;
      resource_ = other.resource_;
    }
    return *this;
  }

  /// The first element, in device memory (null when empty).
  [[nodiscard]] T* data() noexcept { return data_; }
  /// The first element, read-only, in device memory (null when empty).
  [[nodiscard]] T const* data() const noexcept { return data_; }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// The elements as a span of device memory.
  [[nodiscard]] cuda::std::span<T> span() noexcept { return {data_, size_}; }
  /// The elements as a read-only span of device memory.
  [[nodiscard]] cuda::std::span<T const> span() const noexcept { return {data_, size_}; }
  /// The stream the memory is freed on.
  [[nodiscard]] stream_ref stream() const noexcept { return stream_; }
  /// Makes the release ordered on `stream` instead (e.g. after handing the buffer to other work).
  void set_stream(stream_ref stream) noexcept { stream_ = stream; }
  /// The device the memory is on (-1 for an empty buffer made by the default constructor).
  [[nodiscard]] int device() const noexcept { return device_; }
  /// The resource the memory came from and goes back to.
  [[nodiscard]] device_resource_ref resource() const noexcept { return resource_; }

  /// Enqueues a copy of `source` (whose size must equal size()) into the buffer on `stream`.
  void copy_from_host_async(cuda::std::span<T const> source, stream_ref stream)
  {
    expect_same_size(source.size(), "source");
    copy_async(data_, source.data(), cudaMemcpyHostToDevice, stream);
  }
  /// Enqueues a copy of the buffer into `destination` (whose size must equal size()) on `stream`.
  void copy_to_host_async(cuda::std::span<T> destination, stream_ref stream) const
  {
    expect_same_size(destination.size(), "destination");
    copy_async(destination.data(), data_, cudaMemcpyDeviceToHost, stream);
  }
  /// Enqueues a device-to-device copy from `source` (same size, any device) on `stream`.
  void copy_from_async(device_buffer const& source, stream_ref stream)
  {
    expect_same_size(source.size(), "source");
    copy_async(data_, source.data(), cudaMemcpyDefault, stream);
  }

 private:
  void expect_same_size(std::size_t other, char const* argument) const
  {
    STREAMKIT_EXPECTS(other == size_, std::invalid_argument,
                      std::string(argument) + ": has " + std::to_string(other) + " elements, the buffer " +
                        std::to_string(size_));
  }
  void copy_async(void* to, void const* from, cudaMemcpyKind kind, stream_ref stream) const
  {
    if (size_ > 0) { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to, from, size_ * sizeof(T), kind, stream.value())); }
  }
  void release() noexcept
  {
    if (data_ != nullptr) {
      // The resource may be per-device (as RMM's are): release with the buffer's device current.
      int current = device_;
      detail::ignore_release_error(cudaGetDevice(&current));
      if (current != device_) { detail::ignore_release_error(cudaSetDevice(device_)); }
      resource_.deallocate_async(data_, size_ * sizeof(T), device_alignment, stream_);
      if (current != device_) { detail::ignore_release_error(cudaSetDevice(current)); }
    }
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
  stream_ref stream_ = stream_ref::legacy_default();
  int device_ = -1;
  device_resource_ref resource_ = default_device_resource();
};

}  // namespace streamkit
