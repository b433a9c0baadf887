// streamkit._streamkit: the compiled part of the Python package (nanobind). The public API, with
// its framework handling (allocation of results, streams), is the pure-Python package streamkit;
// each feature registers its functions (nearest_bindings.cpp, minmax_bindings.cpp); they take DLPack
// arrays and check every argument before any CUDA call.

#include "common.hpp"
#include "device_support.hpp"

#include <streamkit_build_info.hpp>

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <string>
#include <vector>

namespace nb = nanobind;

namespace {

using namespace streamkit_python;

/// Arrays made here go back to Python as objects with __dlpack__ (usable many times, unlike capsules).
using made_array = nb::ndarray<nb::array_api>;

PyObject* cuda_error_type = nullptr;

nb::dlpack::dtype dtype_of(std::string const& name)
{
  if (name == "int64") { return nb::dtype<std::int64_t>(); }
  if (name == "float32") { return nb::dtype<float>(); }
  if (name == "float64") { return nb::dtype<double>(); }
  value_error("dtype", "expected int64, float32 or float64, got " + name);
}

/// An (uninitialised) CUDA array of `shape` on `device` owned by the returned object (cudaFree when
/// Python drops it); for frameworks whose arrays streamkit cannot allocate (JAX).
made_array device_empty(std::vector<std::size_t> const& shape, std::string const& dtype, int device)
{
  auto const type = dtype_of(dtype);
  std::size_t elements = 1;
  for (std::size_t extent : shape) { elements *= extent; }
  void* data = nullptr;
  {
    streamkit::device_guard const guard(device);
    if (elements > 0) { STREAMKIT_CUDA_TRY_ALLOC(cudaMalloc(&data, elements * type.bits / 8)); }
  }
  nb::capsule owner(data, [](void* p) noexcept { cudaFree(p); });
  return made_array(data, shape.size(), shape.data(), owner, nullptr, type, nb::device::cuda::value, device);
}

/// A view of `pointer` (device memory of `device`) with `shape` and `strides` in elements, keeping
/// `owner` alive.
made_array cuda_view(nb::handle owner, std::uintptr_t pointer, std::vector<std::int64_t> const& shape,
                     std::vector<std::int64_t> const& strides, nb::dlpack::dtype type, int device)
{
  std::vector<std::size_t> extents(shape.begin(), shape.end());
  return made_array(reinterpret_cast<void*>(pointer), extents.size(), extents.data(), owner, strides.data(), type,
                    nb::device::cuda::value, device);
}

/// A DLPack view of an object with __cuda_array_interface__ (version 2 or 3), keeping `owner` alive.
/// The device comes from the pointer; a producer stream named by the interface is waited for.
made_array view_cuda_array_interface(nb::handle owner, nb::dict interface, char const* name)
{
  auto const data = nb::cast<nb::tuple>(interface["data"]);
  auto const pointer = nb::cast<std::uintptr_t>(data[0]);
  auto const shape = nb::cast<std::vector<std::int64_t>>(interface["shape"]);
  auto const typestr = nb::cast<std::string>(interface["typestr"]);
  nb::dlpack::dtype type;
  if (typestr == "<f4") {
    type = nb::dtype<float>();
  } else if (typestr == "<f8") {
    type = nb::dtype<double>();
  } else if (typestr == "<i8") {
    type = nb::dtype<std::int64_t>();
  } else {
    type_error(name, "__cuda_array_interface__ typestr " + typestr + " is not float32 (<f4), float64 (<f8) or int64 (<i8)");
  }
  std::int64_t const item = type.bits / 8;
  std::vector<std::int64_t> strides(shape.size());
  nb::object const byte_strides = interface.contains("strides") ? nb::borrow(interface["strides"]) : nb::none();
  for (std::size_t d = shape.size(); d-- > 0;) {  // C order unless strides are given
    if (!byte_strides.is_none()) {
      auto const bytes = nb::cast<std::int64_t>(nb::cast<nb::tuple>(byte_strides)[d]);
      if (bytes % item != 0) { value_error(name, "a stride of " + std::to_string(bytes) + " bytes is not a multiple of the element size"); }
      strides[d] = bytes / item;
    } else {
      strides[d] = d + 1 < shape.size() ? strides[d + 1] * shape[d + 1] : 1;
    }
  }
  int device = 0;
  if (pointer != 0) {
    cudaPointerAttributes attributes{};
    STREAMKIT_CUDA_TRY(cudaPointerGetAttributes(&attributes, reinterpret_cast<void const*>(pointer)));
    if (attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged) {
      value_error(name, "__cuda_array_interface__ points to memory that is not device memory");
    }
    device = attributes.device;
  }
  if (interface.contains("stream") && !interface["stream"].is_none()) {
    auto const producer = nb::cast<std::uintptr_t>(interface["stream"]);
    nb::gil_scoped_release release;
    streamkit::device_guard const guard(device);
    STREAMKIT_CUDA_TRY(cudaStreamSynchronize(producer == 1 ? cudaStreamLegacy : producer == 2 ? cudaStreamPerThread
                                                                                              : reinterpret_cast<cudaStream_t>(producer)));
  }
  return cuda_view(owner, pointer, shape, strides, type, device);
}

/// streamkit.build_info(): how this extension was built.
nb::dict build_info()
{
  nb::dict info;
  auto const names = [](std::vector<std::string> const& list, char const* prefix) {
    nb::list out;
    for (auto const& name : list) { out.append(nb::str((prefix + name).c_str())); }
    return out;
  };
  info["cuda_architectures"] = nb::str(streamkit_python::build::cuda_architectures);
  info["sass"] = names(this_build().sass, "sm_");
  info["ptx"] = names(this_build().ptx, "compute_");
  info["cuda_version"] = nb::str((std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10)).c_str());
  info["cuda_runtime"] = nb::str("static");
  info["cuda_compiler"] = nb::str(streamkit_python::build::cuda_compiler);
  info["host_compiler"] = nb::str(streamkit_python::build::host_compiler);
  info["wheel"] = streamkit_python::build::wheel;
  return info;
}

/// The build's architectures, or the given ones (the tests' hook), as build_architectures.
build_architectures architectures_of(std::optional<std::vector<std::string>> const& sass,
                                     std::optional<std::vector<std::string>> const& ptx)
{
  return {sass ? *sass : this_build().sass, ptx ? *ptx : this_build().ptx};
}

}  // namespace

NB_MODULE(_streamkit, m)
{
  m.doc() = "The compiled part of streamkit (nanobind). Use the package streamkit, not this module.";

  cuda_error_type = PyErr_NewExceptionWithDoc(
    "streamkit.CudaError",
    "A CUDA runtime call inside streamkit failed. Attributes: code (int, the cudaError_t value), name "
    "(e.g. 'cudaErrorIllegalAddress'), call (the source text of the failed call), file, line.",
    PyExc_RuntimeError, nullptr);
  m.attr("CudaError") = nb::handle(cuda_error_type);

  nb::register_exception_translator([](std::exception_ptr const& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (streamkit::cuda_error const& e) {
      set_cuda_error(cuda_error_type, e);
    } catch (streamkit::bad_alloc const& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    } catch (unsupported_device const& e) {
      // A CudaError as the driver's missing kernel image would be, with a message that says why.
      nb::object type = nb::borrow(cuda_error_type);
      nb::object exc = type(nb::str(e.what()));
      exc.attr("code") = static_cast<int>(cudaErrorNoKernelImageForDevice);
      exc.attr("name") = nb::str(cudaGetErrorName(cudaErrorNoKernelImageForDevice));
      exc.attr("call") = nb::str("streamkit's check at the first use of the device");
      exc.attr("file") = nb::str("");
      exc.attr("line") = 0;
      PyErr_SetObject(cuda_error_type, exc.ptr());
    }
  });

  m.def("device_count", &streamkit::device_count,
        "The number of visible CUDA devices; 0 (never an error) without a driver or a GPU.");

  m.def("_build_info", &build_info, "How this extension was built (streamkit.build_info()).");
  m.def(
    "_architecture_support",
    [](int major, int minor, std::vector<std::string> const& sass, std::vector<std::string> const& ptx) {
      return how_it_runs(major, minor, build_architectures{sass, ptx});
    },
    nb::arg("major"), nb::arg("minor"), nb::arg("sass"), nb::arg("ptx"),
    "How a build with machine code for `sass` and PTX for `ptx` (e.g. ['75', '90a']) runs on compute capability "
    "major.minor, or None where nothing in it runs.");
  m.def(
    "_unsupported_message",
    [](std::string const& device, int major, int minor, std::vector<std::string> const& sass, std::vector<std::string> const& ptx) {
      return unsupported_message(device, major, minor, build_architectures{sass, ptx});
    },
    nb::arg("device"), nb::arg("major"), nb::arg("minor"), nb::arg("sass"), nb::arg("ptx"),
    "The message of the error raised at the first use of a device the build does not run on.");
  m.def(
    "_device_support",
    [](int device, std::optional<std::vector<std::string>> const& sass, std::optional<std::vector<std::string>> const& ptx) {
      auto const build = architectures_of(sass, ptx);
      nb::gil_scoped_release release;
      return sass || ptx ? require_supported(device, build) : require_supported(device);
    },
    nb::arg("device"), nb::arg("sass") = nb::none(), nb::arg("ptx") = nb::none(),
    "How this build (or one with the given architectures) runs on `device`; raises CudaError where it does not.");

  register_nearest(m);
  register_minmax(m);

  m.def("_device_empty", &device_empty, nb::arg("shape"), nb::arg("dtype"), nb::arg("device"),
        "An uninitialised CUDA array owned by the returned object (for JAX results).");
  m.def("_view_cuda_array_interface", &view_cuda_array_interface, nb::arg("owner"), nb::arg("interface"), nb::arg("name"),
        "A DLPack view of an object with __cuda_array_interface__, without a copy.");
  m.def(
    "_view_torch",
    [](nb::handle owner, std::uintptr_t pointer, std::vector<std::int64_t> const& shape, std::vector<std::int64_t> const& strides,
       std::string const& dtype, int device) { return cuda_view(owner, pointer, shape, strides, dtype_of(dtype), device); },
    nb::arg("owner"), nb::arg("pointer"), nb::arg("shape"), nb::arg("strides"), nb::arg("dtype"), nb::arg("device"),
    "A view of a CUDA torch tensor from its fields (strides in elements), without torch's __dlpack__, which records and "
    "waits on an event per call.");
  m.def(
    "_synchronize",
    [](std::uintptr_t stream, int device) {
      nb::gil_scoped_release release;
      streamkit::device_guard const guard(device);
      STREAMKIT_CUDA_TRY(cudaStreamSynchronize(stream_of(stream)));
    },
    nb::arg("stream"), nb::arg("device"), "Waits for a stream (a cudaStream_t as an int; 0: the legacy default stream).");

  m.def(
    "_default_pool_used_high",
    [](int device, bool reset) {
      cudaMemPool_t pool = nullptr;
      STREAMKIT_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
      std::uint64_t bytes = 0;
      if (reset) {
        STREAMKIT_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &bytes));
        return bytes;
      }
      STREAMKIT_CUDA_TRY(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &bytes));
      return bytes;
    },
    nb::arg("device"), nb::arg("reset"),
    "Test hook: the high-water mark of memory in use from the device's default memory pool (where streamkit's default "
    "resource allocates), or resets it to 0.");

  // Test hooks: raise what a failing CUDA call raises, so the translation is testable without a GPU.
  m.def(
    "_raise_cuda_error", [](int code) { throw streamkit::cuda_error(static_cast<cudaError_t>(code), "test_call()", "test.cu", 1); },
    nb::arg("code"));
  m.def(
    "_raise_unsupported_device", [](std::string const& message) { throw unsupported_device(message); }, nb::arg("message"));
  m.def(
    "_raise_bad_alloc", [](int code) { throw streamkit::bad_alloc(static_cast<cudaError_t>(code), "test_alloc()", "test.cu", 1); },
    nb::arg("code"));
}
