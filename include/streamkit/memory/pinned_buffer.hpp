#pragma once
/// @file pinned_buffer.hpp
/// Page-locked host memory: an owning buffer, and a scoped registration of memory the caller owns.

#include <streamkit/memory/detail/size_check.hpp>
#include <streamkit/core/error.hpp>

#include <cuda/std/span>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace streamkit {

/// cudaHostAlloc flags; combine with `|`.
enum class pinned_flags : unsigned {
  none = cudaHostAllocDefault,
  portable = cudaHostAllocPortable,            ///< pinned for every device, not only the current one
  mapped = cudaHostAllocMapped,                ///< also mapped into the device address space
  write_combined = cudaHostAllocWriteCombined, ///< faster host writes and DMA, very slow host reads
};
/// Combines two sets of flags.
[[nodiscard]] constexpr pinned_flags operator|(pinned_flags a, pinned_flags b) noexcept
{
  return static_cast<pinned_flags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

namespace detail {
/// Bytes held by live pinned_buffer objects of the process.
inline std::atomic<std::size_t>& pinned_bytes_counter() noexcept
{
  static std::atomic<std::size_t> bytes{0};
  return bytes;
}
}  // namespace detail

/// Bytes of page-locked host memory currently held by pinned_buffer objects (to check that
/// long-running work keeps pinned memory flat).
[[nodiscard]] inline std::size_t pinned_bytes_in_use() noexcept { return detail::pinned_bytes_counter().load(); }

/// An owning, move-only array of `T` in page-locked host memory, so copies to and from it are true
/// DMA and run asynchronously. Elements are not initialised.
template <class T>
class pinned_buffer {
 public:
  pinned_buffer() = default;
  /// @throws std::invalid_argument if the byte size overflows; cuda_error if allocation fails.
  explicit pinned_buffer(std::size_t count, pinned_flags flags = pinned_flags::portable) : size_(count)
  {
    std::size_t const bytes = detail::checked_bytes<T>(count, "count");
    if (bytes > 0) {
      void* memory = nullptr;
      STREAMKIT_CUDA_TRY_ALLOC(cudaHostAlloc(&memory, bytes, static_cast<unsigned>(flags)));
      data_ = static_cast<T*>(memory);
      detail::pinned_bytes_counter() += bytes;
    }
  }
  ~pinned_buffer() noexcept { release(); }
  pinned_buffer(pinned_buffer const&) = delete;
  pinned_buffer& operator=(pinned_buffer const&) = delete;
  /// Takes over `other`'s memory; `other` becomes empty.
  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0))
  {
  }
  /// Frees the memory it owns, then takes over `other`'s; `other` becomes empty.
  pinned_buffer& operator=(pinned_buffer&& other) noexcept
  {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }

  /// The first element (null when empty).
  [[nodiscard]] T* data() noexcept { return data_; }
  /// The first element, read-only (null when empty).
  [[nodiscard]] T const* data() const noexcept { return data_; }
  /// The number of elements.
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  /// True when the buffer holds no elements.
  [[nodiscard]] bool empty() const noexcept { return size_ == 0; }
  /// The elements as a span.
  [[nodiscard]] cuda::std::span<T> span() noexcept { return {data_, size_}; }
  /// The elements as a read-only span.
  [[nodiscard]] cuda::std::span<T const> span() const noexcept { return {data_, size_}; }
  /// Element `i`, unchecked.
  [[nodiscard]] T& operator[](std::size_t i) noexcept { return data_[i]; }
  /// Element `i`, read-only and unchecked.
  [[nodiscard]] T const& operator[](std::size_t i) const noexcept { return data_[i]; }
  /// Iterator to the first element.
  [[nodiscard]] T* begin() noexcept { return data_; }
  /// Iterator past the last element.
  [[nodiscard]] T* end() noexcept { return data_ + size_; }
  /// Read-only iterator to the first element.
  [[nodiscard]] T const* begin() const noexcept { return data_; }
  /// Read-only iterator past the last element.
  [[nodiscard]] T const* end() const noexcept { return data_ + size_; }

 private:
  void release() noexcept
  {
    if (data_ != nullptr) {
      detail::ignore_release_error(cudaFreeHost(data_));
      detail::pinned_bytes_counter() -= size_ * sizeof(T);
    }
    data_ = nullptr;
    size_ = 0;
  }

  T* data_ = nullptr;
  std::size_t size_ = 0;
};

namespace detail {
/// The kind of memory CUDA knows `pointer` to lie in (cudaMemoryTypeUnregistered when it cannot tell).
[[nodiscard]] inline cudaMemoryType memory_type(void const* pointer) noexcept
{
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    return cudaMemoryTypeUnregistered;
  }
  return attributes.type;
}
}  // namespace detail

/// True if `pointer` lies in page-locked host memory known to CUDA (cudaHostAlloc or registered).
[[nodiscard]] inline bool is_pinned(void const* pointer) noexcept { return detail::memory_type(pointer) == cudaMemoryTypeHost; }

/// Page-locks memory the caller already owns for the registration's lifetime (the C++ form of
/// Numba's `with cuda.pinned(array):`). Ranges that are already pinned are left alone and are not
/// unregistered later, so nesting registrations is safe. Very large ranges are registered in chunks.
class host_registration {
 public:
  /// Default size of each cudaHostRegister call.
  static constexpr std::size_t default_chunk_bytes = std::size_t{1} << 30;

  host_registration() = default;
  /// @throws std::invalid_argument for a null pointer with a non-zero size or a zero chunk size.
  host_registration(void* pointer, std::size_t bytes, std::size_t chunk_bytes = default_chunk_bytes)
  {
    STREAMKIT_EXPECTS(pointer != nullptr || bytes == 0, std::invalid_argument,
                      "pointer: null with a size of " + std::to_string(bytes) + " bytes");
    STREAMKIT_EXPECTS(chunk_bytes > 0, std::invalid_argument, "chunk_bytes: must be positive");
    auto* const base = static_cast<unsigned char*>(pointer);
    try {
      for (std::size_t offset = 0; offset < bytes; offset += chunk_bytes) {
        std::size_t const length = std::min(chunk_bytes, bytes - offset);
        if (is_pinned(base + offset)) { continue; }
        cudaError_t const status = cudaHostRegister(base + offset, length, cudaHostRegisterPortable);
        if (status == cudaErrorHostMemoryAlreadyRegistered) {
          static_cast<void>(cudaGetLastError());
          continue;
        }
        STREAMKIT_CUDA_TRY(status);
        chunks_.push_back(base + offset);
      }
    } catch (...) {
      release();
      throw;
    }
  }
  /// Registers the bytes of `memory`, as host_registration(memory.data(), memory.size_bytes(), chunk_bytes).
  /// @throws std::invalid_argument for a zero chunk size; cuda_error if a registration fails.
  template <class T>
  explicit host_registration(cuda::std::span<T> memory, std::size_t chunk_bytes = default_chunk_bytes)
      : host_registration(const_cast<std::remove_const_t<T>*>(memory.data()), memory.size_bytes(), chunk_bytes)
  {
  }

  ~host_registration() noexcept { release(); }
  host_registration(host_registration const&) = delete;
  host_registration& operator=(host_registration const&) = delete;
  /// Takes over `other`'s registrations; `other` then holds none.
  host_registration(host_registration&& other) noexcept : chunks_(std::move(other.chunks_)) { other.chunks_.clear(); }
  /// Unregisters what it holds, then takes over `other`'s registrations; `other` then holds none.
  host_registration& operator=(host_registration&& other) noexcept
  {
    if (this != &other) {
      release();
      chunks_ = std::move(other.chunks_);
      other.chunks_.clear();
    }
    return *this;
  }

  /// How many cudaHostRegister calls this registration made (0 if everything was already pinned).
  [[nodiscard]] std::size_t registered_chunks() const noexcept { return chunks_.size(); }

 private:
  void release() noexcept
  {
    for (void* chunk : chunks_) { detail::ignore_release_error(cudaHostUnregister(chunk)); }
    chunks_.clear();
  }

  std::vector<void*> chunks_;
};

}  // namespace streamkit
