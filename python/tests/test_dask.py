"""streamkit.dask without a GPU: the graphs, chunk alignment, global reference ids, the workers' kept
indexes and the scaler's tree reduction, on a dask.distributed LocalCluster of processes, each chunk
searched or scaled by the CPU stand-in (cpu_backend.py) where streamkit would use the GPU. The same
paths with streamkit on the GPU: test_dask_gpu.py. Skipped without Dask (the extra streamkit[dask])."""

import subprocess
import sys

import numpy as np
import pytest

dask = pytest.importorskip("dask", reason="Dask is not installed (pip install 'streamkit[dask]')")
distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed (pip install 'streamkit[dask]')")
da = pytest.importorskip("dask.array")

import cpu_backend  # noqa: E402
import streamkit.dask as skd  # noqa: E402


@pytest.fixture(scope="module")
def client():
    """Two worker processes of one thread: every task runs in another process than the test's."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def points(rng, n, dtype=np.float64):
    return np.stack([rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)], axis=1).astype(dtype)


def test_importing_streamkit_imports_no_dask():
    code = "import sys, streamkit; assert 'dask' not in sys.modules and 'distributed' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nearest_blocks_align_and_ids_are_global(client, dtype):
    rng = np.random.default_rng()
    obs, ref = points(rng, 1000, dtype), points(rng, 300, dtype)
    obs[7] = np.nan  # an invalid observation: -1 and NaN in its row
    observations = da.from_array(obs, chunks=((100, 1, 399, 500), (1, 1)))  # column chunks are joined
    references = da.from_array(ref, chunks=(70, 2))  # five chunks: ids are rows of their concatenation
    indices, distances = skd.nearest(observations, references, k=4, max_distance=5000.0, backend=cpu_backend)
    assert indices.chunks == ((100, 1, 399, 500), (4,)) and distances.chunks == indices.chunks
    assert indices.dtype == np.int64 and distances.dtype == dtype
    got_i, got_d = dask.compute(indices, distances)
    want_i, want_d = cpu_backend.nearest(obs, ref, 4, max_distance=5000.0)
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_array_equal(got_d, want_d)
    assert (got_i[7] == -1).all() and np.isnan(got_d[7]).all()
    assert (got_i == -1).any() and (got_i > 70).any()  # beyond max_distance; ids past the first chunk


def test_nearest_on_dataframes(client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe", reason="dask[dataframe] is not installed")
    rng = np.random.default_rng()
    obs, ref = points(rng, 900), points(rng, 200)
    frame = pd.DataFrame({"id": np.arange(900), "lat": obs[:, 0], "lon": obs[:, 1]}, index=np.arange(900) * 3)
    observations = dd.from_pandas(frame, npartitions=4)
    references = dd.from_pandas(pd.DataFrame({"la": ref[:, 0], "lo": ref[:, 1]}), npartitions=3)
    result = skd.nearest(observations, references, k=2, columns=("lat", "lon"), backend=cpu_backend)
    assert result.npartitions == 4 and list(result.columns) == ["index_0", "index_1", "distance_0", "distance_1"]
    got = result.compute()
    want_i, want_d = cpu_backend.nearest(obs, ref, 2)
    np.testing.assert_array_equal(got.index, frame.index)  # the observations' index, partition by partition
    np.testing.assert_array_equal(got[["index_0", "index_1"]].to_numpy(), want_i)
    np.testing.assert_array_equal(got[["distance_0", "distance_1"]].to_numpy(), want_d)
    with pytest.raises(ValueError, match="^observations: a DataFrame of 3 columns"):
        skd.nearest(observations, ref, backend=cpu_backend)


def test_nearest_arguments_are_checked_before_the_graph():
    obs = da.zeros((10, 2), chunks=5)
    with pytest.raises(ValueError, match="^k: 33"):
        skd.nearest(obs, np.zeros((3, 2)), k=33)
    with pytest.raises(ValueError, match=r"^observations: expected shape \(n, 2\)"):
        skd.nearest(da.zeros((10, 3)), np.zeros((3, 2)))
    with pytest.raises(TypeError, match="^references: float32 coordinates, observations float64"):
        skd.nearest(obs, np.zeros((3, 2), np.float32))
    with pytest.raises(TypeError, match="^observations: expected a Dask array or DataFrame"):
        skd.nearest(np.zeros((10, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="^angle: 'grad'"):
        skd.nearest(obs, np.zeros((3, 2)), angle="grad")


def test_index_kept_on_the_workers_follows_updates(client):
    rng = np.random.default_rng()
    obs = points(rng, 800)
    observations = da.from_array(obs, chunks=200)
    with skd.NearestIndex(points(rng, 100), backend=cpu_backend) as index:
        for step in range(3):
            ref = points(rng, 100 + 50 * step)
            index.update(ref)
            got_i, got_d = dask.compute(*index.query(observations, k=3))
            want_i, want_d = cpu_backend.nearest(obs, ref, 3)
            np.testing.assert_array_equal(got_i, want_i)
            np.testing.assert_array_equal(got_d, want_d)
        # Each worker made its index once and updated it in place since (one update per step it saw).
        kept = client.run(lambda: [(v[0], v[1].updates) for v in __import__("streamkit.dask").dask._worker_indexes.values()])
        assert all(version == 3 and 1 <= updates <= 3 for entries in kept.values() for version, updates in entries), kept
        assert sum(len(entries) for entries in kept.values()) >= 1
    assert all(not entries for entries in client.run(lambda: list(__import__("streamkit.dask").dask._worker_indexes)).values())


def test_radius_neighbors_rows_follow_the_blocks(client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe", reason="dask[dataframe] is not installed")
    rng = np.random.default_rng()
    obs, ref = points(rng, 600), points(rng, 400)
    counts, indices, distances = skd.radius_neighbors(da.from_array(obs, chunks=150), ref, 1500.0, backend=cpu_backend)
    assert counts.chunks == ((150,) * 4,) and len(indices.chunks[0]) == 4
    counts, indices, distances = dask.compute(counts, indices, distances)
    offsets, want_i, want_d = cpu_backend.radius_neighbors(obs, ref, 1500.0)
    np.testing.assert_array_equal(counts, np.diff(offsets))
    np.testing.assert_array_equal(indices, want_i)
    np.testing.assert_array_equal(distances, want_d)
    frame = dd.from_pandas(pd.DataFrame({"lat": obs[:, 0], "lon": obs[:, 1]}, index=np.arange(600) + 10), npartitions=3)
    pairs = skd.radius_neighbors(frame, ref, 1500.0, backend=cpu_backend)
    assert pairs.npartitions == 3
    pairs = pairs.compute()
    np.testing.assert_array_equal(pairs["observation"], np.repeat(np.arange(600) + 10, np.diff(offsets)))
    np.testing.assert_array_equal(pairs["index"], want_i)
    np.testing.assert_array_equal(pairs["distance"], want_d)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scaler_reduction_equals_one_fit(client, dtype):
    rng = np.random.default_rng()
    x = rng.normal(size=(1000, 6)).astype(dtype) * 100
    x[:, 1] = np.nan  # all NaN: NaN attributes
    x[:, 2] = 7  # constant: range counts as 1
    x[:500, 3] = np.nan  # NaN in some blocks only: ignored
    x[10, 4] = np.inf
    X = da.from_array(x, chunks=((64,) * 15 + (40,), (4, 2)))  # 16 row blocks: a tree of two levels (8 per node)
    scaler = skd.MinMaxScaler(feature_range=(-1, 2), backend=cpu_backend).fit(X)
    one = cpu_backend.MinMaxScaler(feature_range=(-1, 2)).fit(x)
    for name in ("data_min_", "data_max_", "data_range_", "scale_", "min_"):
        np.testing.assert_array_equal(getattr(scaler, name), getattr(one, name), err_msg=name)
    assert scaler.n_samples_seen_ == 1000 and scaler.n_features_in_ == 6
    scaled = scaler.transform(X)
    assert scaled.chunks == ((64,) * 15 + (40,), (6,))
    np.testing.assert_array_equal(scaled.compute(), one.transform(x))
    np.testing.assert_array_equal(scaler.inverse_transform(scaled).compute(), one.inverse_transform(one.transform(x)))


def test_scaler_partial_fit_folds_batches(client):
    rng = np.random.default_rng()
    batches = [rng.normal(size=(n, 3)) * s for n, s in ((100, 1), (1, 50), (300, 3))]
    batches[0][:, 0] = np.nan  # NaN in one batch only: the other batches' values count
    scaler = skd.MinMaxScaler(backend=cpu_backend)
    for batch in batches:
        scaler.partial_fit(da.from_array(batch, chunks=64))
    one = cpu_backend.MinMaxScaler().fit(np.concatenate(batches))
    for name in ("data_min_", "data_max_", "scale_", "min_"):
        np.testing.assert_array_equal(getattr(scaler, name), getattr(one, name), err_msg=name)
    assert scaler.n_samples_seen_ == 401
    with pytest.raises(ValueError, match="^X: 2 features, the scaler is fitted to 3"):
        scaler.transform(da.zeros((4, 2)))


def test_scaler_errors():
    scaler = skd.MinMaxScaler(backend=cpu_backend)
    with pytest.raises(ValueError, match="not fitted"):
        scaler.transform(da.zeros((4, 2)))
    with pytest.raises(TypeError, match="^X: expected a Dask array"):
        scaler.fit(np.zeros((4, 2)))
    with pytest.raises(TypeError, match="^X: expected dtype float32 or float64, got int64"):
        scaler.fit(da.zeros((4, 2), dtype=np.int64))
    with pytest.raises(ValueError, match="^feature_range: minimum of desired feature range"):
        skd.MinMaxScaler(feature_range=(1, 0), backend=cpu_backend).fit(da.zeros((4, 2)))
