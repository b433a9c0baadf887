"""Host tests (no GPU needed) of streamkit.radius_neighbors and streamkit.neighbors.NearestNeighbors:
argument checks raise before any CUDA call, naming the argument, and the estimator follows
scikit-learn's protocol (parameters, clone, set_params, not-fitted errors, fit without GPU work).
Arguments that pass every check end, without a GPU, in "no CUDA device is visible"."""

import math

import numpy as np
import pytest

import streamkit
from streamkit.neighbors import NearestNeighbors, NotFittedError
from test_validation import good, passes_the_checks


# ---- streamkit.radius_neighbors ----------------------------------------------------------------


def test_radius_neighbors_is_exported():
    assert "radius_neighbors" in streamkit.__all__
    assert callable(streamkit.radius_neighbors)


@pytest.mark.parametrize("radius", [-1.0, math.nan, -math.inf])
def test_negative_or_nan_radius_is_value_error(radius):
    with pytest.raises(ValueError, match="^radius: must be at least 0"):
        streamkit.radius_neighbors(good(), good(), radius)


@pytest.mark.parametrize("radius", [True, "1", None, [1.0]])
def test_radius_of_another_type_is_type_error(radius):
    with pytest.raises(TypeError, match="^radius:"):
        streamkit.radius_neighbors(good(), good(), radius)


def test_per_row_radius_must_match_the_observations():
    with pytest.raises(ValueError, match=r"^radius: expected shape \(4,\)"):
        streamkit.radius_neighbors(good(), good(), np.ones(3))
    with pytest.raises(TypeError, match="^radius: expected dtype float64"):
        streamkit.radius_neighbors(good(), good(), np.ones(4, np.float32))


@pytest.mark.parametrize("name", ["max_per_row", "max_total"])
def test_bad_bounds(name):
    with pytest.raises(ValueError, match=f"^{name}: must be at least 0"):
        streamkit.radius_neighbors(good(), good(), 1.0, **{name: -1})
    with pytest.raises(TypeError, match=f"^{name}: expected an int"):
        streamkit.radius_neighbors(good(), good(), 1.0, **{name: 1.5})


def test_bad_units_and_points():
    with pytest.raises(ValueError, match="^angle:"):
        streamkit.radius_neighbors(good(), good(), 1.0, angle="turns")
    with pytest.raises(ValueError, match="^distance:"):
        streamkit.radius_neighbors(good(), good(), 1.0, distance="miles")
    with pytest.raises(ValueError, match="^observations: expected shape"):
        streamkit.radius_neighbors(np.zeros((4, 3)), good(), 1.0)
    with pytest.raises(ValueError, match="^references: the reference set is empty"):
        streamkit.radius_neighbors(good(), good(0), 1.0)
    with pytest.raises(TypeError, match="^references: dtype float32 differs"):
        streamkit.radius_neighbors(good(), good(dtype=np.float32), 1.0)


@pytest.mark.parametrize("radius", [0.0, 10.0, math.inf, np.full(4, 3.0)])
def test_good_arguments_pass_every_check(radius):
    passes_the_checks(lambda: streamkit.radius_neighbors(good(), good(), radius))
    passes_the_checks(lambda: streamkit.radius_neighbors(np.asfortranarray(good()), good(), radius, sort_results=False,
                                                         return_distance=False, max_per_row=4, max_total=16))


# ---- streamkit.neighbors.NearestNeighbors: scikit-learn's protocol ------------------------------


def test_defaults_and_parameters():
    nn = NearestNeighbors()
    assert nn.get_params() == dict(n_neighbors=5, radius=1.0, algorithm="auto", leaf_size=30, metric="haversine", p=2,
                                   metric_params=None, n_jobs=None, angle="radians", distance="radians")
    assert nn.set_params(n_neighbors=3, radius=0.5) is nn
    assert (nn.n_neighbors, nn.radius) == (3, 0.5)
    assert repr(nn) == "NearestNeighbors(n_neighbors=3, radius=0.5)"
    with pytest.raises(ValueError, match="Invalid parameter 'k' for estimator NearestNeighbors"):
        nn.set_params(k=3)


def test_clone_and_sklearn_parameter_checks():
    sklearn = pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    from sklearn.base import clone
    from sklearn.utils import estimator_checks as checks

    from sklearn.utils import get_tags

    assert get_tags(NearestNeighbors()).target_tags.required is False
    nn = NearestNeighbors(n_neighbors=2, metric="haversine")
    copy = clone(nn)
    assert copy is not nn and copy.get_params() == nn.get_params()
    for check in ("check_no_attributes_set_in_init", "check_get_params_invariance", "check_set_params",
                  "check_parameters_default_constructible"):
        getattr(checks, check)("NearestNeighbors", NearestNeighbors())
    assert sklearn.__version__


def test_queries_before_fit_raise_not_fitted():
    nn = NearestNeighbors()
    for call in (nn.kneighbors, nn.radius_neighbors, nn.kneighbors_graph, nn.radius_neighbors_graph):
        with pytest.raises(NotFittedError, match="not fitted yet"):
            call(good())
    try:
        from sklearn.exceptions import NotFittedError as SklearnNotFitted
    except ImportError:
        return
    assert NotFittedError is SklearnNotFitted


def test_fit_checks_and_keeps_the_points_without_a_gpu():
    X = good(6)
    nn = NearestNeighbors(n_neighbors=2)
    assert nn.fit(X) is nn
    assert (nn.n_samples_fit_, nn.n_features_in_, nn.effective_metric_) == (6, 2, "haversine")
    assert nn.fit([[0.1, 0.2], [0.3, 0.4]]).n_samples_fit_ == 2  # lists become float64 arrays
    with pytest.raises(ValueError, match="^X: expected shape"):
        NearestNeighbors().fit(np.zeros((5, 3)))
    with pytest.raises(ValueError, match="0 sample"):
        NearestNeighbors().fit(good(0))
    with pytest.raises(ValueError, match="metric: 'euclidean' is not supported"):
        NearestNeighbors(metric="euclidean").fit(X)
    with pytest.raises(ValueError, match="algorithm:"):
        NearestNeighbors(algorithm="cover_tree").fit(X)
    with pytest.raises(ValueError, match="Expected n_neighbors > 0"):
        NearestNeighbors(n_neighbors=0).fit(X)
    with pytest.raises(ValueError, match="^radius: must be at least 0"):
        NearestNeighbors(radius=-1.0).fit(X)
    with pytest.raises(ValueError, match="^distance:"):
        NearestNeighbors(distance="miles").fit(X)


def test_query_checks_come_before_the_gpu():
    nn = NearestNeighbors(n_neighbors=3).fit(good(4))
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit, but n_neighbors = 5"):
        nn.kneighbors(good(2), n_neighbors=5)
    with pytest.raises(ValueError, match="Expected n_neighbors <= n_samples_fit, but n_neighbors = 5"):
        nn.kneighbors(n_neighbors=4)  # X=None asks one more, for the point itself
    with pytest.raises(ValueError, match="return_distance must be True if sort_results is True"):
        nn.radius_neighbors(return_distance=False, sort_results=True)
    with pytest.raises(ValueError, match="Unsupported mode"):
        nn.kneighbors_graph(mode="weights")
    with pytest.raises(ValueError, match="Unsupported mode"):
        nn.radius_neighbors_graph(mode="weights")
    with pytest.raises(ValueError, match="^radius: must be at least 0"):
        nn.radius_neighbors(radius=-2.0)
    with pytest.raises(ValueError, match="^X: expected shape"):
        nn.kneighbors(np.zeros((3, 4)))
    passes_the_checks(lambda: nn.kneighbors())
    passes_the_checks(lambda: nn.radius_neighbors(good(3), radius=0.1))
    passes_the_checks(lambda: nn.radius_neighbors_graph(mode="distance"))


# scikit-learn's estimator checks. Those below fail for one reason, the same for scikit-learn's own
# NearestNeighbors(metric="haversine"): they fit on random data of 3 to 10 features, and the haversine
# metric is defined on (latitude, longitude) pairs only (n_features = 2). Every other check must pass.
NOT_APPLICABLE = {
    "check_dict_unchanged", "check_dont_overwrite_parameters", "check_dtype_object", "check_estimators_dtypes",
    "check_estimators_nan_inf", "check_estimators_pickle", "check_f_contiguous_array_estimator", "check_fit2d_1sample",
    "check_fit2d_predict1d", "check_fit_score_takes_y", "check_methods_sample_order_invariance", "check_methods_subset_invariance",
    "check_n_features_in_after_fitting", "check_pipeline_consistency", "check_positive_only_tag_during_fit",
}


def test_sklearn_estimator_checks_that_apply_pass():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    import inspect
    import warnings

    from sklearn.utils.estimator_checks import check_estimator

    if "on_fail" not in inspect.signature(check_estimator).parameters:
        pytest.skip("this scikit-learn's check_estimator cannot report checks one by one (on_fail, scikit-learn >= 1.6)")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(NearestNeighbors(), on_fail=None)
    passed = {r["check_name"] for r in results if r["status"] == "passed"}
    failed = {r["check_name"]: str(r["exception"]) for r in results if r["status"] == "failed"}
    assert set(failed) <= NOT_APPLICABLE, {name: failed[name] for name in set(failed) - NOT_APPLICABLE}
    assert {"check_estimator_cloneable", "check_no_attributes_set_in_init", "check_get_params_invariance", "check_set_params",
            "check_estimators_unfitted", "check_fit_check_is_fitted", "check_estimators_fit_returns_self"} <= passed


# ---- the estimator's own logic, on the host: streamkit's searches replaced by a NumPy brute force ----


def _haversine(Q, X):
    lat1, lon1 = Q[:, :1], Q[:, 1:]
    lat2, lon2 = X[None, :, 0], X[None, :, 1]
    h = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 2 * np.arcsin(np.sqrt(np.minimum(h, 1.0)))


def _fake_nearest(Q, X, k, *, exact, angle, distance):
    assert (exact, angle, distance) == (True, "radians", "radians")
    d = _haversine(np.asarray(Q), np.asarray(X))
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return order.astype(np.int64), np.take_along_axis(d, order, axis=1)


def _fake_radius(Q, X, radius, *, sort_results=True, return_distance=True, angle, distance):
    assert (angle, distance) == ("radians", "radians")
    d = _haversine(np.asarray(Q), np.asarray(X))
    offsets, indices, distances = [0], [], []
    for row in d:
        found = np.flatnonzero(row <= radius)
        if sort_results:
            found = found[np.argsort(row[found], kind="stable")]
        else:
            found = found[::-1]  # any order
        indices.append(found)
        distances.append(row[found])
        offsets.append(offsets[-1] + len(found))
    out = (np.array(offsets, np.int64), np.concatenate(indices).astype(np.int64), np.concatenate(distances))
    return out if return_distance else out[:2]


@pytest.fixture
def host_searches(monkeypatch):
    import streamkit.neighbors as module

    monkeypatch.setattr(module, "nearest", _fake_nearest)
    monkeypatch.setattr(module, "_radius_neighbors", _fake_radius)


def _points(rng, n):
    return np.stack([np.arcsin(rng.uniform(-1, 1, n)), rng.uniform(-np.pi, np.pi, n)], axis=1)


@pytest.mark.parametrize("duplicates", [False, True])
def test_estimator_logic_matches_sklearn(host_searches, duplicates):
    sklearn_neighbors = pytest.importorskip("sklearn.neighbors", reason="scikit-learn is not installed")
    rng = np.random.default_rng()
    X = _points(rng, 120)
    if duplicates:  # identical points: the one left out of its own row is the point itself
        X[60:] = X[rng.integers(0, 60, 60)]
    Q = _points(rng, 40)
    want = sklearn_neighbors.NearestNeighbors(n_neighbors=4, radius=0.3, metric="haversine", algorithm="brute").fit(X)
    got = NearestNeighbors(n_neighbors=4, radius=0.3).fit(X)
    for query in (Q, None):
        wd, wi = want.kneighbors(query)
        gd, gi = got.kneighbors(query)
        np.testing.assert_allclose(gd, wd, atol=1e-12)
        if not duplicates:
            np.testing.assert_array_equal(gi, wi)
        else:  # equal distances: sets of points at the same place may be ordered otherwise
            np.testing.assert_allclose(np.sort(gd, axis=1), np.sort(wd, axis=1), atol=1e-12)
        for mode in ("connectivity", "distance"):
            a, b = got.kneighbors_graph(query, mode=mode), want.kneighbors_graph(query, mode=mode)
            assert a.shape == b.shape and a.nnz == b.nnz
            if not duplicates:
                assert abs(a - b).max() < 1e-12
        wd, wi = want.radius_neighbors(query, sort_results=True)
        gd, gi = got.radius_neighbors(query, sort_results=True)
        assert len(gi) == len(wi)
        for i in range(len(wi)):
            assert set(gi[i].tolist()) == set(wi[i].tolist()), f"row {i}"
            np.testing.assert_allclose(gd[i], wd[i], atol=1e-12)
        assert set(got.radius_neighbors(query, return_distance=False)[0].tolist()) == set(wi[0].tolist())
        for mode in ("connectivity", "distance"):
            a = got.radius_neighbors_graph(query, mode=mode).sorted_indices()
            b = want.radius_neighbors_graph(query, mode=mode).sorted_indices()
            np.testing.assert_array_equal(a.indptr, b.indptr)
            np.testing.assert_array_equal(a.indices, b.indices)
            np.testing.assert_allclose(a.data, b.data, atol=1e-12)
    # Beyond streamkit's k of 32: the radius path, cut at k.
    big = NearestNeighbors(n_neighbors=40).fit(X)
    wd, wi = sklearn_neighbors.NearestNeighbors(n_neighbors=40, metric="haversine", algorithm="brute").fit(X).kneighbors(Q)
    gd, gi = big.kneighbors(Q)
    np.testing.assert_allclose(gd, wd, atol=1e-12)


def test_get_params_round_trip_through_clone_keeps_units():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    from sklearn.base import clone

    nn = NearestNeighbors(angle="degrees", distance="km", radius=50.0)
    assert clone(nn).get_params() == nn.get_params()
