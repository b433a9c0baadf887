"""streamkit.distributed under mpirun (test_distributed.py starts it with 2 and 3 ranks): every rank
checks its own answers and the errors every rank must raise; exits 1 on any failure.

- The search's exchange (replicated and sharded; uneven shares, a rank with no reference at 3 ranks,
  an invalid observation, k up to 5) with the CPU searcher (cpu_backend.Searcher): every answer
  against one brute-force search over the concatenation of all ranks' references (global ids).
- With a GPU: the same with streamkit's GPU searcher, and the min-max scaler against one
  streamkit.MinMaxScaler fit over the concatenation (bit for bit), on NumPy and CuPy rows; CuPy and
  PyTorch points searched where they are (no host copy), ranks mixing device and host arrays.
- benchmarks/distributed_model.py's partition and routing count the visits and bytes the sharded
  layout counts (CPU searcher).
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
import cpu_backend  # noqa: E402
import distributed_model  # noqa: E402
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


def device_search_checks(framework, to_device, tag):
    """CuPy or PyTorch points on the rank's GPU: searched without a host copy (streamkit.distributed's
    host conversion is made to fail meanwhile), results on that GPU in that framework, float32 and
    float64, equal to the CPU brute force over the concatenation; ranks mixing device and host arrays."""
    host_copy = skd._host

    def no_host_copy(array):
        raise AssertionError(f"a {type(array).__name__} went through the host")

    for layout in ("replicated", "sharded"):
        for dtype in ("float64", "float32"):
            everyone = np.concatenate([references_of(r, 5) for r in range(size)])
            obs = points(9000 + rank, 300 + 11 * rank)
            obs[2] = (np.nan, 0.0)
            skd._host = no_host_copy
            try:
                index = skd.NearestIndex(comm, to_device(references_of(rank, 5).astype(dtype)), layout=layout)
                got_i, got_d = index.query(to_device(obs.astype(dtype)), 3)
            finally:
                skd._host = host_copy
            check(f"{tag} {layout} {dtype} framework", type(got_i).__module__.split(".")[0] == framework and
                  type(got_d).__module__.split(".")[0] == framework, f"{type(got_i)}, {type(got_d)}")
            got_i, got_d = cpu_backend_host(got_i), cpu_backend_host(got_d)
            check(f"{tag} {layout} {dtype} dtype", str(got_d.dtype) == dtype, str(got_d.dtype))
            want_i, want_d = cpu_backend.nearest(obs.astype(dtype).astype(np.float64), everyone.astype(dtype).astype(np.float64), 3)
            check(f"{tag} {layout} {dtype} ids", np.array_equal(got_i, want_i), f"{int((got_i != want_i).sum())} differ")
            check(f"{tag} {layout} {dtype} km", np.allclose(got_d, want_d.astype(dtype), rtol=1e-6 if dtype == "float32" else 1e-12,
                                                          atol=1e-9, equal_nan=True))
        # Rank 0's arrays on the GPU, the others' NumPy: the same collectives on every rank.
        mine = references_of(rank, 6)
        index = skd.NearestIndex(comm, to_device(mine) if rank == 0 else mine, layout=layout)
        obs = points(9100 + rank, 120)
        got_i, _ = index.query(to_device(obs) if rank == 0 else obs, 2)
        want_i, _ = cpu_backend.nearest(obs, np.concatenate([references_of(r, 6) for r in range(size)]), 2)
        check(f"{tag} {layout} mixed ranks", np.array_equal(cpu_backend_host(got_i), want_i))
        check(f"{tag} {layout} phases", all(index.last_exchange()[name] >= 0 for name in
                                            ("seconds", "search_seconds", "host_seconds", "staging_seconds")))


def model_checks():
    """benchmarks/distributed_model.py runs the sharded layout's partition and routing itself: on
    the same points (a fresh index: splitters from the references alone) it must count exactly the
    visits and bytes the C++ part counts, summed over the ranks."""
    k = 2
    parts = [np.radians(references_of(r, 8)) for r in range(size)]
    observations = [np.radians(points(8000 + r, 150 + 7 * r)) for r in range(size)]
    observations[0][4] = (np.nan, 0.0)
    index = skd.NearestIndex(comm, np.degrees(parts[rank]), layout="sharded", searcher=cpu_backend.Searcher())
    updated = index.last_exchange()
    index.query(np.degrees(observations[rank]), k)
    queried = index.last_exchange()

    def kth(lat, lon, shard_lat, shard_lon, k):  # the owner's bound, as cpu_backend.Searcher finds it
        if len(shard_lat) == 0:
            return np.full(len(lat), np.nan)
        return cpu_backend.nearest(np.stack([lat, lon], axis=1), np.stack([shard_lat, shard_lon], axis=1), k, angle="radians",
                                   distance="radians")[1][:, k - 1]

    model = distributed_model.sharded_routing([(p[:, 0], p[:, 1]) for p in parts], [(p[:, 0], p[:, 1]) for p in observations], k,
                                              kth_angles=kth, observation_samples=False)
    for name, counted, predicted in (
            ("visits", queried["visits"], model["visits"].sum()),
            ("observations sent", queried["observations_sent"], model["away"].sum() + model["visits"].sum()),
            ("update bytes", updated["bytes_sent"], distributed_model.sharded_update_bytes(size, model).sum()),
            ("query bytes", queried["bytes_sent"], distributed_model.sharded_query_bytes(size, k, model).sum()),
            ("references held", updated["references_held"], model["held"].sum())):
        total = comm.allreduce(counted)
        check(f"model {name}", total == predicted, f"counted {total}, the model {predicted}")


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
    if hasattr(array, "get"):
        return array.get()
    if type(array).__module__.split(".")[0] == "torch":
        return array.cpu().numpy()
    return np.asarray(array)


def main():
    gpu = streamkit.device_count() > 0
    if "--gpu-only" not in sys.argv:
        search_checks(cpu_backend.Searcher(), "cpu")
        model_checks()
    if gpu:
        raises("feature_range disagreement", ValueError, "the ranks disagree on feature_range's high end",
               lambda: skd.MinMaxScaler(comm, feature_range=(0, 1 + rank)).fit(np.ones((3, 2))))
        search_checks(None, "gpu")
        scaler_checks(lambda x: x, "numpy")
        try:
            import cupy
        except ImportError:
            cupy = None
        gpu_of_rank = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank() % streamkit.device_count()  # the search's default
        if cupy is not None:
            scaler_checks(cupy.asarray, "cupy")

            def on_cupy(x):
                with cupy.cuda.Device(gpu_of_rank):
                    return cupy.asarray(x)

            device_search_checks("cupy", on_cupy, "cupy search")
        try:
            import torch
        except ImportError:
            torch = None
        if torch is not None and torch.cuda.is_available():
            device_search_checks("torch", lambda x: torch.from_numpy(np.ascontiguousarray(x)).to(f"cuda:{gpu_of_rank}"), "torch search")
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
