// Bindings of streamkit.MinMaxScaler and streamkit.normalize_many: every argument is checked, naming
// it, before any CUDA call and before anything is written; then the work goes to minmax.cu.

#include "common.hpp"
#include "minmax.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace streamkit_python {

namespace {

using streamkit::layout;
using streamkit::matrix_ref;

/// What a 2-D array is, and how a matrix_ref views it.
struct matrix_info {
  std::size_t rows = 0;
  std::size_t cols = 0;
  bool is_double = false;
  bool on_cuda = false;
  int device = 0;
  layout order = layout::row_major;
  std::size_t ld = 0;
};

char const* dtype_text(bool is_double) { return is_double ? "float64" : "float32"; }

std::string place_text(bool on_cuda, int device)
{
  return on_cuda ? "CUDA device " + std::to_string(device) : std::string("the host");
}

std::string shape_of(matrix_info const& m) { return "(" + std::to_string(m.rows) + ", " + std::to_string(m.cols) + ")"; }

/// The matrix_ref layout of a rows × cols array with element strides (s0, s1), if it has one:
/// row-major when the columns are adjacent (s1 = 1, or one column) and rows s0 ≥ cols apart (any
/// distance for one row); column-major when the rows are adjacent (s0 = 1, or one row) and columns
/// s1 ≥ rows apart. Arrays with no element need no layout.
bool find_layout(matrix_info& m, std::int64_t s0, std::int64_t s1)
{
  auto const rows = static_cast<std::int64_t>(m.rows), cols = static_cast<std::int64_t>(m.cols);
  if (rows == 0 || cols == 0) {
    m.order = layout::row_major;
    m.ld = m.cols;
    return true;
  }
  if (s1 == 1 || cols == 1) {
    std::int64_t const row_stride = rows == 1 ? cols : s0;
    if (row_stride >= cols) {
      m.order = layout::row_major;
      m.ld = static_cast<std::size_t>(row_stride);
      return true;
    }
  }
  if (s0 == 1 || rows == 1) {
    std::int64_t const column_stride = cols == 1 ? rows : s1;
    if (column_stride >= rows) {
      m.order = layout::column_major;
      m.ld = static_cast<std::size_t>(column_stride);
      return true;
    }
  }
  return false;
}

/// Checks a 2-D float32/float64 array, CUDA or host, that a matrix_ref can view (find_layout).
template <class Array>
matrix_info check_matrix(Array const& a, std::string const& name)
{
  char const* const arg = name.c_str();
  if (a.ndim() != 2) {
    std::string const hint =
      a.ndim() == 1 ? "; reshape 1-D data with x.reshape(-1, 1) (one feature) or x.reshape(1, -1) (one sample)" : "";
    value_error(arg,
                "expected a 2-D array of shape (n_samples, n_features), got shape " + shape_text(a.ndim(), a.shape_ptr()) + hint);
  }
  auto const dt = a.dtype();
  bool const f32 = dt == nb::dtype<float>();
  bool const f64 = dt == nb::dtype<double>();
  if (!f32 && !f64) { type_error(arg, "expected dtype float32 or float64, got " + dtype_name(dt)); }
  if (!is_cuda(a) && !is_host(a)) { value_error(arg, where(a) + "; streamkit takes CUDA or host (NumPy) arrays"); }
  matrix_info m;
  m.rows = a.shape(0);
  m.cols = a.shape(1);
  m.is_double = f64;
  m.on_cuda = is_cuda(a);
  m.device = m.on_cuda ? a.device_id() : 0;
  if (!find_layout(m, a.stride(0), a.stride(1))) {
    value_error(arg, "element strides (" + std::to_string(a.stride(0)) + ", " + std::to_string(a.stride(1)) + ") of shape " +
                       shape_of(m) +
                       " are neither row-major (column stride 1, row stride >= n_features) nor column-major (row stride 1, "
                       "column stride >= n_samples); copy it (e.g. ascontiguousarray)");
  }
  std::size_t const element = f64 ? sizeof(double) : sizeof(float);
  if (m.rows * m.cols > 0 && reinterpret_cast<std::uintptr_t>(a.data()) % element != 0) {
    value_error(arg, "data is not aligned to its element size");
  }
  return m;
}

/// scikit-learn's minimum of one sample and one feature for fit and transform.
void check_not_empty(matrix_info const& m, char const* name)
{
  if (m.rows == 0) {
    value_error(name, "found array with 0 sample(s) (shape " + shape_of(m) + ") while a minimum of 1 is required");
  }
  if (m.cols == 0) {
    value_error(name, "found array with 0 feature(s) (shape " + shape_of(m) + ") while a minimum of 1 is required");
  }
}

/// Checks an output `name` for the input `x` (named `x_name`): same shape, dtype and place.
matrix_info check_output(out_array const& a, std::string const& name, matrix_info const& x, char const* x_name)
{
  matrix_info const m = check_matrix(a, name);
  char const* const arg = name.c_str();
  if (m.rows != x.rows || m.cols != x.cols) {
    value_error(arg, "expected shape " + shape_of(x) + " (" + x_name + "'s), got " + shape_of(m));
  }
  if (m.is_double != x.is_double) {
    type_error(arg,
               std::string("expected dtype ") + dtype_text(x.is_double) + " (" + x_name + "'s), got " + dtype_text(m.is_double));
  }
  if (m.on_cuda != x.on_cuda || (m.on_cuda && m.device != x.device)) {
    value_error(arg, "on " + place_text(m.on_cuda, m.device) + " but " + x_name + " is on " + place_text(x.on_cuda, x.device));
  }
  return m;
}

template <class T, class Array>
matrix_ref<T> view_of(Array const& a, matrix_info const& m)
{
  return {static_cast<T*>(const_cast<void*>(static_cast<void const*>(a.data()))), m.rows, m.cols, m.ld, m.order};
}

/// Checks that [lo, hi] stays a finite interval with lo < hi in T (a float32 cast may close it).
template <class T>
void check_range_in(double lo, double hi)
{
  auto const l = static_cast<T>(lo), h = static_cast<T>(hi);
  if (!(std::isfinite(l) && std::isfinite(h) && l < h)) {
    char text[96];
    std::snprintf(text, sizeof text, "(%.17g, %.17g)", lo, hi);
    value_error("feature_range",
                std::string(text) + " is not a finite interval with min < max in " + (sizeof(T) == 8 ? "float64" : "float32"));
  }
}

/// streamkit.MinMaxScaler's compiled part: a scaler<float> or scaler<double> (the dtype of the last
/// fit; the other one is released when a fit changes the dtype), made by the first fit of its dtype.
class minmax_scaler_binding {
 public:
  minmax_scaler_binding(double lo, double hi, bool clip) : lo_(lo), hi_(hi), clip_(clip) {}

  /// fit (`reset`, or unfitted) or partial_fit; CUDA arrays are enqueued on `stream`, host arrays wait.
  void fit(nb::handle x, bool reset, std::uintptr_t stream)
  {
    auto const in = as_array<in_array>(x, "X");
    matrix_info const m = check_fit(in, reset);
    if (m.is_double) {
      fit_as<double>(in, m, nullptr, nullptr, reset, stream, scaler_of(f64_));
    } else {
      fit_as<float>(in, m, nullptr, nullptr, reset, stream, scaler_of(f32_));
    }
    fitted(m);
  }

  /// fit, then transform into `out`, on `stream` (CUDA arrays) or copying X to the device once (host).
  void fit_transform(nb::handle x, nb::handle out, std::uintptr_t stream)
  {
    auto const in = as_array<in_array>(x, "X");
    matrix_info const m = check_fit(in, true);
    auto const result = as_array<out_array>(out, "out");
    matrix_info const o = check_output(result, "out", m, "X");
    if (m.is_double) {
      fit_as<double>(in, m, &result, &o, true, stream, scaler_of(f64_));
    } else {
      fit_as<float>(in, m, &result, &o, true, stream, scaler_of(f32_));
    }
    fitted(m);
  }

  /// transform (or, with `inverse`, inverse_transform) of X into `out`.
  void transform(nb::handle x, nb::handle out, bool inverse, std::uintptr_t stream)
  {
    if (n_features_ == 0) { throw std::logic_error("transform() before fit()"); }
    auto const in = as_array<in_array>(x, "X");
    matrix_info const m = check_matrix(in, "X");
    check_not_empty(m, "X");
    check_like_fit(m);
    auto const result = as_array<out_array>(out, "out");
    matrix_info const o = check_output(result, "out", m, "X");
    if (m.is_double) {
      transform_as<double>(in, m, result, o, inverse, stream, *f64_);
    } else {
      transform_as<float>(in, m, result, o, inverse, stream, *f32_);
    }
  }

  /// Writes the fitted minima, maxima and scales into three host arrays of n_features elements of
  /// the fitted dtype (waits for the last fit).
  void fitted_into(nb::handle min, nb::handle max, nb::handle scale)
  {
    if (n_features_ == 0) { throw std::logic_error("fitted values before fit()"); }
    auto const to_min = check_fitted_output(min, "min");
    auto const to_max = check_fitted_output(max, "max");
    auto const to_scale = check_fitted_output(scale, "scale");
    nb::gil_scoped_release release;
    if (is_double_) {
      copy_fitted_as<double>(*f64_, to_min, to_max, to_scale);
    } else {
      copy_fitted_as<float>(*f32_, to_min, to_max, to_scale);
    }
  }

  /// (n_features, dtype, device): (0, "", -1) before the first fit.
  std::tuple<std::size_t, std::string, int> describe() const
  {
    if (n_features_ == 0) { return {0, "", -1}; }
    return {n_features_, dtype_text(is_double_), is_double_ ? f64_->device() : f32_->device()};
  }

 private:
  /// The checked X of a fit: at least 1 × 1; a partial_fit of a fitted scaler keeps its dtype,
  /// width and device.
  matrix_info check_fit(in_array const& in, bool reset) const
  {
    matrix_info const m = check_matrix(in, "X");
    check_not_empty(m, "X");
    if (!reset && n_features_ > 0) { check_like_fit(m); }
    return m;
  }

  /// X has the fitted dtype and width, and, on a GPU, is on the fitted device.
  void check_like_fit(matrix_info const& m) const
  {
    if (m.is_double != is_double_) {
      type_error("X", std::string("dtype ") + dtype_text(m.is_double) + " differs from the fitted " + dtype_text(is_double_) +
                        " (fit() again to change it)");
    }
    if (m.cols != n_features_) {
      value_error("X", "has " + std::to_string(m.cols) + " features, but MinMaxScaler is expecting " +
                         std::to_string(n_features_) + " features as input");
    }
    int const device = is_double_ ? f64_->device() : f32_->device();
    if (m.on_cuda && m.device != device) {
      value_error("X", "on CUDA device " + std::to_string(m.device) + " but the scaler was fitted on CUDA device " +
                         std::to_string(device) + " (fit() again to move it)");
    }
  }

  /// The scaler of one dtype, made on first use (checks lo < hi, both finite, in that dtype).
  template <class T>
  scaler<T>& scaler_of(std::unique_ptr<scaler<T>>& held)
  {
    if (!held) {
      check_range_in<T>(lo_, hi_);
      held = std::make_unique<scaler<T>>(static_cast<T>(lo_), static_cast<T>(hi_), clip_);
    }
    return *held;
  }

  /// Records a successful fit of `m`; a change of dtype releases the other dtype's scaler.
  void fitted(matrix_info const& m)
  {
    if (m.is_double) {
      f32_.reset();
    } else {
      f64_.reset();
    }
    is_double_ = m.is_double;
    n_features_ = m.cols;
  }

  template <class T>
  static void fit_as(in_array const& in, matrix_info const& m, out_array const* out, matrix_info const* o, bool reset,
                     std::uintptr_t stream, scaler<T>& target)
  {
    auto const x = view_of<T const>(in, m);
    auto const result = out != nullptr ? view_of<T>(*out, *o) : matrix_ref<T>{};
    nb::gil_scoped_release release;
    if (!m.on_cuda) {
      if (out != nullptr) {
        target.fit_transform_host(x, result);
      } else {
        target.fit_host(x, reset);
      }
      return;
    }
    target.fit_async(m.device, x, reset, stream_of(stream));
    if (out != nullptr) { target.transform_async(m.device, x, result, false, stream_of(stream)); }
  }

  template <class T>
  static void transform_as(in_array const& in, matrix_info const& m, out_array const& out, matrix_info const& o, bool inverse,
                           std::uintptr_t stream, scaler<T>& source)
  {
    auto const x = view_of<T const>(in, m);
    auto const result = view_of<T>(out, o);
    nb::gil_scoped_release release;
    if (m.on_cuda) {
      source.transform_async(m.device, x, result, inverse, stream_of(stream));
    } else {
      source.transform_host(x, result, inverse);
    }
  }

  template <class T>
  static void copy_fitted_as(scaler<T> const& source, out_array const& min, out_array const& max, out_array const& scale)
  {
    source.copy_fitted(static_cast<T*>(min.data()), static_cast<T*>(max.data()), static_cast<T*>(scale.data()));
  }

  /// A host array of n_features elements of the fitted dtype, contiguous.
  out_array check_fitted_output(nb::handle object, char const* name) const
  {
    auto a = as_array<out_array>(object, name);
    if (!is_host(a) || a.ndim() != 1 || a.shape(0) != n_features_ || a.stride(0) != 1 ||
        a.dtype() != (is_double_ ? nb::dtype<double>() : nb::dtype<float>())) {
      value_error(name, "expected a contiguous host array of " + std::to_string(n_features_) + " " + dtype_text(is_double_));
    }
    return a;
  }

  double lo_;
  double hi_;
  bool clip_;
  std::unique_ptr<scaler<float>> f32_;
  std::unique_ptr<scaler<double>> f64_;
  bool is_double_ = false;
  std::size_t n_features_ = 0;  // 0: unfitted
};

/// The host arrays of normalize_many and their outputs, by dtype.
struct normalize_batch {
  std::vector<matrix_ref<float const>> inputs_f32;
  std::vector<matrix_ref<float>> outputs_f32;
  std::vector<matrix_ref<double const>> inputs_f64;
  std::vector<matrix_ref<double>> outputs_f64;
  std::size_t elements = 0;
};

void normalize_many(nb::list arrays, nb::list outputs, double lo, double hi)
{
  std::size_t const count = nb::len(arrays);
  if (nb::len(outputs) != count) {
    value_error("out", std::to_string(nb::len(outputs)) + " arrays for " + std::to_string(count) + " inputs");
  }
  std::vector<in_array> inputs;
  std::vector<out_array> results;
  std::vector<matrix_info> input_info, output_info;
  bool any_f32 = false, any_f64 = false;
  for (std::size_t i = 0; i < count; ++i) {
    std::string const name = "arrays[" + std::to_string(i) + "]";
    nb::object const array = arrays[i];
    inputs.push_back(as_array<in_array>(array, name.c_str()));
    input_info.push_back(check_matrix(inputs.back(), name));
    if (input_info.back().on_cuda) {
      type_error(name.c_str(), "on " + place_text(true, input_info.back().device) +
                                 "; normalize_many scales host (NumPy) arrays (MinMaxScaler().fit_transform scales CUDA arrays)");
    }
    (input_info.back().is_double ? any_f64 : any_f32) = true;
  }
  for (std::size_t i = 0; i < count; ++i) {
    std::string const name = "out[" + std::to_string(i) + "]";
    std::string const input_name = "arrays[" + std::to_string(i) + "]";
    nb::object const output = outputs[i];
    results.push_back(as_array<out_array>(output, name.c_str()));
    output_info.push_back(check_output(results.back(), name, input_info[i], input_name.c_str()));
  }
  if (any_f32) { check_range_in<float>(lo, hi); }
  if (any_f64) { check_range_in<double>(lo, hi); }
  normalize_batch batch;
  for (std::size_t i = 0; i < count; ++i) {
    if (input_info[i].is_double) {
      batch.inputs_f64.push_back(view_of<double const>(inputs[i], input_info[i]));
      batch.outputs_f64.push_back(view_of<double>(results[i], output_info[i]));
    } else {
      batch.inputs_f32.push_back(view_of<float const>(inputs[i], input_info[i]));
      batch.outputs_f32.push_back(view_of<float>(results[i], output_info[i]));
    }
    batch.elements += input_info[i].rows * input_info[i].cols;
  }
  if (batch.elements == 0) { return; }  // nothing to scale: no GPU needed
  nb::gil_scoped_release release;
  normalize_host(batch.inputs_f32, batch.outputs_f32, batch.inputs_f64, batch.outputs_f64, lo, hi);
}

}  // namespace

void register_minmax(nb::module_& m)
{
  m.def(
    "_matrix_check",
    [](nb::handle array, std::string const& name) {
      auto const a = as_array<in_array>(array, name.c_str());
      matrix_info const info = check_matrix(a, name);
      return std::make_tuple(info.rows, info.cols, std::string(dtype_text(info.is_double)), info.on_cuda, info.device,
                             info.order == layout::column_major && info.rows > 1 && info.cols > 1);
    },
    nb::arg("array"), nb::arg("name"),
    "Checks a 2-D float32/float64 array streamkit can view (no CUDA call); returns (rows, cols, dtype, on_cuda, device, "
    "fortran_order).");

  m.def("_normalize_many", &normalize_many, nb::arg("arrays"), nb::arg("out"), nb::arg("lo"), nb::arg("hi"),
        "Checks every array, then scales host arrays[i] into out[i] over every GPU and waits.");

  nb::class_<minmax_scaler_binding>(m, "_MinMaxScaler", "The compiled part of streamkit.MinMaxScaler.")
    .def(nb::init<double, double, bool>(), nb::arg("lo"), nb::arg("hi"), nb::arg("clip"))
    .def("fit", &minmax_scaler_binding::fit, nb::arg("x"), nb::arg("reset"), nb::arg("stream"))
    .def("fit_transform", &minmax_scaler_binding::fit_transform, nb::arg("x"), nb::arg("out"), nb::arg("stream"))
    .def("transform", &minmax_scaler_binding::transform, nb::arg("x"), nb::arg("out"), nb::arg("inverse"), nb::arg("stream"))
    .def("fitted_into", &minmax_scaler_binding::fitted_into, nb::arg("min"), nb::arg("max"), nb::arg("scale"))
    .def("describe", &minmax_scaler_binding::describe, "(n_features, dtype, device); (0, '', -1) before the first fit");
}

}  // namespace streamkit_python
