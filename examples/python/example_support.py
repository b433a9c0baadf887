"""What the Python examples share: the "no GPU" exit, CSV tables of points, random points on the sphere, the
float64 haversine the checks use, and CUDA-event timing (as examples/common/example_support.hpp for the C++
examples)."""

import csv
import sys
from pathlib import Path

import numpy as np

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
EXIT_SKIPPED = 77          # as the C++ examples: CTest's "skipped"


def require_gpu(example):
    """streamkit, once a GPU is visible; otherwise says so and exits with EXIT_SKIPPED."""
    import streamkit
    if streamkit.device_count() == 0:
        print(f"{example}: no CUDA device is visible (no driver or no GPU); nothing to run.")
        sys.exit(EXIT_SKIPPED)
    return streamkit


def read_points(path):
    """(lat, lon) rows as float32 degrees and the 'name' column (None without one), columns found by header."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader)]
        if "lat" not in header or "lon" not in header:
            sys.exit(f"{path}: the header must name columns 'lat' and 'lon'")
        lat, lon = header.index("lat"), header.index("lon")
        name = header.index("name") if "name" in header else None
        rows = [r for r in reader if r]
    points = np.array([(float(r[lat]), float(r[lon])) for r in rows], dtype=np.float32)
    return points, ([r[name] for r in rows] if name is not None else None)


def add_place_arguments(parser, random_help):
    """The place and observation arguments of the examples that look up places: --places (a CSV with a
    'name' column, default the shipped cities1000.csv), then --observations (a CSV) or --random N."""
    parser.add_argument("--places", default=str(DATA_DIR / "cities1000.csv"))
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--observations", help="a CSV of observations (lat, lon)")
    source.add_argument("--random", type=int, default=1_000_000, help=random_help)


def read_places_and_observations(args, random_observations):
    """The places and their names, and the observations: read from --observations, else
    random_observations(places, args.random)."""
    places, names = read_points(args.places)
    if names is None:
        sys.exit(f"{args.places}: the header must name a 'name' column")
    if args.observations:
        observations, _ = read_points(args.observations)
    else:
        observations = random_observations(places, args.random)
    return places, names, observations


def random_points(rng, count, dtype=np.float32):
    """`count` uniform random points on the sphere as (lat, lon) rows in degrees."""
    lat = np.degrees(np.arcsin(2.0 * rng.random(count) - 1.0))
    lon = rng.uniform(-180.0, 180.0, count)
    return np.stack([lat, lon], axis=1).astype(dtype)


def haversine(points, others):
    """float64 great-circle distances in radians between (lat, lon) rows in degrees, broadcast like NumPy."""
    lat1, lon1 = np.radians(points[..., 0].astype(np.float64)), np.radians(points[..., 1].astype(np.float64))
    lat2, lon2 = np.radians(others[..., 0].astype(np.float64)), np.radians(others[..., 1].astype(np.float64))
    a = np.sin((lat2 - lat1) / 2) ** 2 + np.cos(lat1) * np.cos(lat2) * np.sin((lon2 - lon1) / 2) ** 2
    return 2.0 * np.arcsin(np.sqrt(np.minimum(a, 1.0)))


def gpu_ms(work):
    """Runs `work()` between two CUDA events on CuPy's current stream; returns (milliseconds, its result)."""
    import cupy
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    start.record()
    result = work()
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(start, end), result
