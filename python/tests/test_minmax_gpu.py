"""GPU tests of streamkit.MinMaxScaler and streamkit.normalize_many: skipped, with the reason,
without a CUDA device, without scikit-learn (the reference), or without the framework a test uses
(CuPy, PyTorch, JAX with a GPU backend, Numba). Results are compared with scikit-learn's
MinMaxScaler on fresh random data holding NaN entries, an all-NaN column, a constant column and a
nearly constant one; normalize_many with a NumPy float64 reference. Outputs are poisoned (-777)
before they are written, so unwritten elements show."""

import warnings

import numpy as np
import pytest

import streamkit
from streamkit import _arrays, _streamkit

pytestmark = pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")
sklearn_preprocessing = pytest.importorskip("sklearn.preprocessing", reason="scikit-learn (the reference) is not installed")

POISON = -777.0
DTYPES = [np.float32, np.float64]
LAYOUTS = ["C", "F", "sliced"]  # C order; Fortran order (column-major); columns 2.. of a wider array (row-major, ld > width)
SPIN_NS = 50_000_000  # how long a kernel keeps a stream busy before it writes a test's input
SPIN_SOURCE = r"""
extern "C" __global__ void spin(unsigned long long nanoseconds) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
"""


# frameworks


def host_layout(a, layout):
    """`a` on the host in `layout`; "sliced" returns the wider array and the column offset."""
    if layout == "C":
        return np.ascontiguousarray(a)
    if layout == "F":
        return np.asfortranarray(a)
    wide = np.full((a.shape[0], a.shape[1] + 5), POISON, dtype=a.dtype)
    wide[:, 2 : 2 + a.shape[1]] = a
    return wide


class Framework:
    """How a test makes, reads and recognises one framework's arrays (on device 0)."""

    name = ""
    mutable = True  # has writable arrays (out=)
    keeps_layout = True  # F-order and sliced arrays stay views (JAX arrays are always dense C order)

    def put(self, a, layout="C"):
        """The host array `a` as this framework's array in `layout` (C, F, sliced)."""
        placed = self.from_host(host_layout(a, layout))
        return placed[:, 2 : 2 + a.shape[1]] if layout == "sliced" else placed

    def full(self, shape, dtype, layout="C"):
        """A poisoned output in `layout` (C or F)."""
        return self.from_host(host_layout(np.full(shape, POISON, dtype=dtype), layout))

    def from_host(self, a):
        raise NotImplementedError

    def get(self, a):
        """A host NumPy copy of this framework's array."""
        raise NotImplementedError

    def native(self, a):
        """Whether `a` is this framework's array, on device 0 (GPU frameworks)."""
        raise NotImplementedError


class NumPyArrays(Framework):
    name = "numpy"

    def from_host(self, a):
        return np.array(a, order="K")  # a copy, as the other frameworks make: in-place tests must not alter the data

    def get(self, a):
        return np.array(a)

    def native(self, a):
        return isinstance(a, np.ndarray)


class CuPyArrays(Framework):
    name = "cupy"

    def __init__(self):
        self.cupy = pytest.importorskip("cupy", reason="CuPy is not installed")

    def from_host(self, a):
        return self.cupy.asarray(a)  # keeps Fortran order

    def get(self, a):
        return self.cupy.asnumpy(a)

    def native(self, a):
        return isinstance(a, self.cupy.ndarray) and a.device.id == 0


class TorchArrays(Framework):
    name = "torch"

    def __init__(self):
        self.torch = pytest.importorskip("torch", reason="PyTorch is not installed")
        if not self.torch.cuda.is_available():
            pytest.skip("PyTorch has no CUDA")

    def from_host(self, a):
        return self.torch.from_numpy(a).to("cuda:0")  # preserve_format: keeps the strides of dense arrays

    def get(self, a):
        return a.cpu().numpy()

    def native(self, a):
        return isinstance(a, self.torch.Tensor) and a.device == self.torch.device("cuda", 0)


class JaxArrays(Framework):
    name = "jax"
    mutable = False
    keeps_layout = False

    def __init__(self):
        self.jax = pytest.importorskip("jax", reason="JAX is not installed")
        self.jax.config.update("jax_enable_x64", True)
        try:
            self.device = self.jax.devices("gpu")[0]
        except RuntimeError:
            pytest.skip("JAX has no GPU backend")

    def from_host(self, a):
        return self.jax.device_put(a, self.device)

    def get(self, a):
        return np.asarray(a)

    def native(self, a):
        return isinstance(a, self.jax.Array) and a.devices() == {self.device}


class NumbaArrays(Framework):
    name = "numba"

    def __init__(self):
        numba_cuda = pytest.importorskip("numba.cuda", reason="Numba is not installed")
        if not numba_cuda.is_available():
            pytest.skip("Numba sees no CUDA device")
        self.cuda = numba_cuda

    def from_host(self, a):
        return self.cuda.to_device(a)  # keeps the host array's strides

    def get(self, a):
        return a.copy_to_host()

    def native(self, a):
        return self.cuda.is_cuda_array(a) and type(a).__module__.startswith("numba")


FRAMEWORKS = {"numpy": NumPyArrays, "cupy": CuPyArrays, "torch": TorchArrays, "jax": JaxArrays, "numba": NumbaArrays}


@pytest.fixture(params=list(FRAMEWORKS))
def fw(request):
    return FRAMEWORKS[request.param]()


@pytest.fixture
def cupy():
    return CuPyArrays().cupy


@pytest.fixture
def torch():
    return TorchArrays().torch


# data and references


def make_data(rng, rows, cols, dtype, special=True):
    """Random features of different offsets and spreads; with `special` (cols ≥ 4): 5 % NaN entries,
    column 1 all NaN, column 2 constant (with NaN), column 3 nearly constant (a range below 10 eps)."""
    X = rng.normal(size=(rows, cols)) * rng.uniform(0.5, 20, cols) + rng.uniform(-50, 50, cols)
    X = X.astype(dtype)
    if special:
        X[rng.random((rows, cols)) < 0.05] = np.nan
        X[:, 1] = np.nan
        X[:, 2] = 3.25
        X[::4, 2] = np.nan
        X[:, 3] = dtype(1) + rng.integers(0, 6, rows).astype(dtype) * np.finfo(dtype).eps
    return X


def reference(X, feature_range=(0, 1), clip=False):
    """scikit-learn's MinMaxScaler fitted to X."""
    scaler = sklearn_preprocessing.MinMaxScaler(feature_range=feature_range, clip=clip)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column
        return scaler.fit(X)


def assert_close(actual, expected, tolerance):
    """Same shape, dtype and NaN positions; elsewhere |actual - expected| ≤ tolerance."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(actual), nan, err_msg="NaN positions differ")
    error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
    bad = ~nan & ~(error <= np.broadcast_to(tolerance, error.shape))
    assert not bad.any(), f"{bad.sum()} elements off, e.g. {actual[bad][:5]} for {expected[bad][:5]}"


def transform_tolerance(X, ref):
    """The documented bound: 4 eps (|x scale_| + |min_| + |lo| + |hi|), from the two formulas' roundings."""
    lo, hi = ref.feature_range
    eps = np.finfo(X.dtype).eps
    return 4 * eps * (np.abs(X.astype(np.float64) * ref.scale_) + np.abs(ref.min_) + abs(lo) + abs(hi))


def inverse_tolerance(expected, ref):
    """4 eps (|x| + |data_min_| + |data_range_|): one rounding in each formula before the last."""
    eps = np.finfo(expected.dtype).eps
    return 4 * eps * (np.abs(expected.astype(np.float64)) + np.abs(ref.data_min_) + np.abs(ref.data_range_))


def sk_transform(ref, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ref.transform(X.copy())


def assert_fitted_like(scaler, ref, fw):
    """The five fitted arrays equal scikit-learn's bit for bit, in the framework of the fit."""
    for name in ("data_min_", "data_max_", "data_range_", "scale_", "min_"):
        value = getattr(scaler, name)
        assert fw.native(value), (name, type(value))
        np.testing.assert_array_equal(fw.get(value), getattr(ref, name), err_msg=name)
        assert fw.get(value).dtype == getattr(ref, name).dtype
    assert type(scaler.n_features_in_) is int and scaler.n_features_in_ == ref.n_features_in_
    assert type(scaler.n_samples_seen_) is int and scaler.n_samples_seen_ == ref.n_samples_seen_


def check_layout(fw, array, layout):
    """The test array has the layout it names (no framework copied it into C order)."""
    if not fw.keeps_layout:
        return
    _rows, _cols, _dtype, _on_cuda, _device, fortran = _streamkit._matrix_check(_arrays.as_dlpack(array, "X"), "X")
    assert fortran == (layout == "F")


# every entry point, every framework, compared with scikit-learn


@pytest.mark.parametrize("shape", [(300, 9), (1000, 8), (3000, 33)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_fit_then_transform_matches_sklearn(fw, dtype, layout, shape):
    rng = np.random.default_rng([1, *shape])
    X, Y = make_data(rng, *shape, dtype), make_data(rng, shape[0] // 2, shape[1], dtype)
    Y[:5] *= 3  # beyond the fitted range
    ref = reference(X)
    device_X = fw.put(X, layout)
    check_layout(fw, device_X, layout)
    scaler = streamkit.MinMaxScaler()
    assert scaler.fit(device_X) is scaler
    assert_fitted_like(scaler, ref, fw)
    result = scaler.transform(fw.put(Y, layout))
    assert fw.native(result) and result.shape == Y.shape
    assert_close(fw.get(result), sk_transform(ref, Y), transform_tolerance(Y, ref))


@pytest.mark.parametrize("feature_range", [(0, 1), (-1, 1), (2.5, 7)])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_fit_transform_matches_sklearn(fw, dtype, layout, feature_range):
    X = make_data(np.random.default_rng(2), 500, 12, dtype)
    ref = reference(X, feature_range)
    scaler = streamkit.MinMaxScaler(feature_range)
    result = scaler.fit_transform(fw.put(X, layout))
    assert fw.native(result)
    assert_close(fw.get(result), sk_transform(ref, X), transform_tolerance(X, ref))
    assert_fitted_like(scaler, ref, fw)
    constant = fw.get(result)[:, 2]
    assert (constant[~np.isnan(constant)] == dtype(feature_range[0])).all()  # a constant column maps to exactly lo


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_clip_matches_sklearn(fw, dtype):
    rng = np.random.default_rng(3)
    X, Y = make_data(rng, 400, 7, dtype), 3 * make_data(rng, 300, 7, dtype)
    ref = reference(X, (-2, 3), clip=True)
    scaler = streamkit.MinMaxScaler((-2, 3), clip=True).fit(fw.put(X))
    result = fw.get(scaler.transform(fw.put(Y)))
    assert_close(result, sk_transform(ref, Y), transform_tolerance(Y, ref))
    finite = result[~np.isnan(result)]
    assert finite.min() == -2 and finite.max() == 3


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_inverse_transform_matches_sklearn_and_round_trips(fw, dtype, layout):
    rng = np.random.default_rng(4)
    X, Y = make_data(rng, 400, 9, dtype), make_data(rng, 250, 9, dtype)
    lo, hi = -1.5, 4.0
    ref = reference(X, (lo, hi))
    scaler = streamkit.MinMaxScaler((lo, hi)).fit(fw.put(X, layout))
    scaled = sk_transform(ref, Y)
    expected = ref.inverse_transform(scaled.copy())
    result = scaler.inverse_transform(fw.put(scaled, layout))
    assert fw.native(result)
    assert_close(fw.get(result), expected, inverse_tolerance(expected, ref))
    back = fw.get(scaler.inverse_transform(scaler.transform(fw.put(Y, layout))))
    eps = np.finfo(dtype).eps
    stretch = (abs(lo) + abs(hi)) / (hi - lo)
    tolerance = 16 * eps * (np.abs(Y.astype(np.float64)) + np.abs(ref.data_min_) + np.abs(ref.data_range_) * stretch)
    assert_close(back, np.where(np.isnan(ref.scale_), np.nan, Y).astype(dtype), tolerance)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_partial_fit_is_bit_identical_to_fit(fw, dtype):
    rng = np.random.default_rng(5)
    X = make_data(rng, 300, 10, dtype)
    # Column 4 is all NaN in the first batches only: scikit-learn's partial_fit would make it NaN for
    # good (np.minimum of its running values); streamkit ignores NaN across batches, as fit does.
    X[:77, 4] = np.nan
    batches = [X[:1], X[1:77], X[77:200], X[200:]]
    whole = streamkit.MinMaxScaler((-1, 1)).fit(fw.put(X))
    parts = streamkit.MinMaxScaler((-1, 1))
    for batch in batches:
        assert parts.partial_fit(fw.put(np.ascontiguousarray(batch))) is parts
    assert parts.n_samples_seen_ == 300 and whole.n_samples_seen_ == 300
    assert_fitted_like(parts, reference(X, (-1, 1)), fw)
    for name in ("data_min_", "data_max_", "data_range_", "scale_", "min_"):
        np.testing.assert_array_equal(fw.get(getattr(parts, name)), fw.get(getattr(whole, name)), err_msg=name)
    Y = fw.put(make_data(rng, 100, 10, dtype))
    assert np.array_equal(fw.get(parts.transform(Y)), fw.get(whole.transform(Y)), equal_nan=True)


@pytest.mark.parametrize("layout", ["C", "F"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["float32", "float64"])
def test_out_is_written_in_place(fw, dtype, layout):
    if not fw.mutable:
        pytest.skip(f"{fw.name} arrays are immutable")
    rng = np.random.default_rng(6)
    X, Y = make_data(rng, 200, 8, dtype), make_data(rng, 150, 8, dtype)
    ref = reference(X)
    in_place = fw.put(X, layout)
    scaler = streamkit.MinMaxScaler()
    assert scaler.fit_transform(in_place, out=in_place) is in_place
    assert_close(fw.get(in_place), sk_transform(ref, X), transform_tolerance(X, ref))
    other = "F" if layout == "C" else "C"
    out = fw.full(Y.shape, dtype, other)  # another layout than the input's
    assert scaler.transform(fw.put(Y, layout), out=out) is out
    scaled = sk_transform(ref, Y)
    assert_close(fw.get(out), scaled, transform_tolerance(Y, ref))
    back = fw.full(Y.shape, dtype, layout)
    assert scaler.inverse_transform(out, out=back) is back
    expected = ref.inverse_transform(fw.get(out).copy())
    assert_close(fw.get(back), expected, inverse_tolerance(expected, ref))
    fitted = fw.full(X.shape, dtype, other)
    assert scaler.fit_transform(fw.put(X, layout), out=fitted) is fitted
    assert_close(fw.get(fitted), sk_transform(ref, X), transform_tolerance(X, ref))


@pytest.mark.parametrize("shape", [(1, 6), (40, 1), (1, 1), (2, 3)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_small_shapes_match_sklearn(fw, shape):
    X = make_data(np.random.default_rng(7), *shape, np.float64, special=False)
    ref = reference(X, (-1, 2))
    scaler = streamkit.MinMaxScaler((-1, 2))
    result = fw.get(scaler.fit_transform(fw.put(X)))
    assert_close(result, sk_transform(ref, X), transform_tolerance(X, ref))
    assert_fitted_like(scaler, ref, fw)
    if shape[0] == 1:
        assert (result == -1).all()  # one sample: every column is constant


def test_refit_replaces_the_fitted_attributes(fw):
    rng = np.random.default_rng(8)
    X1, X2 = make_data(rng, 100, 5, np.float64), 10 + make_data(rng, 80, 5, np.float64)
    scaler = streamkit.MinMaxScaler().fit(fw.put(X1))
    assert_fitted_like(scaler, reference(X1), fw)
    scaler.fit(fw.put(X2))
    assert_fitted_like(scaler, reference(X2), fw)


def test_float32_fit_after_float64_fit(fw):
    rng = np.random.default_rng(9)
    X64, X32 = make_data(rng, 100, 5, np.float64), make_data(rng, 90, 5, np.float32)
    scaler = streamkit.MinMaxScaler().fit(fw.put(X64))
    scaler.fit(fw.put(X32))
    assert_fitted_like(scaler, reference(X32), fw)
    assert fw.get(scaler.transform(fw.put(X32))).dtype == np.float32


def test_infinities_follow_the_documented_rule(fw):
    inf = np.inf
    X = np.array([[0.0, 1.0, 5.0], [2.0, inf, -inf], [4.0, 3.0, 7.0]])
    scaler = streamkit.MinMaxScaler()
    result = fw.get(scaler.fit_transform(fw.put(X)))
    expected = np.array([[0.0, 0.0, np.nan], [0.5, np.nan, np.nan], [1.0, 0.0, np.nan]])
    np.testing.assert_array_equal(result, expected)
    np.testing.assert_array_equal(fw.get(scaler.data_min_), [0.0, 1.0, -inf])
    np.testing.assert_array_equal(fw.get(scaler.data_max_), [4.0, inf, 7.0])
    np.testing.assert_array_equal(fw.get(scaler.scale_), [0.25, 0.0, 0.0])


# errors after a fit: rejected before anything is written


def test_fitted_checks_reject_before_writing(fw):
    rng = np.random.default_rng(10)
    X = make_data(rng, 50, 5, np.float64)
    scaler = streamkit.MinMaxScaler().fit(fw.put(X))
    if fw.mutable:
        out = fw.full((4, 6), np.float64)
        with pytest.raises(ValueError, match="^X: has 6 features, but MinMaxScaler is expecting 5 features as input"):
            scaler.transform(fw.put(np.zeros((4, 6))), out=out)
        out32 = fw.full((4, 5), np.float32)
        with pytest.raises(TypeError, match="^X: dtype float32 differs from the fitted float64"):
            scaler.transform(fw.put(np.zeros((4, 5), np.float32)), out=out32)
        wrong = fw.full((5, 4), np.float64)
        with pytest.raises(ValueError, match=r"^out: expected shape \(4, 5\) \(X's\), got \(5, 4\)"):
            scaler.inverse_transform(fw.put(np.zeros((4, 5))), out=wrong)
        for poisoned in (out, out32, wrong):
            assert (fw.get(poisoned) == POISON).all()
    with pytest.raises(ValueError, match=r"^X: found array with 0 sample\(s\)"):
        scaler.transform(np.zeros((0, 5)))  # a host array: some frameworks make no zero-size device arrays
    with pytest.raises(ValueError, match="^X: has 4 features"):
        scaler.partial_fit(fw.put(np.zeros((3, 4))))
    with pytest.raises(TypeError, match="^X: dtype float32 differs"):
        scaler.partial_fit(fw.put(np.zeros((3, 5), np.float32)))
    assert scaler.n_samples_seen_ == 50
    scaler.set_params(clip=True)
    with pytest.raises(ValueError, match="^clip: changed by set_params since the last fit"):
        scaler.transform(fw.put(X))
    scaler.set_params(feature_range=(0, 2))
    with pytest.raises(ValueError, match="^feature_range: changed by set_params"):
        scaler.partial_fit(fw.put(X))
    result = fw.get(scaler.fit(fw.put(X)).transform(fw.put(X)))
    ref = reference(X, (0, 2), clip=True)
    assert_close(result, sk_transform(ref, X), transform_tolerance(X, ref))


def test_fit_in_one_framework_transform_in_others(cupy):
    rng = np.random.default_rng(11)
    X, Y = make_data(rng, 120, 6, np.float64), make_data(rng, 60, 6, np.float64)
    ref = reference(X)
    scaler = streamkit.MinMaxScaler().fit(cupy.asarray(X))
    on_host = scaler.transform(Y)  # through the fitted device
    assert isinstance(on_host, np.ndarray)
    assert_close(on_host, sk_transform(ref, Y), transform_tolerance(Y, ref))
    np.testing.assert_array_equal(cupy.asnumpy(scaler.transform(cupy.asarray(Y))), on_host)
    host_fitted = streamkit.MinMaxScaler().fit(X)
    assert isinstance(host_fitted.data_min_, np.ndarray)
    on_device = host_fitted.transform(cupy.asarray(Y))
    assert isinstance(on_device, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(on_device), on_host)


# streams


def pending_write(cupy, stream, target, source):
    """Enqueues on `stream` a kernel that spins SPIN_NS, then the copy of `source` into `target`."""
    spin = cupy.RawKernel(SPIN_SOURCE, "spin")
    with stream:
        spin((1,), (1,), (np.uint64(SPIN_NS),))
        target[...] = source


@pytest.mark.parametrize("how", ["stream argument", "current stream"])
def test_cupy_fit_transform_orders_after_a_pending_write_on_the_stream(cupy, how):
    """Fails if the stream is ignored: X is still zeros on any other stream when streamkit is called."""
    X_host = make_data(np.random.default_rng(12), 4096, 16, np.float64)
    staged = cupy.asarray(X_host)
    X = cupy.zeros_like(staged)
    cupy.cuda.Device().synchronize()
    stream = cupy.cuda.Stream(non_blocking=True)
    pending_write(cupy, stream, X, staged)
    assert not stream.done, "the write ended before streamkit was called: the test would prove nothing"
    scaler = streamkit.MinMaxScaler()
    if how == "stream argument":
        result = scaler.fit_transform(X, stream=stream)
    else:
        with stream:
            result = scaler.fit_transform(X)
    stream.synchronize()
    ref = reference(X_host)
    assert_close(cupy.asnumpy(result), sk_transform(ref, X_host), transform_tolerance(X_host, ref))


def test_cupy_transform_on_another_stream_waits_for_the_fit(cupy):
    rng = np.random.default_rng(13)
    old, new, Y = (make_data(rng, 2048, 8, np.float64) for _ in range(3))
    old = 100 + 10 * old  # other statistics: a transform that does not wait uses them
    scaler = streamkit.MinMaxScaler().fit(cupy.asarray(old))
    staged, X, device_Y = cupy.asarray(new), cupy.zeros((2048, 8)), cupy.asarray(Y)
    cupy.cuda.Device().synchronize()
    fit_stream, transform_stream = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    pending_write(cupy, fit_stream, X, staged)
    scaler.fit(X, stream=fit_stream)
    result = scaler.transform(device_Y, stream=transform_stream)
    assert not fit_stream.done
    transform_stream.synchronize()
    ref = reference(new)
    assert_close(cupy.asnumpy(result), sk_transform(ref, Y), transform_tolerance(Y, ref))


def test_cupy_fit_on_another_stream_waits_for_earlier_transforms(cupy):
    rng = np.random.default_rng(14)
    first, second, Y = (make_data(rng, 2048, 8, np.float64) for _ in range(3))
    scaler = streamkit.MinMaxScaler().fit(cupy.asarray(first))
    staged, pending_Y, device_second = cupy.asarray(Y), cupy.zeros((2048, 8)), cupy.asarray(10 + second)
    cupy.cuda.Device().synchronize()
    transform_stream, fit_stream = cupy.cuda.Stream(non_blocking=True), cupy.cuda.Stream(non_blocking=True)
    pending_write(cupy, transform_stream, pending_Y, staged)
    result = scaler.transform(pending_Y, stream=transform_stream)
    scaler.fit(device_second, stream=fit_stream)  # must not overwrite what the pending transform reads
    assert not transform_stream.done
    transform_stream.synchronize()
    fit_stream.synchronize()
    ref = reference(first)
    assert_close(cupy.asnumpy(result), sk_transform(ref, Y), transform_tolerance(Y, ref))


@pytest.mark.parametrize("how", ["stream argument", "current stream"])
def test_torch_fit_transform_orders_after_a_pending_write_on_the_stream(torch, how):
    X_host = make_data(np.random.default_rng(15), 4096, 16, np.float32)
    staged = torch.from_numpy(X_host).cuda()
    X = torch.zeros_like(staged)
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)  # about 50 ms of clock cycles
        X.copy_(staged)
    assert not stream.query(), "the write ended before streamkit was called: the test would prove nothing"
    scaler = streamkit.MinMaxScaler()
    if how == "stream argument":
        result = scaler.fit_transform(X, stream=stream)
    else:
        with torch.cuda.stream(stream):
            result = scaler.fit_transform(X)
    stream.synchronize()
    ref = reference(X_host)
    assert_close(result.cpu().numpy(), sk_transform(ref, X_host), transform_tolerance(X_host, ref))


# no copies: the frameworks' allocators grow by exactly the outputs


@pytest.mark.parametrize("layout", LAYOUTS)
def test_cupy_allocates_only_the_outputs(cupy, layout, counting_cupy_allocations):
    """Every allocation from CuPy's allocator is counted (a temporary shows even when it is freed
    again): steady fits and transforms into `out` make none; a transform makes its result only."""
    X = CuPyArrays().put(make_data(np.random.default_rng(16), 256, 16, np.float64), layout)
    scaler = streamkit.MinMaxScaler().fit(X)
    out = cupy.empty((256, 16))
    with counting_cupy_allocations() as sizes:
        scaler.fit(X)
        scaler.partial_fit(X)
        scaler.transform(X, out=out)
        scaler.inverse_transform(out, out=out)
        scaler.fit_transform(X, out=out)
    assert sizes == []
    with counting_cupy_allocations() as sizes:
        result = scaler.transform(X)
    assert sizes == [result.nbytes]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_torch_allocates_only_the_outputs(torch, layout):
    X = TorchArrays().put(make_data(np.random.default_rng(17), 256, 16, np.float64), layout)
    scaler = streamkit.MinMaxScaler().fit(X)
    out = torch.empty((256, 16), dtype=torch.float64, device="cuda:0")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    scaler.fit(X)
    scaler.transform(X, out=out)
    scaler.fit_transform(X, out=out)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() == before
    result = scaler.transform(X)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before == result.nbytes
    assert torch.cuda.max_memory_allocated() - before == result.nbytes


# several GPUs


@pytest.mark.skipif(streamkit.device_count() < 2, reason="needs two CUDA devices")
def test_cupy_arrays_on_another_device(cupy):
    X = make_data(np.random.default_rng(18), 100, 5, np.float64)
    with cupy.cuda.Device(0):
        X0, stream0 = cupy.asarray(X), cupy.cuda.Stream()
    with cupy.cuda.Device(1):
        X1 = cupy.asarray(X)
    scaler = streamkit.MinMaxScaler().fit(X0)
    with pytest.raises(ValueError, match="^X: on CUDA device 1 but the scaler was fitted on CUDA device 0"):
        scaler.transform(X1)
    with pytest.raises(ValueError, match="^X: on CUDA device 1 but the scaler was fitted on CUDA device 0"):
        scaler.partial_fit(X1)
    with pytest.raises(ValueError, match="^stream: belongs to CUDA device 0 but the array is on CUDA device 1"):
        scaler.fit(X1, stream=stream0)
    scaler.fit(X1)  # moves the scaler
    assert scaler.data_min_.device.id == 1
    ref = reference(X)
    with cupy.cuda.Device(1):
        on_device = cupy.asnumpy(scaler.transform(X1))
    assert_close(on_device, sk_transform(ref, X), transform_tolerance(X, ref))
    np.testing.assert_array_equal(scaler.transform(X), on_device)  # host arrays go through device 1


# normalize_many


def normalize_reference(a, lo, hi):
    """Per-column scaling in float64 from the minima, maxima and scale streamkit computes in a's dtype."""
    dtype = a.dtype.type
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanmin(a, axis=0), np.nanmax(a, axis=0)
    spread = high - low
    spread = np.where(spread < 10 * np.finfo(dtype).eps, dtype(1), spread)
    scale = (dtype(hi) - dtype(lo)) / spread
    return (lo + (a.astype(np.float64) - low) * scale).astype(a.dtype)


def assert_normalized(results, arrays, lo, hi):
    assert len(results) == len(arrays)
    for result, array in zip(results, arrays):
        assert isinstance(result, np.ndarray) and result.shape == array.shape and result.dtype == array.dtype
        assert_close(result, normalize_reference(array, lo, hi), 4 * np.finfo(array.dtype).eps * (abs(lo) + abs(hi)))


def uneven_arrays(rng):
    arrays = [make_data(rng, 1, 7, np.float64, special=False), make_data(rng, 7, 1, np.float32, special=False),
              make_data(rng, 1, 1, np.float64, special=False), np.asfortranarray(make_data(rng, 300, 5, np.float32)),
              np.asfortranarray(make_data(rng, 2000, 40, np.float64)), make_data(rng, 2000, 40, np.float64),
              make_data(rng, 64, 1000, np.float32), np.asfortranarray(make_data(rng, 256, 300, np.float64)),
              make_data(rng, 65, 100, np.float64), make_data(rng, 500, 3000, np.float64)]
    wide = make_data(rng, 50, 40, np.float64)
    arrays.append(wide[:, 3:33])  # sliced: row-major with a leading dimension of 40
    return arrays


@pytest.mark.parametrize("feature_range", [(0, 1), (-1, 1), (2.5, 7)])
def test_normalize_many_matches_float64_reference(feature_range):
    rng = np.random.default_rng(19)
    arrays = [make_data(rng, 60, 400, np.float64) for _ in range(18)]
    results = streamkit.normalize_many(arrays, feature_range)
    assert_normalized(results, arrays, *feature_range)


def test_normalize_many_uneven_shapes_and_mixed_dtypes():
    arrays = uneven_arrays(np.random.default_rng(20))
    results = streamkit.normalize_many(tuple(arrays), (-1, 2))
    assert_normalized(results, arrays, -1, 2)
    assert results[4].flags.f_contiguous and results[5].flags.c_contiguous


def test_normalize_many_writes_out_and_in_place():
    rng = np.random.default_rng(21)
    arrays = uneven_arrays(rng) + [make_data(rng, 60, 400, np.float64) for _ in range(18)]
    originals = [a.copy() for a in arrays]
    out = [np.full(a.shape, POISON, dtype=a.dtype, order="F" if i % 2 else "C") for i, a in enumerate(arrays)]
    results = streamkit.normalize_many(arrays, out=out)
    assert all(r is o for r, o in zip(results, out))
    assert_normalized(results, originals, 0, 1)
    assert all(np.array_equal(a, o, equal_nan=True) for a, o in zip(arrays, originals))  # inputs untouched
    in_place = streamkit.normalize_many(arrays, out=arrays)
    assert all(r is a for r, a in zip(in_place, arrays))
    assert_normalized(arrays, originals, 0, 1)


def test_normalize_many_rejects_cuda_arrays(cupy):
    out = [np.full((5, 3), POISON)]
    with pytest.raises(TypeError, match=r"^arrays\[1\]: on CUDA device 0; normalize_many scales host"):
        streamkit.normalize_many([np.zeros((5, 3)), cupy.zeros((5, 3))], out=out + [np.full((5, 3), POISON)])
    assert (out[0] == POISON).all()


# scikit-learn


def test_pipeline_with_sklearn_on_numpy():
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import Pipeline

    rng = np.random.default_rng(22)
    X = rng.normal(size=(400, 6)) * [1, 10, 100, 0.1, 5, 50] + [0, -20, 300, 1, 7, -40]
    y = (X[:, 0] + (X[:, 1] + 20) / 10 - (X[:, 3] - 1) * 10 > 0).astype(int)
    assert 100 < y.sum() < 300

    def pipeline(scaler):
        return Pipeline([("scale", scaler), ("model", LogisticRegression())])

    ours = pipeline(streamkit.MinMaxScaler()).fit(X, y)
    ref = pipeline(sklearn_preprocessing.MinMaxScaler()).fit(X, y)
    assert isinstance(ours.named_steps["scale"].data_min_, np.ndarray)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours[-1].coef_, ref[-1].coef_, rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(cross_val_score(pipeline(streamkit.MinMaxScaler()), X, y, cv=3),
                               cross_val_score(pipeline(sklearn_preprocessing.MinMaxScaler()), X, y, cv=3))
    np.testing.assert_array_equal(ours[:-1].get_feature_names_out(), [f"x{i}" for i in range(6)])
