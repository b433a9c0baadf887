// streamkit._streamkit_mpi: the compiled part of streamkit.distributed (nanobind), built only when
// CMake finds MPI (a source build against the user's MPI; the binary wheel leaves it out).
// Communicators come as Fortran handles (mpi4py's comm.py2f()), turned into MPI_Comm by
// MPI_Comm_f2c: no mpi4py headers are needed. The Python side (streamkit/distributed.py) checks and
// converts the arrays; here they arrive as host float64 coordinates in radians (packed), as
// streamkit::distributed's host-pointer API takes them.

#include "common.hpp"
#include "mpi.hpp"

#include <streamkit/core/error.hpp>
#include <streamkit/distributed/nearest_neighbor.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

namespace {

using namespace streamkit_python;
namespace dist = streamkit::distributed;

using coordinates = nb::ndarray<double const, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using device_points = nb::ndarray<double const, nb::ndim<2>, nb::device::cuda>;
using device_index_rows = nb::ndarray<std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cuda>;
using device_angle_rows = nb::ndarray<double, nb::ndim<2>, nb::c_contig, nb::device::cuda>;
using index_rows = nb::ndarray<std::int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using angle_rows = nb::ndarray<double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using numpy_view = nb::ndarray<nb::numpy>;

MPI_Comm communicator(std::int64_t fortran_handle) { return MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_handle)); }

dist::reference_layout layout_of(bool sharded) { return sharded ? dist::reference_layout::sharded : dist::reference_layout::replicated; }

/// An (n, 2) array of (latitude, longitude) rows, any strides, as a view: a row's longitude is one
/// column stride after its latitude.
streamkit::points_ref<double> points_view(device_points const& rows)
{
  return {rows.data(), rows.data() + rows.stride(1), rows.shape(0), static_cast<std::size_t>(rows.stride(0)), streamkit::angle_unit::radians};
}

/// A NumPy view (no copy, valid during the call) of a searcher's buffer.
template <class T>
nb::object view(T const* data, std::size_t rows, std::size_t cols = 0)
{
  std::size_t const shape[2] = {rows, cols};
  numpy_view const array(const_cast<T*>(data), cols == 0 ? 1 : 2, shape, nb::handle(), nullptr, nb::dtype<T>());
  return nb::cast(array, nb::rv_policy::reference);
}

/// A rank's own search written in Python (the distributed_nearest Searcher): `prepare(latitude,
/// longitude)` and `search(latitude, longitude, k, index, angle)`, radians, float64 NumPy views
/// valid during the call; search fills index (int64) and angle (float64), shape (n, k), nearest
/// first, ties to the smaller index, -1 and NaN beyond the set. For tests and CPU stand-ins.
struct python_searcher {
  nb::object searcher;

  void prepare(double const* latitude, double const* longitude, std::size_t count)
  {
    nb::gil_scoped_acquire gil;
    searcher.attr("prepare")(view(latitude, count), view(longitude, count));
  }

  void search(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    nb::gil_scoped_acquire gil;
    searcher.attr("search")(view(latitude, count), view(longitude, count), k, view(index, count, k), view(angle, count, k));
  }
};

using python_nearest = dist::distributed_nearest<python_searcher>;

/// update/query/size/last_exchange of a distributed search (distributed_nearest's host-pointer
/// API), the GIL released during the collectives.
template <class Search>
void bind_search_methods(nb::class_<Search>& c)
{
  c.def(
     "update",
     [](Search& s, coordinates latitude, coordinates longitude) {
       nb::gil_scoped_release release;
       s.update(latitude.data(), longitude.data(), latitude.shape(0));
     },
     nb::arg("latitude"), nb::arg("longitude"))
    .def(
      "query",
      [](Search& s, coordinates latitude, coordinates longitude, std::size_t k, index_rows index, angle_rows angle) {
        nb::gil_scoped_release release;
        s.query(latitude.data(), longitude.data(), latitude.shape(0), k, index.data(), angle.data());
      },
      nb::arg("latitude"), nb::arg("longitude"), nb::arg("k"), nb::arg("index"), nb::arg("angle"))
    .def("size", &Search::size)
    .def("last_exchange", [](Search const& s) {
      auto const& e = s.last_exchange();
      nb::dict d;  // exchange_stats' fields by name
      d["bytes_sent"] = e.bytes_sent, d["bytes_received"] = e.bytes_received, d["observations_sent"] = e.observations_sent;
      d["visits"] = e.visits, d["observations_searched"] = e.observations_searched, d["references_held"] = e.references_held;
      d["seconds"] = e.seconds, d["search_seconds"] = e.search_seconds, d["host_seconds"] = e.host_seconds;
      d["staging_seconds"] = e.staging_seconds;
      return d;
    });
}

template <class T>
void bind_scaler(nb::module_& m, char const* name)
{
  using matrix = nb::ndarray<T, nb::ndim<2>>;
  auto const view_of = [](matrix const& a) {
    // Row-major (ld = row stride) or column-major (ld = column stride), as the Python side checked.
    bool const rows = a.stride(1) == 1 || a.shape(1) <= 1;
    std::size_t const ld = rows ? (a.shape(0) <= 1 ? a.shape(1) : static_cast<std::size_t>(a.stride(0)))
                                : static_cast<std::size_t>(a.stride(1));
    return streamkit::matrix_ref<T>{a.data(), a.shape(0), a.shape(1), std::max<std::size_t>(ld, 1),
                                    rows ? streamkit::layout::row_major : streamkit::layout::column_major};
  };
  nb::class_<mpi_scaler<T>>(m, name)
    .def(
      "__init__",
      [](mpi_scaler<T>* self, std::int64_t comm, double lo, double hi, bool clip) {
        new (self) mpi_scaler<T>(communicator(comm), static_cast<T>(lo), static_cast<T>(hi), clip);
      },
      nb::arg("comm"), nb::arg("lo"), nb::arg("hi"), nb::arg("clip"))
    .def(
      "fit",
      [view_of](mpi_scaler<T>& s, matrix x, bool on_cuda, bool reset, std::uintptr_t stream) {
        auto const rows = view_of(x);
        nb::gil_scoped_release release;
        s.fit(streamkit::matrix_ref<T const>{rows.data, rows.rows, rows.cols, rows.ld, rows.order}, on_cuda, reset, stream_of(stream));
      },
      nb::arg("x"), nb::arg("on_cuda"), nb::arg("reset"), nb::arg("stream"))
    .def(
      "transform",
      [view_of](mpi_scaler<T>& s, matrix x, matrix out, bool on_cuda, bool inverse, std::uintptr_t stream) {
        auto const in = view_of(x);
        auto const to = view_of(out);
        nb::gil_scoped_release release;
        s.transform(streamkit::matrix_ref<T const>{in.data, in.rows, in.cols, in.ld, in.order}, to, on_cuda, inverse, stream_of(stream));
      },
      nb::arg("x"), nb::arg("out"), nb::arg("on_cuda"), nb::arg("inverse"), nb::arg("stream"))
    .def("fitted",
         [](mpi_scaler<T> const& s) {
           std::vector<T> min, max, scale;
           {
             nb::gil_scoped_release release;
             s.fitted(min, max, scale);
           }
           return std::make_tuple(min, max, scale);
         })
    .def("samples_seen", &mpi_scaler<T>::samples_seen)
    .def("uses_device_pointers", &mpi_scaler<T>::uses_device_pointers);
}

}  // namespace

NB_MODULE(_streamkit_mpi, m)
{
  m.doc() = "The compiled part of streamkit.distributed (nanobind, MPI). Use streamkit.distributed, not this module.";

  // A CUDA error here is the streamkit.CudaError the main extension raises.
  static nb::object const cuda_error_type = nb::module_::import_("streamkit._streamkit").attr("CudaError");
  nb::register_exception_translator([](std::exception_ptr const& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (streamkit::cuda_error const& e) {
      set_cuda_error(cuda_error_type.ptr(), e);
    } catch (streamkit::bad_alloc const& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });

  auto gpu = nb::class_<gpu_nearest>(m, "_GpuNearest");
  gpu.def(
    "__init__",
    [](gpu_nearest* self, std::int64_t comm, bool sharded, int device) {
      nb::gil_scoped_release release;  // collective
      new (self) gpu_nearest(communicator(comm), layout_of(sharded), device);
    },
    nb::arg("comm"), nb::arg("sharded"), nb::arg("device"));
  bind_search_methods(gpu);
  gpu.def(
       "update_device",
       [](gpu_nearest& s, device_points references, std::uintptr_t stream) {
         nb::gil_scoped_release release;
         s.update(points_view(references), stream_of(stream));
       },
       nb::arg("references"), nb::arg("stream"))
    .def(
      "query_device",
      [](gpu_nearest& s, device_points observations, device_index_rows index, device_angle_rows angle, std::uintptr_t stream) {
        nb::gil_scoped_release release;
        s.query(points_view(observations), streamkit::neighbors_ref<std::int64_t, double>::dense(index.data(), angle.data(), index.shape(0), index.shape(1)),
                stream_of(stream));
      },
      nb::arg("observations"), nb::arg("index"), nb::arg("angle"), nb::arg("stream"))
    .def("device", &gpu_nearest::device);

  auto host = nb::class_<python_nearest>(m, "_PythonNearest");
  host.def(
    "__init__",
    [](python_nearest* self, std::int64_t comm, bool sharded, nb::object searcher) {
      new (self) python_nearest(communicator(comm), layout_of(sharded), python_searcher{std::move(searcher)});
    },
    nb::arg("comm"), nb::arg("sharded"), nb::arg("searcher"));
  bind_search_methods(host);

  bind_scaler<float>(m, "_ScalerF32");
  bind_scaler<double>(m, "_ScalerF64");
  m.def("_library_version", [] {
    char text[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(text, &length);
    return std::string(text, static_cast<std::size_t>(length));
  }, "The MPI library this extension is linked with (MPI_Get_library_version).");
}
