// The CUDA side of streamkit.MinMaxScaler and streamkit.normalize_many, compiled by nvcc.

#include "minmax.hpp"
#include "device_memory.hpp"
#include "shared_dispatcher.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/preprocessing/minmax.cuh>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

namespace streamkit_python {

using streamkit::layout;
using streamkit::matrix_ref;

namespace {

/// Copies the lines of `from` (rows of a row-major, columns of a column-major view) to `to`, which
/// has the same shape and order and a pitch of its own; one 1-D copy when both are dense.
template <class T>
void copy_lines(matrix_ref<T const> const& from, matrix_ref<T> const& to, cudaMemcpyKind kind, cudaStream_t stream)
{
  bool const rows = from.order == layout::row_major;
  std::size_t const lines = rows ? from.rows : from.cols;
  std::size_t const line = rows ? from.cols : from.rows;
  if (lines == 0 || line == 0) { return; }
  if ((from.ld == line && to.ld == line) || lines == 1) {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to.data, from.data, lines * line * sizeof(T), kind, stream));
  } else {
    STREAMKIT_CUDA_TRY(
      cudaMemcpy2DAsync(to.data, to.ld * sizeof(T), from.data, from.ld * sizeof(T), line * sizeof(T), lines, kind, stream));
  }
}

/// Throws std::invalid_argument unless `stream` belongs to `device`.
void expect_stream_of(int device, cudaStream_t stream)
{
  int const owner = streamkit::stream_ref(stream).device();
  STREAMKIT_EXPECTS(owner == device, std::invalid_argument,
                    "stream: belongs to CUDA device " + std::to_string(owner) + " but the array is on CUDA device " +
                      std::to_string(device));
}

}  // namespace

/// Where host arrays are copied to on the scaler's device: a stream and device buffers that only
/// grow, so that the host path allocates nothing once it has seen its largest shape.
template <class T>
struct host_staging {
  explicit host_staging(int device) : stream(device) {}

  /// The buffer, holding at least `count` elements (the old memory is freed in stream order).
  T* reserve(streamkit::device_buffer<T>& buffer, std::size_t count)
  {
    if (buffer.size() < count) { buffer = streamkit::device_buffer<T>(count, stream); }
    return buffer.data();
  }

  streamkit::stream stream;  // first member, so destroyed last: after the frees enqueued on it
  streamkit::device_buffer<T> input;
  streamkit::device_buffer<T> output;
};

template <class T>
struct scaler<T>::state {
  explicit state(streamkit::minmax_options<T> const& options) : fitted(options) {}

  /// The staging on `device`, made anew when the scaler has moved to another device.
  host_staging<T>& staging_on(int device)
  {
    if (!staging || staging->stream.device() != device) { staging = std::make_unique<host_staging<T>>(device); }
    return *staging;
  }

  streamkit::minmax_scaler<T> fitted;
  std::mutex staging_lock;  // host calls share the staging buffers from the copy in to the copy back
  std::unique_ptr<host_staging<T>> staging;
};

template <class T>
scaler<T>::scaler(T lo, T hi, bool clip) : state_(std::make_unique<state>(streamkit::minmax_options<T>{lo, hi, clip}))
{
}

template <class T>
scaler<T>::~scaler() = default;

template <class T>
void scaler<T>::fit_async(int device, matrix_ref<T const> x, bool reset, cudaStream_t stream)
{
  streamkit::device_guard const guard(device);
  prepare_device(device);
  expect_stream_of(device, stream);
  if (reset) {
    state_->fitted.fit_async(x, streamkit::stream_ref(stream));
  } else {
    state_->fitted.partial_fit_async(x, streamkit::stream_ref(stream));
  }
  device_.store(device);
}

template <class T>
void scaler<T>::transform_async(int device, matrix_ref<T const> x, matrix_ref<T> out, bool inverse, cudaStream_t stream)
{
  streamkit::device_guard const guard(device);
  prepare_device(device);
  expect_stream_of(device, stream);
  if (inverse) {
    state_->fitted.inverse_transform_async(x, out, streamkit::stream_ref(stream));
  } else {
    state_->fitted.transform_async(x, out, streamkit::stream_ref(stream));
  }
}

namespace {

/// What a host call does on the device between the copy in and the copy back.
enum class host_fit { none, reset, accumulate };

/// The host path: `x` to the device, an optional fit, an optional transform into `out` (null data:
/// none) and its copy back, then a wait.
template <class T>
void run_host(streamkit::minmax_scaler<T>& fitted, host_staging<T>& staging, matrix_ref<T const> x, matrix_ref<T> out,
                     host_fit fit, bool inverse)
{
  auto const stream = streamkit::stream_ref(staging.stream);
  T* const device_x = staging.reserve(staging.input, x.size());
  auto const x_on_device = matrix_ref<T>::dense(device_x, x.rows, x.cols, x.order);
  copy_lines(x, x_on_device, cudaMemcpyHostToDevice, stream);
  if (fit == host_fit::reset) { fitted.fit_async(x_on_device, stream); }
  if (fit == host_fit::accumulate) { fitted.partial_fit_async(x_on_device, stream); }
  if (out.data != nullptr) {
    auto const out_on_device = matrix_ref<T>::dense(staging.reserve(staging.output, out.size()), out.rows, out.cols, out.order);
    if (inverse) {
      fitted.inverse_transform_async(x_on_device, out_on_device, stream);
    } else {
      fitted.transform_async(x_on_device, out_on_device, stream);
    }
    copy_lines<T>(out_on_device, out, cudaMemcpyDeviceToHost, stream);
  }
  stream.sync();
}

}  // namespace

template <class T>
void scaler<T>::fit_host(matrix_ref<T const> x, bool reset)
{
  int const device = device_.load() >= 0 ? device_.load() : 0;
  streamkit::device_guard const guard(device);
  prepare_device(device);
  std::lock_guard const lock(state_->staging_lock);
  run_host(state_->fitted, state_->staging_on(device), x, matrix_ref<T>{}, reset ? host_fit::reset : host_fit::accumulate, false);
  device_.store(device);
}

template <class T>
void scaler<T>::transform_host(matrix_ref<T const> x, matrix_ref<T> out, bool inverse)
{
  int const device = device_.load();
  STREAMKIT_EXPECTS(device >= 0, std::logic_error, "transform() before fit()");
  streamkit::device_guard const guard(device);
  prepare_device(device);
  std::lock_guard const lock(state_->staging_lock);
  run_host(state_->fitted, state_->staging_on(device), x, out, host_fit::none, inverse);
}

template <class T>
void scaler<T>::fit_transform_host(matrix_ref<T const> x, matrix_ref<T> out)
{
  int const device = device_.load() >= 0 ? device_.load() : 0;
  streamkit::device_guard const guard(device);
  prepare_device(device);
  std::lock_guard const lock(state_->staging_lock);
  run_host(state_->fitted, state_->staging_on(device), x, out, host_fit::reset, false);
  device_.store(device);
}

template <class T>
void scaler<T>::copy_fitted(T* min, T* max, T* scale) const
{
  auto const copy = [](std::vector<T> const& from, T* to) { std::memcpy(to, from.data(), from.size() * sizeof(T)); };
  copy(state_->fitted.data_min_host(), min);
  copy(state_->fitted.data_max_host(), max);
  copy(state_->fitted.scale_host(), scale);
}

void normalize_host(std::vector<matrix_ref<float const>> const& inputs_f32, std::vector<matrix_ref<float>> const& outputs_f32,
                    std::vector<matrix_ref<double const>> const& inputs_f64, std::vector<matrix_ref<double>> const& outputs_f64,
                    double lo, double hi)
{
  auto shared = lock_shared_dispatcher();
  if (!inputs_f32.empty()) {
    streamkit::minmax_options<float> const options{static_cast<float>(lo), static_cast<float>(hi), false};
    streamkit::dispatch_minmax_normalize(shared.workers, inputs_f32, outputs_f32, options);
  }
  if (!inputs_f64.empty()) {
    streamkit::minmax_options<double> const options{lo, hi, false};
    streamkit::dispatch_minmax_normalize(shared.workers, inputs_f64, outputs_f64, options);
  }
}

template class scaler<float>;
template class scaler<double>;

}  // namespace streamkit_python
