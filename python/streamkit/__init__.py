"""streamkit: exact nearest neighbours on the sphere and column min-max scaling on CUDA arrays,
zero-copy, on the caller's stream (Python bindings of the header-only C++/CUDA library of the same
name).

Public names: :func:`nearest`, :class:`NearestIndex`, :func:`radius_neighbors`, :class:`MinMaxScaler`,
:func:`normalize_many`, :func:`device_count`, :func:`build_info`, :class:`CudaError`; scikit-learn's estimator
in :mod:`streamkit.neighbors` (:class:`streamkit.neighbors.NearestNeighbors`).
"""

from ._streamkit import CudaError, _build_info, device_count
from ._minmax import MinMaxScaler, normalize_many
from ._nearest import MAX_NEIGHBORS, NearestIndex, nearest
from ._radius import radius_neighbors
from . import neighbors

__all__ = ["CudaError", "MAX_NEIGHBORS", "MinMaxScaler", "NearestIndex", "build_info", "device_count", "nearest",
           "normalize_many", "radius_neighbors"]
__version__ = "0.1.0"


def build_info():
    """How this copy of streamkit was built, as a new dict:

    - ``cuda_architectures``: CMAKE_CUDA_ARCHITECTURES as given to the build, e.g.
      ``"75-real;80-real;86-real;89-real;90-real;100-real;120"`` (the binary wheel) or ``"90"`` (a
      default source build);
    - ``sass``: the architectures it carries machine code for, e.g. ``["sm_75", ..., "sm_120"]``;
      a GPU of compute capability X.y runs machine code for X.z with z <= y;
    - ``ptx``: those it carries PTX for, e.g. ``["compute_120"]``, which the driver compiles at
      first use for GPUs of that compute capability or newer;
    - ``cuda_version``: the CUDA runtime it is built with and links statically (``cuda_runtime``:
      ``"static"``), e.g. ``"13.0"``: it needs an NVIDIA driver for that CUDA version or newer, and no
      CUDA Toolkit;
    - ``cuda_compiler``, ``host_compiler``: e.g. ``"NVIDIA 13.0.88"``, ``"GNU 12.2.0"``;
    - ``wheel``: True for the binary wheel (python/build_wheel.sh), False for a source build.

    The first use of a GPU that the build has neither machine code nor PTX for raises
    :class:`CudaError` (``name`` ``"cudaErrorNoKernelImageForDevice"``) naming the GPU's compute
    capability and these architectures.
    """
    info = _build_info()
    info["version"] = __version__
    return info
