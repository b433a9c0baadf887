#!/usr/bin/env python3
"""Min-max scaling of a Dask array with streamkit.dask.MinMaxScaler (dask-ml's interface): the 18 arrays of
60 x 98450 doubles of normalize_many_arrays.py as one Dask array of 18 blocks of 60 rows, fitted (per-block
extrema on the workers' GPUs, reduced in a tree) and transformed block by block; against one
streamkit.MinMaxScaler fit of the whole array (the fitted attributes bit for bit), a NumPy float64 reference
(transform within 1e-12) and, when it is installed, dask-ml's MinMaxScaler on the same Dask array (same results,
both timed). Exits 1 on a wrong answer, 77 without a GPU or without Dask.

    python3 examples/python/dask_minmax_scaler.py          # --blocks 18 --rows 60 --columns 98450
"""

import argparse
import sys
import time

import numpy as np

import example_support

TOLERANCE = 1e-12


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--blocks", type=int, default=18)
    parser.add_argument("--rows", type=int, default=60)
    parser.add_argument("--columns", type=int, default=98450)
    args = parser.parse_args()
    streamkit = example_support.require_gpu("dask_minmax_scaler")
    try:
        import dask.array as da
        from distributed import Client, LocalCluster
        import streamkit.dask as skd
    except ImportError as missing:
        print(f"dask_minmax_scaler: {missing.name} is not installed (pip install 'streamkit[dask]')")
        return example_support.EXIT_SKIPPED
    x = np.random.default_rng(3).normal(10.0, 4.0, (args.blocks * args.rows, args.columns))
    x[:, 7] = np.nan  # an all-NaN column: NaN attributes
    failed = 0
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, Client(cluster):
        X = da.from_array(x, chunks=(args.rows, args.columns)).persist()
        results = {}
        scalers = [("streamkit.dask", skd.MinMaxScaler)]
        try:
            from dask_ml.preprocessing import MinMaxScaler as DaskMLScaler
            scalers.append(("dask-ml", DaskMLScaler))
        except ImportError:
            print("dask-ml is not installed: streamkit.dask alone")
        for name, make in scalers:
            make().fit(X)  # warm-up
            started = time.perf_counter()
            scaler = make().fit(X)
            fit_ms = (time.perf_counter() - started) * 1e3
            started = time.perf_counter()
            scaled = scaler.transform(X).compute()
            transform_ms = (time.perf_counter() - started) * 1e3
            results[name] = (scaler, scaled)
            print(f"{name}: fit {fit_ms:.1f} ms, transform into this process {transform_ms:.1f} ms "
                  f"({X.numblocks[0]} blocks of {args.rows} x {args.columns} doubles)")
    one = streamkit.MinMaxScaler().fit(x)
    scaler, scaled = results["streamkit.dask"]
    same = all(np.array_equal(getattr(scaler, a), getattr(one, a), equal_nan=True)
               for a in ("data_min_", "data_max_", "data_range_", "scale_", "min_"))
    failed += not same
    print(f"fitted attributes {'equal' if same else 'NOT equal'} to one streamkit.MinMaxScaler fit, bit for bit")
    with np.errstate(invalid="ignore"):
        low = np.nanmin(x, axis=0)
        want = (x - low) / (np.nanmax(x, axis=0) - low)
    worst = float(np.nanmax(np.abs(scaled - want)))
    failed += not (worst < TOLERANCE and np.array_equal(np.isnan(scaled), np.isnan(want)))
    print(f"transform: largest difference from the NumPy float64 reference {worst:.2e}")
    if "dask-ml" in results:
        theirs, theirs_scaled = results["dask-ml"]
        same = all(np.array_equal(getattr(scaler, a), np.asarray(getattr(theirs, a)), equal_nan=True)
                   for a in ("data_min_", "data_max_"))
        worst = float(np.nanmax(np.abs(scaled - np.asarray(theirs_scaled))))
        failed += not (same and worst < TOLERANCE)
        print(f"dask-ml: data_min_/data_max_ {'equal' if same else 'NOT equal'}, transforms differ by at most {worst:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
