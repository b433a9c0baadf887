#pragma once
// Host facade of column min-max scaling: validation, dispatch and launches.

#include <streamkit/preprocessing/detail/minmax_kernels.cuh>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace streamkit {
namespace detail {

template <class T>
void expect_options(minmax_options<T> const& options)
{
  STREAMKIT_EXPECTS(std::isfinite(options.lo) && std::isfinite(options.hi) && options.lo < options.hi, std::invalid_argument,
                    "feature_range: needs finite lo < hi, got (" + std::to_string(options.lo) + ", " +
                      std::to_string(options.hi) + ")");
}

template <class T>
void expect_same_shape(matrix_ref<T const> const& in, matrix_ref<T> const& out, std::string const& argument = "out")
{
  STREAMKIT_EXPECTS(in.rows == out.rows && in.cols == out.cols, std::invalid_argument,
                    argument + ": shape " + std::to_string(out.rows) + " x " + std::to_string(out.cols) + " does not match the input's " +
                      std::to_string(in.rows) + " x " + std::to_string(in.cols));
}

template <class T>
scaling<T> scaling_of(minmax_options<T> const& options) noexcept
{
  return {options.lo, options.hi, options.clip};
}

inline int sm_count_of(stream_ref stream)
{
  int sm_count = 0;
  STREAMKIT_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, stream.device()));
  return sm_count;
}

/// Folds x into the ordered accumulators (grids: plan_reduce).
template <class T>
void reduce_into(matrix_ref<T const> const& x, ordered_t<T>* min_bits, ordered_t<T>* max_bits, stream_ref stream)
{
  if (x.rows == 0 || x.cols == 0) { return; }
  reduce_plan const plan = plan_reduce(x, sm_count_of(stream));
  if (plan.narrow) {
    minmax_reduce_narrow<T><<<plan.grid_x, reduce_narrow_block, 0, stream.value()>>>(x.data, x.rows, x.cols, plan.rows_per_block,
                                                                                      min_bits, max_bits);
  } else {
    minmax_reduce<T><<<dim3(plan.grid_x, plan.grid_y), dim3(rows_block_x, rows_block_y), 0, stream.value()>>>(
      x, plan.rows_per_block, min_bits, max_bits);
  }
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
void reset_bits(std::size_t cols, ordered_t<T>* min_bits, ordered_t<T>* max_bits, stream_ref stream)
{
  minmax_reset<T><<<column_grid(cols), column_block, 0, stream.value()>>>(cols, min_bits, max_bits);
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
void finalize(std::size_t cols, ordered_t<T> const* min_bits, ordered_t<T> const* max_bits, scaling<T> const& s, T* min,
              T* max, T* scale, stream_ref stream)
{
  minmax_finalize<T><<<column_grid(cols), column_block, 0, stream.value()>>>(cols, min_bits, max_bits, s, min, max, scale);
  STREAMKIT_CHECK_LAUNCH();
}

/// Whether minmax_cols_cluster was compiled for sm_90 or later (clusters) for this device.
template <class T>
bool clusters_available()
{
  cudaFuncAttributes attributes{};
  STREAMKIT_CUDA_TRY(cudaFuncGetAttributes(&attributes, minmax_cols_cluster<T>));
  return attributes.ptxVersion >= 90;
}

template <class T>
void launch_cols_cluster(matrix_ref<T const> const& in, matrix_ref<T> const& out, minmax_plan const& plan, scaling<T> const& s,
                         T* min, T* max, stream_ref stream)
{
  std::size_t const slice_bytes = (in.rows + plan.cluster_blocks - 1) / plan.cluster_blocks * sizeof(T);
  // Always the largest slice, never this call's: another thread may launch the kernel in between.
  STREAMKIT_CUDA_TRY(
    cudaFuncSetAttribute(minmax_cols_cluster<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(cluster_slice_bytes)));
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = plan.cluster_blocks;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(plan.grid_x);
  config.blockDim = dim3(cluster_block);
  config.dynamicSmemBytes = slice_bytes;
  config.stream = stream.value();
  config.attrs = &cluster;
  config.numAttrs = 1;
  STREAMKIT_CUDA_TRY(cudaLaunchKernelEx(&config, minmax_cols_cluster<T>, in, out, s, min, max));
}

template <class T, bool Inverse>
void apply(matrix_ref<T const> const& in, matrix_ref<T> const& out, T const* min, T const* scale, scaling<T> const& s,
           stream_ref stream)
{
  if (in.rows == 0 || in.cols == 0) { return; }
  minmax_apply<T, Inverse><<<apply_grid(in.rows, in.cols, sm_count_of(stream)), apply_block, 0, stream.value()>>>(in, out, min,
                                                                                                                 scale, s);
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace detail

template <class T>
void column_minmax_async(detail::identity_t<matrix_ref<T const>> x, T* min, T* max, stream_ref stream, device_resource_ref resource)
{
  detail::expect_matrix(x, "x");
  STREAMKIT_EXPECTS((min != nullptr && max != nullptr) || x.cols == 0, std::invalid_argument,
                    "min, max: null outputs for " + std::to_string(x.cols) + " columns");
  if (x.cols == 0) { return; }
  device_guard guard(stream.device());
  device_buffer<detail::ordered_t<T>> bits(2 * x.cols, stream, resource);  // the one allocation of the call
  detail::reset_bits<T>(x.cols, bits.data(), bits.data() + x.cols, stream);
  detail::reduce_into(x, bits.data(), bits.data() + x.cols, stream);
  detail::finalize(x.cols, bits.data(), bits.data() + x.cols, detail::scaling<T>{T(0), T(1), false}, min, max, static_cast<T*>(nullptr), stream);
}

template <class T>
void column_minmax(detail::identity_t<matrix_ref<T const>> x, T* min, T* max, stream_ref stream, device_resource_ref resource)
{
  column_minmax_async<T>(x, min, max, stream, resource);
  stream.sync();
}

template <class T>
void minmax_normalize_async(detail::identity_t<matrix_ref<T const>> in, matrix_ref<T> out, minmax_options<T> const& options,
                            stream_ref stream, detail::identity_t<T>* min, detail::identity_t<T>* max, device_resource_ref resource)
{
  detail::expect_options(options);
  detail::expect_matrix(in, "in");
  detail::expect_matrix(out, "out");
  detail::expect_same_shape(in, out);
  if (in.rows == 0 || in.cols == 0) { return; }
  device_guard guard(stream.device());
  auto const s = detail::scaling_of(options);
  detail::minmax_plan const plan = detail::plan_normalize(in, detail::clusters_available<T>);
  switch (plan.path) {
    case detail::minmax_path::rows_fused:
      detail::minmax_rows_fused<T><<<plan.grid_x, dim3(detail::rows_block_x, detail::rows_block_y), 0, stream.value()>>>(
        in, out, s, min, max);
      STREAMKIT_CHECK_LAUNCH();
      return;
    case detail::minmax_path::cols_fused:
      detail::minmax_cols_fused<T><<<plan.grid_x, detail::cols_fused_block, 0, stream.value()>>>(in, out, s, min, max);
      STREAMKIT_CHECK_LAUNCH();
      return;
    case detail::minmax_path::cols_cluster: detail::launch_cols_cluster(in, out, plan, s, min, max, stream); return;
    case detail::minmax_path::two_pass: break;
  }
  // One allocation: 3 × cols fitted values (min, max, scale), then 2 × cols order-preserving bits.
  static_assert(sizeof(detail::ordered_t<T>) == sizeof(T));
  device_buffer<T> memory(5 * in.cols, stream, resource);
  T* const fitted = memory.data();
  auto* const bits = reinterpret_cast<detail::ordered_t<T>*>(memory.data() + 3 * in.cols);
  T* const min_out = min != nullptr ? min : fitted;
  T* const max_out = max != nullptr ? max : fitted + in.cols;
  detail::reset_bits<T>(in.cols, bits, bits + in.cols, stream);
  detail::reduce_into(in, bits, bits + in.cols, stream);
  detail::finalize(in.cols, bits, bits + in.cols, s, min_out, max_out, fitted + 2 * in.cols, stream);
  detail::apply<T, false>(in, out, min_out, fitted + 2 * in.cols, s, stream);
}

template <class T>
void minmax_normalize(detail::identity_t<matrix_ref<T const>> in, matrix_ref<T> out, minmax_options<T> const& options,
                      stream_ref stream, device_resource_ref resource)
{
  minmax_normalize_async<T>(in, out, options, stream, nullptr, nullptr, resource);
  stream.sync();
}

namespace detail {

/// What a minmax_scaler has fitted, on one device, with the events that order its users. The device
/// memory is freed on a stream of its own once the last fit and every transform have run, so the
/// callers' streams may be gone by then.
template <class T>
class scaler_state {
 public:
  scaler_state(std::size_t features, stream_ref stream, device_resource_ref resource)
      : release(stream.device()),
        features(features),
        min_bits(features, stream, resource),
        max_bits(features, stream, resource),
        min(features, stream, resource),
        max(features, stream, resource),
        scale(features, stream, resource),
        fitted(stream.device())
  {
    // Freed on `release`, so that stream must follow the allocations even if no fit is ever recorded.
    release.ref().wait(stream);
    min_bits.set_stream(release);
    max_bits.set_stream(release);
    for (auto* buffer : {&min, &max, &scale}) { buffer->set_stream(release); }
  }
  scaler_state(scaler_state const&) = delete;
  scaler_state& operator=(scaler_state const&) = delete;
  ~scaler_state() noexcept
  {
    cudaStream_t const frees = release.ref().value();
    if (fitted.recorded()) { ignore_release_error(cudaStreamWaitEvent(frees, fitted.value(), 0)); }
    for (auto const& transform : transforms) {
      if (transform.recorded()) { ignore_release_error(cudaStreamWaitEvent(frees, transform.value(), 0)); }
    }
  }

  [[nodiscard]] int device() const noexcept { return release.device(); }

  /// Makes work enqueued next on `stream` wait for the last fit and for every transform still running.
  void order_after_everything(stream_ref stream) const
  {
    if (fitted.recorded()) { stream.wait(fitted); }
    for (auto const& transform : transforms) {
      if (!transform.ready()) { stream.wait(transform); }
    }
  }

  /// Marks the end of a transform just enqueued on `stream`, reusing an event whose work has completed.
  void record_transform(stream_ref stream)
  {
    auto const done = std::find_if(transforms.begin(), transforms.end(), [](event const& e) { return e.ready(); });
    (done != transforms.end() ? *done : transforms.emplace_back(device())).record(stream);
  }

  stream release;  // first member, so destroyed last: after the frees enqueued on it
  std::size_t features;
  device_buffer<ordered_t<T>> min_bits;
  device_buffer<ordered_t<T>> max_bits;
  device_buffer<T> min;
  device_buffer<T> max;
  device_buffer<T> scale;
  event fitted;                  // recorded after the last fit's device work
  std::vector<event> transforms;  // recorded after transforms; fits wait for those still running
};

}  // namespace detail

template <class T>
minmax_scaler<T>::minmax_scaler(minmax_options<T> const& options, device_resource_ref resource)
    : options_(options), resource_(resource)
{
  detail::expect_options(options);
}

template <class T>
minmax_scaler<T>::~minmax_scaler() = default;

template <class T>
void minmax_scaler<T>::accumulate(matrix_ref<T const> x, stream_ref stream, bool reset)
{
  detail::expect_matrix(x, "x");
  STREAMKIT_EXPECTS(x.rows > 0 && x.cols > 0, std::invalid_argument,
                    "x: cannot fit " + std::to_string(x.rows) + " x " + std::to_string(x.cols) + " elements");
  std::lock_guard const lock(mutex_);
  bool const fresh = reset || !state_;
  STREAMKIT_EXPECTS(fresh || x.cols == state_->features, std::invalid_argument,
                    "x: has " + std::to_string(x.cols) + " columns, the scaler was fitted on " + std::to_string(state_->features));
  int const device = stream.device();
  device_guard guard(device);
  if (fresh && (!state_ || state_->features != x.cols || state_->device() != device)) {
    // The old state frees its memory once its last users have run.
    state_ = std::make_unique<detail::scaler_state<T>>(x.cols, stream, resource_);
  }
  auto& state = *state_;
  state.order_after_everything(stream);
  if (fresh) { detail::reset_bits<T>(x.cols, state.min_bits.data(), state.max_bits.data(), stream); }
  detail::reduce_into(x, state.min_bits.data(), state.max_bits.data(), stream);
  detail::finalize(x.cols, state.min_bits.data(), state.max_bits.data(), detail::scaling_of(options_), state.min.data(),
                   state.max.data(), state.scale.data(), stream);
  state.fitted.record(stream);
}

template <class T>
void minmax_scaler<T>::fit_async(matrix_ref<T const> x, stream_ref stream)
{
  accumulate(x, stream, true);
}

template <class T>
void minmax_scaler<T>::partial_fit_async(matrix_ref<T const> x, stream_ref stream)
{
  accumulate(x, stream, false);
}

template <class T>
template <bool Inverse>
void minmax_scaler<T>::apply_fitted(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream, char const* what) const
{
  std::lock_guard const lock(mutex_);
  STREAMKIT_EXPECTS(state_ != nullptr, std::logic_error, std::string(what) + "() before fit()");
  auto& state = *state_;
  detail::expect_matrix(x, "x");
  STREAMKIT_EXPECTS(x.cols == state.features, std::invalid_argument,
                    "x: has " + std::to_string(x.cols) + " columns, the scaler was fitted on " + std::to_string(state.features));
  detail::expect_matrix(out, "out");
  detail::expect_same_shape(x, out);
  int const device = stream.device();
  STREAMKIT_EXPECTS(device == state.device(), std::invalid_argument,
                    "stream: belongs to device " + std::to_string(device) + " but the scaler was fitted on device " +
                      std::to_string(state.device()));
  device_guard guard(device);
  stream.wait(state.fitted);
  detail::apply<T, Inverse>(x, out, state.min.data(), state.scale.data(), detail::scaling_of(options_), stream);
  state.record_transform(stream);
}

template <class T>
void minmax_scaler<T>::transform_async(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const
{
  apply_fitted<false>(x, out, stream, "transform");
}

template <class T>
void minmax_scaler<T>::inverse_transform_async(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const
{
  apply_fitted<true>(x, out, stream, "inverse_transform");
}

template <class T>
void minmax_scaler<T>::fit(matrix_ref<T const> x, stream_ref stream)
{
  fit_async(x, stream);
  stream.sync();
}
template <class T>
void minmax_scaler<T>::partial_fit(matrix_ref<T const> x, stream_ref stream)
{
  partial_fit_async(x, stream);
  stream.sync();
}
template <class T>
void minmax_scaler<T>::transform(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const
{
  transform_async(x, out, stream);
  stream.sync();
}
template <class T>
void minmax_scaler<T>::inverse_transform(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const
{
  inverse_transform_async(x, out, stream);
  stream.sync();
}

template <class T>
std::size_t minmax_scaler<T>::n_features() const
{
  std::lock_guard const lock(mutex_);
  return state_ ? state_->features : 0;
}

template <class T>
device_buffer<T> const& minmax_scaler<T>::fitted_buffer(fitted_array which) const
{
  switch (which) {
    case fitted_array::min: return state_->min;
    case fitted_array::max: return state_->max;
    case fitted_array::scale: break;
  }
  return state_->scale;
}

template <class T>
T const* minmax_scaler<T>::device_array(fitted_array which) const
{
  std::lock_guard const lock(mutex_);
  return state_ ? fitted_buffer(which).data() : nullptr;
}

template <class T>
T const* minmax_scaler<T>::data_min() const
{
  return device_array(fitted_array::min);
}
template <class T>
T const* minmax_scaler<T>::data_max() const
{
  return device_array(fitted_array::max);
}
template <class T>
T const* minmax_scaler<T>::scale() const
{
  return device_array(fitted_array::scale);
}

template <class T>
std::vector<T> minmax_scaler<T>::host_copy(fitted_array which) const
{
  std::lock_guard const lock(mutex_);
  if (!state_) { return {}; }
  device_guard guard(state_->device());
  stream_ref const copies = state_->release;
  copies.wait(state_->fitted);
  std::vector<T> host(state_->features);
  fitted_buffer(which).copy_to_host_async(cuda::std::span<T>(host.data(), host.size()), copies);
  copies.sync();
  return host;
}

template <class T>
std::vector<T> minmax_scaler<T>::data_min_host() const
{
  return host_copy(fitted_array::min);
}
template <class T>
std::vector<T> minmax_scaler<T>::data_max_host() const
{
  return host_copy(fitted_array::max);
}
template <class T>
std::vector<T> minmax_scaler<T>::scale_host() const
{
  return host_copy(fitted_array::scale);
}

}  // namespace streamkit
