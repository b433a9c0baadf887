"""streamkit.radius_neighbors: every reference within a distance of each observation, as compressed rows."""

from __future__ import annotations

import numbers

from . import _arrays, _streamkit
from ._nearest import _ANGLES, _DISTANCES, _check_choice

_NO_BOUND = (1 << 64) - 1


def _check_bound(value, name):
    if value is None:
        return _NO_BOUND
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}: expected an int or None, got {type(value).__name__}")
    if int(value) < 0:
        raise ValueError(f"{name}: must be at least 0 (None for no bound), got {int(value)}")
    return int(value)


def _check_radius(radius):
    """(scalar, per-row array or None): a number at least 0 (inf: every reference), or an array."""
    if isinstance(radius, bool):
        raise TypeError("radius: expected a number or an array of one radius per observation, got bool")
    if isinstance(radius, numbers.Real):
        radius = float(radius)
        if not radius >= 0:  # NaN too
            raise ValueError(f"radius: must be at least 0 (inf for every reference), got {radius}")
        return radius, None
    if hasattr(radius, "__dlpack__") or hasattr(radius, "__cuda_array_interface__"):
        return 0.0, radius
    raise TypeError(f"radius: expected a number or an array of one radius per observation, got {type(radius).__name__}")


class _RowPlacement:
    """Allocates the 1-D result arrays the compiled module asks for (offsets, then indices and
    distances once the total is known) in `like`'s framework, where the observations are."""

    def __init__(self, like, on_cuda, device):
        self._like, self._on_cuda, self._device = like, on_cuda, device
        self.arrays = {}

    def __call__(self, name, size, dtype):
        array = _arrays.empty(self._like, (size,), dtype, self._device, self._on_cuda)
        self.arrays[name] = array
        return _arrays.as_dlpack(array, name)


def _host_rows(array):
    """A NumPy array as C-contiguous (n, 2) rows (the host path copies them to a GPU anyway)."""
    if _arrays.framework(array) == "numpy":
        import numpy

        return numpy.ascontiguousarray(array)
    return array


def radius_neighbors(observations, references, radius, *, angle="degrees", distance="km", sort_results=True,
                     return_distance=True, max_per_row=None, max_total=None, stream=None):
    """Every reference within `radius` of each observation, by great-circle (haversine) distance,
    as compressed rows.

    Parameters
    ----------
    observations, references : arrays of shape (n, 2) and (m, 2)
        (latitude, longitude) rows, float32 or float64 (both the same), 1 ≤ m < 2^32, n < 2^32: CUDA
        arrays on one device (taken without a copy, as in :func:`nearest`), or both NumPy arrays
        (copied to the current GPU and back; the call waits).
    radius : float or array of shape (n,)
        In the `distance` unit: a reference is returned when its float64 haversine distance is at
        most the radius (the distance reported: a reference exactly at the radius is in). inf: every
        valid reference. An array gives one radius per observation (float64, where the observations
        are); a NaN or negative entry gives an empty row.
    angle : {"degrees", "radians"}
        Unit of the coordinates.
    distance : {"km", "m", "radians"}
        Unit of `radius` and of the returned distances (sphere of 6371.0088 km).
    sort_results : bool
        True: each row by distance, ties to the smaller index (its first k entries are the k
        nearest). False: each row in no particular order (faster).
    return_distance : bool
        Whether to compute and return the distances.
    max_per_row, max_total : int or None
        Bounds on a row's and on the total number of neighbours: a larger result raises ValueError
        saying how many would have come back, before it is allocated.
    stream : None, int, or a stream object
        As in :func:`nearest` (CUDA arrays).

    Returns
    -------
    (offsets, indices, distances) or (offsets, indices)
        1-D arrays in the observations' framework: row i holds indices[offsets[i]:offsets[i + 1]]
        (int64) and the same slice of distances (the coordinates' dtype); offsets has n + 1 entries.
        Invalid observations (non-finite, latitude outside ±90°) get empty rows and invalid references
        are never returned.

    With CUDA arrays the call waits once, for the total (to allocate the result), and enqueues the
    rest on the stream. Raises TypeError and ValueError naming the argument before any CUDA work.
    """
    angle_code = _check_choice(angle, "angle", _ANGLES)
    distance_code = _check_choice(distance, "distance", _DISTANCES)
    scalar, radii = _check_radius(radius)
    per_row, total = _check_bound(max_per_row, "max_per_row"), _check_bound(max_total, "max_total")
    obs = _arrays.as_dlpack(_host_rows(observations), "observations")
    ref = _arrays.as_dlpack(_host_rows(references), "references")
    _n, _dtype, on_cuda, device = _streamkit._points_check(obs, "observations")
    handle = _arrays.stream_handle(stream, observations, device) if on_cuda else 0
    if radii is not None:
        radii = _arrays.as_dlpack(radii, "radius")
    placement = _RowPlacement(observations, on_cuda, device)
    _streamkit._radius_neighbors(obs, ref, scalar, radii, angle_code, distance_code, bool(sort_results), bool(return_distance),
                                 per_row, total, handle, placement)
    names = ("offsets", "indices", "distances") if return_distance else ("offsets", "indices")
    results = tuple(placement.arrays[name] for name in names)
    return _arrays.finish(observations, results, handle, device) if on_cuda else results


__all__ = ["radius_neighbors"]
