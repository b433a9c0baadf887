#pragma once
// The device side of distributed_gpu_nearest's staging: rows copied between two strided layouts on
// one GPU (a strided view packed before its copy to the host, results unpacked into a strided view),
// because a pitched copy of rows of 8 to 8k bytes between host and device moves one row per transfer.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cstddef>

namespace streamkit::distributed::detail {

template <class T>
__global__ void copy_strided_rows(T const* from, std::size_t from_stride, T* to, std::size_t to_stride, std::size_t rows, std::size_t width)
{
  std::size_t const items = rows * width;
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < items; e += std::size_t{gridDim.x} * blockDim.x) {
    std::size_t const row = e / width, column = e % width;
    to[row * to_stride + column] = from[row * from_stride + column];
  }
}

/// `rows` rows of `width` values from `from` (a row every `from_stride` values) to `to` (every
/// `to_stride`), both in the device memory of `stream`'s GPU; enqueued on `stream`.
template <class T>
void launch_copy_strided_rows(T const* from, std::size_t from_stride, T* to, std::size_t to_stride, std::size_t rows, std::size_t width,
                              stream_ref stream)
{
  if (rows == 0 || width == 0) { return; }
  copy_strided_rows<T><<<streamkit::detail::grid_size("copy_strided_rows", rows * width, 256, streamkit::detail::grid_stride_blocks), 256, 0,
                         stream.value()>>>(from, from_stride, to, to_stride, rows, width);
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace streamkit::distributed::detail
