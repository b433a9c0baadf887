#!/usr/bin/env python3
"""Places within r km of each GPS point: every place of a CSV of places (the shipped GeoNames cities1000 table
by default) within the radius of each observation, by streamkit.radius_neighbors on CuPy arrays, as compressed
rows (offsets, place indices, km), each row nearest first.

  python3 examples/python/places_within_radius.py [--radius KM] [--places places.csv]
                                                  [--observations obs.csv | --random N] [--max-per-row ROWS]

Defaults: 10 km, examples/data/cities1000.csv, 1,000,000 GPS points scattered within about 50 km of random
places (so that most have places around them; --observations takes a CSV with 'lat' and 'lon' columns). Prints
the time of the query (CUDA events), how many places the rows hold, the places around the first points, and
what a bound on the rows says when the result exceeds it (ValueError naming how many would have come back,
before anything is allocated); checks 2,000 rows against a float64 CPU brute force: every place within the
radius there, none beyond it, distances and order right. Exits 1 on a wrong answer (77 when no GPU is visible).
"""

import argparse
import sys

import numpy as np

import example_support

SAMPLE_ROWS = 2000
EARTH_RADIUS_KM = 6371.0088        # streamkit's sphere
BOUNDARY_KM = 1e-9                 # a place this close to the radius may be in or out (float64 rounding)
KM_TOLERANCE = 2e-3                # float32 distances in km, as reverse_geocode.py


def points_near_places(rng, places, count, spread_km=50.0):
    """`count` GPS points, each within about `spread_km` of a random place, as float32 (lat, lon) degrees."""
    centre = places[rng.integers(0, len(places), count)].astype(np.float64)
    spread = np.degrees(spread_km / EARTH_RADIUS_KM)
    lat = np.clip(centre[:, 0] + rng.uniform(-spread, spread, count), -90.0, 90.0)
    lon = centre[:, 1] + rng.uniform(-spread, spread, count) / np.maximum(np.cos(np.radians(lat)), 1e-3)
    lon = np.remainder(lon + 180.0, 360.0) - 180.0
    return np.stack([lat, lon], axis=1).astype(np.float32)


def count_wrong(observations, places, offsets, indices, km, radius_km):
    """Rows of an evenly spaced sample that miss a place within the radius, hold one beyond it or twice, report
    a distance off by more than KM_TOLERANCE, or are not nearest first."""
    step = max(len(observations) // SAMPLE_ROWS, 1)
    rows = np.arange(0, len(observations), step)
    wrong = 0
    for chunk in np.array_split(rows, max(1, len(rows) // 50)):
        all_km = example_support.haversine(observations[chunk, None, :], places[None, :, :]) * EARTH_RADIUS_KM
        for row, row_km in zip(chunk, all_km):
            found = indices[offsets[row]:offsets[row + 1]]
            found_km = km[offsets[row]:offsets[row + 1]]
            surely_in = np.flatnonzero(row_km <= radius_km - BOUNDARY_KM)
            maybe_in = row_km <= radius_km + BOUNDARY_KM
            if len(np.unique(found)) != len(found) or not np.all(maybe_in[found]) or \
                    not np.all(np.isin(surely_in, found)) or \
                    np.any(np.abs(found_km - row_km[found]) > KM_TOLERANCE) or np.any(np.diff(row_km[found]) < -1e-9):
                wrong += 1
    return len(rows), wrong


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--radius", type=float, default=10.0, help="km (default 10)")
    example_support.add_place_arguments(parser, "GPS points near random places (default 1,000,000)")
    parser.add_argument("--max-per-row", type=int, default=None, help="a bound on the places per point (default none)")
    args = parser.parse_args()
    streamkit = example_support.require_gpu("places_within_radius")
    import cupy

    places, names, observations = example_support.read_places_and_observations(
        args, lambda places, count: points_near_places(np.random.default_rng(2026), places, count))
    print(f"places: {len(places):,} from {args.places}\nobservations: {len(observations):,}\nradius: {args.radius} km")

    device_places, device_observations = cupy.asarray(places), cupy.asarray(observations)

    def query(max_per_row=None):
        return streamkit.radius_neighbors(device_observations, device_places, args.radius, distance="km",
                                          max_per_row=max_per_row)

    try:
        query(args.max_per_row)                                  # warm-up
    except ValueError as error:                                  # a row holds more than --max-per-row
        sys.exit(f"ValueError: {error}")
    ms, (device_offsets, device_indices, device_km) = example_support.gpu_ms(lambda: query(args.max_per_row))
    offsets, indices, km = cupy.asnumpy(device_offsets), cupy.asnumpy(device_indices), cupy.asnumpy(device_km)
    per_point = np.diff(offsets)
    print(f"GPU radius query ({args.radius} km, rows sorted nearest first): {ms:.3f} ms (CUDA events; one wait for "
          f"the total) on {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(f"{len(indices):,} (point, place) pairs: {per_point.mean():.2f} places per point on average, at most "
          f"{per_point.max():,}, {np.count_nonzero(per_point == 0):,} points with none")
    for i in range(3):
        row = [f"{names[j]} {d:.1f} km" for j, d in zip(indices[offsets[i]:offsets[i + 1]][:4], km[offsets[i]:offsets[i + 1]][:4])]
        more = f", and {per_point[i] - 4} more" if per_point[i] > 4 else ""
        print(f"  ({observations[i, 0]:8.3f}, {observations[i, 1]:8.3f}): {', '.join(row) or 'nothing'}{more}")

    # A bound below the result: the query says how many would have come back instead of cutting rows short.
    if per_point.max() > 0:
        try:
            query(max_per_row=int(per_point.max()) - 1)
            print("max_per_row below the largest row: no error")
            return 1
        except ValueError as error:
            print(f"with max_per_row={per_point.max() - 1}: ValueError: {error}")

    checked, wrong = count_wrong(observations, places, offsets, indices, km, args.radius)
    print(f"checked {checked} rows against the CPU: {wrong} wrong")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
