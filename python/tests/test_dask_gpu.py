"""streamkit.dask on the GPU: a dask.distributed cluster of one worker per GPU (dask-cuda's
LocalCUDACluster when installed, else a LocalCluster of processes) runs the chunks through streamkit
itself; every answer against streamkit's single-process call on the same data (NumPy and CuPy
blocks, DataFrames, NearestIndex across updates, radius rows, the scaler bit for bit). Skipped without
a GPU or without Dask (the CPU paths: test_dask.py)."""

import numpy as np
import pytest

import streamkit

pytestmark = pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")
dask = pytest.importorskip("dask", reason="Dask is not installed (pip install 'streamkit[dask]')")
distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'streamkit[dask]')")
da = pytest.importorskip("dask.array")

import streamkit.dask as skd  # noqa: E402


@pytest.fixture(scope="module")
def client():
    try:
        from dask_cuda import LocalCUDACluster
        cluster = LocalCUDACluster(n_workers=streamkit.device_count(), threads_per_worker=1, dashboard_address=None)
    except ImportError:
        cluster = distributed.LocalCluster(n_workers=streamkit.device_count(), threads_per_worker=1, processes=True,
                                           dashboard_address=None)
    with cluster, distributed.Client(cluster) as c:
        yield c


def points(rng, n, dtype=np.float64):
    return np.stack([rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)], axis=1).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("blocks", ["numpy", "cupy"])
def test_nearest_equals_one_search(client, dtype, blocks):
    rng = np.random.default_rng()
    obs, ref = points(rng, 50_000, dtype), points(rng, 3000, dtype)
    obs[11] = np.nan
    observations = da.from_array(obs, chunks=(7000, 2))
    references = ref
    if blocks == "cupy":
        cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
        observations, references = observations.map_blocks(cupy.asarray), cupy.asarray(ref)
    indices, distances = skd.nearest(observations, references, k=4)
    got_i, got_d = dask.compute(indices, distances)
    if blocks == "cupy":
        assert type(got_i).__module__.startswith("cupy")
        got_i, got_d = got_i.get(), got_d.get()
    want_i, want_d = streamkit.nearest(obs, ref, k=4)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_d, want_d)


def test_dataframe_and_index_updates(client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe", reason="dask[dataframe] is not installed")
    rng = np.random.default_rng()
    obs = points(rng, 40_000)
    frame = dd.from_pandas(pd.DataFrame({"lat": obs[:, 0], "lon": obs[:, 1]}), npartitions=4)
    with skd.NearestIndex(points(rng, 100)) as index:
        for step in range(3):
            ref = points(rng, 2000 + 1000 * step)
            got = index.update(ref).query(frame, k=2).compute()
            want_i, want_d = streamkit.nearest(obs, ref, k=2)
            np.testing.assert_array_equal(got[["index_0", "index_1"]].to_numpy(), want_i)
            np.testing.assert_array_equal(got[["distance_0", "distance_1"]].to_numpy(), want_d)


def test_radius_rows_equal_one_query(client):
    rng = np.random.default_rng()
    obs, ref = points(rng, 20_000), points(rng, 5000)
    counts, indices, distances = dask.compute(*skd.radius_neighbors(da.from_array(obs, chunks=6000), ref, 300.0))
    offsets, want_i, want_d = streamkit.radius_neighbors(obs, ref, 300.0)
    np.testing.assert_array_equal(counts, np.diff(offsets))
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(distances, want_d)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scaler_equals_one_fit(client, dtype):
    rng = np.random.default_rng()
    x = (rng.normal(size=(5000, 40)) * 50).astype(dtype)
    x[:, 3] = np.nan
    x[:2500, 4] = np.nan
    x[:, 5] = 1.5
    X = da.from_array(x, chunks=(300, 40))
    scaler = skd.MinMaxScaler(feature_range=(-2, 3)).fit(X)
    one = streamkit.MinMaxScaler(feature_range=(-2, 3)).fit(x)
    for name in ("data_min_", "data_max_", "data_range_", "scale_", "min_"):
        np.testing.assert_array_equal(getattr(scaler, name), getattr(one, name), err_msg=name)
    np.testing.assert_array_equal(scaler.transform(X).compute(), one.transform(x))
    np.testing.assert_array_equal(scaler.inverse_transform(X).compute(), one.inverse_transform(x))
