"""What every streamkit entry point shares: recognising the caller's framework, importing its arrays
without a copy, picking the stream, and allocating results in that framework."""

from __future__ import annotations

import numbers

from . import _streamkit

_FRAMEWORK_OF_TYPE = {}


def framework(array):
    """The top-level module name of an array's type: 'cupy', 'torch', 'jax', 'numba', 'numpy', ..."""
    kind = type(array)
    name = _FRAMEWORK_OF_TYPE.get(kind)
    if name is None:
        name = kind.__module__.split(".")[0]
        name = _FRAMEWORK_OF_TYPE[kind] = "jax" if name == "jaxlib" else name
    return name


def as_dlpack(array, name):
    """`array` as an object the compiled module imports by DLPack, without a copy; TypeError naming
    `name` otherwise. Objects with only ``__cuda_array_interface__`` (Numba device arrays) are
    viewed by the compiled module, with their owner kept alive; JAX arrays are waited for first
    (JAX does not say on which stream it writes them)."""
    if framework(array) == "torch":
        view = _torch_view(array)
        if view is not None:
            return view
    # __dlpack__ first: testing for __cuda_array_interface__ builds it (5 µs for a torch tensor).
    if hasattr(array, "__dlpack__"):
        if framework(array) == "jax":
            array.block_until_ready()
        return array
    if hasattr(array, "__cuda_array_interface__"):
        return _streamkit._view_cuda_array_interface(array, array.__cuda_array_interface__, name)
    raise TypeError(
        f"{name}: expected an array: DLPack (CuPy, PyTorch, JAX, NumPy) or __cuda_array_interface__ (Numba), "
        f"got {type(array).__name__}"
    )


_TORCH = {}


def _torch_types():
    """torch, and its dtypes by streamkit's names and back, imported once (each lookup on the
    per-call path costs a microsecond otherwise)."""
    if not _TORCH:
        import torch

        names = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64"}
        _TORCH.update(module=torch, names=names, dtypes={name: dtype for dtype, name in names.items()},
                      strided=torch.strided)
    return _TORCH


def _torch_view(tensor):
    """A view of a dense CUDA float32/float64/int64 torch tensor, read from its fields: torch's
    __dlpack__ synchronises through an event on every call (10 µs). None for anything else, which
    then takes the DLPack path (and its errors)."""
    types = _torch_types()
    dtype = types["names"].get(tensor.dtype)
    if dtype is None or not tensor.is_cuda or tensor.layout is not types["strided"] or tensor.requires_grad:
        return None
    return _streamkit._view_torch(tensor, tensor.data_ptr(), tensor.shape, tensor.stride(), dtype, tensor.get_device())


def stream_handle(stream, array, device):
    """The cudaStream_t (as an int) to run on: `stream`, or else the current stream of `array`'s
    framework (CuPy, torch); the legacy default stream (0) for JAX, Numba and others."""
    if stream is None:
        name = framework(array)
        if name == "cupy":
            import cupy

            return int(cupy.cuda.get_current_stream(device).ptr)
        if name == "torch":
            torch = _torch_types()["module"]
            if hasattr(torch._C, "_cuda_getCurrentRawStream"):  # what torch.cuda.current_stream reads, 10× faster
                return int(torch._C._cuda_getCurrentRawStream(device))
            return int(torch.cuda.current_stream(device).cuda_stream)
        return 0
    if isinstance(stream, bool):
        raise TypeError("stream: expected a stream object or an int handle, got bool")
    if isinstance(stream, numbers.Integral):
        if int(stream) < 0:
            raise ValueError(f"stream: a handle is not negative, got {int(stream)}")
        return int(stream)
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:  # cuda.core's stream protocol: (version, handle)
        value = protocol() if callable(protocol) else protocol
        return int(value[1])
    for attribute in ("ptr", "cuda_stream", "handle"):  # CuPy, torch.cuda.Stream, Numba
        value = getattr(stream, attribute, None)
        if hasattr(value, "value"):  # Numba's handle is a ctypes c_void_p
            value = value.value or 0
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
    raise TypeError(
        f"stream: expected an object with __cuda_stream__, a CuPy or torch stream, or an int handle, got {type(stream).__name__}"
    )


def empty(like, shape, dtype, device, on_cuda):
    """An uninitialised array of `shape` and `dtype` ('int64', 'float32', 'float64') in `like`'s
    framework, where `like` lives: CuPy, PyTorch and Numba allocate from their own pools; JAX gets
    memory streamkit allocates (JAX arrays are immutable: see `finish`); host inputs get NumPy."""
    name = framework(like)
    if not on_cuda:
        import numpy

        return numpy.empty(shape, dtype=dtype)
    if name == "cupy":
        import cupy

        if cupy.cuda.runtime.getDevice() == device:  # the common case, without a device switch
            return cupy.empty(shape, dtype=dtype)
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=dtype)
    if name == "torch":  # on like's device, without building a torch.device
        return like.new_empty(shape, dtype=_torch_types()["dtypes"][dtype])
    if name == "numba":
        from numba import cuda

        with cuda.gpus[device]:
            return cuda.device_array(shape, dtype=dtype)
    return _streamkit._device_empty(tuple(shape), dtype, device)


class _TorchMemory:
    """Owns memory from torch's current allocator (torch.cuda.caching_allocator_alloc) until dropped."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        _torch_types()["module"].cuda.caching_allocator_delete(self.ptr)


def temporaries(like, device, handle):
    """An allocator of streamkit's temporaries in `like`'s framework, ``allocate(nbytes) -> (address,
    owner)`` on stream `handle`, when the caller has replaced the framework's allocator (CuPy:
    ``cupy.cuda.set_allocator``, e.g. RMM's ``rmm_cupy_allocator``; PyTorch: a pluggable allocator,
    e.g. RMM's ``rmm_torch_allocator``); else None: they come from streamkit's own pool (the
    device's cudaMallocAsync pool), as with the frameworks' default allocators, which keep pools of
    their own. Dropping an owner gives the memory back in the order of `handle` (the temporaries of a
    call live on its stream)."""
    name = framework(like)
    if name == "cupy":
        import cupy

        if getattr(cupy.cuda.get_allocator(), "__self__", None) is cupy.get_default_memory_pool():
            return None
        stream = cupy.cuda.ExternalStream(handle, device) if handle else None

        def allocate_cupy(nbytes):
            with cupy.cuda.Device(device):
                if stream is None:
                    memory = cupy.cuda.alloc(nbytes)  # the legacy default stream is CuPy's null stream
                else:
                    with stream:
                        memory = cupy.cuda.alloc(nbytes)
            return memory.ptr, memory

        return allocate_cupy
    if name == "torch":
        types = _torch_types()
        if "pluggable" not in types:  # fixed once the allocator is in use, as it is for `like`
            types["pluggable"] = types["module"].cuda.get_allocator_backend() == "pluggable"
        if not types["pluggable"]:
            return None
        caching_allocator_alloc = types["module"].cuda.caching_allocator_alloc

        def allocate_torch(nbytes):
            ptr = caching_allocator_alloc(nbytes, device, handle)
            return ptr, _TorchMemory(ptr)

        return allocate_torch
    return None


def data_pointer(array):
    """The device address of an array `empty` made in CuPy, PyTorch or Numba (C-contiguous), else None."""
    name = framework(array)
    if name == "cupy":
        return array.data.ptr
    if name == "torch":
        return array.data_ptr()
    return None


def finish(like, results, handle, device):
    """Results streamkit allocated (`empty`), handed back in `like`'s framework. For JAX the stream
    is waited for first (JAX reads them on streams of its own), then they become JAX arrays without
    a copy."""
    if framework(like) != "jax":
        return results
    import jax.dlpack

    _streamkit._synchronize(handle, device)
    return tuple(jax.dlpack.from_dlpack(r) for r in results)
