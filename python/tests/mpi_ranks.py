"""streamkit.distributed under mpirun (test_distributed.py starts it with 2 and 3 ranks): every rank
checks its own answers and the errors every rank must raise; exits 1 on any failure.

- The search's exchange (replicated and sharded; uneven shares, a rank with no reference at 3 ranks,
  an invalid observation, k up to 5) with the CPU searcher (cpu_backend.Searcher): every answer
  against one brute-force search over the concatenation of all ranks' references (global ids).
- With a GPU: the same with streamkit's GPU searcher, and the min-max scaler against one
  streamkit.MinMaxScaler fit over the concatenation (bit for bit), on NumPy and CuPy rows.
- Errors: ranks that disagree on k (or, with a GPU, feature_range) all raise the same ValueError; a bad argument on
  one rank raises there and RuntimeError naming it elsewhere.

    mpirun -np 2 python python/tests/mpi_ranks.py [--gpu-only]
"""

import os
import sys
import traceback

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu_backend  # noqa: E402
import streamkit  # noqa: E402
import streamkit.distributed as skd  # noqa: E402

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
failures = []


def points(seed, n):
    rng = np.random.default_rng(seed)
    return np.stack([rng.uniform(-90, 90, n), rng.uniform(-180, 180, n)], axis=1)


def references_of(r, step):
    """Rank r's references at a step, the same on every rank that asks (so each can rebuild the
    concatenation); rank 1 holds none at 3 ranks."""
    return points(1000 * step + r, 0 if (size == 3 and r == 1) else 50 + 37 * r)


def check(name, condition, detail=""):
    if not condition:
        failures.append(f"rank {rank}: {name} {detail}")


def raises(name, error_type, text, call):
    try:
        call()
    except error_type as error:
        check(name, text in str(error), f"message {str(error)!r} lacks {text!r}")
    except Exception as error:  # noqa: BLE001
        check(name, False, f"raised {type(error).__name__}: {error}")
    else:
        check(name, False, "did not raise")


def search_checks(searcher, tag):
    for layout in ("replicated", "sharded"):
        index = None
        for step in range(2):
            mine = references_of(rank, step)
            everyone = np.concatenate([references_of(r, step) for r in range(size)])
            if index is None:
                index = skd.NearestIndex(comm, mine, layout=layout, searcher=searcher)
            else:
                index.update(mine)
            check(f"{tag} {layout} len", len(index) == len(everyone), f"{len(index)} != {len(everyone)}")
            obs = points(7000 + rank + 10 * step, 200 + 13 * rank)
            obs[3] = (np.nan, 0.0)
            for k in (1, 5):
                got_i, got_d = index.query(obs, k)
                want_i, want_d = cpu_backend.nearest(obs, everyone, k)
                check(f"{tag} {layout} step {step} k={k} ids", np.array_equal(got_i, want_i),
                      f"{int((got_i != want_i).sum())} differ")
                check(f"{tag} {layout} step {step} k={k} km", np.allclose(got_d, want_d, rtol=1e-12, atol=1e-9, equal_nan=True))
        if layout == "sharded":
            check(f"{tag} sharded exchange", index.last_exchange()["observations_sent"] >= 0)
    raises(f"{tag} k disagreement", ValueError, "the ranks disagree on k",
           lambda: index.query(points(5, 10), 1 + (rank == size - 1)))
    bad = points(5, 10) if rank != 1 else np.zeros((10, 3))
    raises(f"{tag} bad argument", ValueError if rank == 1 else RuntimeError,
           "observations:" if rank == 1 else "failed on rank 1", lambda: index.query(bad, 1))


def scaler_checks(to_device, tag):
    rng = np.random.default_rng(99)
    parts = [rng.normal(size=(0 if (size == 3 and r == 1) else 40 + 9 * r, 5)) * 10 for r in range(size)]
    for r, part in enumerate(parts):
        part[:, 1] = np.nan  # NaN everywhere: NaN attributes
        if r != size - 1 and len(part):
            part[:, 2] = np.nan  # NaN but on the last rank: its values count
    one = streamkit.MinMaxScaler(feature_range=(-1, 1)).fit(np.concatenate(parts))
    scaler = skd.MinMaxScaler(comm, feature_range=(-1, 1)).fit(to_device(parts[rank]))
    for name in ("data_min_", "data_max_", "scale_", "min_"):
        got, want = cpu_backend_host(getattr(scaler, name)), getattr(one, name)
        check(f"{tag} scaler {name}", np.array_equal(got, want, equal_nan=True), f"{got} != {want}")
    check(f"{tag} samples", scaler.n_samples_seen_ == sum(len(p) for p in parts))
    if len(parts[rank]):
        got = cpu_backend_host(scaler.transform(to_device(parts[rank])))
        check(f"{tag} transform", np.array_equal(got, one.transform(parts[rank]), equal_nan=True))


def cpu_backend_host(array):
    return array.get() if hasattr(array, "get") else np.asarray(array)


def main():
    gpu = streamkit.device_count() > 0
    if "--gpu-only" not in sys.argv:
        search_checks(cpu_backend.Searcher(), "cpu")
    if gpu:
        raises("feature_range disagreement", ValueError, "the ranks disagree on feature_range's high end",
               lambda: skd.MinMaxScaler(comm, feature_range=(0, 1 + rank)).fit(np.ones((3, 2))))
        search_checks(None, "gpu")
        scaler_checks(lambda x: x, "numpy")
        try:
            import cupy
        except ImportError:
            cupy = None
        if cupy is not None:
            scaler_checks(cupy.asarray, "cupy")
    else:  # a rank's own failure (no GPU: its rows cannot be copied to one) raises on every rank
        raises("fit without a GPU", ValueError, "sees no CUDA device", lambda: skd.MinMaxScaler(comm).fit(np.ones((3, 2))))
    total = comm.allreduce(len(failures))
    for line in failures:
        print(line, flush=True)
    if rank == 0:
        print(f"streamkit.distributed at {size} ranks ({'GPU' if gpu else 'no GPU'}): {total} failures", flush=True)
    return 1 if total else 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception:  # noqa: BLE001 - never leave the other ranks waiting
        traceback.print_exc()
        comm.Abort(2)
    sys.exit(code)
