"""streamkit: exact nearest neighbours on the sphere and column min-max scaling on CUDA arrays,
zero-copy, on the caller's stream (Python bindings of the header-only C++/CUDA library of the same
name).

Public names: :func:`nearest`, :class:`NearestIndex`, :class:`MinMaxScaler`, :func:`normalize_many`,
:func:`device_count`, :class:`CudaError`.
"""

from ._streamkit import CudaError, device_count
from ._minmax import MinMaxScaler, normalize_many
from ._nearest import MAX_NEIGHBORS, NearestIndex, nearest

__all__ = ["CudaError", "MAX_NEIGHBORS", "MinMaxScaler", "NearestIndex", "device_count", "nearest", "normalize_many"]
__version__ = "0.1.0"
