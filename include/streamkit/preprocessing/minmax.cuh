#pragma once
/// @file minmax.cuh
/// Column min-max scaling of 2-D arrays on the device:
///   out(i, j) = lo + (x(i, j) − min_j) · (hi − lo) / (max_j − min_j)
/// for float or double, row- or column-major, any leading dimension, in place or out of place.
///
/// Semantics (those of scikit-learn's MinMaxScaler, except where noted):
/// - NaN is ignored when fitting and stays NaN when transforming. A column with no value other than
///   NaN gets min = max = scale = NaN, and its outputs are NaN.
/// - A column whose range max − min is below 10 × epsilon of T (absolute, as scikit-learn) is
///   treated as constant: its range counts as 1, so its values map to lo (x = min).
/// - ±inf take part in min and max like any value (scikit-learn rejects them). A column holding one
///   gets an infinite range and scale 0: finite values map to lo if the column's min is finite and to
///   NaN if it is −inf; the infinities themselves map to NaN. Nothing throws for them.
/// - `clip` clamps transformed values to [lo, hi]; NaN stays NaN.
/// - feature_range must satisfy lo < hi, both finite (std::invalid_argument otherwise).
///
/// Bad arguments (null data with a non-zero size, a leading dimension below the width, lo ≥ hi,
/// shapes that do not match) throw std::invalid_argument before anything is written. Every call takes
/// its stream last: the `_async` forms enqueue on it and never wait; the blocking forms are the
/// `_async` form, then a wait for that stream.

#include <streamkit/preprocessing/detail/minmax_kernels.cuh>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/core/matrix.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace streamkit {

/// The interval values are scaled to, and whether to clamp to it.
template <class T>
struct minmax_options {
  T lo = T(0);        ///< lower end of the interval
  T hi = T(1);        ///< upper end of the interval; lo < hi, both finite
  bool clip = false;  ///< clamp transformed values to [lo, hi] (NaN stays NaN)
};

/// Per-column min and max (NaN ignored) of `x` into device arrays of x.cols elements, on `stream`;
/// never waits. `x` may be a mutable view: T is deduced from `min` and `max`. Allocates one buffer of
/// 2 × x.cols elements from `resource`, freed in stream order.
template <class T>
void column_minmax_async(detail::identity_t<matrix_ref<T const>> x, T* min, T* max, stream_ref stream,
                         device_resource_ref resource = default_device_resource());
/// column_minmax_async(), then waits for `stream`.
template <class T>
void column_minmax(detail::identity_t<matrix_ref<T const>> x, T* min, T* max, stream_ref stream,
                   device_resource_ref resource = default_device_resource());

/// Fit and transform in one call; `out` may be `in` (in place) and may have another layout or pitch,
/// but the same rows × cols. Short columns are read once: row-major up to 64 rows, column-major up to
/// 256 rows, and on sm_90 and later column-major from 1536 up to 114688 rows of double or 229376 of
/// float (a cluster of blocks per column, the column in their shared memory); others twice (one
/// reduction, one transform). `min`/`max` may be null or device arrays
/// of `cols` elements that receive the fitted values.
/// `in` may be a mutable view (`minmax_normalize_async(x, x, options, stream)` scales in place): T is
/// deduced from `out`. Never waits. The shapes read once allocate nothing; the others allocate one
/// buffer of 5 × cols elements from `resource`, freed in stream order (for repeated scaling without
/// allocation use a minmax_scaler, which keeps its memory).
template <class T>
void minmax_normalize_async(detail::identity_t<matrix_ref<T const>> in, matrix_ref<T> out, minmax_options<T> const& options,
                            stream_ref stream, detail::identity_t<T>* min = nullptr, detail::identity_t<T>* max = nullptr,
                            device_resource_ref resource = default_device_resource());
/// minmax_normalize_async(), then waits for `stream`.
template <class T>
void minmax_normalize(detail::identity_t<matrix_ref<T const>> in, matrix_ref<T> out, minmax_options<T> const& options,
                      stream_ref stream, device_resource_ref resource = default_device_resource());

namespace detail {
template <class T>
class scaler_state;
}  // namespace detail

/// A scikit-learn style MinMaxScaler whose state lives on one device. partial_fit() keeps running
/// minima and maxima, so fitting batches one by one gives bit for bit what one fit() over their
/// concatenation gives.
///
/// Thread-safe, and safe across streams: fits, transforms and the host accessors may be called from
/// several host threads at once, each with its own stream. Calls are serialised on the host (a lock is
/// held while the call enqueues its work, not while the work runs) and ordered on the device: a
/// transform waits for the last fit enqueued before it, and a fit waits for every transform enqueued
/// before it, whatever their streams. Transforms must use a stream of the device the scaler was last
/// fitted on. The raw pointers data_min(), data_max() and scale() are outside that ordering.
template <class T>
class minmax_scaler {
 public:
  /// A scaler to [options.lo, options.hi] whose device memory comes from `resource` (which must
  /// outlive it). Memory is allocated by the first fit and again only by a fit of another width or
  /// device: a loop of fits and transforms of one shape allocates nothing after the first.
  /// @throws std::invalid_argument unless lo < hi, both finite.
  explicit minmax_scaler(minmax_options<T> const& options = {}, device_resource_ref resource = default_device_resource());
  /// Move-only; moving is not thread-safe. A moved-from scaler is unfitted: transforming with it
  /// throws std::logic_error, fitting it starts afresh.
  minmax_scaler(minmax_scaler&& other) noexcept
      : options_(other.options_), resource_(other.resource_), state_(std::move(other.state_))
  {
  }
  /// Move assignment; not thread-safe. The memory of the state it held is released after that
  /// state's last fit and transform have run; `other` becomes unfitted.
  minmax_scaler& operator=(minmax_scaler&& other) noexcept
  {
    options_ = other.options_;
    resource_ = other.resource_;
    state_ = std::move(other.state_);
    return *this;
  }
  minmax_scaler(minmax_scaler const&) = delete;
  minmax_scaler& operator=(minmax_scaler const&) = delete;
  /// Returns at once; the device memory is released after the last fit and transform have run.
  ~minmax_scaler();

  /// Fits per-column min, max and scale to `x` (device memory), discarding any earlier fit, on
  /// `stream`; never waits. @throws std::invalid_argument for a bad view or one with no elements.
  void fit_async(matrix_ref<T const> x, stream_ref stream);
  /// Folds `x` into the running minima and maxima (a first fit when unfitted), on `stream`; never
  /// waits. @throws std::invalid_argument for a bad view, one with no elements, or a column count
  /// other than the fitted one.
  void partial_fit_async(matrix_ref<T const> x, stream_ref stream);
  /// Scales `x` into `out` (same shape, device memory) with the fitted values, on `stream`; never
  /// waits. @throws std::logic_error when unfitted; std::invalid_argument for bad views, a column
  /// count other than the fitted one, or a stream of another device than the last fit's.
  void transform_async(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const;
  /// The inverse of transform_async() (no clipping): maps scaled `x` back to the data's range into
  /// `out`, on `stream`; never waits. @throws std::logic_error when unfitted; std::invalid_argument
  /// as transform_async().
  void inverse_transform_async(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const;

  /// The `_async` forms, then a wait for `stream`.
  void fit(matrix_ref<T const> x, stream_ref stream);
  /// partial_fit_async(), then a wait for `stream`.
  void partial_fit(matrix_ref<T const> x, stream_ref stream);
  /// transform_async(), then a wait for `stream`.
  void transform(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const;
  /// inverse_transform_async(), then a wait for `stream`.
  void inverse_transform(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const;

  /// True once a fit has been enqueued (n_features() > 0).
  [[nodiscard]] bool fitted() const { return n_features() > 0; }
  /// The number of columns of the last fit (0 when unfitted).
  [[nodiscard]] std::size_t n_features() const;
  /// The interval (lo, hi) values are scaled to.
  [[nodiscard]] std::pair<T, T> feature_range() const noexcept { return {options_.lo, options_.hi}; }
  /// Whether transforms clamp to feature_range().
  [[nodiscard]] bool clip() const noexcept { return options_.clip; }
  /// Device arrays of n_features() elements (null until fitted; valid until a fit of another shape
  /// or device, or the scaler's end). Work reading them on a stream other than the last fit's must
  /// wait for that fit first.
  [[nodiscard]] T const* data_min() const;
  /// Device array of the per-column maxima; as data_min().
  [[nodiscard]] T const* data_max() const;
  /// Device array of the per-column scales (hi − lo) / (max − min), a range below 10 × epsilon of T
  /// counting as 1; as data_min().
  [[nodiscard]] T const* scale() const;
  /// Host copies, taken after the last fit's device work (empty when unfitted).
  [[nodiscard]] std::vector<T> data_min_host() const;
  /// Host copy of data_max(); as data_min_host().
  [[nodiscard]] std::vector<T> data_max_host() const;
  /// Host copy of scale(); as data_min_host().
  [[nodiscard]] std::vector<T> scale_host() const;

 private:
  void accumulate(matrix_ref<T const> x, stream_ref stream, bool reset);
  /// transform (Inverse = false) or inverse_transform, after checking `what`'s arguments.
  template <bool Inverse>
  void apply_fitted(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream, char const* what) const;
  enum class fitted_array { min, max, scale };
  /// The selected device array, or null when unfitted.
  T const* device_array(fitted_array which) const;
  /// The selected buffer of a fitted scaler; the caller holds the lock.
  device_buffer<T> const& fitted_buffer(fitted_array which) const;
  std::vector<T> host_copy(fitted_array which) const;

  minmax_options<T> options_;
  device_resource_ref resource_;
  mutable std::mutex mutex_;
  std::unique_ptr<detail::scaler_state<T>> state_;
};

}  // namespace streamkit

#include <streamkit/preprocessing/detail/minmax_impl.cuh>
