# Type stubs of the public API of streamkit (the docstrings are on the runtime objects).
from typing import Any, Sequence

from . import neighbors as neighbors

MAX_NEIGHBORS: int
__version__: str

class CudaError(RuntimeError):
    code: int
    name: str
    call: str
    file: str
    line: int

def device_count() -> int: ...
def build_info() -> dict[str, Any]: ...
def nearest(
    observations: Any,
    references: Any,
    k: int = 1,
    *,
    angle: str = "degrees",
    distance: str = "km",
    exact: bool = True,
    max_distance: float | None = None,
    stream: Any = None,
    out: tuple[Any, Any] | None = None,
) -> tuple[Any, Any]: ...

def radius_neighbors(
    observations: Any,
    references: Any,
    radius: Any,
    *,
    angle: str = "degrees",
    distance: str = "km",
    sort_results: bool = True,
    return_distance: bool = True,
    max_per_row: int | None = None,
    max_total: int | None = None,
    stream: Any = None,
) -> tuple[Any, ...]: ...

class NearestIndex:
    def __init__(
        self,
        references: Any,
        *,
        angle: str = "degrees",
        distance: str = "km",
        exact: bool = True,
        max_distance: float | None = None,
        stream: Any = None,
    ) -> None: ...
    def update(self, references: Any, *, stream: Any = None) -> NearestIndex: ...
    def query(self, observations: Any, k: int = 1, *, stream: Any = None, out: tuple[Any, Any] | None = None) -> tuple[Any, Any]: ...
    def __len__(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> int | None: ...

class MinMaxScaler:
    feature_range: tuple[float, float]
    clip: bool
    n_features_in_: int
    n_samples_seen_: int
    def __init__(self, feature_range: tuple[float, float] = (0, 1), *, clip: bool = False) -> None: ...
    def get_params(self, deep: bool = True) -> dict[str, Any]: ...
    def set_params(self, **params: Any) -> MinMaxScaler: ...
    def fit(self, X: Any, y: Any = None, *, stream: Any = None) -> MinMaxScaler: ...
    def partial_fit(self, X: Any, y: Any = None, *, stream: Any = None) -> MinMaxScaler: ...
    def transform(self, X: Any, *, stream: Any = None, out: Any = None) -> Any: ...
    def inverse_transform(self, X: Any, *, stream: Any = None, out: Any = None) -> Any: ...
    def fit_transform(self, X: Any, y: Any = None, *, stream: Any = None, out: Any = None) -> Any: ...
    def get_feature_names_out(self, input_features: Sequence[str] | None = None) -> Any: ...
    @property
    def data_min_(self) -> Any: ...
    @property
    def data_max_(self) -> Any: ...
    @property
    def data_range_(self) -> Any: ...
    @property
    def scale_(self) -> Any: ...
    @property
    def min_(self) -> Any: ...

def normalize_many(
    arrays: Sequence[Any], feature_range: tuple[float, float] = (0, 1), out: Sequence[Any] | None = None
) -> list[Any]: ...
