#pragma once
// The bridge between the min-max binding code (minmax_bindings.cpp, host compiler) and its CUDA
// code (minmax.cu, nvcc): plain C++ declarations on streamkit's views, nothing of nanobind or of
// the .cuh headers.

#include <streamkit/core/matrix.hpp>

#include <atomic>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

namespace streamkit_python {

/// streamkit.MinMaxScaler's compiled state: a streamkit::minmax_scaler<T>, whose device memory is
/// kept from one fit to the next of the same width and device, and, for host arrays, a stream and
/// grow-only device buffers on the scaler's device through which they are copied. So repeated fits
/// and transforms of one shape allocate nothing. Explicitly instantiated for float and double in
/// minmax.cu, as is all below.
template <class T>
class scaler {
 public:
  /// A scaler to [lo, hi], clamping transformed values to it if `clip`.
  /// @throws std::invalid_argument unless lo < hi, both finite.
  scaler(T lo, T hi, bool clip);
  ~scaler();
  scaler(scaler const&) = delete;
  scaler& operator=(scaler const&) = delete;

  /// fit (`reset`) or partial_fit of `x`, device memory of `device`, on `stream` (of that device);
  /// never waits. A partial_fit must be on the device of the fits before it.
  /// @throws std::invalid_argument for a stream of another device.
  void fit_async(int device, streamkit::matrix_ref<T const> x, bool reset, cudaStream_t stream);
  /// transform (or, with `inverse`, inverse_transform) of `x` into `out`, device memory of the
  /// fitted device, on `stream`; never waits. Ordered after the last fit whatever its stream.
  void transform_async(int device, streamkit::matrix_ref<T const> x, streamkit::matrix_ref<T> out, bool inverse,
                       cudaStream_t stream);

  /// Host arrays: copied to the scaler's device (device 0 before the first fit), fitted or
  /// transformed there on a stream of the scaler's, copied back; these wait.
  void fit_host(streamkit::matrix_ref<T const> x, bool reset);
  void transform_host(streamkit::matrix_ref<T const> x, streamkit::matrix_ref<T> out, bool inverse);
  /// fit_host then transform_host, copying `x` to the device once.
  void fit_transform_host(streamkit::matrix_ref<T const> x, streamkit::matrix_ref<T> out);

  /// Copies the fitted per-column minima, maxima and scales (n_features elements each) to host
  /// memory once the last fit has run (waits for it).
  void copy_fitted(T* min, T* max, T* scale) const;
  /// The device of the last fit; -1 before the first.
  [[nodiscard]] int device() const noexcept { return device_.load(); }

 private:
  struct state;
  std::unique_ptr<state> state_;
  std::atomic<int> device_{-1};
};

/// streamkit::dispatch_minmax_normalize of host arrays over every visible GPU (the process's shared
/// dispatcher), float32 and float64 batches one after the other under one lock; waits. Arrays with
/// no element are skipped. The caller has checked lo < hi (finite) in both types.
void normalize_host(std::vector<streamkit::matrix_ref<float const>> const& inputs_f32,
                    std::vector<streamkit::matrix_ref<float>> const& outputs_f32,
                    std::vector<streamkit::matrix_ref<double const>> const& inputs_f64,
                    std::vector<streamkit::matrix_ref<double>> const& outputs_f64, double lo, double hi);

}  // namespace streamkit_python
