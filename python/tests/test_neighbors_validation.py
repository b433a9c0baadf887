"""Host tests (no GPU needed) of streamkit.radius_neighbors and streamkit.neighbors.NearestNeighbors:
argument checks raise before any CUDA call, naming the argument, and the estimator follows
scikit-learn's protocol (parameters, clone, set_params, not-fitted errors, fit without GPU work).
Arguments that pass every check end, without a GPU, in "no CUDA device is visible"."""

import math

import numpy as np
import pytest

import streamkit
from streamkit.neighbors import NearestNeighbors, NotFittedError


def good(n=4, dtype=np.float64):
    return np.zeros((n, 2), dtype=dtype)


def passes_the_checks(call):
    if streamkit.device_count() > 0:
        return call()
    with pytest.raises(RuntimeError, match="no CUDA device is visible"):
        call()


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
                                                         return_distance=False, max_per_row=3, max_total=0))


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
