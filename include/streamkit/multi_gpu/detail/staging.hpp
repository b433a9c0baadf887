#pragma once
// The host staging pipeline of every built-in multi-GPU workload: host memory to packed device
// memory and back, on a chunk's stream and in its device's copy order. Page-locked host memory goes
// straight to DMA (the fast path); pageable memory is copied through the worker's pinned staging
// buffers by the worker's host thread.

#include <streamkit/multi_gpu/dispatcher.hpp>

#include <cstddef>
#include <cstring>

namespace streamkit::detail {

/// A host region of `lines` runs of `length` elements, `ld` elements apart (ld ≥ length), and
/// whether it is page-locked.
template <class T>
struct host_lines {
  T* data = nullptr;
  std::size_t lines = 0;
  std::size_t length = 0;
  std::size_t ld = 0;
  bool pinned = false;
  [[nodiscard]] std::size_t elements() const noexcept { return lines * length; }
};

/// Host copy between two line regions of the same lines and length.
template <class T>
void copy_lines(T* to, std::size_t to_ld, T const* from, std::size_t from_ld, std::size_t lines, std::size_t length)
{
  if (to_ld == length && from_ld == length) {
    std::memcpy(to, from, lines * length * sizeof(T));
    return;
  }
  for (std::size_t line = 0; line < lines; ++line) { std::memcpy(to + line * to_ld, from + line * from_ld, length * sizeof(T)); }
}

/// Stream-ordered copy between two line regions of the same lines and length.
template <class T>
void copy_lines_async(T* to, std::size_t to_ld, T const* from, std::size_t from_ld, std::size_t lines, std::size_t length,
                      cudaMemcpyKind kind, stream_ref stream)
{
  if (to_ld == length && from_ld == length) {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to, from, lines * length * sizeof(T), kind, stream.value()));
    return;
  }
  STREAMKIT_CUDA_TRY(cudaMemcpy2DAsync(to, to_ld * sizeof(T), from, from_ld * sizeof(T), length * sizeof(T), lines, kind,
                                       stream.value()));
}

/// Enqueues the copy of `from` into packed device memory `to` on the chunk's stream, after the
/// device's previous copies in: straight from pinned memory, else through staging slot `slot`.
template <class T>
void copy_to_device(chunk_context& chunk, host_lines<T const> const& from, T* to, std::size_t slot)
{
  T const* source = from.data;
  std::size_t source_ld = from.ld;
  if (!from.pinned) {
    T* const staging = chunk.workspace.pinned<T>(from.elements(), slot);
    copy_lines(staging, from.length, from.data, from.ld, from.lines, from.length);
    source = staging;
    source_ld = from.length;
  }
  chunk.copy_in([&] {
    copy_lines_async(to, from.length, source, source_ld, from.lines, from.length, cudaMemcpyHostToDevice, chunk.stream);
  });
}

/// A device-to-host copy of a chunk: enqueued by the constructor, after the device's previous copies
/// out, straight into pinned memory, else into staging slot `slot`, from which finish() copies once
/// the chunk's stream has been synchronised.
template <class T>
class copy_to_host {
 public:
  copy_to_host(chunk_context& chunk, T const* from, host_lines<T> const& to, std::size_t slot)
      : to_(to), staging_(to.pinned ? nullptr : chunk.workspace.pinned<T>(to.elements(), slot))
  {
    chunk.copy_out([&] {
      if (staging_ == nullptr) {
        copy_lines_async(to_.data, to_.ld, from, to_.length, to_.lines, to_.length, cudaMemcpyDeviceToHost, chunk.stream);
      } else {
        copy_lines_async(staging_, to_.length, from, to_.length, to_.lines, to_.length, cudaMemcpyDeviceToHost, chunk.stream);
      }
    });
  }
  /// After the chunk's stream is synchronised: moves staged elements to their place.
  void finish() const
  {
    if (staging_ != nullptr) { copy_lines(to_.data, to_.ld, staging_, to_.length, to_.lines, to_.length); }
  }

 private:
  host_lines<T> to_;
  T* staging_;
};

}  // namespace streamkit::detail
