"""streamkit.neighbors.NearestNeighbors: scikit-learn's (and cuML's) NearestNeighbors with the haversine
metric, answered by streamkit's exact GPU searches, so that switching is a change of import."""

from __future__ import annotations

import inspect
import math
import numbers

from . import _arrays, _streamkit
from ._nearest import _ANGLES, _DISTANCES, MAX_NEIGHBORS, _check_choice, nearest
from ._radius import radius_neighbors as _radius_neighbors

_ALGORITHMS = ("auto", "brute", "ball_tree", "kd_tree")
_METRICS = ("haversine",)

class _NotFittedError(ValueError, AttributeError):
    """Raised when a query comes before fit, where scikit-learn (whose NotFittedError is used when it
    is installed) is not."""


def _not_fitted_error():
    """scikit-learn's NotFittedError when it is installed (imported only then: importing streamkit
    never imports scikit-learn), else streamkit's own of the same bases."""
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:  # pragma: no cover - scikit-learn is optional
        return _NotFittedError
    return NotFittedError


def __getattr__(name):
    if name == "NotFittedError":
        return _not_fitted_error()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _xp(array):
    """The array module of `array`: cupy for CuPy arrays, numpy otherwise."""
    if _arrays.framework(array) == "cupy":
        import cupy

        return cupy
    import numpy

    return numpy


def _as_points(X, name):
    """X as an array streamkit takes: CUDA arrays as they are; NumPy arrays of float32 or float64 as
    they are, of other real dtypes (and lists) as float64, complex and sparse input refused, and
    host input checked for NaN and infinity, as scikit-learn does."""
    if type(X).__module__.startswith("scipy.sparse") or hasattr(X, "tocsr"):
        raise TypeError(f"{name}: sparse data was passed, but dense data is required (sparse input is not supported)")
    if _arrays.framework(X) != "numpy" and (hasattr(X, "__dlpack__") or hasattr(X, "__cuda_array_interface__")):
        return X
    import numpy

    array = numpy.asarray(X)
    if numpy.iscomplexobj(array):
        raise ValueError(f"{name}: Complex data not supported")
    if array.dtype not in (numpy.float32, numpy.float64):
        try:
            array = array.astype(numpy.float64)
        except (TypeError, ValueError) as error:
            raise TypeError(f"{name}: expected an array of (latitude, longitude) rows, got dtype {array.dtype}") from error
    if array.ndim == 2 and array.shape[1] == 0:
        raise ValueError(f"{name}: 0 feature(s) (shape={array.shape}) while a minimum of 1 is required.")
    if array.ndim == 2 and array.shape[1] != 2:
        raise ValueError(f"{name}: expected shape (n, 2) of (latitude, longitude) rows, got shape {array.shape}: the haversine "
                         f"metric is defined for n_features = 2, got n_features = {array.shape[1]}")
    if array.size and not numpy.isfinite(array).all():
        raise ValueError(f"{name}: Input {name} contains NaN or infinity.")
    return array


class NearestNeighbors:
    """Unsupervised nearest neighbours on the sphere, following scikit-learn's
    ``sklearn.neighbors.NearestNeighbors`` (and cuML's): ``fit``, ``kneighbors``,
    ``radius_neighbors``, ``kneighbors_graph``, ``radius_neighbors_graph``, ``get_params`` /
    ``set_params``.

    Parameters
    ----------
    n_neighbors : int, default 5
        Neighbours per query of :meth:`kneighbors`.
    radius : float, default 1.0
        Radius of :meth:`radius_neighbors`, in the `distance` unit (radians by default).
    algorithm : {"auto", "brute", "ball_tree", "kd_tree"}
        Accepted for compatibility; streamkit picks its engine (brute force or its tree) per query.
    leaf_size, p, metric_params, n_jobs
        Accepted for compatibility, unused.
    metric : "haversine"
        The only metric: great-circle distance. As in scikit-learn, X holds (latitude, longitude)
        rows in radians and distances come back in radians (on the unit sphere).
    angle : {"radians", "degrees"}, default "radians"
        streamkit's own option: the unit of X's coordinates.
    distance : {"radians", "km", "m"}, default "radians"
        streamkit's own option: the unit of `radius` and of the returned distances (sphere of
        6371.0088 km).

    X may be a NumPy array (searched on the GPU, results as NumPy arrays and SciPy sparse matrices)
    or a CUDA array (CuPy, PyTorch, ...; results in its framework, graphs as ``cupyx.scipy.sparse``
    for CuPy), float32 or float64. Every answer is exact (float64 ranking, ties to the smaller
    index). Differences from scikit-learn: only the haversine metric; rows of non-finite points or
    latitudes beyond ±90° are empty (or -1 in kneighbors) instead of an error.
    """

    def __init__(self, n_neighbors=5, radius=1.0, algorithm="auto", leaf_size=30, metric="haversine", p=2, metric_params=None,
                 n_jobs=None, angle="radians", distance="radians"):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.metric = metric
        self.p = p
        self.metric_params = metric_params
        self.n_jobs = n_jobs
        self.angle = angle
        self.distance = distance

    # ---- scikit-learn's estimator protocol ------------------------------------------------------

    @classmethod
    def _get_param_names(cls):
        return sorted(name for name in inspect.signature(cls.__init__).parameters if name != "self")

    def get_params(self, deep=True):
        """The constructor's parameters, by name (scikit-learn's protocol)."""
        return {name: getattr(self, name) for name in self._get_param_names()}

    def set_params(self, **params):
        """Sets constructor parameters by name and returns self; ValueError for an unknown name."""
        valid = self._get_param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"Invalid parameter {name!r} for estimator {type(self).__name__}. Valid parameters are: {valid!r}.")
            setattr(self, name, value)
        return self

    def __repr__(self):
        defaults = {name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items() if name != "self"}
        changed = ", ".join(f"{name}={value!r}" for name, value in self.get_params().items() if value != defaults[name])
        return f"{type(self).__name__}({changed})"

    def __sklearn_tags__(self):
        # scikit-learn's default tags (imported only when scikit-learn asks for them).
        from sklearn.base import BaseEstimator

        tags = BaseEstimator.__sklearn_tags__(self)
        tags.target_tags.required = False
        tags.input_tags.allow_nan = False
        return tags

    def __sklearn_is_fitted__(self):
        return hasattr(self, "_fit_X")

    def _check_fitted(self):
        if not hasattr(self, "_fit_X"):
            raise _not_fitted_error()(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with appropriate arguments before using this estimator."
            )

    def _check_params(self):
        if self.metric not in _METRICS:
            raise ValueError(f"metric: {self.metric!r} is not supported; streamkit answers {list(_METRICS)}")
        if self.algorithm not in _ALGORITHMS:
            raise ValueError(f"algorithm: {self.algorithm!r} is not one of {list(_ALGORITHMS)}")
        _check_choice(self.angle, "angle", _ANGLES)
        _check_choice(self.distance, "distance", _DISTANCES)
        self._check_n_neighbors(self.n_neighbors)
        self._check_radius(self.radius)

    @staticmethod
    def _check_n_neighbors(k):
        if isinstance(k, bool) or not isinstance(k, numbers.Integral):
            raise TypeError(f"n_neighbors: expected an int, got {type(k).__name__}")
        if int(k) < 1:
            raise ValueError(f"Expected n_neighbors > 0. Got {int(k)}")
        return int(k)

    @staticmethod
    def _check_radius(radius):
        if isinstance(radius, bool) or not isinstance(radius, numbers.Real):
            raise TypeError(f"radius: expected a number, got {type(radius).__name__}")
        if not float(radius) >= 0:
            raise ValueError(f"radius: must be at least 0, got {float(radius)}")
        return float(radius)

    def fit(self, X, y=None):
        """Keeps X ((n, 2) (latitude, longitude) rows) as the fitted points; returns self. Checks
        only (no GPU work): the searches prepare X on their first query."""
        self._check_params()
        X = _as_points(X, "X")
        n, dtype, on_cuda, device = _streamkit._points_check(_arrays.as_dlpack(X, "X"), "X")
        if n == 0:
            raise ValueError("X: found array with 0 sample(s) (shape (0, 2)) while a minimum of 1 is required")
        self._fit_X = X
        self.n_samples_fit_ = n
        self.n_features_in_ = 2
        self.effective_metric_ = "haversine"
        self.effective_metric_params_ = {}
        self._fit_method = "brute" if self.algorithm == "brute" else "auto"
        self._dtype, self._on_cuda, self._device = dtype, on_cuda, device
        return self

    def _units(self):
        return {"angle": self.angle, "distance": self.distance}

    def _query_points(self, X):
        if X is None:
            return self._fit_X
        X = _as_points(X, "X")
        _n, dtype, on_cuda, device = _streamkit._points_check(_arrays.as_dlpack(X, "X"), "X")
        if (on_cuda, device if on_cuda else 0) != (self._on_cuda, self._device if self._on_cuda else 0):
            raise ValueError("X: on another device than the fitted points")
        if dtype != self._dtype:  # scikit-learn converts: so does this
            X = X.astype(self._dtype)
        return X

    # ---- k nearest ------------------------------------------------------------------------------

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The n_neighbors nearest fitted points of each row of X: ``(distances, indices)`` of shape
        (n_queries, n_neighbors), nearest first (or ``indices`` alone). X=None: the fitted points,
        each without itself (as scikit-learn)."""
        self._check_fitted()
        k = self._check_n_neighbors(self.n_neighbors if n_neighbors is None else n_neighbors)
        query_is_train = X is None
        Q = self._query_points(X)
        wanted = k + 1 if query_is_train else k
        if wanted > self.n_samples_fit_:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {wanted}, n_samples_fit = {self.n_samples_fit_}, "
                f"n_samples = {_streamkit._points_check(_arrays.as_dlpack(Q, 'X'), 'X')[0]}"
            )
        if wanted <= MAX_NEIGHBORS:
            indices, distances = nearest(Q, self._fit_X, wanted, exact=True, **self._units())
        else:  # beyond streamkit's k: the sorted radius query over every point, cut at k
            offsets, flat, flat_distances = _radius_neighbors(Q, self._fit_X, math.inf, sort_results=True, **self._units())
            xp = _xp(flat)
            rows = int(offsets.shape[0]) - 1
            if int(flat.shape[0]) != rows * self.n_samples_fit_:
                raise ValueError("X: invalid points (non-finite, or latitude beyond ±90°) leave fewer than n_neighbors neighbours")
            indices = xp.reshape(flat, (rows, self.n_samples_fit_))[:, :wanted]
            distances = xp.reshape(flat_distances, (rows, self.n_samples_fit_))[:, :wanted]
        if query_is_train:
            xp = _xp(indices)
            n = int(indices.shape[0])
            mask = indices != xp.arange(n)[:, None]
            mask[xp.all(mask, axis=1), 0] = False  # itself not among them (duplicates): the first goes, as scikit-learn
            indices = xp.reshape(indices[mask], (n, k))
            distances = xp.reshape(distances[mask], (n, k))
        return (distances, indices) if return_distance else indices

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """kneighbors as a sparse (n_queries, n_samples_fit) CSR matrix: ones ("connectivity") or
        distances ("distance"); SciPy for host input, ``cupyx.scipy.sparse`` for CuPy."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        distances, indices = self.kneighbors(X, n_neighbors, return_distance=True)
        xp = _xp(indices)
        n, k = int(indices.shape[0]), int(indices.shape[1])
        data = xp.ones(n * k) if mode == "connectivity" else xp.ravel(distances)
        return self._csr(data, xp.ravel(indices), xp.arange(0, n * k + 1, k), n, indices)

    # ---- within a radius ------------------------------------------------------------------------

    def _radius_rows(self, X, radius, return_distance, sort_results):
        """(offsets, indices, distances or None) of the radius query, self removed for X=None."""
        self._check_fitted()
        radius = self._check_radius(self.radius if radius is None else radius)
        query_is_train = X is None
        Q = self._query_points(X)
        found = _radius_neighbors(Q, self._fit_X, radius, sort_results=sort_results, return_distance=return_distance, **self._units())
        offsets, indices = found[0], found[1]
        distances = found[2] if return_distance else None
        if query_is_train:
            xp = _xp(indices)
            n = int(offsets.shape[0]) - 1
            rows = xp.searchsorted(offsets[1:], xp.arange(int(indices.shape[0])), side="right")  # each entry's row
            keep = indices != rows
            indices = indices[keep]
            distances = distances[keep] if distances is not None else None
            kept = xp.zeros(n + 1, dtype=offsets.dtype)
            kept[1:] = xp.cumsum(xp.bincount(rows[keep], minlength=n))
            offsets = kept
        return offsets, indices, distances

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """The fitted points within `radius` of each row of X (X=None: the fitted points, each
        without itself): ``(distances, indices)``, object arrays of one array per query, as
        scikit-learn returns them (or ``indices`` alone); sorted by distance with sort_results."""
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        offsets, indices, distances = self._radius_rows(X, radius, return_distance, sort_results)
        import numpy

        bounds = [int(b) for b in (offsets.get() if hasattr(offsets, "get") else offsets)]

        def rows(flat):
            out = numpy.empty(len(bounds) - 1, dtype=object)
            for i in range(len(bounds) - 1):
                out[i] = flat[bounds[i]:bounds[i + 1]]
            return out

        return (rows(distances), rows(indices)) if return_distance else rows(indices)

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """radius_neighbors as a sparse (n_queries, n_samples_fit) CSR matrix: ones
        ("connectivity") or distances ("distance"); SciPy for host input, ``cupyx.scipy.sparse``
        for CuPy."""
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        offsets, indices, distances = self._radius_rows(X, radius, mode == "distance", sort_results and mode == "distance")
        xp = _xp(indices)
        data = xp.ones(int(indices.shape[0])) if mode == "connectivity" else distances
        return self._csr(data, indices, offsets, int(offsets.shape[0]) - 1, indices)

    def _csr(self, data, indices, indptr, rows, like):
        shape = (rows, self.n_samples_fit_)
        name = _arrays.framework(like)
        if name == "cupy":
            import cupy
            import cupyx.scipy.sparse

            return cupyx.scipy.sparse.csr_matrix((data, indices.astype(cupy.int32), indptr.astype(cupy.int32)), shape=shape)
        if name != "numpy":
            raise TypeError(f"graphs come as SciPy (NumPy input) or cupyx.scipy.sparse (CuPy input) matrices, not for {name} arrays")
        import scipy.sparse

        return scipy.sparse.csr_matrix((data, indices, indptr), shape=shape)


__all__ = ["NearestNeighbors", "NotFittedError"]
