"""streamkit.nearest and streamkit.NearestIndex: exact k nearest neighbours by great-circle distance."""

from __future__ import annotations

import math
import numbers

from . import _arrays, _streamkit

_ANGLES = {"radians": 0, "degrees": 1}
_DISTANCES = {"radians": 0, "km": 1, "m": 2}
MAX_NEIGHBORS = 32


def _check_k(k):
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"k: expected an int, got {type(k).__name__}")
    k = int(k)
    if not 1 <= k <= MAX_NEIGHBORS:
        raise ValueError(f"k: {k}; streamkit answers k from 1 to {MAX_NEIGHBORS}")
    return k


def _check_choice(value, name, choices):
    if not isinstance(value, str):
        raise TypeError(f"{name}: expected one of {sorted(choices)}, got {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{name}: {value!r} is not one of {sorted(choices)}")
    return choices[value]


def _check_max_distance(value):
    if value is None:
        return math.inf
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"max_distance: expected a number or None, got {type(value).__name__}")
    value = float(value)
    if not value >= 0:  # NaN too
        raise ValueError(f"max_distance: must be at least 0 (None for no limit), got {value}")
    return value


def _options(k, angle, distance, max_distance):
    """The checked codes (k, angle, distance, max_distance) the compiled module takes."""
    return (_check_k(k), _check_choice(angle, "angle", _ANGLES), _check_choice(distance, "distance", _DISTANCES),
            _check_max_distance(max_distance))


class _Placement:
    """Where a search writes, decided once the compiled module has checked the inputs: called with
    (n, dtype, on_cuda, device), it takes `out` or allocates results in `like`'s framework, and picks
    the stream; `results()` hands them back."""

    def __init__(self, like, k, stream, out, temporaries=False):
        if out is not None:
            if not isinstance(out, (tuple, list)) or len(out) != 2:
                raise TypeError("out: expected a pair (indices, distances)")
            for array in out:
                if _arrays.framework(array) == "jax":
                    raise TypeError("out: JAX arrays are immutable; leave out=None to get new JAX arrays")
        self._like, self._k, self._stream, self._out = like, k, stream, out
        self._temporaries = temporaries

    def __call__(self, n, dtype, on_cuda, device):
        self._handle = _arrays.stream_handle(self._stream, self._like, device) if on_cuda else 0
        self._device = device
        if self._out is None:
            self._pair = (_arrays.empty(self._like, (n, self._k), "int64", device, on_cuda),
                          _arrays.empty(self._like, (n, self._k), dtype, device, on_cuda))
            pointers = (_arrays.data_pointer(self._pair[0]), _arrays.data_pointer(self._pair[1]))
            if None not in pointers:  # made here, dense (n, k): the compiled module needs only the addresses
                return pointers + (self._handle, self._allocator(on_cuda, device))
        else:
            self._pair = tuple(self._out)
        return (_arrays.as_dlpack(self._pair[0], "out[0]"), _arrays.as_dlpack(self._pair[1], "out[1]"), self._handle,
                self._allocator(on_cuda, device))

    def _allocator(self, on_cuda, device):
        """Where the search's temporaries come from: the framework's allocator when the caller has
        replaced it (e.g. with RMM's), else None (streamkit's own pool)."""
        if not (self._temporaries and on_cuda):
            return None
        return _arrays.temporaries(self._like, device, self._handle)

    def results(self):
        if self._out is None:
            return _arrays.finish(self._like, self._pair, self._handle, self._device)
        return self._pair


def nearest(observations, references, k=1, *, angle="degrees", distance="km", exact=True, max_distance=None,
            stream=None, out=None):
    """The k nearest references of every observation by great-circle (haversine) distance.

    Parameters
    ----------
    observations, references : arrays of shape (n, 2) and (m, 2)
        (latitude, longitude) rows, float32 or float64 (both the same), 1 ≤ m < 2^32. Either CUDA
        arrays on one device, taken without a copy: any DLPack array (CuPy, PyTorch, JAX) or
        ``__cuda_array_interface__`` object (Numba); sliced and transposed arrays pass (the row
        stride must be positive). Or both NumPy (host) arrays: the search then runs over every
        visible GPU (pinned staging, copies overlapping the search) and waits.
    k : int
        Neighbours per observation, 1 to 32.
    angle : {"degrees", "radians"}
        Unit of the coordinates.
    distance : {"km", "m", "radians"}
        Unit of the returned distances and of `max_distance` (sphere of 6371.0088 km).
    exact : bool
        True: the float64 ranking. False: k = 1 may rank in float32 (faster; within 2.4e-7 rad).
    max_distance : float or None
        Neighbours farther than this come back as index -1 and NaN.
    stream : None, int, or a stream object
        Where the search is enqueued: an object with ``__cuda_stream__``, a CuPy stream, a
        ``torch.cuda.Stream``, or a cudaStream_t as an int (0: the legacy default stream). None: the
        current stream of the observations' framework (CuPy, torch), else the legacy default stream.
    out : (indices, distances) or None
        Arrays of shape (n, k), int64 and the coordinates' dtype, where the observations are, with
        column stride 1 and one row stride; written in place and returned (not JAX arrays: they are
        immutable). None: new arrays in the observations' framework (CuPy, PyTorch, Numba, NumPy
        from their own allocators; JAX from memory streamkit allocates). The search's temporaries
        come from streamkit's pool (the device's cudaMallocAsync pool), or from the framework's
        allocator when the caller has replaced CuPy's (``cupy.cuda.set_allocator``) or PyTorch's (a
        pluggable allocator), e.g. with RMM's ``rmm.allocators.cupy`` / ``rmm.allocators.torch``.

    Returns
    -------
    (indices, distances) : arrays of shape (n, k)
        Row i holds observation i's neighbours, nearest first (ties to the smaller index); -1 and NaN
        where fewer than k exist or the observation is invalid (non-finite, latitude outside ±90°).

    With CUDA arrays the call is asynchronous like a CuPy or PyTorch operation: it returns once the
    search is enqueued on the stream; for JAX it waits for the stream before the results become
    JAX arrays. With NumPy arrays it returns when the results are written. The inputs must stay
    alive until the stream has passed the search (as for any asynchronous operation).

    Raises
    ------
    TypeError, ValueError
        Bad arguments, naming the argument, before any CUDA work and before anything is written.
    MemoryError
        A device allocation failed.
    streamkit.CudaError
        Any other CUDA failure.
    """
    k, angle_code, distance_code, limit = _options(k, angle, distance, max_distance)
    placement = _Placement(observations, k, stream, out, temporaries=True)
    _streamkit._nearest(
        _arrays.as_dlpack(observations, "observations"), _arrays.as_dlpack(references, "references"), k, angle_code,
        distance_code, bool(exact), limit, placement,
    )
    return placement.results()


class NearestIndex:
    """A reference set prepared for repeated k-nearest-neighbour queries, for time-stepping: build it
    once, then per step `update` the references (no new memory when the set is no larger) and
    `query`. streamkit picks its engine per query (brute force or its spatial tree) and rebuilds
    the tree lazily after an update.

    Parameters
    ----------
    references : array of shape (m, 2)
        (latitude, longitude) rows, float32 or float64, 1 ≤ m < 2^32: a CUDA array (the index lives
        on its device) or a NumPy array (every visible GPU holds the references; queries take NumPy
        observations, split across the GPUs).
    angle, distance, exact, max_distance
        As in :func:`nearest`; fixed for the index's life.
    stream : None, int, or a stream object
        Where the references are prepared (CUDA arrays); as in :func:`nearest`.

    Updates and queries are ordered on the device whatever their streams: a query waits for the
    update before it, an update for the queries before it. The index keeps a reference to the last
    reference array it was given until the next update.
    """

    def __init__(self, references, *, angle="degrees", distance="km", exact=True, max_distance=None, stream=None):
        self._angle = _check_choice(angle, "angle", _ANGLES)
        self._distance = _check_choice(distance, "distance", _DISTANCES)
        self._max_distance = _check_max_distance(max_distance)
        self._exact = bool(exact)
        self._params = dict(angle=angle, distance=distance, exact=self._exact, max_distance=max_distance)
        ref = _arrays.as_dlpack(references, "references")
        _m, dtype, on_cuda, device = _streamkit._points_check(ref, "references")
        handle = _arrays.stream_handle(stream, references, device) if on_cuda else 0
        self._index = _streamkit._NearestIndex(ref, self._angle, self._distance, self._exact, self._max_distance, handle)
        self._dtype, self._on_cuda, self._device = dtype, on_cuda, device
        self._references = references

    def update(self, references, *, stream=None):
        """Replaces the reference set (same dtype and device as the first; any size m ≥ 1). CUDA
        arrays: enqueued on `stream` (default: the array framework's current stream), never waits.
        NumPy arrays: copied to every GPU, waits. Returns self."""
        ref = _arrays.as_dlpack(references, "references")
        handle = _arrays.stream_handle(stream, references, self._device) if self._on_cuda else 0
        self._index.update(ref, handle)
        self._references = references
        return self

    def query(self, observations, k=1, *, stream=None, out=None):
        """The k nearest references of every observation: ``(indices, distances)`` of shape (n, k),
        as :func:`nearest` returns them (and in the observations' framework). Observations must have
        the references' dtype and place. CUDA arrays: enqueued on `stream`, never waits (except for
        JAX results); NumPy arrays: searched over every GPU, waits."""
        k = _check_k(k)
        placement = _Placement(observations, k, stream, out)
        self._index.query(_arrays.as_dlpack(observations, "observations"), k, placement)
        return placement.results()

    def __len__(self):
        """The number of references m."""
        return self._index.describe()[0]

    @property
    def dtype(self):
        """'float32' or 'float64': the dtype of the references and of every query."""
        return self._dtype

    @property
    def device(self):
        """The CUDA device of the index, or None for a host (NumPy) index over every GPU."""
        return self._device if self._on_cuda else None

    def __repr__(self):
        where = f"cuda:{self._device}" if self._on_cuda else "host, every GPU"
        return f"streamkit.NearestIndex(m={len(self)}, dtype={self._dtype}, {where}, {self._params})"
