#!/usr/bin/env python3
"""streamkit.distributed across MPI ranks (the Python twin of examples/distributed_nearest_neighbor.cu): each rank
holds a share of the references and of the observations; per time step the references move, every rank updates
and queries (replicated, then sharded), and gets its observations' nearest references among all ranks' (global
ids). Then the min-max scaler fitted over every rank's rows. Every answer of the last step is checked against
streamkit.nearest over the concatenation of all ranks' references on the rank's GPU, a sample against a float64
CPU brute force, and the scaler against one fit over the concatenation (bit for bit). Exits 1 on a wrong answer
(on every rank), 77 without a GPU or without the MPI extension.

    mpirun -np 2 python3 examples/python/mpi_nearest_neighbor.py       # --observations 22 --references 16 --steps 3
"""

import argparse
import sys
import time

import numpy as np

import example_support

SAMPLE = 500


def share(total, ranks, rank):
    """This rank's [begin, end) of `total` items split as evenly as possible."""
    return total * rank // ranks, total * (rank + 1) // ranks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--observations", type=int, default=22, help="log2 of the observations over all ranks")
    parser.add_argument("--references", type=int, default=16, help="log2 of the references over all ranks")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    streamkit = example_support.require_gpu("mpi_nearest_neighbor")
    try:
        from mpi4py import MPI
        import streamkit.distributed as skd
    except ImportError as missing:
        print(f"mpi_nearest_neighbor: {missing}")
        return example_support.EXIT_SKIPPED
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    n, m = 1 << args.observations, 1 << args.references
    lo, hi = share(m, ranks, rank)
    wrong = 0
    for layout in ("replicated", "sharded"):
        index, times = None, []
        for step in range(args.steps + 1):  # step 0 warms up
            rng = np.random.default_rng(100 + step)  # the same on every rank: each can rebuild the concatenation
            everyone = example_support.random_points(rng, m, np.float64)
            obs = example_support.random_points(np.random.default_rng(1000 * rank + step), n // ranks, np.float64)
            comm.Barrier()
            started = time.perf_counter()
            if index is None:
                index = skd.NearestIndex(comm, everyone[lo:hi], layout=layout)
            else:
                index.update(everyone[lo:hi])
            ids, km = index.query(obs, k=1)
            times.append(comm.allreduce(time.perf_counter() - started, op=MPI.MAX) * 1e3)
        want, _ = streamkit.nearest(obs, everyone, k=1)  # one search over the concatenation, this rank's GPU(s)
        differ = int(np.count_nonzero(ids != want))
        rows = np.random.default_rng(rank).choice(len(obs), SAMPLE, replace=False)
        best = example_support.haversine(obs[rows, None, :], everyone[None, :, :]).min(axis=1)
        beyond = int(np.count_nonzero(example_support.haversine(obs[rows], everyone[ids[rows, 0]]) > best))
        wrong += differ + beyond
        differ, beyond = comm.allreduce(differ), comm.allreduce(beyond)
        if rank == 0:
            print(f"{layout}: {ranks} rank(s), {n:,} observations x {m:,} references, k = 1; step (update + query, slowest "
                  f"rank) median {np.median(times[1:]):.1f} ms; {differ} answers differ from one search over the "
                  f"concatenation, {beyond} of {SAMPLE * ranks} sampled rows beyond the float64 brute force's nearest")

    rows = np.random.default_rng(5 + rank).normal(10.0, 4.0, (60 * (rank + 1), 1000))
    rows[:, 3] = np.nan
    scaler = skd.MinMaxScaler(comm).fit(rows)
    everyone = np.concatenate(comm.allgather(rows))
    one = streamkit.MinMaxScaler().fit(everyone)
    same = all(np.array_equal(getattr(scaler, name), getattr(one, name), equal_nan=True) for name in ("data_min_", "data_max_", "scale_"))
    same = same and np.array_equal(scaler.transform(rows), one.transform(rows), equal_nan=True)
    wrong += 0 if same else 1
    differing = comm.allreduce(int(not same))
    if rank == 0:
        print(f"MinMaxScaler over {ranks} rank(s) ({len(everyone)} x 1000): {differing} rank(s) differ from one fit over "
              "the concatenation (bit for bit)")
    return 1 if comm.allreduce(wrong) else 0


if __name__ == "__main__":
    sys.exit(main())
