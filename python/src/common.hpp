#pragma once
// What every binding file shares (host compiler only): importing arrays by DLPack with errors that
// name the argument, dtype and shape texts, stream handles.

#include <streamkit/core/error.hpp>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime_api.h>

namespace streamkit_python {

namespace nb = nanobind;

using in_array = nb::ndarray<nb::ro>;  // any dtype, shape, device: checked by the caller, naming the argument
using out_array = nb::ndarray<>;

/// `object` as a DLPack array, without a copy; TypeError naming `name` otherwise.
template <class Array>
Array as_array(nb::handle object, char const* name)
{
  nb::detail::make_caster<Array> caster;
  if (!caster.from_python(object, 0, nullptr)) {
    throw nb::type_error((std::string(name) + ": expected an array with __dlpack__ (CuPy, PyTorch, JAX, NumPy), got " +
                          nb::type_name(object.type()).c_str())
                           .c_str());
  }
  return caster.value;
}

inline std::string dtype_name(nb::dlpack::dtype t)
{
  switch (static_cast<nb::dlpack::dtype_code>(t.code)) {
    case nb::dlpack::dtype_code::Float: return "float" + std::to_string(t.bits);
    case nb::dlpack::dtype_code::Int: return "int" + std::to_string(t.bits);
    case nb::dlpack::dtype_code::UInt: return "uint" + std::to_string(t.bits);
    case nb::dlpack::dtype_code::Bool: return "bool";
    case nb::dlpack::dtype_code::Complex: return "complex" + std::to_string(t.bits);
    case nb::dlpack::dtype_code::Bfloat: return "bfloat" + std::to_string(t.bits);
    default: return "dtype code " + std::to_string(t.code) + " of " + std::to_string(t.bits) + " bits";
  }
}

/// Device memory the CUDA runtime can address (plain or managed).
template <class Array>
bool is_cuda(Array const& a)
{
  return a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value;
}

/// Host memory (NumPy and other CPU arrays).
template <class Array>
bool is_host(Array const& a)
{
  return a.device_type() == nb::device::cpu::value;
}

/// "on CUDA device 1" / "on the host" / "on a device of DLPack type 4".
template <class Array>
std::string where(Array const& a)
{
  if (is_cuda(a)) { return "on CUDA device " + std::to_string(a.device_id()); }
  if (is_host(a)) { return "on the host"; }
  return "on a device of DLPack type " + std::to_string(a.device_type());
}

inline std::string shape_text(std::size_t ndim, std::int64_t const* shape)
{
  std::string s = "(";
  for (std::size_t i = 0; i < ndim; ++i) { s += (i ? ", " : "") + std::to_string(shape[i]); }
  return s + (ndim == 1 ? ",)" : ")");
}

/// A cudaStream_t passed from Python as an int; 0 is the legacy default stream (as in CuPy and torch).
inline cudaStream_t stream_of(std::uintptr_t handle)
{
  return handle == 0 ? cudaStreamLegacy : reinterpret_cast<cudaStream_t>(handle);
}

/// ValueError / TypeError whose message begins with the argument's name.
[[noreturn]] inline void value_error(char const* name, std::string const& text)
{
  throw nb::value_error((std::string(name) + ": " + text).c_str());
}
[[noreturn]] inline void type_error(char const* name, std::string const& text)
{
  throw nb::type_error((std::string(name) + ": " + text).c_str());
}

/// Raises `e` as `type` (streamkit.CudaError) with its attributes code, name, call, file and line.
inline void set_cuda_error(PyObject* type, streamkit::cuda_error const& e)
{
  nb::object exc = nb::borrow(type)(nb::str(e.what()));
  exc.attr("code") = static_cast<int>(e.error());
  exc.attr("name") = nb::str(e.name());
  exc.attr("call") = nb::str(e.call().c_str());
  exc.attr("file") = nb::str(e.file().c_str());
  exc.attr("line") = e.line();
  PyErr_SetObject(type, exc.ptr());
}

/// The binding functions of each feature, registered on the module by module.cpp.
void register_nearest(nb::module_& m);
void register_minmax(nb::module_& m);

}  // namespace streamkit_python
