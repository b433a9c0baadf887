"""GPU tests of streamkit.nearest and streamkit.NearestIndex: every framework (CuPy, PyTorch, JAX,
Numba, NumPy), both dtypes, non-contiguous inputs, streams, zero-copy, against a float64 brute force
in NumPy. Skipped, with the reason, without a CUDA device or without the framework."""

import numpy as np
import pytest

import streamkit

pytestmark = pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")

EARTH_KM = 6371.0088


def brute_force(obs, ref, k):
    """Indices (ties to the smaller index) and km distances of the k nearest, in float64."""
    obs, ref = np.radians(np.asarray(obs, np.float64)), np.radians(np.asarray(ref, np.float64))
    lat1, lon1 = obs[:, :1], obs[:, 1:]
    lat2, lon2 = ref[None, :, 0], ref[None, :, 1]
    h = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    angle = 2 * np.arcsin(np.sqrt(np.minimum(h, 1.0)))
    order = np.argsort(angle, axis=1, kind="stable")[:, :k]
    found = np.full((len(obs), k), -1, np.int64)
    found[:, : order.shape[1]] = order
    distance = np.full((len(obs), k), np.nan)
    distance[:, : order.shape[1]] = np.take_along_axis(angle, order, axis=1) * EARTH_KM
    return found, distance


def random_points(rng, n, dtype=np.float64):
    return np.stack([rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)], axis=1).astype(dtype)


def check(indices, distances, obs, ref, k, dtype):
    want_i, want_d = brute_force(obs, ref, k)
    np.testing.assert_array_equal(indices, want_i)
    rtol = 1e-12 if dtype == np.float64 else 2e-6
    np.testing.assert_allclose(distances, want_d, rtol=rtol, atol=1e-9)


# Each framework: (to device, to NumPy, the result type's check).
def cupy_framework():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    return cupy.asarray, cupy.asnumpy, lambda a: isinstance(a, cupy.ndarray)


def torch_framework():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return (lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda(), lambda a: a.cpu().numpy(),
            lambda a: isinstance(a, torch.Tensor) and a.is_cuda)


def jax_framework():
    jax = pytest.importorskip("jax", reason="JAX is not installed")
    jax.config.update("jax_enable_x64", True)
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("JAX sees no GPU")
    return (lambda a: jax.device_put(a, gpus[0]), np.asarray,
            lambda a: isinstance(a, jax.Array) and next(iter(a.devices())).platform == "gpu")


def numba_framework():
    pytest.importorskip("numba", reason="Numba is not installed")
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("Numba sees no CUDA device")
    return (lambda a: cuda.to_device(np.ascontiguousarray(a)), lambda a: a.copy_to_host(), cuda.is_cuda_array)


def numpy_framework():
    return np.ascontiguousarray, np.asarray, lambda a: isinstance(a, np.ndarray)


FRAMEWORKS = {"cupy": cupy_framework, "torch": torch_framework, "jax": jax_framework, "numba": numba_framework,
              "numpy": numpy_framework}


@pytest.mark.parametrize("name", FRAMEWORKS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("k", [1, 5, 32])
def test_nearest_in_every_framework(name, dtype, k):
    to_device, to_numpy, is_theirs = FRAMEWORKS[name]()
    rng = np.random.default_rng(k)
    obs, ref = random_points(rng, 700, dtype), random_points(rng, 300, dtype)
    indices, distances = streamkit.nearest(to_device(obs), to_device(ref), k)
    assert is_theirs(indices) and is_theirs(distances)
    indices, distances = to_numpy(indices), to_numpy(distances)
    assert indices.dtype == np.int64 and distances.dtype == dtype and indices.shape == (700, k)
    check(indices, distances, obs, ref, k, dtype)


@pytest.mark.parametrize("name", FRAMEWORKS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_index_in_every_framework(name, dtype):
    to_device, to_numpy, is_theirs = FRAMEWORKS[name]()
    rng = np.random.default_rng(7)
    ref = random_points(rng, 2000, dtype)
    index = streamkit.NearestIndex(to_device(ref))
    assert len(index) == 2000 and index.dtype == np.dtype(dtype).name
    for step, m in enumerate([2000, 500, 3000, 1]):  # moving references; smaller, larger, single
        ref = random_points(rng, m, dtype)
        index.update(to_device(ref))
        obs = random_points(rng, 4000 + step, dtype)
        for k in (1, 8):
            indices, distances = index.query(to_device(obs), k)
            assert is_theirs(indices)
            check(to_numpy(indices), to_numpy(distances), obs, ref, k, dtype)


def test_host_path_equals_device_path():
    cupy = cupy_framework()[0]
    rng = np.random.default_rng(3)
    obs, ref = random_points(rng, 50_000), random_points(rng, 20_000)
    host_i, host_d = streamkit.nearest(obs, ref, 4)
    dev_i, dev_d = streamkit.nearest(cupy(obs), cupy(ref), 4)
    np.testing.assert_array_equal(host_i, dev_i.get())
    np.testing.assert_array_equal(host_d, dev_d.get())
    sample = rng.choice(len(obs), 2000, replace=False)
    check(host_i[sample], host_d[sample], obs[sample], ref, 4, np.float64)


@pytest.mark.parametrize("name", ["cupy", "torch"])
def test_non_contiguous_inputs_are_read_in_place(name):
    to_device, to_numpy, _ = FRAMEWORKS[name]()
    rng = np.random.default_rng(11)
    obs, ref = random_points(rng, 600), random_points(rng, 250)
    wide = np.zeros((600, 5))
    wide[:, 1], wide[:, 3] = obs[:, 0], obs[:, 1]
    sliced = to_device(wide)[:, 1:4:2]  # row stride 5, longitude 2 elements after latitude
    transposed = to_device(np.ascontiguousarray(ref.T)).T  # strides (1, 250)
    indices, distances = streamkit.nearest(sliced, transposed, 3)
    check(to_numpy(indices), to_numpy(distances), obs, ref, 3, np.float64)


def test_out_is_written_in_place_with_a_row_stride():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(5)
    obs, ref = random_points(rng, 400), random_points(rng, 100)
    indices = cupy.full((400, 8), -7, dtype=cupy.int64)
    distances = cupy.full((400, 8), 123.0)
    got = streamkit.nearest(cupy.asarray(obs), cupy.asarray(ref), 3, out=(indices[:, :3], distances[:, :3]))
    assert got[0].data.ptr == indices.data.ptr
    check(indices[:, :3].get(), distances[:, :3].get(), obs, ref, 3, np.float64)
    assert (indices[:, 3:] == -7).all() and (distances[:, 3:] == 123.0).all()  # nothing written beyond k


def test_invalid_observations_and_max_distance():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(9)
    obs, ref = random_points(rng, 300), random_points(rng, 200)
    obs[7] = (np.nan, 0.0)
    obs[8] = (95.0, 0.0)
    indices, distances = streamkit.nearest(cupy.asarray(obs), cupy.asarray(ref), 2, max_distance=500.0)
    indices, distances = indices.get(), distances.get()
    assert (indices[7:9] == -1).all() and np.isnan(distances[7:9]).all()
    want_i, want_d = brute_force(obs, ref, 2)
    far = want_d > 500.0
    want_i[far], want_d[far] = -1, np.nan
    keep = np.ones(300, bool)
    keep[7:9] = False
    np.testing.assert_array_equal(indices[keep], want_i[keep])


def test_zero_observations_return_empty_results():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    indices, distances = streamkit.nearest(cupy.zeros((0, 2)), cupy.zeros((3, 2)), 4)
    assert indices.shape == (0, 4) and distances.shape == (0, 4)


SPIN = r"""
extern "C" __global__ void spin_then_copy(const double* source, double* target, int n, long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
  for (int i = threadIdx.x; i < n; i += blockDim.x) target[i] = source[i];
}
"""


def test_cupy_user_stream_orders_the_search_after_its_pending_kernel():
    """A kernel on a non-blocking user stream spins ~50 ms, then writes the observations. The search
    must run after it: this fails if the stream is ignored (the legacy default stream would not wait)."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(13)
    obs, ref = random_points(rng, 2000), random_points(rng, 500)
    kernel = cupy.RawKernel(SPIN, "spin_then_copy")
    rate = cupy.cuda.Device().attributes["ClockRate"] * 1000  # kHz → Hz
    source, d_ref = cupy.asarray(obs), cupy.asarray(ref)
    for explicit in (True, False):
        target = cupy.full((2000, 2), 45.0)
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            kernel((1,), (256,), (source, target, np.int32(obs.size), np.int64(rate // 20)))
            indices, distances = (streamkit.nearest(target, d_ref, 1, stream=stream) if explicit
                                  else streamkit.nearest(target, d_ref, 1))
            stream.synchronize()
        check(indices.get(), distances.get(), obs, ref, 1, np.float64)


def test_torch_current_stream_orders_the_search_after_its_pending_kernel():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rng = np.random.default_rng(17)
    obs, ref = random_points(rng, 2000), random_points(rng, 500)
    source, d_ref = torch.from_numpy(obs).cuda(), torch.from_numpy(ref).cuda()
    target = torch.full((2000, 2), 45.0, dtype=torch.float64, device="cuda")
    stream = torch.cuda.Stream()
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(100_000_000)  # about 50 ms at 2 GHz
        target.copy_(source)
        indices, distances = streamkit.nearest(target, d_ref, 1)
    stream.synchronize()
    check(indices.cpu().numpy(), distances.cpu().numpy(), obs, ref, 1, np.float64)


def test_cupy_allocates_the_results_and_gives_the_temporaries_back(counting_cupy_allocations):
    """Every allocation from CuPy's allocator is counted. A replaced allocator (this counting one, as
    RMM's would be) also serves streamkit's temporaries: the search makes its two results first,
    then its temporaries, and by the end only the results remain in use."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(19)
    obs, ref = cupy.asarray(random_points(rng, 100_000)), cupy.asarray(random_points(rng, 50_000))
    pool = cupy.get_default_memory_pool()
    with counting_cupy_allocations() as sizes:
        used = pool.used_bytes()
        indices, distances = streamkit.nearest(obs, ref, 2)
        cupy.cuda.Device().synchronize()
        in_use = pool.used_bytes() - used
    assert sizes[:2] == [indices.nbytes, distances.nbytes]
    assert len(sizes) > 2, "the temporaries come from the replaced allocator"
    rounded = lambda n: -(-n // 512) * 512  # noqa: E731  (CuPy's pool rounds to 512 bytes)
    assert in_use == rounded(indices.nbytes) + rounded(distances.nbytes)


def test_cupy_default_pool_serves_only_the_results():
    """With CuPy's own pool (not replaced), a search allocates its two results there and its
    temporaries from streamkit's pool: CuPy's pool grows by the results only."""
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng(29)
    obs, ref = cupy.asarray(random_points(rng, 100_000)), cupy.asarray(random_points(rng, 50_000))
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    total = pool.total_bytes()
    indices, distances = streamkit.nearest(obs, ref, 2)
    cupy.cuda.Device().synchronize()
    rounded = lambda n: -(-n // 512) * 512  # noqa: E731
    assert pool.total_bytes() - total == rounded(indices.nbytes) + rounded(distances.nbytes)


def test_torch_inputs_are_not_copied():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    rng = np.random.default_rng(23)
    obs = torch.from_numpy(random_points(rng, 100_000)).cuda()
    ref = torch.from_numpy(random_points(rng, 50_000)).cuda()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    indices, distances = streamkit.nearest(obs, ref, 2)
    torch.cuda.synchronize()
    grown = torch.cuda.memory_allocated() - before
    assert grown == indices.element_size() * indices.nelement() + distances.element_size() * distances.nelement()
    assert indices.device == obs.device


def test_arrays_on_different_devices_are_rejected():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    if streamkit.device_count() < 2:
        pytest.skip("needs two GPUs")
    obs = cupy.zeros((4, 2))
    with cupy.cuda.Device(1):
        ref = cupy.zeros((4, 2))
    with pytest.raises(ValueError, match="^references: on CUDA device 1 but the observations are on CUDA device 0"):
        streamkit.nearest(obs, ref)
