#pragma once
// The sharded layout's engine on the GPU (sharded_rows.hpp describes engines): the rows in the device
// memory of one GPU, each step of sharded_rows.hpp a kernel on one stream, the stable partition a
// radix sort of the bins, the selection CUB's; MPI's buffers page-locked host memory. Without a
// CUDA-aware MPI the rows that go to other ranks cross PCIe once each way, and only those. Also the
// copies of distributed_gpu_nearest's staging between strided layouts on the GPU
// (launch_copy_strided_rows()).

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/distributed/detail/sharded_rows.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/pinned_buffer.hpp>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace streamkit::distributed::detail {

template <class Step>
__global__ void for_each_row(std::size_t count, Step step)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) { step(i); }
}

/// step(i) for every i < count, enqueued on `stream` (of the current device).
template <class Step>
void launch_for_each_row(std::size_t count, Step const& step, stream_ref stream)
{
  if (count == 0) { return; }
  for_each_row<Step><<<streamkit::detail::grid_size("for_each_row", count, 256, streamkit::detail::grid_stride_blocks), 256, 0, stream.value()>>>(
    count, step);
  STREAMKIT_CHECK_LAUNCH();
}

/// Item e of `width`-value rows copied from rows `from_stride` values apart to rows `to_stride` apart
/// (a strided view packed before its copy to the host, results unpacked into a strided view: a
/// pitched copy of rows of 8 to 8k bytes between host and device moves one row per transfer).
template <class T>
struct copy_strided_rows {
  T const* from;
  std::size_t from_stride;
  T* to;
  std::size_t to_stride;
  std::size_t width;

  __device__ void operator()(std::size_t e) const
  {
    std::size_t const row = e / width, column = e % width;
    to[row * to_stride + column] = from[row * from_stride + column];
  }
};

/// `rows` rows of `width` values from `from` (a row every `from_stride` values) to `to` (every
/// `to_stride`), both in the device memory of `stream`'s GPU; enqueued on `stream`.
template <class T>
void launch_copy_strided_rows(T const* from, std::size_t from_stride, T* to, std::size_t to_stride, std::size_t rows, std::size_t width,
                              stream_ref stream)
{
  launch_for_each_row(rows * width, copy_strided_rows<T>{from, from_stride, to, to_stride, width}, stream);
}

/// row[i] = i (the values of partition()'s radix sort, which reads them from memory).
struct number_rows {
  std::uint32_t* row;
  __device__ void operator()(std::size_t i) const { row[i] = static_cast<std::uint32_t>(i); }
};

/// start[b]: the first of the `count` sorted bins that is ≥ b (b ≤ bins; `count` if none).
struct bin_starts {
  std::uint32_t const* sorted;
  std::size_t count;
  std::size_t* start;

  __device__ void operator()(std::size_t b) const
  {
    std::size_t low = 0, high = count;
    while (low < high) {
      std::size_t const middle = low + (high - low) / 2;
      if (sorted[middle] < b) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    start[b] = low;
  }
};

/// The engine of rows on one GPU (see the file's description). Move-only; its methods make its
/// device current.
class device_row_engine {
 public:
  template <class T>
  using buffer = device_buffer<T>;
  template <class T>
  using host_buffer = pinned_buffer<T>;

  explicit device_row_engine(int device) : device_(device), stream_(std::make_unique<streamkit::stream>(device)) {}

  [[nodiscard]] int device() const noexcept { return device_; }
  /// The stream everything is enqueued on.
  [[nodiscard]] stream_ref work_stream() const { return stream_->ref(); }

  /// Grown by an eighth more than asked: the sizes of a loop of queries vary a little (the rows a
  /// rank owns, the flagged ones), and a page-locked or device allocation costs milliseconds.
  template <class T>
  T* reserve(device_buffer<T>& storage, std::size_t count)
  {
    if (storage.size() < count) {
      device_guard const guard(device_);
      storage = device_buffer<T>(count + count / 8, work_stream());
    }
    return storage.data();
  }
  template <class T>
  static T* reserve(pinned_buffer<T>& storage, std::size_t count)
  {
    if (storage.size() < count) { storage = pinned_buffer<T>(count + count / 8); }
    return storage.data();
  }

  template <class Step>
  void for_each(std::size_t count, Step const& step)
  {
    device_guard const guard(device_);
    launch_for_each_row(count, step, work_stream());
  }

  /// A stable radix sort of (bin, row) over the bits the bins need, then each bin's first row by a
  /// binary search; waits for the sizes.
  void partition(std::uint32_t const* bin, std::size_t count, std::size_t bins, std::uint32_t* order, std::size_t* sizes)
  {
    device_guard const guard(device_);
    std::uint32_t* const row = reserve(rows_, count);
    std::uint32_t* const sorted = reserve(sorted_bins_, count);
    std::size_t* const start = reserve(starts_, bins + 1);
    std::size_t* const start_host = reserve(starts_host_, bins + 1);
    for_each(count, number_rows{row});
    int end_bit = 1;
    while (end_bit < 32 && (std::size_t{1} << end_bit) < bins) { ++end_bit; }
    std::size_t bytes = 0;
    auto const n = static_cast<std::int64_t>(count);
    if (count > 0) {
      STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, bytes, bin, sorted, row, order, n, 0, end_bit, work_stream().value()));
      STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(reserve(temporary_, bytes + 1), bytes, bin, sorted, row, order, n, 0, end_bit,
                                                         work_stream().value()));
    }
    for_each(bins + 1, bin_starts{sorted, count, start});
    to_host(start, bins + 1, start_host);
    wait();
    for (std::size_t b = 0; b < bins; ++b) { sizes[b] = start_host[b + 1] - start_host[b]; }
  }

  /// CUB's selection of the flagged row numbers; waits for the count.
  std::size_t select(std::uint8_t const* flag, std::size_t count, std::uint32_t* selected)
  {
    if (count == 0) { return 0; }
    device_guard const guard(device_);
    std::int64_t* const found = reserve(selected_count_, 1);
    std::int64_t* const found_host = reserve(selected_count_host_, 1);
    thrust::counting_iterator<std::uint32_t> const row(0);  // the row numbers, read by CUB
    std::size_t bytes = 0;
    auto const n = static_cast<std::int64_t>(count);
    STREAMKIT_CUDA_TRY(cub::DeviceSelect::Flagged(nullptr, bytes, row, flag, selected, found, n, work_stream().value()));
    STREAMKIT_CUDA_TRY(cub::DeviceSelect::Flagged(reserve(temporary_, bytes + 1), bytes, row, flag, selected, found, n, work_stream().value()));
    to_host(found, 1, found_host);
    wait();
    return static_cast<std::size_t>(*found_host);
  }

  template <class T>
  void to_host(T const* from, std::size_t count, T* to)
  {
    copy_async(to, from, count, cudaMemcpyDeviceToHost);
  }
  template <class T>
  void from_host(T const* from, std::size_t count, T* to)
  {
    copy_async(to, from, count, cudaMemcpyHostToDevice);
  }
  template <class T>
  void copy(T const* from, std::size_t count, T* to)
  {
    copy_async(to, from, count, cudaMemcpyDeviceToDevice);
  }
  void wait() { work_stream().sync(); }

 private:
  template <class T>
  void copy_async(T* to, T const* from, std::size_t count, cudaMemcpyKind kind)
  {
    if (count == 0) { return; }
    device_guard const guard(device_);
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to, from, count * sizeof(T), kind, work_stream().value()));
  }

  int device_;
  std::unique_ptr<streamkit::stream> stream_;  // stable across moves; before the buffers, which free on it
  device_buffer<unsigned char> temporary_;     // CUB's (a byte more than asked: never null, which would ask again)
  device_buffer<std::uint32_t> rows_, sorted_bins_;
  device_buffer<std::size_t> starts_;
  device_buffer<std::int64_t> selected_count_;
  pinned_buffer<std::size_t> starts_host_;
  pinned_buffer<std::int64_t> selected_count_host_;
};

}  // namespace streamkit::distributed::detail
