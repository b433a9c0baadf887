"""Host tests (no GPU needed): the package imports, and bad arguments raise the documented
exceptions, naming the argument, before any CUDA call and before anything is written. NumPy arrays
serve as inputs: every check comes before the host path needs a GPU, so that, without one, arguments
that pass every check end in "dispatcher: no CUDA device is visible"."""

import math

import numpy as np
import pytest

import streamkit
from streamkit import _streamkit


def good(n=4, dtype=np.float64):
    return np.zeros((n, 2), dtype=dtype)


def passes_the_checks(call):
    """Runs `call`, which must pass every argument check: without a GPU it then fails for want of one."""
    if streamkit.device_count() > 0:
        return call()
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        call()


def test_imports_and_exports():
    assert callable(streamkit.nearest)
    assert issubclass(streamkit.CudaError, RuntimeError)
    assert set(streamkit.__all__) >= {"nearest", "device_count", "CudaError"}


def test_device_count_never_raises():
    count = streamkit.device_count()
    assert isinstance(count, int) and count >= 0


@pytest.mark.parametrize("shape", [(4,), (4, 3), (4, 1), (4, 2, 1), (2, 4)])
@pytest.mark.parametrize("which", ["observations", "references"])
def test_bad_shape_is_value_error(shape, which):
    bad = np.zeros(shape)
    args = (bad, good()) if which == "observations" else (good(), bad)
    with pytest.raises(ValueError, match=f"^{which}: expected shape"):
        streamkit.nearest(*args)


@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int64, np.complex64, np.uint8])
@pytest.mark.parametrize("which", ["observations", "references"])
def test_bad_dtype_is_type_error(dtype, which):
    bad = np.zeros((4, 2), dtype=dtype)
    args = (bad, good()) if which == "observations" else (good(), bad)
    with pytest.raises(TypeError, match=f"^{which}: expected dtype float32 or float64"):
        streamkit.nearest(*args)


def test_mixed_dtypes_is_type_error():
    with pytest.raises(TypeError, match="^references: dtype float32 differs"):
        streamkit.nearest(good(dtype=np.float64), good(dtype=np.float32))


def test_empty_references_is_value_error():
    with pytest.raises(ValueError, match="^references: the reference set is empty"):
        streamkit.nearest(good(), np.zeros((0, 2)))


def test_reversed_rows_are_value_error():
    with pytest.raises(ValueError, match="^observations: row stride -2"):
        streamkit.nearest(good()[::-1], good())


@pytest.mark.parametrize("value", [[[0.0, 0.0]], 3.0, "a", None])
def test_not_an_array_is_type_error(value):
    with pytest.raises(TypeError, match="^references: expected an array"):
        streamkit.nearest(good(), value)


@pytest.mark.parametrize("k", [0, 33, -1, 1000])
def test_k_out_of_range_is_value_error(k):
    with pytest.raises(ValueError, match=f"^k: {k};"):
        streamkit.nearest(good(), good(), k)


@pytest.mark.parametrize("k", [1.0, "1", True, None])
def test_k_not_an_int_is_type_error(k):
    with pytest.raises(TypeError, match="^k: expected an int"):
        streamkit.nearest(good(), good(), k)


def test_k_numpy_integer_is_accepted_as_int():
    passes_the_checks(lambda: streamkit.nearest(good(), good(), np.int64(32)))


@pytest.mark.parametrize("angle", ["deg", "Degrees", "", "rad"])
def test_bad_angle_is_value_error(angle):
    with pytest.raises(ValueError, match="^angle: "):
        streamkit.nearest(good(), good(), angle=angle)


@pytest.mark.parametrize("distance", ["kilometres", "KM", "miles", ""])
def test_bad_distance_is_value_error(distance):
    with pytest.raises(ValueError, match="^distance: "):
        streamkit.nearest(good(), good(), distance=distance)


def test_non_string_units_are_type_error():
    with pytest.raises(TypeError, match="^angle: "):
        streamkit.nearest(good(), good(), angle=1)
    with pytest.raises(TypeError, match="^distance: "):
        streamkit.nearest(good(), good(), distance=None)


@pytest.mark.parametrize("value", [-1.0, math.nan, -math.inf])
def test_bad_max_distance_is_value_error(value):
    with pytest.raises(ValueError, match="^max_distance: "):
        streamkit.nearest(good(), good(), max_distance=value)


def test_max_distance_not_a_number_is_type_error():
    with pytest.raises(TypeError, match="^max_distance: "):
        streamkit.nearest(good(), good(), max_distance="10")


def test_bad_stream_is_type_error():
    with pytest.raises(TypeError, match="^stream: "):
        streamkit._arrays.stream_handle(object(), good(), 0)
    with pytest.raises(ValueError, match="^stream: "):
        streamkit._arrays.stream_handle(-1, good(), 0)


def test_stream_protocols():
    class CudaStream:  # cuda.core's protocol: a method returning (version, handle)
        def __cuda_stream__(self):
            return (0, 1234)

    class CupyLike:
        ptr = 99

    assert streamkit._arrays.stream_handle(CudaStream(), good(), 0) == 1234
    assert streamkit._arrays.stream_handle(CupyLike(), good(), 0) == 99
    assert streamkit._arrays.stream_handle(7, good(), 0) == 7
    assert streamkit._arrays.stream_handle(None, good(), 0) == 0


def test_host_arrays_pass_the_checks():
    passes_the_checks(lambda: streamkit.nearest(good(), good()))
    passes_the_checks(lambda: streamkit.NearestIndex(good()))


def test_transposed_and_sliced_arrays_pass_the_layout_checks():
    transposed = np.zeros((2, 5)).T  # strides (1, 5) elements
    sliced = np.zeros((10, 4))[::2, 1:3]  # strides (8, 1) elements
    for array in (transposed, sliced):
        passes_the_checks(lambda: streamkit.nearest(array, array))


def poisoned(n, k, dtype=np.float64):
    return np.full((n, k), -7, dtype=np.int64), np.full((n, k), 123.0, dtype=dtype)


@pytest.mark.parametrize(
    "make_out, match",
    [
        (lambda: poisoned(3, 2), "^indices: expected shape \\(4, 2\\)"),
        (lambda: (poisoned(4, 2)[0].astype(np.int32), poisoned(4, 2)[1]), "^indices: expected dtype int64"),
        (lambda: (poisoned(4, 2)[0], poisoned(4, 2, np.float32)[1]), "^distances: expected dtype float64"),
        (lambda: (np.full((2, 4), -7, np.int64).T, poisoned(4, 2)[1]), "^indices: columns must be contiguous"),
        (lambda: (poisoned(4, 2)[0], np.full((4, 4), 1.0)[:, :2]), "^distances: row stride 4 elements differs"),
    ],
)
def test_bad_out_is_rejected_and_nothing_is_written(make_out, match):
    indices, distances = make_out()
    before = (indices.copy(), distances.copy())
    with pytest.raises((TypeError, ValueError), match=match):
        streamkit.nearest(good(), good(), 2, out=(indices, distances))
    np.testing.assert_array_equal(indices, before[0])
    np.testing.assert_array_equal(distances, before[1])


def test_out_must_be_a_pair():
    with pytest.raises(TypeError, match="^out: expected a pair"):
        streamkit.nearest(good(), good(), out=np.zeros((4, 1)))


def test_nearest_index_checks_its_arguments():
    with pytest.raises(ValueError, match="^references: the reference set is empty"):
        streamkit.NearestIndex(np.zeros((0, 2)))
    with pytest.raises(TypeError, match="^references: expected dtype float32 or float64"):
        streamkit.NearestIndex(np.zeros((4, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="^angle: "):
        streamkit.NearestIndex(good(), angle="deg")
    with pytest.raises(ValueError, match="^max_distance: "):
        streamkit.NearestIndex(good(), max_distance=-1)


def fake_cuda_array(shape, typestr="<f8", strides=None):
    """An object with only __cuda_array_interface__, at address 0 (checks that need no memory)."""

    class Fake:
        __cuda_array_interface__ = {"data": (0, False), "shape": shape, "typestr": typestr, "strides": strides, "version": 3}

    return Fake()


def test_cuda_array_interface_objects_are_viewed_and_checked():
    with pytest.raises(TypeError, match="^observations: __cuda_array_interface__ typestr <i4"):
        streamkit.nearest(fake_cuda_array((4, 2), "<i4"), good())
    with pytest.raises(ValueError, match="^observations: a stride of 12 bytes"):
        streamkit.nearest(fake_cuda_array((4, 2), "<f8", (12, 8)), good())
    # A valid view of device memory is compared with the host references: the place check names it.
    with pytest.raises(ValueError, match="^references: on the host but the observations are on CUDA device 0"):
        streamkit.nearest(fake_cuda_array((0, 2)), good())


def test_cuda_error_translation():
    with pytest.raises(streamkit.CudaError) as info:
        _streamkit._raise_cuda_error(700)
    error = info.value
    assert error.code == 700
    assert error.name == "cudaErrorIllegalAddress"
    assert error.call == "test_call()"
    assert "cudaErrorIllegalAddress" in str(error)


def test_bad_alloc_translation():
    with pytest.raises(MemoryError, match="cudaErrorMemoryAllocation"):
        _streamkit._raise_bad_alloc(2)
