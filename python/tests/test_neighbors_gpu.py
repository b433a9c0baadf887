"""GPU tests of streamkit.radius_neighbors and streamkit.neighbors.NearestNeighbors against
scikit-learn's BallTree and NearestNeighbors with the haversine metric (indices as sets per row,
distances to 1e-12 rad), on uniform, clustered and identical points, points exactly at the radius,
r = 0, r >= pi, empty rows, one fitted point; NumPy and CuPy inputs. Skipped, with the reason, without
a CUDA device, scikit-learn or CuPy."""

import math

import numpy as np
import pytest

import streamkit
from streamkit.neighbors import NearestNeighbors

pytestmark = pytest.mark.skipif(streamkit.device_count() == 0, reason="no CUDA device visible (streamkit.device_count() == 0)")
sklearn_neighbors = pytest.importorskip("sklearn.neighbors", reason="scikit-learn is not installed")


def uniform(rng, n):
    """(lat, lon) in radians, uniform on the sphere."""
    return np.stack([np.arcsin(rng.uniform(-1, 1, n)), rng.uniform(-math.pi, math.pi, n)], axis=1)


def clustered(rng, n):
    centres = uniform(rng, 5)
    pick = rng.integers(0, 5, n)
    return centres[pick] + rng.normal(0, 1e-4, (n, 2))


def identical(rng, n):
    points = uniform(rng, 7)
    return points[rng.integers(0, 7, n)]


def expect_same_rows(got_dist, got_ind, want_dist, want_ind, sorted_rows):
    assert len(got_ind) == len(want_ind)
    for i, (gi, wi) in enumerate(zip(got_ind, want_ind)):
        assert set(np.asarray(gi).tolist()) == set(np.asarray(wi).tolist()), f"row {i}"
        order_g, order_w = np.argsort(np.asarray(gi)), np.argsort(np.asarray(wi))
        np.testing.assert_allclose(np.asarray(got_dist[i])[order_g], np.asarray(want_dist[i])[order_w], rtol=0, atol=1e-12)
        if sorted_rows:
            assert np.all(np.diff(np.asarray(got_dist[i])) >= -1e-15), f"row {i} not sorted"


GENERATORS = {"uniform": uniform, "clustered": clustered, "identical": identical}


@pytest.mark.parametrize("kind", sorted(GENERATORS))
@pytest.mark.parametrize("radius", [0.0, 1e-4, 0.05, math.pi, 4.0])
def test_radius_neighbors_equals_balltree(kind, radius):
    rng = np.random.default_rng()
    X = GENERATORS[kind](rng, 700)
    Q = GENERATORS[kind](rng, 300)
    tree = sklearn_neighbors.BallTree(X, metric="haversine")
    want_ind, want_dist = tree.query_radius(Q, radius, return_distance=True)
    nn = NearestNeighbors(radius=radius).fit(X)
    got_dist, got_ind = nn.radius_neighbors(Q, sort_results=True)
    expect_same_rows(got_dist, got_ind, want_dist, want_ind, True)


def test_points_exactly_at_the_radius_and_per_row_radii():
    rng = np.random.default_rng()
    X, Q = uniform(rng, 500), uniform(rng, 200)
    d, i = NearestNeighbors(n_neighbors=3).fit(X).kneighbors(Q)
    radii = np.ascontiguousarray(d[:, 2])
    offsets, indices, distances = streamkit.radius_neighbors(Q, X, radii, angle="radians", distance="radians")
    for row in range(len(Q)):
        part = indices[offsets[row]:offsets[row + 1]]
        np.testing.assert_array_equal(part[:3], i[row])  # the 3 nearest first, the 3rd exactly at the radius
        assert np.all(distances[offsets[row]:offsets[row + 1]] <= radii[row])


def test_kneighbors_equals_sklearn_with_and_without_x():
    rng = np.random.default_rng()
    X, Q = uniform(rng, 400), uniform(rng, 150)
    for k in (1, 5, 40):
        want = sklearn_neighbors.NearestNeighbors(n_neighbors=k, metric="haversine", algorithm="ball_tree").fit(X)
        got = NearestNeighbors(n_neighbors=k).fit(X)
        for query in (Q, None):
            wd, wi = want.kneighbors(query)
            gd, gi = got.kneighbors(query)
            np.testing.assert_array_equal(gi, wi)
            np.testing.assert_allclose(gd, wd, rtol=0, atol=1e-12)
        a, b = got.kneighbors_graph(mode="distance"), want.kneighbors_graph(mode="distance")
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.data, b.data, rtol=0, atol=1e-12)


def test_radius_neighbors_without_x_excludes_each_point_and_graphs_match():
    rng = np.random.default_rng()
    X = np.concatenate([uniform(rng, 300), identical(rng, 100)])
    want = sklearn_neighbors.NearestNeighbors(radius=0.1, metric="haversine").fit(X)
    got = NearestNeighbors(radius=0.1).fit(X)
    wd, wi = want.radius_neighbors(sort_results=True)
    gd, gi = got.radius_neighbors(sort_results=True)
    expect_same_rows(gd, gi, wd, wi, True)
    for mode in ("connectivity", "distance"):
        a = got.radius_neighbors_graph(mode=mode).sorted_indices()
        b = want.radius_neighbors_graph(mode=mode).sorted_indices()
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_allclose(a.data, b.data, rtol=0, atol=1e-12)


def test_single_fitted_point_and_empty_rows():
    X = np.array([[0.5, 0.5]])
    nn = NearestNeighbors(n_neighbors=1, radius=1e-9).fit(X)
    d, i = nn.kneighbors(np.array([[0.5, 0.5], [-0.5, 1.0]]))
    np.testing.assert_array_equal(i, [[0], [0]])
    gd, gi = nn.radius_neighbors(np.array([[0.5, 0.5], [-0.5, 1.0]]))
    assert list(gi[0]) == [0] and len(gi[1]) == 0


def test_bounds_raise_saying_how_many():
    rng = np.random.default_rng()
    X = uniform(rng, 300)
    with pytest.raises(ValueError, match="references within the radius in all"):
        streamkit.radius_neighbors(X, X, math.inf, angle="radians", distance="radians", max_total=10)
    with pytest.raises(ValueError, match="a row would hold 300 references"):
        streamkit.radius_neighbors(X, X, math.inf, angle="radians", distance="radians", max_per_row=299)


def test_cupy_input_gives_cupy_results_and_cupyx_graphs():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    rng = np.random.default_rng()
    X, Q = uniform(rng, 500), uniform(rng, 200)
    want = sklearn_neighbors.NearestNeighbors(radius=0.08, n_neighbors=4, metric="haversine").fit(X)
    got = NearestNeighbors(radius=0.08, n_neighbors=4).fit(cupy.asarray(X))
    gd, gi = got.kneighbors(cupy.asarray(Q))
    assert isinstance(gi, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(gi), want.kneighbors(Q)[1])
    graph = got.radius_neighbors_graph(cupy.asarray(Q), mode="distance")
    import cupyx.scipy.sparse

    assert isinstance(graph, cupyx.scipy.sparse.csr_matrix)
    b = want.radius_neighbors_graph(Q, mode="distance").sorted_indices()
    a = graph.get().sorted_indices()
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.data, b.data, rtol=0, atol=1e-12)
