#!/usr/bin/env python3
"""The motivating notebook's nearest-neighbour cell, written for scikit-learn (or cuML), run on streamkit by
changing its import only:

    from sklearn.neighbors import NearestNeighbors          # the notebook (cuML: from cuml.neighbors import ...)
    from streamkit.neighbors import NearestNeighbors        # this example: the one line that changed

    nn = NearestNeighbors(n_neighbors=1, algorithm="brute", metric="haversine").fit(refs)
    distances, indices = nn.kneighbors(obs)                 # (lat, lon) in radians in, radians out

  python3 examples/python/sklearn_nearest_neighbors.py [--places places.csv] [--random N] [--sample ROWS]

Defaults: the 144,563 places of examples/data/cities1000.csv as refs, 1,000,000 random GPS points as obs (NumPy
float64 radians, as scikit-learn takes them: streamkit copies them to every visible GPU and back), 1,000
sampled rows checked against scikit-learn's own NearestNeighbors when it is installed (else a NumPy float64
brute force): the same nearest place (or one at the same distance, a tie) and the distance to 1e-12 rad.
Prints the cell's wall-clock time; exits 1 on a wrong answer (77 when no GPU is visible).
"""

import argparse
import sys
import time

import numpy as np

import example_support

EARTH_RADIUS_KM = 6371.0088        # streamkit's sphere
TOLERANCE_RAD = 1e-12              # the float64 haversine of the same pair, evaluated in another order


def haversine_radians(obs, refs):
    """float64 great-circle distances between (lat, lon) rows in radians, broadcast like NumPy (scikit-learn's formula)."""
    lat1, lon1, lat2, lon2 = obs[..., 0], obs[..., 1], refs[..., 0], refs[..., 1]
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 2.0 * np.arcsin(np.sqrt(np.minimum(a, 1.0)))


def reference_answer(obs, refs):
    """(distances, indices) of the nearest ref of each obs row: scikit-learn's brute force when it is
    installed, else NumPy's, in chunks; and which of the two answered."""
    try:
        from sklearn.neighbors import NearestNeighbors as SklearnNearestNeighbors
    except ImportError:
        distances, indices = np.empty((len(obs), 1)), np.empty((len(obs), 1), dtype=np.int64)
        for chunk in np.array_split(np.arange(len(obs)), max(1, len(obs) // 50)):
            all_distances = haversine_radians(obs[chunk, None, :], refs[None, :, :])
            indices[chunk, 0] = np.argmin(all_distances, axis=1)      # ties: the first, as scikit-learn
            distances[chunk, 0] = all_distances[np.arange(len(chunk)), indices[chunk, 0]]
        return distances, indices, "a NumPy float64 brute force"
    nn = SklearnNearestNeighbors(n_neighbors=1, algorithm="brute", metric="haversine").fit(refs)
    distances, indices = nn.kneighbors(obs)
    return distances, indices, "scikit-learn's NearestNeighbors(algorithm='brute', metric='haversine')"


def count_wrong(obs, refs, distances, indices, rows):
    """Sampled rows whose nearest place is neither the reference answer's nor at its distance (a tie), or whose
    distance is off by more than TOLERANCE_RAD; and what the reference answer was."""
    start = time.perf_counter()
    want_distances, want_indices, reference = reference_answer(obs[rows], refs)
    seconds = time.perf_counter() - start
    got_index, want_index = indices[rows, 0], want_indices[:, 0]
    # The distance of the place each side chose, evaluated here (a tie: two places at the same distance).
    got_at = haversine_radians(obs[rows], refs[got_index])
    same = (got_index == want_index) | (np.abs(got_at - want_distances[:, 0]) <= TOLERANCE_RAD)
    distance_ok = np.abs(distances[rows, 0] - want_distances[:, 0]) <= TOLERANCE_RAD
    return int(np.count_nonzero(~(same & distance_ok))), reference, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--places", default=str(example_support.DATA_DIR / "cities1000.csv"))
    parser.add_argument("--random", type=int, default=1_000_000, help="random GPS points (default 1,000,000)")
    parser.add_argument("--sample", type=int, default=1000, help="rows checked (default 1,000)")
    args = parser.parse_args()
    example_support.require_gpu("sklearn_nearest_neighbors")

    places, names = example_support.read_points(args.places)
    # The notebook's inputs: (lat, lon) rows in radians, float64, as scikit-learn's haversine metric takes them.
    refs = np.radians(places.astype(np.float64))
    obs = np.radians(example_support.random_points(np.random.default_rng(2026), args.random).astype(np.float64))
    print(f"refs: {len(refs):,} places from {args.places}\nobs: {len(obs):,} random GPS points")

    # ---- the notebook's cell; only the import changed ------------------------------------------------------
    from streamkit.neighbors import NearestNeighbors       # was: from sklearn.neighbors import NearestNeighbors

    start = time.perf_counter()
    nn = NearestNeighbors(n_neighbors=1, algorithm="brute", metric="haversine").fit(refs)
    distances, indices = nn.kneighbors(obs)
    seconds = time.perf_counter() - start
    # ---------------------------------------------------------------------------------------------------------

    print(f"streamkit.neighbors.NearestNeighbors(...).fit(refs).kneighbors(obs): {seconds * 1e3:.1f} ms "
          f"(wall clock: NumPy in and out, every visible GPU)")
    for i in range(3):
        lat, lon = np.degrees(obs[i])
        print(f"  ({lat:8.3f}, {lon:8.3f}): {names[indices[i, 0]]}, {distances[i, 0] * EARTH_RADIUS_KM:.1f} km")

    rows = np.arange(0, len(obs), max(len(obs) // max(args.sample, 1), 1))
    wrong, reference, reference_seconds = count_wrong(obs, refs, distances, indices, rows)
    print(f"checked {len(rows)} rows against {reference} ({reference_seconds:.2f} s for them on the CPU): {wrong} wrong")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
