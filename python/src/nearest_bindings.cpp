// Bindings of streamkit.nearest and streamkit.NearestIndex: every argument is checked, naming it,
// before any CUDA call and before anything is written; then the work goes to nearest.cu.

#include "common.hpp"
#include "nearest.hpp"

#include <streamkit/core/error.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

namespace streamkit_python {

namespace {

/// Where and what a (n, 2) coordinate array is.
struct points_info {
  std::size_t count = 0;
  bool is_double = false;
  bool on_cuda = false;
  int device = 0;
};

char const* dtype_text(bool is_double) { return is_double ? "float64" : "float32"; }

std::string place_text(bool on_cuda, int device)
{
  return on_cuda ? "CUDA device " + std::to_string(device) : std::string("the host");
}

/// Checks a (n, 2) array of (lat, lon) rows, float32 or float64, CUDA or host, whose layout
/// points_ref can view: latitude at data + i*s0, longitude at data + s1 + i*s0 (strides in
/// elements), s0 ≥ 1 when n > 1. Any s1 is fine (1: interleaved rows; n: a transposed (2, n)
/// array), so sliced and transposed arrays pass.
points_info check_points(in_array const& a, char const* name)
{
  if (a.ndim() != 2 || a.shape(1) != 2) {
    value_error(name, "expected shape (n, 2) of (latitude, longitude) rows, got shape " + shape_text(a.ndim(), a.shape_ptr()));
  }
  auto const dt = a.dtype();
  bool const f32 = dt == nb::dtype<float>();
  bool const f64 = dt == nb::dtype<double>();
  if (!f32 && !f64) { type_error(name, "expected dtype float32 or float64, got " + dtype_name(dt)); }
  std::size_t const n = a.shape(0);
  if (n > 1 && a.stride(0) < 1) {
    value_error(name, "row stride " + std::to_string(a.stride(0)) +
                        " elements; streamkit reads rows with a positive stride (reversed or broadcast rows are not supported, copy them)");
  }
  std::size_t const element = f64 ? sizeof(double) : sizeof(float);
  if (reinterpret_cast<std::uintptr_t>(a.data()) % element != 0) { value_error(name, "data is not aligned to its element size"); }
  if (!is_cuda(a) && !is_host(a)) { value_error(name, where(a) + "; streamkit takes CUDA or host (NumPy) arrays"); }
  return {n, f64, is_cuda(a), is_cuda(a) ? a.device_id() : 0};
}

template <class T>
streamkit::points_ref<T> points_view(in_array const& a, streamkit::angle_unit unit)
{
  streamkit::points_ref<T> p;
  auto const* data = static_cast<T const*>(a.data());
  p.count = a.shape(0);
  p.stride = p.count > 1 ? static_cast<std::size_t>(a.stride(0)) : 1;
  p.latitude = p.count > 0 ? data : nullptr;
  p.longitude = p.count > 0 ? data + a.stride(1) : nullptr;
  p.unit = unit;
  return p;
}

/// Checks a reference set: m ≥ 1, below 2^32.
void check_reference_count(points_info const& r)
{
  if (r.count == 0) { value_error("references", "the reference set is empty (shape (0, 2))"); }
  if (r.count >= (std::size_t{1} << 32)) {
    value_error("references", std::to_string(r.count) + " points; a search takes at most 2^32 - 1");
  }
}

/// Checks that `b` (named `name`) has the dtype and place of `a` (named `a_name`).
void check_same_kind(points_info const& a, char const* a_name, points_info const& b, char const* name)
{
  if (a.is_double != b.is_double) {
    type_error(name, std::string("dtype ") + dtype_text(b.is_double) + " differs from the " + a_name + "' " + dtype_text(a.is_double));
  }
  if (a.on_cuda != b.on_cuda || (a.on_cuda && a.device != b.device)) {
    value_error(name, "on " + place_text(b.on_cuda, b.device) + " but the " + a_name + " are on " + place_text(a.on_cuda, a.device));
  }
}

/// Checks observations and references together.
std::tuple<points_info, points_info> check_pair(in_array const& obs, in_array const& ref)
{
  points_info const o = check_points(obs, "observations");
  points_info const r = check_points(ref, "references");
  check_same_kind(o, "observations", r, "references");
  check_reference_count(r);
  return {o, r};
}

void check_k(std::size_t k)
{
  if (k < 1 || k > streamkit::max_neighbors) {
    value_error("k", std::to_string(k) + "; streamkit answers k from 1 to " + std::to_string(streamkit::max_neighbors));
  }
}

/// Checks an output table: 2-D (n, k), dtype `want`, column stride 1, row stride ≥ k, where the
/// observations are. Returns its row stride in elements.
std::size_t check_table(out_array const& a, char const* name, nb::dlpack::dtype want, char const* want_name, std::size_t k,
                        points_info const& o)
{
  std::size_t const n = o.count;
  if (a.ndim() != 2 || a.shape(0) != n || a.shape(1) != k) {
    value_error(name, "expected shape (" + std::to_string(n) + ", " + std::to_string(k) + "), got " + shape_text(a.ndim(), a.shape_ptr()));
  }
  if (a.dtype() != want) { type_error(name, std::string("expected dtype ") + want_name + ", got " + dtype_name(a.dtype())); }
  bool const same_place = o.on_cuda ? is_cuda(a) && a.device_id() == o.device : is_host(a);
  if (!same_place) { value_error(name, where(a) + " but the observations are on " + place_text(o.on_cuda, o.device)); }
  if (n == 0) { return k; }
  if (k > 1 && a.stride(1) != 1) { value_error(name, "columns must be contiguous (column stride 1), got " + std::to_string(a.stride(1))); }
  std::int64_t const row = n > 1 ? a.stride(0) : static_cast<std::int64_t>(k);
  if (row < static_cast<std::int64_t>(k)) { value_error(name, "row stride " + std::to_string(row) + " is less than k = " + std::to_string(k)); }
  return static_cast<std::size_t>(row);
}

/// Where a search of `o` with k neighbours writes, and on which stream: `place(n, dtype, on_cuda,
/// device)` (the package's callable: it allocates results or takes out=, and picks the stream) returns
/// (indices, distances, stream[, temporaries]), called once the inputs have passed their checks. The
/// pair is either two arrays (out=), checked here, or the two addresses of dense (n, k) results the
/// package has just allocated; `temporaries`, when not None, allocates streamkit's temporaries in the
/// caller's framework.
struct placement {
  out_array indices;
  out_array distances;
  std::size_t row = 0;
  std::uintptr_t stream = 0;
  nb::object temporaries;  // the 4th item, when given: allocate(nbytes) -> (address, owner), or None
};

/// streamkit's temporaries through the package's callable `allocate(nbytes) -> (address, owner)`
/// (the framework's allocator, on the call's stream): each owner is kept until streamkit releases
/// its memory, and dropping it gives the memory back in the order of that stream.
struct python_allocations {
  nb::object allocate;
  std::unordered_map<void*, nb::object> owners;

  static void* allocate_callback(void* context, std::size_t bytes, cudaStream_t)
  {
    auto& self = *static_cast<python_allocations*>(context);
    nb::gil_scoped_acquire const gil;
    std::string failure;
    try {
      auto const made = nb::cast<nb::tuple>(self.allocate(bytes));
      void* const memory = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(made[0]));
      self.owners[memory] = nb::borrow(made[1]);
      return memory;
    } catch (nb::python_error const& e) {
      failure = e.what();
    } catch (nb::cast_error const&) {
      failure = "it did not return (address, owner)";
    }
    std::string const call = "the framework's allocator for " + std::to_string(bytes) + " bytes of streamkit's temporaries: " + failure;
    throw streamkit::bad_alloc(cudaErrorMemoryAllocation, call.c_str(), __FILE__, __LINE__);
  }

  static void deallocate_callback(void* context, void* memory) noexcept
  {
    auto& self = *static_cast<python_allocations*>(context);
    nb::gil_scoped_acquire const gil;
    self.owners.erase(memory);
  }
};

placement place_results(nb::handle place, std::size_t k, points_info const& o)
{
  auto const placed = nb::cast<nb::tuple>(place(o.count, dtype_text(o.is_double), o.on_cuda, o.device));
  auto const stream = nb::cast<std::uintptr_t>(placed[2]);
  nb::object temporaries = placed.size() > 3 ? nb::borrow<nb::object>(placed[3]) : nb::object(nb::none());
  if (nb::isinstance<nb::int_>(placed[0])) {
    // Results the package has just allocated, dense (n, k), where the observations are: their addresses.
    auto const dense = [&](nb::handle address, nb::dlpack::dtype type) {
      std::size_t const shape[2] = {o.count, k};
      return out_array(reinterpret_cast<void*>(nb::cast<std::uintptr_t>(address)), 2, shape, nb::handle(), nullptr, type,
                       o.on_cuda ? nb::device::cuda::value : nb::device::cpu::value, o.device);
    };
    return {dense(placed[0], nb::dtype<std::int64_t>()), dense(placed[1], o.is_double ? nb::dtype<double>() : nb::dtype<float>()), k,
            stream, std::move(temporaries)};
  }
  auto idx = as_array<out_array>(placed[0], "indices");
  auto dst = as_array<out_array>(placed[1], "distances");
  std::size_t const row_i = check_table(idx, "indices", nb::dtype<std::int64_t>(), "int64", k, o);
  std::size_t const row_d = o.is_double ? check_table(dst, "distances", nb::dtype<double>(), "float64", k, o)
                                        : check_table(dst, "distances", nb::dtype<float>(), "float32", k, o);
  if (o.count > 1 && row_i != row_d) {
    value_error("distances", "row stride " + std::to_string(row_d) + " elements differs from the indices' " + std::to_string(row_i) +
                               " (streamkit writes both with one row stride)");
  }
  return {idx, dst, row_i, stream, std::move(temporaries)};
}

template <class T>
streamkit::neighbors_ref<std::int64_t, T> result_view(placement const& out, std::size_t n, std::size_t k)
{
  streamkit::neighbors_ref<std::int64_t, T> result;
  result.index = static_cast<std::int64_t*>(out.indices.data());
  result.distance = static_cast<T*>(out.distances.data());
  result.count = n;
  result.k = k;
  result.stride = out.row;
  return result;
}

streamkit::angle_unit angle_of(int code)
{
  if (code == 0) { return streamkit::angle_unit::radians; }
  if (code == 1) { return streamkit::angle_unit::degrees; }
  value_error("angle", "unknown code " + std::to_string(code));
}

/// The search options from the Python arguments (checked by the package: the codes, max_distance).
streamkit::nearest_options options_of(int distance, bool exact, double max_distance)
{
  if (!(max_distance >= 0)) { value_error("max_distance", "must be at least 0 (None for no limit)"); }
  streamkit::nearest_options options;
  options.precision = exact ? streamkit::nn_precision::exact : streamkit::nn_precision::fast;
  options.on_invalid = streamkit::invalid_points::mark;
  options.max_distance = max_distance;
  switch (distance) {
    case 0: options.unit = streamkit::distance_unit::radians; break;
    case 1: options.unit = streamkit::distance_unit::kilometres; break;
    case 2: options.unit = streamkit::distance_unit::metres; break;
    default: value_error("distance", "unknown code " + std::to_string(distance));
  }
  return options;
}

template <class T>
void run_nearest(in_array const& obs, in_array const& ref, placement const& out, std::size_t k, streamkit::angle_unit angle,
                 streamkit::nearest_options const& options, points_info const& o)
{
  auto const observations = points_view<T>(obs, angle);
  auto const references = points_view<T>(ref, angle);
  auto const result = result_view<T>(out, o.count, k);
  std::optional<python_allocations> framework;
  allocation_callbacks callbacks;
  if (o.on_cuda && out.temporaries.is_valid() && !out.temporaries.is_none()) {
    framework.emplace(python_allocations{out.temporaries, {}});
    callbacks = {&*framework, &python_allocations::allocate_callback, &python_allocations::deallocate_callback};
  }
  nb::gil_scoped_release release;
  if (o.on_cuda) {
    nearest_async<T>(o.device, observations, references, result, options, stream_of(out.stream), framework ? &callbacks : nullptr);
  } else {
    nearest_host<T>(observations, references, result, options);
  }
}

/// streamkit.NearestIndex's compiled part: a device_index (CUDA references) or a host_index (host
/// references, every GPU) of float or double, fixed by the first reference set.
class nearest_index_binding {
 public:
  nearest_index_binding(nb::handle references, int angle, int distance, bool exact, double max_distance, std::uintptr_t stream)
      : angle_(angle_of(angle)), options_(options_of(distance, exact, max_distance))
  {
    auto const ref = as_array<in_array>(references, "references");
    kind_ = check_points(ref, "references");
    check_reference_count(kind_);
    if (kind_.is_double) {
      make_as<double>(ref, stream, f64_device_, f64_host_);
    } else {
      make_as<float>(ref, stream, f32_device_, f32_host_);
    }
  }

  void update(nb::handle references, std::uintptr_t stream)
  {
    auto const ref = as_array<in_array>(references, "references");
    points_info const r = check_points(ref, "references");
    check_same_kind(kind_, "index's references", r, "references");
    check_reference_count(r);
    if (kind_.is_double) {
      update_as<double>(ref, stream, f64_device_, f64_host_);
    } else {
      update_as<float>(ref, stream, f32_device_, f32_host_);
    }
  }

  void query(nb::handle observations, std::size_t k, nb::handle place)
  {
    auto const obs = as_array<in_array>(observations, "observations");
    points_info const o = check_points(obs, "observations");
    check_same_kind(kind_, "index's references", o, "observations");
    check_k(k);
    auto const out = place_results(place, k, o);
    if (o.count == 0) { return; }
    if (kind_.is_double) {
      query_as<double>(obs, out, k, f64_device_, f64_host_);
    } else {
      query_as<float>(obs, out, k, f32_device_, f32_host_);
    }
  }

  /// (m, dtype, on_cuda, device).
  std::tuple<std::size_t, std::string, bool, int> describe() const
  {
    std::size_t const m = kind_.is_double ? size(f64_device_, f64_host_) : size(f32_device_, f32_host_);
    return {m, dtype_text(kind_.is_double), kind_.on_cuda, kind_.device};
  }

 private:
  template <class T>
  void make_as(in_array const& ref, std::uintptr_t stream, std::unique_ptr<device_index<T>>& on_device,
            std::unique_ptr<host_index<T>>& on_host)
  {
    auto const references = points_view<T>(ref, angle_);
    nb::gil_scoped_release release;
    if (kind_.on_cuda) {
      on_device = std::make_unique<device_index<T>>(kind_.device, references, options_, stream_of(stream));
    } else {
      on_host = std::make_unique<host_index<T>>(references, options_);
    }
  }
  template <class T>
  void update_as(in_array const& ref, std::uintptr_t stream, std::unique_ptr<device_index<T>>& on_device,
              std::unique_ptr<host_index<T>>& on_host)
  {
    auto const references = points_view<T>(ref, angle_);
    nb::gil_scoped_release release;
    if (on_device) {
      on_device->update(references, stream_of(stream));
    } else {
      on_host->update(references);
    }
  }
  template <class T>
  void query_as(in_array const& obs, placement const& out, std::size_t k, std::unique_ptr<device_index<T>>& on_device,
                std::unique_ptr<host_index<T>>& on_host)
  {
    auto const observations = points_view<T>(obs, angle_);
    auto const result = result_view<T>(out, observations.count, k);
    nb::gil_scoped_release release;
    if (on_device) {
      on_device->query(observations, result, stream_of(out.stream));
    } else {
      on_host->query(observations, result);
    }
  }
  template <class T>
  static std::size_t size(std::unique_ptr<device_index<T>> const& on_device, std::unique_ptr<host_index<T>> const& on_host)
  {
    return on_device ? on_device->size() : on_host->size();
  }

  streamkit::angle_unit angle_;
  streamkit::nearest_options options_;
  points_info kind_;
  std::unique_ptr<device_index<float>> f32_device_;
  std::unique_ptr<device_index<double>> f64_device_;
  std::unique_ptr<host_index<float>> f32_host_;
  std::unique_ptr<host_index<double>> f64_host_;
};

/// Checks a 1-D array of `n` elements of `want` where the observations are, contiguous.
template <class Array>
void check_vector(Array const& a, char const* name, std::size_t n, nb::dlpack::dtype want, char const* want_name, points_info const& o)
{
  if (a.ndim() != 1 || a.shape(0) != n) {
    value_error(name, "expected shape (" + std::to_string(n) + ",), got " + shape_text(a.ndim(), a.shape_ptr()));
  }
  if (a.dtype() != want) { type_error(name, std::string("expected dtype ") + want_name + ", got " + dtype_name(a.dtype())); }
  bool const same_place = o.on_cuda ? is_cuda(a) && a.device_id() == o.device : is_host(a);
  if (!same_place) { value_error(name, where(a) + " but the observations are on " + place_text(o.on_cuda, o.device)); }
  if (n > 1 && a.stride(0) != 1) { value_error(name, "must be contiguous (stride 1), got stride " + std::to_string(a.stride(0))); }
}

/// A host (n, 2) array must be C-contiguous for the host path of radius queries (the package copies others).
void check_contiguous_rows(in_array const& a, points_info const& p, char const* name)
{
  if (!p.on_cuda && p.count > 1 && (a.stride(0) != 2 || a.stride(1) != 1)) {
    value_error(name, "host arrays must be C-contiguous (n, 2) rows for a radius query");
  }
}

template <class T>
void run_radius(in_array const& obs, in_array const& ref, points_info const& o, streamkit::angle_unit unit, radius_request const& request,
                streamkit::nearest_options const& options, std::uintptr_t stream, std::int64_t* offsets, nb::handle place)
{
  char const* const dtype = dtype_text(o.is_double);
  radius_storage const storage = [&](std::size_t total) {
    nb::gil_scoped_acquire acquire;
    auto const take = [&](char const* name, char const* type, nb::dlpack::dtype want) {
      auto const array = as_array<out_array>(place(name, total, type), name);
      check_vector(array, name, total, want, type, o);
      return array.data();
    };
    auto* const index = static_cast<std::int64_t*>(take("indices", "int64", nb::dtype<std::int64_t>()));
    void* const distance = request.distances ? take("distances", dtype, o.is_double ? nb::dtype<double>() : nb::dtype<float>()) : nullptr;
    return std::pair<std::int64_t*, void*>(index, distance);
  };
  auto const observations = points_view<T>(obs, unit);
  auto const references = points_view<T>(ref, unit);
  nb::gil_scoped_release release;
  radius_query<T>(o.on_cuda, o.device, observations, references, request, options, stream_of(stream), offsets, storage);
}

}  // namespace

void register_nearest(nb::module_& m)
{
  m.def(
    "_radius_neighbors",
    [](nb::handle observations, nb::handle references, double radius, nb::handle radii, int angle, int distance, bool sorted,
       bool return_distance, std::size_t max_per_row, std::size_t max_total, std::uintptr_t stream, nb::handle place) {
      auto const obs = as_array<in_array>(observations, "observations");
      auto const ref = as_array<in_array>(references, "references");
      auto const [o, r] = check_pair(obs, ref);
      check_contiguous_rows(obs, o, "observations");
      check_contiguous_rows(ref, r, "references");
      radius_request request;
      request.radius = radius;
      request.sorted = sorted;
      request.distances = return_distance;
      request.max_per_row = max_per_row;
      request.max_total = max_total;
      if (!radii.is_none()) {
        auto const per_row = as_array<in_array>(radii, "radius");
        check_vector(per_row, "radius", o.count, nb::dtype<double>(), "float64", o);
        request.radii = static_cast<double const*>(per_row.data());
      } else if (!(radius >= 0)) {
        value_error("radius", "must be at least 0 (inf for every reference), got " + std::to_string(radius));
      }
      auto const options = options_of(distance, true, std::numeric_limits<double>::infinity());
      auto const unit = angle_of(angle);
      auto offsets = as_array<out_array>(place("offsets", o.count + 1, "int64"), "offsets");
      check_vector(offsets, "offsets", o.count + 1, nb::dtype<std::int64_t>(), "int64", o);
      auto* const offsets_data = static_cast<std::int64_t*>(offsets.data());
      if (o.is_double) {
        run_radius<double>(obs, ref, o, unit, request, options, stream, offsets_data, place);
      } else {
        run_radius<float>(obs, ref, o, unit, request, options, stream, offsets_data, place);
      }
    },
    nb::arg("observations"), nb::arg("references"), nb::arg("radius"), nb::arg("radii").none(), nb::arg("angle"), nb::arg("distance"),
    nb::arg("sorted"), nb::arg("return_distance"), nb::arg("max_per_row"), nb::arg("max_total"), nb::arg("stream"), nb::arg("place"),
    "Checks the inputs, then a radius query in compressed rows: place(name, size, dtype) gives the 1-D arrays 'offsets' (n + 1), "
    "then, once the total is known, 'indices' and 'distances'. CUDA arrays: one wait for the total, the fill enqueued on the "
    "stream. Host arrays: copied to the current device and back, waits.");

  m.def(
    "_points_check",
    [](nb::handle points, char const* name) {
      auto const a = as_array<in_array>(points, name);
      points_info const p = check_points(a, name);
      return std::make_tuple(p.count, std::string(dtype_text(p.is_double)), p.on_cuda, p.device);
    },
    nb::arg("points"), nb::arg("name"), "Checks one coordinate array (no CUDA call); returns (n, dtype, on_cuda, device).");

  m.def(
    "_nearest",
    [](nb::handle observations, nb::handle references, std::size_t k, int angle, int distance, bool exact, double max_distance,
       nb::handle place) {
      auto const obs = as_array<in_array>(observations, "observations");
      auto const ref = as_array<in_array>(references, "references");
      auto const [o, r] = check_pair(obs, ref);
      check_k(k);
      auto const options = options_of(distance, exact, max_distance);
      auto const unit = angle_of(angle);
      auto const out = place_results(place, k, o);
      if (o.count == 0) { return; }
      if (o.is_double) {
        run_nearest<double>(obs, ref, out, k, unit, options, o);
      } else {
        run_nearest<float>(obs, ref, out, k, unit, options, o);
      }
    },
    nb::arg("observations"), nb::arg("references"), nb::arg("k"), nb::arg("angle"), nb::arg("distance"), nb::arg("exact"),
    nb::arg("max_distance"), nb::arg("place"),
    "Checks the inputs, calls place(n, dtype, on_cuda, device) -> (indices, distances, stream), checks those, then searches. "
    "CUDA arrays: enqueued on the stream (a cudaStream_t as an int; 0: the legacy default stream), never waits. Host arrays: "
    "over every GPU, waits.");

  m.def(
    "_nearest_enqueue_ns",
    [](nb::handle observations, nb::handle references, std::size_t k, bool exact, nb::handle place, std::size_t calls) {
      auto const obs = as_array<in_array>(observations, "observations");
      auto const ref = as_array<in_array>(references, "references");
      auto const [o, r] = check_pair(obs, ref);
      check_k(k);
      auto const options = options_of(1, exact, std::numeric_limits<double>::infinity());
      auto const out = place_results(place, k, o);
      // Batches of 100 calls, the stream waited for between them outside the timing (as the Python
      // benchmark does), so that no call waits on a full launch queue.
      std::chrono::duration<double, std::nano> spent{};
      for (std::size_t done = 0; done < calls; done += 100) {
        auto const start = std::chrono::steady_clock::now();
        for (std::size_t call = done; call < std::min(calls, done + 100); ++call) {
          if (o.is_double) {
            run_nearest<double>(obs, ref, out, k, streamkit::angle_unit::degrees, options, o);
          } else {
            run_nearest<float>(obs, ref, out, k, streamkit::angle_unit::degrees, options, o);
          }
        }
        spent += std::chrono::steady_clock::now() - start;
        STREAMKIT_CUDA_TRY(cudaStreamSynchronize(stream_of(out.stream)));
      }
      return spent.count() / static_cast<double>(calls);
    },
    nb::arg("observations"), nb::arg("references"), nb::arg("k"), nb::arg("exact"), nb::arg("place"), nb::arg("calls"),
    "Benchmark hook: the C++ host time (ns per call, mean of `calls`) of the search _nearest makes (degrees, km), with the "
    "arrays imported and checked once: what a C++ caller pays, to measure the Python layer's overhead against.");

  nb::class_<nearest_index_binding>(m, "_NearestIndex", "The compiled part of streamkit.NearestIndex.")
    .def(nb::init<nb::handle, int, int, bool, double, std::uintptr_t>(), nb::arg("references"), nb::arg("angle"),
         nb::arg("distance"), nb::arg("exact"), nb::arg("max_distance"), nb::arg("stream"))
    .def("update", &nearest_index_binding::update, nb::arg("references"), nb::arg("stream"))
    .def("query", &nearest_index_binding::query, nb::arg("observations"), nb::arg("k"), nb::arg("place"))
    .def("describe", &nearest_index_binding::describe, "(m, dtype, on_cuda, device)");
}

}  // namespace streamkit_python
