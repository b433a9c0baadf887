"""streamkit.dask: the nearest-neighbour search and the min-max scaler over Dask collections (the
extra ``streamkit[dask]``).

Each chunk (Dask array block or DataFrame partition) is searched or scaled by the single-process API
(:func:`streamkit.nearest`, :class:`streamkit.NearestIndex`, :func:`streamkit.radius_neighbors`,
:class:`streamkit.MinMaxScaler`) on the worker that holds it: CuPy chunks on the worker's GPU, without
leaving it (dask-cuda's ``LocalCUDACluster``: one worker per GPU); NumPy chunks through every GPU the
worker sees. Results are Dask collections with the observations' chunks or partitions.

References are one task of the graph: the scheduler sends them to each worker once per call (or, with
:class:`NearestIndex`, once per ``update``), and the ids are global: the row in the concatenation of
the references' chunks or partitions.

``backend``: every function and class takes the module whose ``nearest``, ``NearestIndex``,
``radius_neighbors`` and ``MinMaxScaler`` run each chunk (default: :mod:`streamkit`). It must be
importable by the workers; another search with the same signatures, or a CPU stand-in where no GPU
is (the tests' ``python/tests/cpu_backend.py``), goes there.

Importing streamkit does not import this module or Dask.
"""

from __future__ import annotations

import itertools
import threading
import uuid

import dask
import dask.array as da
import numpy

import streamkit

__all__ = ["MinMaxScaler", "NearestIndex", "nearest", "radius_neighbors"]


# --- the inputs -------------------------------------------------------------------------------------

def _is_frame(collection):
    return hasattr(collection, "map_partitions") and hasattr(collection, "columns")


def _pick_columns(frame, columns, name):
    """The two coordinate column names of a Dask DataFrame: `columns`, or its only two columns."""
    if columns is None:
        if len(frame.columns) != 2:
            raise ValueError(f"{name}: a DataFrame of {len(frame.columns)} columns; name the (latitude, longitude) "
                             "columns with columns=(lat, lon)")
        return tuple(frame.columns)
    columns = tuple(columns)
    if len(columns) != 2:
        raise ValueError(f"columns: expected two names (latitude, longitude), got {columns!r}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"columns: {missing} not in {name}'s columns {list(frame.columns)}")
    return columns


def _coordinate_dtype(dtypes, name):
    kinds = {numpy.dtype(d) for d in dtypes}
    if len(kinds) != 1 or next(iter(kinds)) not in (numpy.float32, numpy.float64):
        raise TypeError(f"{name}: coordinates must be float32 or float64 (both columns the same), got "
                        f"{[str(d) for d in dtypes]}")
    return next(iter(kinds))


def _frame_points(frame, columns):
    """A partition's (n, 2) coordinates: CuPy for cuDF, NumPy for pandas."""
    values = frame[list(columns)]
    return values.to_cupy() if hasattr(values, "to_cupy") else _aligned(values.to_numpy())


def _observation_blocks(observations, columns):
    """(row-chunked (n, 2) Dask array or Dask DataFrame, its coordinate dtype, column names or None)."""
    if _is_frame(observations):
        columns = _pick_columns(observations, columns, "observations")
        return observations, _coordinate_dtype([observations.dtypes[c] for c in columns], "observations"), columns
    if not isinstance(observations, da.Array):
        raise TypeError(f"observations: expected a Dask array or DataFrame, got {type(observations).__name__} "
                        "(streamkit.nearest takes arrays in memory)")
    if observations.ndim != 2 or observations.shape[1] != 2:
        raise ValueError(f"observations: expected shape (n, 2) of (latitude, longitude) rows, got {observations.shape}")
    dtype = _coordinate_dtype([observations.dtype], "observations")
    if len(observations.chunks[1]) != 1:
        observations = observations.rechunk({1: 2})
    return observations, dtype, None


def _reference_task(references, columns, dtype):
    """The references as one object of the graph (a Delayed, or an array held as is): a Dask array or
    DataFrame becomes the concatenation of its chunks or partitions, so ids are rows of it."""
    if _is_frame(references):
        columns = _pick_columns(references, columns, "references")
        found = _coordinate_dtype([references.dtypes[c] for c in columns], "references")
        parts = references.to_delayed()
        return _check_reference_dtype(found, dtype), dask.delayed(_concatenate_frames)(parts, columns)
    if isinstance(references, da.Array):
        if references.ndim != 2 or references.shape[1] != 2:
            raise ValueError(f"references: expected shape (m, 2) of (latitude, longitude) rows, got {references.shape}")
        _check_reference_dtype(_coordinate_dtype([references.dtype], "references"), dtype)
        return dtype, references.rechunk({0: -1, 1: -1}).to_delayed().ravel()[0]
    shape, found = getattr(references, "shape", None), getattr(references, "dtype", None)
    if shape is None or found is None or len(shape) != 2 or shape[1] != 2:
        raise ValueError(f"references: expected an (m, 2) array, Dask array or DataFrame, got {type(references).__name__} "
                         f"of shape {shape}")
    _check_reference_dtype(_coordinate_dtype([found], "references"), dtype)
    return dtype, dask.delayed(references, pure=False)


def _check_reference_dtype(found, wanted):
    if found != wanted:
        raise TypeError(f"references: {found} coordinates, observations {wanted}: both must have the same dtype")
    return found


def _concatenate_frames(parts, columns):
    points = [_frame_points(part, columns) for part in parts]
    return _module_of(points[0]).concatenate(points)


def _module_of(array):
    """numpy or cupy, for the array's kind."""
    if type(array).__module__.split(".")[0] == "cupy":
        import cupy

        return cupy
    return numpy


def _like(references, points):
    """`references` in the framework of `points` (CuPy chunks take CuPy references, on their device)."""
    if _module_of(points) is _module_of(references):
        return references
    if _module_of(points) is numpy:
        return references.get()
    import cupy

    return cupy.asarray(references)


def _aligned(array):
    """`array`, copied when it is a NumPy array that deserialisation left unaligned (dask.distributed
    can hand a block over as a view at any byte offset of a message; streamkit needs aligned elements)."""
    if isinstance(array, numpy.ndarray) and not array.flags.aligned:
        return array.copy()
    return array


def _backend(backend):
    return streamkit if backend is None else backend


# --- k nearest ----------------------------------------------------------------------------------------

def _search_block(block, references, k, options, backend):
    block = _aligned(block)
    return backend.nearest(block, _like(_aligned(references), block), k, **options)


def _query_block(block, handle, k, backend):
    block = _aligned(block)
    return _worker_index(handle, backend, block).query(block, k)


def _pair_of_arrays(blocks, tasks, k, dtype, meta):
    """Dask arrays (indices, distances) of shape (n, k), one block per observation block."""
    rows = blocks.chunks[0]
    idx = [da.from_delayed(task[0], shape=(n, k), dtype=numpy.int64, meta=meta.astype(numpy.int64)) for n, task in
           zip(rows, tasks)]
    dist = [da.from_delayed(task[1], shape=(n, k), dtype=dtype, meta=meta) for n, task in zip(rows, tasks)]
    return da.concatenate(idx, axis=0), da.concatenate(dist, axis=0)


def _neighbour_frame(frame, pair, k):
    """A partition's result: index_0..index_{k-1}, distance_0..distance_{k-1}, the partition's index."""
    indices, distances = pair
    data = {f"index_{j}": indices[:, j] for j in range(k)}
    data.update({f"distance_{j}": distances[:, j] for j in range(k)})
    return type(frame)(data, index=frame.index)


def _frame_meta(frame, dtypes):
    meta = frame._meta
    return type(meta)({name: numpy.empty(0, dtype) for name, dtype in dtypes.items()}, index=meta.index)


def _run(observations, columns, k, dtype, search, *extra):
    """Searches every block or partition with ``search(points, *extra)`` -> (indices, distances)."""
    if columns is not None:
        return observations.map_partitions(
            lambda part, *args: _neighbour_frame(part, search(_frame_points(part, columns), *args), k), *extra,
            meta=_frame_meta(observations, {**{f"index_{j}": numpy.int64 for j in range(k)},
                                            **{f"distance_{j}": dtype for j in range(k)}}))
    tasks = [dask.delayed(search, nout=2)(block, *extra) for block in observations.to_delayed().ravel()]
    return _pair_of_arrays(observations, tasks, k, dtype, observations._meta.astype(dtype))


def nearest(observations, references, k=1, *, angle="degrees", distance="km", exact=True, max_distance=None,
            columns=None, reference_columns=None, backend=None):
    """The k nearest references of every observation, chunk by chunk on the workers:
    :func:`streamkit.nearest` over Dask collections.

    Parameters
    ----------
    observations : Dask array of shape (n, 2) or Dask DataFrame
        (latitude, longitude) rows, float32 or float64, NumPy or CuPy blocks (pandas or cuDF
        partitions: the two columns ``columns``, by default the frame's only two).
    references : array of shape (m, 2) (NumPy or CuPy), Dask array, or Dask DataFrame
        The same dtype. A Dask collection is concatenated into one task (columns
        ``reference_columns``); ids are rows of the concatenation. The scheduler sends the
        references to each worker once.
    k, angle, distance, exact, max_distance
        As in :func:`streamkit.nearest`.
    backend : module, default :mod:`streamkit`
        Where ``nearest`` comes from on the workers (see the module's description).

    Returns
    -------
    (indices, distances) : Dask arrays of shape (n, k), int64 and the coordinates' dtype, chunked as
        the observations' rows (NumPy or CuPy blocks as theirs); for a DataFrame, a Dask DataFrame
        with the observations' partitions and index and columns ``index_0 .. index_{k-1}``,
        ``distance_0 .. distance_{k-1}``. Lazy: nothing is searched until computed.

    Arguments are checked (TypeError, ValueError naming them) before the graph is built; the search's
    own checks run on the workers and raise at compute time.
    """
    k = streamkit._nearest._check_k(k)
    options = dict(angle=angle, distance=distance, exact=exact, max_distance=max_distance)
    streamkit._nearest._options(k, angle, distance, max_distance)
    observations, dtype, columns = _observation_blocks(observations, columns)
    _dtype, refs = _reference_task(references, reference_columns, dtype)
    return _run(observations, columns, k, dtype, _search_block, refs, k, options, _backend(backend))


# --- references kept on the workers --------------------------------------------------------------------

_worker_indexes = {}  # on each worker process: NearestIndex handle id -> (version, backend index)
_worker_lock = threading.Lock()


def _worker_index(handle, backend, block):
    """This process's index of `handle` (id, version, references), made on first use and updated in
    place when the handle's version moved on; prepared where `block` is (CuPy: its device)."""
    key, version, references, options = handle
    references = _like(_aligned(references), block)
    place = getattr(getattr(references, "device", None), "id", None)
    with _worker_lock:
        known = _worker_indexes.get((key, place))
        if known is None:
            index = backend.NearestIndex(references, **options)
        else:
            index = known[1]
            if known[0] != version:
                index.update(references)
        _worker_indexes[(key, place)] = (version, index)
        return index


def _forget(key):
    with _worker_lock:
        for known in [k for k in _worker_indexes if k[0] == key]:
            del _worker_indexes[known]


class NearestIndex:
    """References kept on the Dask workers for repeated queries (time-stepping): each worker
    prepares a :class:`streamkit.NearestIndex` at its first query and updates it in place after each
    :meth:`update` (no new memory when the set is no larger).

    Parameters
    ----------
    references : array of shape (m, 2) (NumPy or CuPy), Dask array or Dask DataFrame
        As in :func:`nearest`; with a ``dask.distributed`` client they are scattered to every worker
        once (``broadcast=True``) and every query refers to them.
    angle, distance, exact, max_distance, reference_columns, backend
        As in :func:`nearest`; fixed for the index's life.
    client : dask.distributed.Client or None
        Default: the current client, if any (else the references travel in each query's graph).

    :meth:`close` (or leaving a ``with`` block) drops the workers' indexes.
    """

    _ids = itertools.count()

    def __init__(self, references, *, angle="degrees", distance="km", exact=True, max_distance=None,
                 reference_columns=None, backend=None, client=None):
        streamkit._nearest._options(1, angle, distance, max_distance)
        self._options = dict(angle=angle, distance=distance, exact=exact, max_distance=max_distance)
        self._backend = _backend(backend)
        self._key = f"streamkit-nearest-index-{uuid.uuid4().hex}"
        self._client = client if client is not None else _current_client()
        self._version = 0
        self._reference_columns = reference_columns
        self._set(references)

    def _set(self, references):
        dtype = _coordinate_dtype([_dtype_of(references, self._reference_columns)], "references")
        self._dtype, refs = _reference_task(references, self._reference_columns, dtype)
        if self._client is not None:
            refs = self._client.scatter(refs.compute() if hasattr(refs, "compute") else refs, broadcast=True)
        self._references = refs

    def update(self, references):
        """Replaces the references (same dtype; any size m >= 1); the workers update their indexes at
        their next query. Returns self."""
        self._version += 1
        self._set(references)
        return self

    def query(self, observations, k=1, *, columns=None):
        """The k nearest references of every observation: what :func:`nearest` returns for
        `observations` (its dtype must be the references')."""
        k = streamkit._nearest._check_k(k)
        observations, dtype, columns = _observation_blocks(observations, columns)
        if dtype != self._dtype:
            raise TypeError(f"observations: {dtype} coordinates, the index holds {self._dtype}")
        handle = dask.delayed(_handle)(self._key, self._version, self._references, self._options)
        return _run(observations, columns, k, dtype, _query_block, handle, k, self._backend)

    def close(self):
        """Drops the indexes on the workers (and in this process)."""
        if self._client is not None:
            self._client.run(_forget, self._key)
        _forget(self._key)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _handle(key, version, references, options):
    return key, version, references, options


def _dtype_of(references, columns):
    if _is_frame(references):
        columns = _pick_columns(references, columns, "references")
        return _coordinate_dtype([references.dtypes[c] for c in columns], "references")
    found = getattr(references, "dtype", None)
    if found is None:
        raise TypeError(f"references: expected an array, Dask array or DataFrame, got {type(references).__name__}")
    return found


def _current_client():
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client: the local schedulers
        return None


# --- within a radius ------------------------------------------------------------------------------------

def _radius_block(block, references, radius, options, backend):
    block = _aligned(block)
    offsets, indices, distances = backend.radius_neighbors(block, _like(_aligned(references), block), radius, **options)
    return offsets[1:] - offsets[:-1], indices, distances


def _pairs_frame(part, columns, references, radius, options, backend):
    """A partition's pairs: one row per (observation, reference) within the radius."""
    counts, indices, distances = _radius_block(_frame_points(part, columns), references, radius, options, backend)
    xp = _module_of(indices)
    rows = xp.repeat(xp.arange(len(part)), counts)
    labels = part.index[rows.get() if xp is not numpy else rows]
    return type(part)({"observation": labels, "index": indices, "distance": distances}, index=None)


def radius_neighbors(observations, references, radius, *, angle="degrees", distance="km", sort_results=True,
                     columns=None, reference_columns=None, backend=None):
    """Every reference within `radius` of each observation, chunk by chunk on the workers:
    :func:`streamkit.radius_neighbors` over Dask collections.

    Parameters
    ----------
    observations, references, columns, reference_columns, backend
        As in :func:`nearest`.
    radius : float
        One radius for every observation, in the `distance` unit.
    angle, distance, sort_results
        As in :func:`streamkit.radius_neighbors`.

    Returns
    -------
    (counts, indices, distances) for a Dask array: `counts` (n,) int64 chunked as the observations'
        rows; `indices` (int64) and `distances` (the coordinates' dtype) 1-D, one block per
        observation block, of sizes known once computed: observation i's neighbours are the counts[i]
        entries after the sum of counts[:i] (nearest first when `sort_results`).
    For a Dask DataFrame: a Dask DataFrame of the pairs, with the observations' partitions, columns
        ``observation`` (the observation's index label), ``index`` and ``distance``.
    """
    if isinstance(radius, bool) or not isinstance(radius, (int, float)):
        raise TypeError(f"radius: expected a number (one radius for every observation), got {type(radius).__name__}")
    scalar, _ = streamkit._radius._check_radius(radius)
    streamkit._nearest._options(1, angle, distance, None)
    options = dict(angle=angle, distance=distance, sort_results=bool(sort_results))
    observations, dtype, columns = _observation_blocks(observations, columns)
    _dtype, refs = _reference_task(references, reference_columns, dtype)
    backend = _backend(backend)
    if columns is not None:
        meta = _frame_meta(observations, {"observation": observations._meta.index.dtype, "index": numpy.int64,
                                          "distance": dtype})
        meta.index = meta.index.astype(numpy.int64)
        return observations.map_partitions(_pairs_frame, columns, refs, scalar, options, backend, meta=meta,
                                           align_dataframes=False, enforce_metadata=False)
    meta = observations._meta.astype(dtype)
    tasks = [dask.delayed(_radius_block, nout=3)(block, refs, scalar, options, backend)
             for block in observations.to_delayed().ravel()]
    counts = da.concatenate([da.from_delayed(t[0], shape=(n,), dtype=numpy.int64, meta=meta.astype(numpy.int64).ravel())
                             for n, t in zip(observations.chunks[0], tasks)])
    indices = da.concatenate([da.from_delayed(t[1], shape=(numpy.nan,), dtype=numpy.int64, meta=meta.astype(numpy.int64).ravel())
                              for t in tasks])
    distances = da.concatenate([da.from_delayed(t[2], shape=(numpy.nan,), dtype=dtype, meta=meta.ravel()) for t in tasks])
    return counts, indices, distances


# --- min-max scaling ------------------------------------------------------------------------------------

def _to_host(array):
    return array.get() if _module_of(array) is not numpy else numpy.asarray(array)


def _block_extrema(block, backend):
    """A (2, n_features) NumPy array: the block's per-column minima and maxima as the backend's
    scaler fits them (NaN ignored; NaN for a column of NaN alone), or NaN for a block of no row."""
    if block.shape[0] == 0:
        return numpy.full((2, block.shape[1]), numpy.nan, dtype=block.dtype)
    scaler = backend.MinMaxScaler().fit(_aligned(block))
    return numpy.stack([_to_host(scaler.data_min_), _to_host(scaler.data_max_)])


def _combine_extrema(*parts):
    """Minima and maxima of several (2, n_features) extrema: exact, NaN ignored (fmin/fmax), so any
    tree of combinations gives the minima and maxima of one fit over every row."""
    parts = [p for p in parts if p is not None]
    out = parts[0].copy()
    for p in parts[1:]:
        numpy.fmin(out[0], p[0], out=out[0])
        numpy.fmax(out[1], p[1], out=out[1])
    return out


def _fitted_attributes(extrema, feature_range, clip, backend):
    """The fitted attributes of the backend's scaler fitted to the two rows [minima; maxima] (the same
    fit as one over every row: the C++ distributed scaler's way too), as NumPy arrays."""
    scaler = backend.MinMaxScaler(feature_range, clip=clip).fit(_aligned(extrema))
    return {name: _to_host(getattr(scaler, name)) for name in ("data_min_", "data_max_", "data_range_", "scale_", "min_")}


_block_scalers = {}  # on each worker process: (token, place) -> the backend's scaler fitted to those extrema
_block_scalers_lock = threading.Lock()


def _scale_block(block, extrema, token, feature_range, clip, inverse, backend):
    block = _aligned(block)
    if block.shape[0] == 0:
        return block.copy()
    xp = _module_of(block)
    place = block.device.id if xp is not numpy else None
    with _block_scalers_lock:
        scaler = _block_scalers.get((token, place))
        if scaler is None:
            _block_scalers.clear()  # one fitted state per process: the latest
            scaler = backend.MinMaxScaler(feature_range, clip=clip).fit(xp.asarray(_aligned(extrema)))
            _block_scalers[(token, place)] = scaler
    return scaler.inverse_transform(block) if inverse else scaler.transform(block)


def _tree_reduce(tasks, combine, split_every=8):
    while len(tasks) > 1:
        tasks = [dask.delayed(combine)(*tasks[i:i + split_every]) for i in range(0, len(tasks), split_every)]
    return tasks[0]


class MinMaxScaler:
    """dask-ml's ``MinMaxScaler`` interface over Dask arrays, each block scaled on its worker by
    :class:`streamkit.MinMaxScaler`.

    ``fit`` computes each block's per-column minima and maxima on its worker and reduces them in a tree
    (NaN ignored; exact, so bit for bit one fit over the concatenation, with streamkit's NaN rules: a
    column of NaN alone gets NaN); the fitted attributes then come from a streamkit scaler fitted to
    the two rows [minima; maxima] on a worker. ``transform`` and ``inverse_transform`` map over the
    blocks (lazy Dask arrays with X's chunks; NumPy or CuPy blocks as X's); ``partial_fit`` folds each
    array's extrema into the running ones.

    Parameters
    ----------
    feature_range : (float, float), default (0, 1)
    clip : bool, default False
    backend : module, default :mod:`streamkit`
        Where ``MinMaxScaler`` comes from on the workers (see the module's description).

    Fitted attributes (NumPy arrays, as dask-ml's): ``data_min_``, ``data_max_``, ``data_range_``,
    ``scale_``, ``min_``, ``n_features_in_``, ``n_samples_seen_``. ``fit`` and ``partial_fit`` compute
    (they wait for the reduction), as dask-ml's do.
    """

    def __init__(self, feature_range=(0, 1), *, clip=False, backend=None):
        self.feature_range = feature_range
        self.clip = clip
        self.backend = backend

    def get_params(self, deep=True):
        return {"backend": self.backend, "clip": self.clip, "feature_range": self.feature_range}

    def set_params(self, **params):
        valid = self.get_params()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"{name}: not a parameter of MinMaxScaler (valid: {', '.join(sorted(valid))})")
            setattr(self, name, value)
        return self

    def _checked(self, X, name="X"):
        if not isinstance(X, da.Array):
            raise TypeError(f"{name}: expected a Dask array, got {type(X).__name__} (streamkit.MinMaxScaler takes arrays "
                            "in memory)")
        if X.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D array of shape (n_samples, n_features), got shape {X.shape}")
        if X.dtype not in (numpy.float32, numpy.float64):
            raise TypeError(f"{name}: expected dtype float32 or float64, got {X.dtype}")
        if hasattr(self, "n_features_in_") and X.shape[1] != self.n_features_in_:
            raise ValueError(f"{name}: {X.shape[1]} features, the scaler is fitted to {self.n_features_in_}")
        if hasattr(self, "_dtype") and X.dtype != self._dtype:
            raise TypeError(f"{name}: dtype {X.dtype}, the scaler is fitted to {self._dtype}")
        return X.rechunk({1: -1}) if len(X.chunks[1]) != 1 else X

    def _extrema(self, X):
        lo, hi = streamkit._minmax._check_feature_range(self.feature_range)
        clip = streamkit._minmax._check_clip(self.clip)
        backend = _backend(self.backend)
        blocks = X.to_delayed().ravel()
        parts = [dask.delayed(_block_extrema)(block, backend) for block in blocks]
        return _tree_reduce(parts, _combine_extrema), (lo, hi), clip, backend

    def _fit(self, X, reset):
        X = self._checked(X)
        if X.shape[0] == 0 or X.shape[1] == 0:
            raise ValueError(f"X: found array with shape {X.shape}; fit needs at least one sample and one feature")
        if reset:
            for name in ("n_features_in_", "_dtype", "_extrema_seen"):
                self.__dict__.pop(name, None)
        extrema, feature_range, clip, backend = self._extrema(X)
        if not reset:
            extrema = dask.delayed(_combine_extrema)(self._extrema_seen, extrema)
        fitted = dask.delayed(_fitted_attributes)(extrema, feature_range, clip, backend)
        extrema, fitted = dask.compute(extrema, fitted)
        self._extrema_seen, self._params = extrema, (feature_range, clip)
        self._token = uuid.uuid4().hex
        self.__dict__.update(fitted)
        self.n_features_in_, self._dtype = X.shape[1], X.dtype
        self.n_samples_seen_ = X.shape[0] + (0 if reset else self.n_samples_seen_)
        return self

    def fit(self, X, y=None):
        """Per-column minima and maxima of X (a Dask array, float32 or float64, any chunks), NaN
        ignored, reduced over the blocks; discards any earlier fit. Returns self."""
        return self._fit(X, reset=True)

    def partial_fit(self, X, y=None):
        """Folds X's minima and maxima into the running ones (a first fit when unfitted): batches give
        bit for bit one fit of their concatenation. Returns self."""
        return self._fit(X, reset=not hasattr(self, "_extrema_seen"))

    def _map(self, X, inverse):
        if not hasattr(self, "_extrema_seen"):
            raise streamkit._minmax._not_fitted("inverse_transform" if inverse else "transform")
        X = self._checked(X)
        feature_range, clip = self._params
        return X.map_blocks(_scale_block, self._extrema_seen, self._token, feature_range, clip, inverse,
                            _backend(self.backend), dtype=X.dtype)

    def transform(self, X):
        """X scaled per column with the fitted values, block by block on the workers: a lazy Dask array
        with X's chunks."""
        return self._map(X, inverse=False)

    def inverse_transform(self, X):
        """Undoes the scaling, block by block: a lazy Dask array with X's chunks."""
        return self._map(X, inverse=True)

    def fit_transform(self, X, y=None):
        """fit(X), then transform(X)."""
        return self.fit(X).transform(X)
