"""A CPU stand-in for streamkit's GPU work, with the signatures streamkit.dask and
streamkit.distributed call (`backend=` / `searcher=`): float64 NumPy brute force of the haversine
distance (ties to the smaller index, -1 and NaN beyond the set, beyond max_distance or for an invalid
observation) and a NumPy min-max scaler with streamkit's rules (NaN ignored, all-NaN columns NaN, a
range below 10 eps counts as 1). It lets CI run the graphs, chunk alignment, id offsets, exchanges and
reductions on machines without a GPU; the GPU tests compare the same paths with streamkit itself.

Imported by name on Dask's worker processes (they inherit the tests' sys.path)."""

import warnings

import numpy as np

EARTH_KM = 6371.0088
_UNITS = {"radians": 1.0, "km": EARTH_KM, "m": EARTH_KM * 1000.0}


def angles(observations, references, angle="degrees"):
    """(n, m) float64 great-circle angles (radians); NaN rows for invalid observations, NaN columns
    for invalid references."""
    obs, ref = np.asarray(observations, np.float64), np.asarray(references, np.float64)
    if angle == "degrees":
        obs, ref = np.radians(obs), np.radians(ref)
    lat1, lon1 = obs[:, :1], obs[:, 1:]
    lat2, lon2 = ref[None, :, 0], ref[None, :, 1]
    h = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    result = 2 * np.arcsin(np.sqrt(np.minimum(h, 1.0)))
    bad_obs = ~(np.isfinite(obs).all(axis=1) & (np.abs(obs[:, 0]) <= np.pi / 2))
    bad_ref = ~(np.isfinite(ref).all(axis=1) & (np.abs(ref[:, 0]) <= np.pi / 2))
    result[bad_obs, :] = np.nan
    result[:, bad_ref] = np.nan
    return result


def nearest(observations, references, k=1, *, angle="degrees", distance="km", exact=True, max_distance=None):
    dtype = np.asarray(observations).dtype
    a = angles(observations, references, angle) * _UNITS[distance]
    if max_distance is not None:
        a[a > max_distance] = np.nan
    order = np.argsort(np.where(np.isnan(a), np.inf, a), axis=1, kind="stable")[:, :k]
    found = np.take_along_axis(a, order, axis=1)
    index = np.full((len(a), k), -1, np.int64)
    dist = np.full((len(a), k), np.nan, dtype)
    keep = ~np.isnan(found)
    index[:, : order.shape[1]] = np.where(keep, order, -1)
    dist[:, : order.shape[1]] = np.where(keep, found, np.nan)
    return index, dist


class NearestIndex:
    """streamkit.NearestIndex's interface over `nearest` (counts its updates, for the tests)."""

    def __init__(self, references, **options):
        self.references, self.options, self.updates = np.asarray(references), options, 0

    def update(self, references):
        self.references, self.updates = np.asarray(references), self.updates + 1
        return self

    def query(self, observations, k=1):
        return nearest(observations, self.references, k, **self.options)


def radius_neighbors(observations, references, radius, *, angle="degrees", distance="km", sort_results=True):
    dtype = np.asarray(observations).dtype
    a = angles(observations, references, angle) * _UNITS[distance]
    rows_i, rows_d = [], []
    for row in a:
        hit = np.flatnonzero(row <= radius)
        hit = hit[np.argsort(row[hit], kind="stable")] if sort_results else hit
        rows_i.append(hit)
        rows_d.append(row[hit])
    offsets = np.zeros(len(a) + 1, np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows_i])
    indices = np.concatenate(rows_i).astype(np.int64) if rows_i else np.zeros(0, np.int64)
    distances = np.concatenate(rows_d).astype(dtype) if rows_d else np.zeros(0, dtype)
    return offsets, indices, distances


class MinMaxScaler:
    """streamkit.MinMaxScaler's rules in NumPy (fit, transform, inverse_transform, the attributes)."""

    def __init__(self, feature_range=(0, 1), *, clip=False):
        self.feature_range, self.clip = feature_range, clip

    def fit(self, X):
        X = np.asarray(X)
        lo, hi = (X.dtype.type(v) for v in self.feature_range)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
            self.data_min_, self.data_max_ = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
            self.data_range_ = self.data_max_ - self.data_min_
            span = np.where(self.data_range_ < 10 * np.finfo(X.dtype).eps, X.dtype.type(1), self.data_range_)
            self.scale_ = ((hi - lo) / span).astype(X.dtype)
            self.min_ = lo - self.data_min_ * self.scale_
        return self

    def transform(self, X):
        lo, hi = (np.asarray(X).dtype.type(v) for v in self.feature_range)
        with np.errstate(all="ignore"):
            y = lo + (np.asarray(X) - self.data_min_) * self.scale_
        return np.clip(y, lo, hi) if self.clip else y

    def inverse_transform(self, X):
        lo = np.asarray(X).dtype.type(self.feature_range[0])
        with np.errstate(all="ignore"):
            return (np.asarray(X) - lo) / self.scale_ + self.data_min_


class Searcher:
    """A rank's own search for streamkit.distributed.NearestIndex(searcher=...): radians in, local
    indices and angles (radians) out, as the C++ part's Searcher."""

    def prepare(self, latitude, longitude):
        self.references = np.stack([latitude, longitude], axis=1).copy()  # the views last only for the call

    def search(self, latitude, longitude, k, index, angle):
        found, distance = nearest(np.stack([latitude, longitude], axis=1), self.references, k, angle="radians",
                                  distance="radians") if len(self.references) else (np.full(index.shape, -1),
                                                                                    np.full(angle.shape, np.nan))
        index[...], angle[...] = found, distance
