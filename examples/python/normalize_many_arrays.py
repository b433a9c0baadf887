#!/usr/bin/env python3
"""Normalise many arrays: 18 arrays of 60 x 98450 doubles, column min-max to [0, 1], host to host with
streamkit.normalize_many (spread over every GPU), from and into pinned memory; then one array on the device with
streamkit.MinMaxScaler. Both checked against a NumPy float64 reference; exits 1 on a wrong answer.

  python3 examples/python/normalize_many_arrays.py
"""

import sys
import time

import cupy
import cupyx
import numpy as np

import example_support

ARRAYS, ROWS, COLUMNS = 18, 60, 98450
TOLERANCE = 1e-12


def reference(x):
    low = x.min(axis=0)
    return (x - low) / (x.max(axis=0) - low)


def main():
    streamkit = example_support.require_gpu("normalize_many_arrays")
    rng = np.random.default_rng(3)
    # Pinned host memory lets the copies run at full speed and overlap the kernels (pageable arrays work too).
    inputs = [cupyx.empty_pinned((ROWS, COLUMNS), np.float64) for _ in range(ARRAYS)]
    outputs = [cupyx.empty_pinned((ROWS, COLUMNS), np.float64) for _ in range(ARRAYS)]
    for x in inputs:
        x[...] = rng.normal(10.0, 4.0, (ROWS, COLUMNS))

    streamkit.normalize_many(inputs, out=outputs)    # warm-up: the GPUs' buffers are allocated once
    started = time.perf_counter()
    streamkit.normalize_many(inputs, out=outputs)
    host_ms = (time.perf_counter() - started) * 1e3
    worst_host = max(float(np.max(np.abs(y - reference(x)))) for x, y in zip(inputs, outputs))
    gigabytes = 2 * sum(x.nbytes for x in inputs) / 1e9
    print(f"{ARRAYS} arrays of {ROWS} x {COLUMNS} doubles, host to host from pinned memory on "
          f"{streamkit.device_count()} GPU(s) ({cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()})")
    print(f"time {host_ms:.2f} ms (wall clock), {gigabytes / host_ms * 1e3:.1f} GB/s (bytes in + out)")
    print(f"largest difference from the CPU reference: {worst_host:.2e}")

    device_array = cupy.asarray(inputs[0])
    scaler = streamkit.MinMaxScaler()
    scaler.fit_transform(device_array)               # warm-up
    device_ms, scaled = example_support.gpu_ms(lambda: scaler.fit_transform(device_array))
    worst_device = float(np.max(np.abs(cupy.asnumpy(scaled) - reference(inputs[0]))))
    print(f"one array on the device, MinMaxScaler().fit_transform: {device_ms:.3f} ms (CUDA events), "
          f"largest difference {worst_device:.2e}")
    if not (worst_host < TOLERANCE and worst_device < TOLERANCE):
        print(f"FAILED: a difference is not below {TOLERANCE:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
