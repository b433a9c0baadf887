#!/usr/bin/env python3
"""Reverse-geocode GPS points: for each observation, the k nearest places of a CSV of places (the shipped
GeoNames cities1000 table by default) and their distances in km, written to a CSV. The Python twin of
examples/reverse_geocode.cu.

  python3 examples/python/reverse_geocode.py [--k K] [--places places.csv]
                                             [--observations obs.csv | --random N] [--output out.csv]

Defaults: k = 1, examples/data/cities1000.csv, 1,000,000 random observations, reverse_geocode_out.csv. CSV
files need a header naming 'lat' and 'lon' (and 'name' for the places). The search runs on CuPy arrays through
streamkit.NearestIndex (which picks its engine); the example prints the time of a search (CUDA events) and
checks 2,000 of the answers against a float64 CPU brute force; exits 1 on a wrong answer.
"""

import argparse
import csv
import sys

import cupy
import numpy as np

import example_support

SAMPLE_ROWS = 2000
ANGLE_TOLERANCE_RAD = 2.5e-7       # as the C++ example
KM_TOLERANCE = 2e-3
EARTH_RADIUS_KM = 6371.0088        # streamkit's sphere


def count_wrong(observations, places, indices, km, k):
    """Rows of an evenly spaced sample whose j-th neighbour is not at the j-th smallest float64 distance."""
    step = max(len(observations) // SAMPLE_ROWS, 1)
    rows = np.arange(0, len(observations), step)
    kk = min(k, len(places))
    wrong = 0
    for chunk in np.array_split(rows, max(1, len(rows) // 50)):
        all_distances = example_support.haversine(observations[chunk, None, :], places[None, :, :])
        smallest = np.sort(np.partition(all_distances, kk - 1, axis=1)[:, :kk], axis=1)
        for row, best in zip(chunk, smallest):
            found = indices[row]
            if np.any(found[kk:] != -1) or np.any(found[:kk] < 0):
                wrong += 1
                continue
            got = example_support.haversine(observations[row], places[found[:kk]])
            if np.any(np.abs(got - best) > ANGLE_TOLERANCE_RAD) or \
                    np.any(np.abs(km[row, :kk] - got * EARTH_RADIUS_KM) > KM_TOLERANCE):
                wrong += 1
    return len(rows), wrong


def write_csv(path, observations, names, indices, km, k):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["lat", "lon"] + [f"{column}_{c}" for c in range(1, k + 1)
                                          for column in ("place", "distance_km")])
        for point, found, distance in zip(observations.tolist(), indices.tolist(), km.tolist()):
            row = point[:]
            for j, d in zip(found, distance):
                row += [names[j] if j >= 0 else "", d]
            writer.writerow(row)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, default=1)
    example_support.add_place_arguments(parser, "random observations (default 1,000,000)")
    parser.add_argument("--output", default="reverse_geocode_out.csv")
    args = parser.parse_args()

    places, names, observations = example_support.read_places_and_observations(
        args, lambda places, count: example_support.random_points(np.random.default_rng(2026), count))
    print(f"places: {len(places):,} from {args.places}\nobservations: {len(observations):,}")

    streamkit = example_support.require_gpu("reverse_geocode")
    device_places, device_observations = cupy.asarray(places), cupy.asarray(observations)
    index = streamkit.NearestIndex(device_places, distance="km")
    index.query(device_observations, args.k)       # warm-up
    ms, (device_indices, device_km) = example_support.gpu_ms(lambda: index.query(device_observations, args.k))
    indices, km = cupy.asnumpy(device_indices), cupy.asnumpy(device_km)
    print(f"GPU search (k = {args.k}): {ms:.3f} ms (CUDA events) on "
          f"{cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")

    checked, wrong = count_wrong(observations, places, indices, km, args.k)
    print(f"checked {checked} rows of {args.k} neighbours against the CPU: {wrong} wrong")
    write_csv(args.output, observations, names, indices, km, args.k)
    print(f"wrote {args.output}")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
