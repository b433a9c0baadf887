#!/usr/bin/env python3
"""The motivating notebook's Dask case with streamkit.dask: the nearest of 2^14 references for each of 2^24
observations in a Dask DataFrame of four partitions (the notebook's
``dask_cudf.from_cudf(obs, npartitions=4).map_partitions(get_nearest, coord2=refs)`` on a LocalCUDACluster), one
partition per worker and each searched on its worker's GPU; then the same search of a Dask array of CuPy blocks
on the workers' GPUs (searched there), and streamkit's single-process search of the same data in this
process (NumPy: every GPU). Every answer of both Dask searches is checked against the single-process one, and a
sample against a float64 CPU brute force; exits 1 on a wrong answer, 77 without a GPU or without Dask.

    python3 examples/python/dask_nearest_neighbor.py                      # 2^24 x 2^14, four partitions
    python3 examples/python/dask_nearest_neighbor.py --observations 26 --references 16 --partitions 8

Workers: dask-cuda's LocalCUDACluster (one worker per GPU) when dask-cuda is installed, else a LocalCluster of
one process per GPU (each sees every GPU).
"""

import argparse
import sys
import time

import numpy as np

import example_support

SAMPLE = 2000


def cluster_and_client(gpus):
    from distributed import Client, LocalCluster
    try:
        from dask_cuda import LocalCUDACluster
        cluster, kind = LocalCUDACluster(n_workers=gpus, threads_per_worker=1, dashboard_address=None), "LocalCUDACluster"
    except ImportError:
        cluster, kind = LocalCluster(n_workers=gpus, threads_per_worker=1, processes=True, dashboard_address=None), "LocalCluster"
    return cluster, Client(cluster), kind


def persisted(collection):
    """The collection computed and kept on the workers (waits for it)."""
    from distributed import futures_of, wait
    kept = collection.persist()
    wait(futures_of(kept))
    return kept


def timed(what):
    started = time.perf_counter()
    result = what()
    return result, (time.perf_counter() - started) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--observations", type=int, default=24, help="log2 of the observation count")
    parser.add_argument("--references", type=int, default=14, help="log2 of the reference count")
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args()
    streamkit = example_support.require_gpu("dask_nearest_neighbor")
    try:
        import dask.array as da
        import dask.dataframe as dd
        import pandas as pd
        import streamkit.dask as skd
    except ImportError as missing:
        print(f"dask_nearest_neighbor: {missing.name} is not installed (pip install 'streamkit[dask]' 'dask[dataframe]')")
        return example_support.EXIT_SKIPPED
    import cupy

    n, m = 1 << args.observations, 1 << args.references
    rng = np.random.default_rng(11)
    obs = example_support.random_points(rng, n, np.float64)
    refs = example_support.random_points(rng, m, np.float64)
    cluster, client, kind = cluster_and_client(streamkit.device_count())
    failed = 0
    with cluster, client:
        print(f"{n:,} observations x {m:,} references, k = 1, float64; {kind} of {len(client.scheduler_info()['workers'])} "
              f"worker(s), {cupy.cuda.runtime.getDeviceProperties(0)['name'].decode()}")

        # The notebook's case: a DataFrame of four partitions; the result keeps them (and the index).
        frame = dd.from_pandas(pd.DataFrame({"lat": obs[:, 0], "lon": obs[:, 1]}), npartitions=args.partitions)
        frame = frame.persist()
        nearest_frame = skd.nearest(frame, refs, k=1, columns=("lat", "lon"))
        skd.nearest(frame.partitions[0], refs, k=1, columns=("lat", "lon")).compute()  # warm-up of every worker's GPU
        _, persist_ms = timed(lambda: persisted(nearest_frame))
        result, compute_ms = timed(lambda: nearest_frame.compute())
        print(f"DataFrame, {frame.npartitions} partitions (NumPy to each worker's GPUs): {persist_ms:.1f} ms kept on the "
              f"workers, {compute_ms:.1f} ms into this process")
        frame_ids = result["index_0"].to_numpy()

        # CuPy blocks on the workers' GPUs: searched where they are, only the results travel here.
        blocks = persisted(da.from_array(obs, chunks=(-(-n // args.partitions), 2)).map_blocks(cupy.asarray))
        indices, _distances = skd.nearest(blocks, cupy.asarray(refs), k=1)
        skd.nearest(blocks[: 1 << 10], cupy.asarray(refs), k=1)[0].compute()  # warm-up
        kept, cupy_ms = timed(lambda: persisted(indices))
        cupy_ids = cupy.asnumpy(kept.compute())[:, 0]
        print(f"Dask array of CuPy blocks on the workers, {len(blocks.chunks[0])} blocks: {cupy_ms:.1f} ms kept on the workers")

    # The single-process search of the same data (NumPy in and out over every GPU of this process).
    streamkit.nearest(obs[:1024], refs, k=1)
    (single_ids, _), single_ms = timed(lambda: streamkit.nearest(obs, refs, k=1))
    print(f"single process, streamkit.nearest (NumPy, every GPU): {single_ms:.1f} ms")
    for name, got, want in (("DataFrame", frame_ids, single_ids[:, 0]), ("CuPy blocks", cupy_ids, single_ids[:, 0])):
        wrong = int(np.count_nonzero(got != want))
        failed += wrong
        print(f"{name}: {wrong} of {n:,} answers differ from the single-process search")
    rows = rng.choice(n, SAMPLE, replace=False)
    best = np.concatenate([example_support.haversine(obs[part, None, :], refs[None, :, :]).min(axis=1)
                           for part in np.array_split(rows, 16)])
    found = example_support.haversine(obs[rows], refs[frame_ids[rows]])
    wrong = int(np.count_nonzero(found > best))  # a tie (the same distance) is right
    failed += wrong
    print(f"{SAMPLE} sampled rows against a float64 CPU brute force: {wrong} wrong")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
