"""streamkit: exact nearest neighbours on the sphere and column min-max scaling on CUDA arrays,
zero-copy, on the caller's stream (Python bindings of the header-only C++/CUDA library of the same
name).

Public names: :func:`nearest`, :class:`NearestIndex`, :func:`radius_neighbors`, :class:`MinMaxScaler`,
:func:`normalize_many`, :func:`device_count`, :class:`CudaError`; scikit-learn's estimator in
:mod:`streamkit.neighbors` (:class:`streamkit.neighbors.NearestNeighbors`).
"""

from ._streamkit import CudaError, device_count
from ._minmax import MinMaxScaler, normalize_many
from ._nearest import MAX_NEIGHBORS, NearestIndex, nearest
from ._radius import radius_neighbors
from . import neighbors

__all__ = ["CudaError", "MAX_NEIGHBORS", "MinMaxScaler", "NearestIndex", "device_count", "nearest", "normalize_many",
           "radius_neighbors"]
__version__ = "0.1.0"
