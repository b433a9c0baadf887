#!/usr/bin/env python3
"""Dynamic nearest neighbour: every time step the reference points move and new observations arrive; the exact
nearest reference of each observation is recomputed with one streamkit.NearestIndex, whose update() reuses its
memory. The Python twin of examples/dynamic_nearest_neighbor.cu.

  python3 examples/python/dynamic_nearest_neighbor.py          # CuPy arrays on one GPU, CUDA-event times
  python3 examples/python/dynamic_nearest_neighbor.py --host   # NumPy arrays: host in, host out, every GPU

Prints the time of each step (update + query) and pairs/s, and checks 200 sampled observations of each step
against a float64 CPU brute force; exits 1 on a wrong answer.
"""

import argparse
import sys
import time

import numpy as np

import example_support

OBSERVATIONS, REFERENCES, STEPS = 1 << 22, 1 << 14, 5
DRIFT_DEGREES = 0.05
SAMPLE_ROWS = 200
TOLERANCE_RAD = 2e-7               # as the C++ example


def drift(rng, references):
    """References move by a small random step and stay on the sphere (latitude clamped, longitude wrapped)."""
    moved = references + rng.normal(0.0, DRIFT_DEGREES, references.shape).astype(references.dtype)
    moved[:, 0] = np.clip(moved[:, 0], -90.0, 90.0)
    moved[:, 1] = np.remainder(moved[:, 1] + 180.0, 360.0) - 180.0
    return moved


def count_wrong(observations, references, indices):
    """Sampled observations whose answer is farther than the float64 nearest reference (beyond rounding)."""
    rows = np.arange(0, len(observations), len(observations) // SAMPLE_ROWS)
    best = example_support.haversine(observations[rows, None, :], references[None, :, :]).min(axis=1)
    found = indices[rows, 0]
    got = example_support.haversine(observations[rows], references[np.clip(found, 0, None)])
    return int(np.sum((found < 0) | (got > best + TOLERANCE_RAD)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", action="store_true", help="NumPy arrays, host in and host out over every GPU")
    args = parser.parse_args()
    streamkit = example_support.require_gpu("dynamic_nearest_neighbor")
    import cupy

    rng = np.random.default_rng(4)
    references = example_support.random_points(rng, REFERENCES)
    to_device = np.asarray if args.host else cupy.asarray
    index = streamkit.NearestIndex(to_device(references))
    wrong = 0
    for step in range(STEPS + 1):
        references = drift(rng, references)
        observations = example_support.random_points(rng, OBSERVATIONS)
        if args.host:
            started = time.perf_counter()
            index.update(references)
            indices, _ = index.query(observations)       # waits: the results are NumPy arrays
            ms, how = (time.perf_counter() - started) * 1e3, "wall clock, host in, host out"
        else:
            device_references, device_observations = cupy.asarray(references), cupy.asarray(observations)
            ms, (device_indices, _) = example_support.gpu_ms(
                lambda: index.update(device_references).query(device_observations))
            indices, how = cupy.asnumpy(device_indices), "CUDA events, data on the device"
        wrong += count_wrong(observations, references, indices)
        if step > 0:                                     # step 0 warms up
            print(f"step {step}: {ms:.3f} ms (update + query; {how}), "
                  f"{OBSERVATIONS * REFERENCES / (ms * 1e-3) / 1e12:.2f} T pairs/s")
    where = f"{streamkit.device_count()} GPU(s)" if args.host else "1 GPU"
    print(f"{OBSERVATIONS:,} observations x {REFERENCES:,} references per step on {where} "
          f"({cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}); {wrong} sampled answers wrong")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
