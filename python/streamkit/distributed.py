"""streamkit.distributed: the MPI part of streamkit over mpi4py communicators (the extra
``streamkit[mpi]``): the exact k-nearest-neighbour search across ranks (references replicated or
sharded) and the min-max scaler fitted over every rank's rows, on CuPy, PyTorch, JAX, Numba or NumPy
arrays per rank. The C++ part is ``include/streamkit/distributed`` (docs/distributed.md).

Every call is collective over the communicator: every rank must make it. Ranks that disagree (k, the
layout, the column count, the dtype, the scaler's options) all raise the same ValueError; an error
in one rank's own work (a bad argument, a CUDA error) raises there and makes every other rank raise
RuntimeError naming that rank, so no rank is left waiting.

Needs the extension ``_streamkit_mpi``, which a source build makes when CMake finds MPI, linked with
that MPI library: mpi4py must use the same one. The binary wheel leaves it out.

Communicators travel as Fortran handles (``comm.py2f()``), turned into ``MPI_Comm`` by
``MPI_Comm_f2c``: any mpi4py build against that MPI library works.
"""

from __future__ import annotations

import math

import numpy
from mpi4py import MPI

from . import _arrays, _streamkit
from ._minmax import _check_clip, _check_feature_range, _fitted_arrays, _not_fitted, _place_of, _to_place
from ._nearest import _ANGLES, _DISTANCES, _check_choice

try:
    from . import _streamkit_mpi
except ImportError as error:  # the binary wheel, or a source build that found no MPI
    raise ImportError(
        "streamkit.distributed needs the extension streamkit._streamkit_mpi, which only a source build of streamkit "
        "against your MPI makes (pip install ./python from a clone, with mpicc on the PATH); the binary wheel leaves it out"
    ) from error

__all__ = ["MinMaxScaler", "NearestIndex", "nearest"]

EARTH_RADIUS_KM = 6371.0088
_KM_PER_RADIAN = {"radians": 1.0, "km": EARTH_RADIUS_KM, "m": EARTH_RADIUS_KM * 1000.0}
_LAYOUTS = ("replicated", "sharded")


def _collective(comm, what, local):
    """Runs `local()` on this rank, then agrees over `comm` on the outcome: if it raised on any rank,
    every rank raises (that rank its own exception, the others RuntimeError naming the lowest such
    rank). Returns local()'s result. The Python side of the C++ part's run_everywhere()."""
    try:
        result, failure = local(), None
    except Exception as error:  # noqa: BLE001 - every failure is shared with the other ranks
        result, failure = None, error
    first = comm.allreduce(comm.Get_rank() if failure is not None else comm.Get_size(), op=MPI.MIN)
    if failure is not None:
        raise failure
    if first < comm.Get_size():
        raise RuntimeError(f"{what}: failed on rank {first} (see that rank's exception)")
    return result


def _check_comm(comm):
    if not (hasattr(comm, "py2f") and hasattr(comm, "allreduce")):
        raise TypeError(f"comm: expected an mpi4py communicator (e.g. MPI.COMM_WORLD), got {type(comm).__name__}")
    return comm


def _host(array):
    """A host NumPy copy (or view) of a CUDA or host array."""
    kind = _arrays.framework(array)
    if kind == "cupy":
        return array.get()
    if kind == "torch":
        return array.detach().cpu().numpy()
    if kind == "numba":
        return array.copy_to_host()
    return numpy.asarray(array)


def _points(array, angle, checked):
    """(latitude, longitude) in radians, float64 and packed, of an (n, 2) array of any framework, and
    (dtype, place) of the array for the results; `checked` is what _points_check said of it."""
    _n, dtype, on_cuda, device = checked
    rows = _host(array).astype(numpy.float64, copy=False)
    if angle == "degrees":
        rows = numpy.radians(rows)
    return (numpy.ascontiguousarray(rows[:, 0]), numpy.ascontiguousarray(rows[:, 1])), (dtype, _place_of(array, on_cuda, device))


# Frameworks whose CUDA arrays the GPU search takes where they are (their own arithmetic makes them
# float64 radians on the GPU): C++ device views, no host copy. Others (JAX, Numba) are copied to the host.
_DEVICE_FRAMEWORKS = ("cupy", "torch")


def _device_points(array, name, angle, device, checked):
    """(float64 radians (n, 2) on the GPU, (dtype, device)) of a CuPy or PyTorch CUDA array on the
    rank's GPU `device`, converted there in its own framework; `checked` is what _points_check said
    of it."""
    _n, dtype, _on_cuda, where = checked
    if where != device:
        raise ValueError(f"{name}: on GPU {where}, but this rank searches on GPU {device}")
    if _arrays.framework(array) == "torch":
        rows = array.detach().to(dtype=_arrays._torch_types()["module"].float64)
    else:
        rows = array.astype("float64", copy=False)
    if angle == "degrees":
        rows = rows * (math.pi / 180)
    return rows, (dtype, where)


def _check_k(k):
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k: expected an int, got {type(k).__name__}")
    return k  # its range is checked collectively (the ranks must agree; k >= 1)


class NearestIndex:
    """Exact k nearest neighbours across the ranks of `comm`: each rank holds a part of the references
    and of the observations, and gets its own observations' neighbours among every rank's references,
    with global ids (the rank's offset in the concatenation of all ranks' parts in rank order, plus the
    local row): the answer of one search over the concatenated references. streamkit::distributed's
    ``distributed_nearest`` (docs/distributed.md).

    Parameters
    ----------
    comm : mpi4py communicator
        Kept by the index; every call is collective over it.
    references : array of shape (m, 2)
        This rank's references, (latitude, longitude) rows, float32 or float64, any framework; m may
        be 0. CuPy and PyTorch arrays on the rank's GPU stay there (made float64 radians by their own
        framework, passed to the C++ part as device views); other CUDA arrays are copied to the host.
    layout : {"replicated", "sharded"}
        replicated: every rank receives every reference at each update (all-gather) and searches them
        all; with observations on the GPU the search runs there and the results stay there. sharded:
        each update repartitions all references by space (each rank a compact region); an observation
        goes to the rank of its region and on only to the ranks within its k-th distance there (at
        several ranks with the GPU search, the work per observation runs on the rank's GPU: device
        arrays are read and written there, host arrays copied there and back, and only the rows for
        other ranks pass through page-locked host memory to MPI).
    angle, distance
        Units of the coordinates and of the returned distances (as :func:`streamkit.nearest`).
    device : int or None
        This rank's GPU; None: its rank on the node modulo the visible GPUs.
    searcher : object or None
        Instead of the GPU, a rank's own search written in Python: ``prepare(latitude, longitude)``
        and ``search(latitude, longitude, k, index, angle)`` on float64 NumPy arrays in radians,
        search filling index (int64) and angle (float64) of shape (n, k), nearest first, ties to the
        smaller index, -1 and NaN beyond the set (for tests and CPU stand-ins).
    """

    def __init__(self, comm, references, *, layout="replicated", angle="degrees", distance="km", device=None, searcher=None):
        self._comm = _check_comm(comm)

        def local():
            if layout not in _LAYOUTS:
                raise ValueError(f"layout: {layout!r} is not one of {list(_LAYOUTS)}")
            units = _check_choice(angle, "angle", _ANGLES), _check_choice(distance, "distance", _DISTANCES)
            if device is not None and (isinstance(device, bool) or not isinstance(device, int) or device < 0):
                raise ValueError(f"device: expected None or a device number >= 0, got {device!r}")
            return units

        _collective(comm, "streamkit.distributed.NearestIndex", local)
        self._angle, self._distance = angle, distance
        if searcher is None:
            self._search = _streamkit_mpi._GpuNearest(comm.py2f(), layout == "sharded", -1 if device is None else device)
            self._device = self._search.device()
        else:
            self._search = _streamkit_mpi._PythonNearest(comm.py2f(), layout == "sharded", searcher)
            self._device = None  # a Python searcher takes NumPy arrays
        self.update(references)

    def _rows(self, array, name):
        """This rank's points as the search takes them: ("device", (n, 2) float64 radians on its GPU,
        (dtype, device number)) for CuPy and PyTorch arrays there (GPU search), else ("host",
        (latitude, longitude) in host memory, (dtype, place of the results))."""
        checked = _streamkit._points_check(_arrays.as_dlpack(array, name), name)  # (n, dtype, on CUDA, device)
        if self._device is not None and checked[2] and _arrays.framework(array) in _DEVICE_FRAMEWORKS:
            return ("device",) + _device_points(array, name, self._angle, self._device, checked)
        return ("host",) + _points(array, self._angle, checked)

    def update(self, references):
        """Replaces this rank's references (any size m >= 0; every rank calls it). Returns self."""
        where, rows, _ = _collective(self._comm, "streamkit.distributed.NearestIndex.update",
                                     lambda: self._rows(references, "references"))
        if where == "device":
            self._search.update_device(rows, _arrays.stream_handle(None, rows, self._device))
        else:
            self._search.update(*rows)
        return self

    def query(self, observations, k=1):
        """The k nearest references (global ids) of this rank's observations (n, 2), as
        :func:`streamkit.nearest` returns them: ``(indices, distances)`` of shape (n, k), int64 and the
        observations' dtype, in the observations' framework and device (CuPy and PyTorch arrays on the
        rank's GPU: made there, no host copy); nearest first, ties to the smaller id, -1 and NaN where
        fewer than k exist or for an invalid observation. Every rank calls it with the same k (else
        every rank raises ValueError)."""
        where, rows, (dtype, place) = _collective(
            self._comm, "streamkit.distributed.NearestIndex.query",
            lambda: (_check_k(k), self._rows(observations, "observations"))[1])
        if where == "device":  # results made and left on the GPU, in the observations' framework
            shape = (rows.shape[0], max(k, 0))
            index = _arrays.empty(observations, shape, "int64", self._device, True)
            angle = _arrays.empty(observations, shape, "float64", self._device, True)
            self._search.query_device(rows, index, angle, _arrays.stream_handle(None, rows, self._device))
            distances = angle * _KM_PER_RADIAN[self._distance] if self._distance != "radians" else angle
            return index, (distances.to(dtype=getattr(_arrays._torch_types()["module"], dtype))
                           if _arrays.framework(observations) == "torch" else distances.astype(dtype, copy=False))
        lat, lon = rows
        index = numpy.empty((len(lat), max(k, 0)), numpy.int64)
        angle = numpy.empty((len(lat), max(k, 0)), numpy.float64)
        self._search.query(lat, lon, k, index, angle)
        distances = (angle * _KM_PER_RADIAN[self._distance]).astype(dtype)
        return _to_place(index, place), _to_place(distances, place)

    def __len__(self):
        """The number of references over all ranks."""
        return self._search.size()

    def last_exchange(self):
        """What this rank moved and did in the last update or query (the C++ part's exchange_stats):
        a dict of bytes_sent, bytes_received, observations_sent and visits (sharded queries: sent to
        other ranks, and of those sent on by an owner to ranks within reach), observations_searched,
        references_held, and where the wall time went: seconds (in the exchange's collectives),
        search_seconds, host_seconds (the routing: keys, owners, packing, reach tests, merging,
        placing) and staging_seconds (arrays copied between host and GPU, not hidden behind other
        work)."""
        return self._search.last_exchange()


def nearest(comm, observations, references, k=1, *, layout="replicated", angle="degrees", distance="km", device=None,
            searcher=None):
    """The k nearest references (global ids) of this rank's observations among every rank's
    references: ``NearestIndex(comm, references, ...).query(observations, k)``. Collective."""
    return NearestIndex(comm, references, layout=layout, angle=angle, distance=distance, device=device,
                        searcher=searcher).query(observations, k)


class MinMaxScaler:
    """Min-max scaling of a matrix whose rows are spread over the ranks of `comm`: ``fit`` and
    ``partial_fit`` reduce the per-column minima and maxima over the ranks (exact: bit for bit one fit
    of the concatenation, with :class:`streamkit.MinMaxScaler`'s NaN rules); every rank then
    transforms its own rows on its own GPU with the global statistics. streamkit::distributed's
    ``distributed_minmax_scaler``.

    Parameters
    ----------
    comm : mpi4py communicator
    feature_range : (float, float), default (0, 1)
    clip : bool, default False

    ``X``: this rank's rows, (n_samples, n_features) float32 or float64, a CUDA array (used where it
    is; fits wait for its stream, transforms are enqueued on it) or a host array (copied through the
    rank's GPU; the call waits). A rank may hold no rows. Fits are collective; transforms are local.
    The fitted attributes (``data_min_``, ``data_max_``, ``data_range_``, ``scale_``, ``min_``) come
    back in the framework of the last fit's input, ``n_samples_seen_`` counts every rank's rows.
    """

    def __init__(self, comm, feature_range=(0, 1), *, clip=False):
        self._comm = _check_comm(comm)
        self.feature_range, self.clip = feature_range, clip
        self._compiled = None

    def _fit(self, X, reset, stream):
        what = "streamkit.distributed.MinMaxScaler." + ("fit" if reset else "partial_fit")

        def local():
            lo, hi = _check_feature_range(self.feature_range)
            clip = _check_clip(self.clip)
            rows, cols, dtype, on_cuda, device, _fortran = _streamkit._matrix_check(_arrays.as_dlpack(X, "X"), "X")
            handle = _arrays.stream_handle(stream, X, device) if on_cuda else 0
            x = X if on_cuda else numpy.ascontiguousarray(X)
            return (lo, hi, clip), dtype, on_cuda, device, handle, x

        params, dtype, on_cuda, device, handle, x = _collective(self._comm, what, local)
        if reset or self._compiled is None or self._compiled[0] != (params, dtype):
            compiled = (_streamkit_mpi._ScalerF64 if dtype == "float64" else _streamkit_mpi._ScalerF32)(self._comm.py2f(), *params)
            self._compiled = ((params, dtype), compiled)
            reset = True
        self._compiled[1].fit(x, on_cuda, reset, handle)
        self._place, self._fitted_cache = _place_of(X, on_cuda, device), None
        self.n_features_in_ = X.shape[1]
        self.n_samples_seen_ = self._compiled[1].samples_seen()
        return self

    def fit(self, X, y=None, *, stream=None):
        """Fits to every rank's rows, discarding any earlier fit. Collective; waits. Returns self."""
        return self._fit(X, True, stream)

    def partial_fit(self, X, y=None, *, stream=None):
        """Folds every rank's rows into the running extrema (a first fit when unfitted, or when the
        dtype or the parameters changed). Collective; waits. Returns self."""
        return self._fit(X, False, stream)

    def _apply(self, X, inverse, stream, out):
        if self._compiled is None:
            raise _not_fitted("inverse_transform" if inverse else "transform")
        rows, cols, dtype, on_cuda, device, _fortran = _streamkit._matrix_check(_arrays.as_dlpack(X, "X"), "X")
        handle = _arrays.stream_handle(stream, X, device) if on_cuda else 0
        x = X if on_cuda else numpy.ascontiguousarray(X)
        result = out if out is not None else (_arrays.empty(X, (rows, cols), dtype, device, True) if on_cuda
                                              else numpy.empty((rows, cols), dtype))
        self._compiled[1].transform(x, result, on_cuda, inverse, handle)
        return _arrays.finish(X, (result,), handle, device)[0] if (on_cuda and out is None) else result

    def transform(self, X, *, stream=None, out=None):
        """This rank's rows scaled with the global statistics (local: no communication)."""
        return self._apply(X, False, stream, out)

    def inverse_transform(self, X, *, stream=None, out=None):
        """Undoes the scaling of this rank's rows (local)."""
        return self._apply(X, True, stream, out)

    def fit_transform(self, X, y=None, *, stream=None):
        """fit(X) over every rank, then this rank's transform(X)."""
        return self.fit(X, stream=stream).transform(X, stream=stream)

    def _fitted_values(self):
        if self._compiled is None:
            raise _not_fitted("its fitted attributes")
        if self._fitted_cache is None:
            (lo, _hi, _clip), dtype = self._compiled[0]
            data_min, data_max, scale = (numpy.asarray(v, dtype=dtype) for v in self._compiled[1].fitted())
            self._fitted_cache = _fitted_arrays(data_min, data_max, scale, lo, self._place)
        return self._fitted_cache

    data_min_ = property(lambda self: self._fitted_values()["data_min_"], doc="Per-feature minimum over every rank.")
    data_max_ = property(lambda self: self._fitted_values()["data_max_"], doc="Per-feature maximum over every rank.")
    data_range_ = property(lambda self: self._fitted_values()["data_range_"], doc="Per-feature data_max_ - data_min_.")
    scale_ = property(lambda self: self._fitted_values()["scale_"], doc="Per-feature (hi - lo) / data_range_.")
    min_ = property(lambda self: self._fitted_values()["min_"], doc="Per-feature lo - data_min_ * scale_.")

    @property
    def uses_device_pointers(self):
        """Whether the extrema travel between ranks as device pointers (a CUDA-aware MPI), else
        through pinned host memory."""
        return self._compiled is not None and self._compiled[1].uses_device_pointers()

