#!/usr/bin/env python3
"""Exact k-nearest neighbours on the sphere: streamkit's engines against their GPU and CPU peers.

One process, the same generated data for every method. For each workload the script writes the points
to raw files, runs streamkit's CLI `bench_nn_files` once per engine (auto, brute_force, tree), then the
peers on the same points, already on the GPU, as 3-D float32 unit vectors (Euclidean chord order is
great-circle order):

  cupy_knn          cupy-knn 0.4.0, LBVH: LBVHIndex.build(refs) + query_knn(obs)
  jztree            jztree 1.1.0 (JAX, z-order tree): jztree.knn.knn.jit(refs, k=k, part_query=obs),
                    one call (the tree over both sets is built inside; build and query not separable)
  torch_cdist_topk  torch.cdist + topk(k, largest=False) over chunks of observations
  scipy_ckdtree     scipy cKDTree on the host, workers=-1 (a subset of observations on big shapes,
                    query time extrapolated linearly)
  numba_two_pass    the motivating notebook's method, k = 1 only: a Numba CUDA float32 haversine kernel,
                    pass 1 = blocks of observation tiles x reference slices, per-thread minima, a
                    warp-shuffle (value, index) reduction into per-slice partial minima; pass 2 merges slices

Timing: data already on the device (host arrays for cKDTree); per step build + query, the device
synchronised before and after each phase, wall clock between (time.perf_counter); `--warmups` runs
(default 2), then the median of `--repeat` runs (default 5). streamkit's numbers are the ones its CLI
prints (it times itself, given `--repeat`). The unit-vector conversion of the peers' inputs is done once
before timing (not timed); streamkit's CLI converts latitudes/longitudes in degrees itself.
A method whose timed runs would take more than `--max-method-seconds` (estimated from one measured chunk)
is skipped and its estimate recorded.

Checking: a sample of `--sample` observations (default 2,000) per workload; the exact k nearest in
float64 on the CPU (chord between float64 unit vectors computed from the float32 inputs; ties by the
smallest index). A row is wrong if a returned neighbour's float64 great-circle distance differs from the
reference's j-th distance by more than 1e-6 relative + 1e-9 rad absolute, if an index repeats or is out
of range. `identical_indices` counts rows equal to the reference's indices.

Usage (repository root; the device machine has no internet: the two peers and jztree's CUDA backend
travel as wheels in .whl/):

  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
      .whl/*.whl && export PYTHONPATH=/tmp/site
  PYTHONUNBUFFERED=1 python3 benchmarks/peers_nearest.py --out docs/results/h100_peers_nearest.json
  python3 benchmarks/peers_nearest.py --quick --out /tmp/quick.json              # smoke run (sizes / 16)
  python3 benchmarks/peers_nearest.py --workloads gps_1M_places_k1,sweep --methods streamkit,cupy_knn

Workloads (fixed seeds): uniform_2^24x2^14_k1, gps_1M_places_k1, clustered_2^22x2^20_k1,
uniform_2^20x2^20_k16, small_2^16x2^13_k1, and `sweep` (N = 2^20 uniform observations, M = 2^10 ... 2^22
uniform references, k = 1, streamkit engines only; for the plot of time against M).

Output JSON: {"gpu", "date", "command", "versions", "settings", "complete", "workloads": [{"name", "n", "m",
"k", "methods": [{"method", "status", "build_ms", "query_ms", "total_ms", "checked", "wrong",
"identical_indices", "max_error_rad", "note", ...}]}], "sweep": [{"m", "engine", "build_ms", "query_ms",
"total_ms", ...}]}. The file is rewritten after every workload, so a run cut short keeps what it finished
("complete": false). Statuses: ok, missing (package or binary absent), skipped, n/a, error.
Turn it into docs with: python3 benchmarks/make_report.py ... --peers FILE.json
"""
import os

# JAX must not take 75 % of the GPU at import: streamkit's CLI and the other peers share the device.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse
import csv
import dataclasses
import datetime
import importlib.metadata
import json
import math
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
EARTH_RADIUS_KM = 6371.0088
BASE_SEED = 20261123
RELATIVE_TOLERANCE = 1e-6
ABSOLUTE_TOLERANCE_RAD = 1e-9
TORCH_CHUNK_ELEMENTS = 1 << 30   # distances per torch.cdist chunk: 4 GiB of float32, peak well under 20 GB
HOST_QUERY_BUDGET_S = 0.5        # cKDTree: largest observation subset whose query takes about this long
STREAMKIT_ENGINES = ("auto", "brute_force", "tree")
PEERS = ("cupy_knn", "jztree", "torch_cdist_topk", "scipy_ckdtree", "numba_two_pass")
METHODS = tuple(f"streamkit_{e}" for e in STREAMKIT_ENGINES) + PEERS


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    n: int
    m: int | None      # None: every place of the CSV
    k: int
    kind: str          # uniform, gps, clustered
    peers: tuple


WORKLOADS = (
    Workload("uniform_2^24x2^14_k1", 1 << 24, 1 << 14, 1, "uniform", PEERS),
    Workload("gps_1M_places_k1", 1_000_000, None, 1, "gps", PEERS),
    Workload("clustered_2^22x2^20_k1", 1 << 22, 1 << 20, 1, "clustered", PEERS),
    Workload("uniform_2^20x2^20_k16", 1 << 20, 1 << 20, 16, "uniform", PEERS),
    Workload("small_2^16x2^13_k1", 1 << 16, 1 << 13, 1, "uniform", ("torch_cdist_topk",)),
)
SWEEP_N = 1 << 20
SWEEP_M = tuple(1 << e for e in range(10, 23, 2))
SWEEP_ENGINES = ("brute_force", "tree", "auto")


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------

def rng_for(name, role):
    return np.random.default_rng([BASE_SEED, zlib.crc32(name.encode()), role])


def unit_vectors(lat_deg, lon_deg):
    """float64 unit vectors (x, y, z) of latitudes/longitudes in degrees (any float type)."""
    lat = np.radians(np.asarray(lat_deg, dtype=np.float64))
    lon = np.radians(np.asarray(lon_deg, dtype=np.float64))
    cos_lat = np.cos(lat)
    return np.stack([cos_lat * np.cos(lon), cos_lat * np.sin(lon), np.sin(lat)], axis=1)


def degrees_from_unit(v):
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    lat = np.degrees(np.arcsin(np.clip(v[:, 2], -1.0, 1.0)))
    lon = np.degrees(np.arctan2(v[:, 1], v[:, 0]))
    return lat.astype(np.float32), lon.astype(np.float32)


def uniform_points(rng, count):
    """Uniform on the sphere: lat = asin(2u - 1), lon uniform; float32 degrees."""
    lat = np.degrees(np.arcsin(2.0 * rng.random(count) - 1.0))
    lon = rng.uniform(-180.0, 180.0, count)
    return lat.astype(np.float32), lon.astype(np.float32)


def points_near(rng, centre_lat, centre_lon, count, mode, scale_km):
    """Points around randomly chosen centres: 'disc' = uniform in a disc of radius scale_km,
    'gaussian' = Gaussian north/east offsets of sigma scale_km (tangent plane, then back on the sphere)."""
    pick = rng.integers(0, len(centre_lat), count)
    lat = np.radians(centre_lat[pick].astype(np.float64))
    lon = np.radians(centre_lon[pick].astype(np.float64))
    p = unit_vectors(centre_lat[pick], centre_lon[pick])
    east = np.stack([-np.sin(lon), np.cos(lon), np.zeros_like(lon)], axis=1)
    north = np.stack([-np.sin(lat) * np.cos(lon), -np.sin(lat) * np.sin(lon), np.cos(lat)], axis=1)
    if mode == "disc":
        r = scale_km * np.sqrt(rng.random(count))
        theta = rng.uniform(0.0, 2.0 * np.pi, count)
        d_north, d_east = r * np.cos(theta), r * np.sin(theta)
    else:
        d_north, d_east = rng.normal(0.0, scale_km, count), rng.normal(0.0, scale_km, count)
    v = p + (d_north[:, None] * north + d_east[:, None] * east) / EARTH_RADIUS_KM
    return degrees_from_unit(v)


def read_places(path):
    """Latitudes and longitudes (float32 degrees) of the places CSV, columns found by header name."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = [h.strip().lower() for h in next(reader)]
        lat_col = next(i for i, h in enumerate(header) if h in ("lat", "latitude"))
        lon_col = next(i for i, h in enumerate(header) if h in ("lon", "lng", "long", "longitude"))
        rows = [(float(r[lat_col]), float(r[lon_col])) for r in reader if r]
    coords = np.asarray(rows, dtype=np.float64)
    return coords[:, 0].astype(np.float32), coords[:, 1].astype(np.float32)


class Data:
    """One workload's points: float32 degrees (what streamkit reads), float32 unit vectors (what the
    peers get) and float64 unit vectors of the references (for the checker)."""

    def __init__(self, obs_lat, obs_lon, ref_lat, ref_lon):
        self.obs_lat, self.obs_lon, self.ref_lat, self.ref_lon = obs_lat, obs_lon, ref_lat, ref_lon
        self.n, self.m = len(obs_lat), len(ref_lat)
        self.obs_unit32 = np.ascontiguousarray(unit_vectors(obs_lat, obs_lon).astype(np.float32))
        self.ref_unit64 = unit_vectors(ref_lat, ref_lon)
        self.ref_unit32 = np.ascontiguousarray(self.ref_unit64.astype(np.float32))

    def write(self, directory):
        """Raw little-endian float32 (lat, lon) pairs in degrees, as bench_nn_files reads them."""
        obs_file, ref_file = Path(directory) / "observations.bin", Path(directory) / "references.bin"
        np.stack([self.obs_lat, self.obs_lon], axis=1).astype("<f4").tofile(obs_file)
        np.stack([self.ref_lat, self.ref_lon], axis=1).astype("<f4").tofile(ref_file)
        return obs_file, ref_file


def make_data(workload, places, quick):
    div = 16 if quick else 1
    n = workload.n // div
    obs_rng, ref_rng = rng_for(workload.name, 0), rng_for(workload.name, 1)
    if workload.kind == "uniform":
        obs, refs = uniform_points(obs_rng, n), uniform_points(ref_rng, workload.m // div)
    elif workload.kind == "gps":
        place_lat, place_lon = places
        if quick:  # a subset of the places, in file order
            keep = np.sort(ref_rng.choice(len(place_lat), len(place_lat) // div, replace=False))
            place_lat, place_lon = place_lat[keep], place_lon[keep]
        near = points_near(obs_rng, place_lat, place_lon, n // 2, "disc", 5.0)
        far = uniform_points(obs_rng, n - n // 2)
        order = obs_rng.permutation(n)
        obs = (np.concatenate([near[0], far[0]])[order], np.concatenate([near[1], far[1]])[order])
        refs = (place_lat, place_lon)
    elif workload.kind == "clustered":
        obs = points_near(obs_rng, places[0], places[1], n, "gaussian", 2.0)
        refs = points_near(ref_rng, places[0], places[1], workload.m // div, "gaussian", 2.0)
    else:
        raise ValueError(workload.kind)
    return Data(obs[0], obs[1], refs[0], refs[1])


# ------------------------------------------------------------------------------------------------
# Float64 reference and checker
# ------------------------------------------------------------------------------------------------

def angle_from_chord(chord):
    return 2.0 * np.arcsin(np.minimum(chord / 2.0, 1.0))


def exact_knn(query64, refs64, k):
    """Exact k nearest by float64 chord, ties by the smallest index. Returns (indices (s, k) int64, -1
    where M < k; great-circle distances (s, k) rad, NaN there)."""
    s, m = len(query64), len(refs64)
    kk = min(k, m)
    idx = np.full((s, k), -1, dtype=np.int64)
    ang = np.full((s, k), np.nan)

    def finish(row, candidates):
        d2 = ((refs64[candidates] - query64[row]) ** 2).sum(axis=1)
        order = np.lexsort((candidates, d2))[:kk]
        idx[row, :kk] = candidates[order]
        ang[row, :kk] = angle_from_chord(np.sqrt(d2[order]))

    try:
        from scipy.spatial import cKDTree
    except ImportError:
        cKDTree = None
    if cKDTree is not None:
        # The tree finds the k-th distance; every point within it (plus a margin far above rounding) is
        # then ranked by the same float64 formula as the fallback, so ties come out by index.
        tree = cKDTree(refs64)
        dist, _ = tree.query(query64, k=kk)
        radius = np.asarray(dist).reshape(s, kk)[:, -1] * (1.0 + 1e-9) + 1e-12
        balls = tree.query_ball_point(query64, radius)
        for row in range(s):
            finish(row, np.asarray(balls[row], dtype=np.int64))
        return idx, ang
    rows_per_chunk = max(1, (1 << 24) // m)
    for lo in range(0, s, rows_per_chunk):
        block = query64[lo:lo + rows_per_chunk]
        d2 = ((refs64[None, :, :] - block[:, None, :]) ** 2).sum(axis=2)
        for r in range(len(block)):
            kth = np.partition(d2[r], kk - 1)[kk - 1]
            finish(lo + r, np.nonzero(d2[r] <= kth)[0])
    return idx, ang


def check_rows(rows, query64, refs64, ref_idx, ref_ang):
    """(wrong rows, rows identical to the reference, largest distance excess in rad)."""
    rows = np.asarray(rows, dtype=np.int64)
    m = len(refs64)
    expected_present = ref_idx >= 0
    in_range = (rows >= 0) & (rows < m)
    vectors = refs64[np.clip(rows, 0, m - 1)]
    got = angle_from_chord(np.linalg.norm(vectors - query64[:, None, :], axis=2))
    excess = np.where(expected_present & in_range, got - ref_ang, 0.0)
    bad = np.where(expected_present,
                   ~in_range | (np.abs(excess) > RELATIVE_TOLERANCE * np.nan_to_num(ref_ang) + ABSOLUTE_TOLERANCE_RAD),
                   rows != -1)
    ordered = np.sort(np.where(in_range, rows, -1 - np.arange(rows.shape[1])), axis=1)
    repeated = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1) if rows.shape[1] > 1 else np.zeros(len(rows), bool)
    wrong = bad.any(axis=1) | repeated
    identical = (rows == ref_idx).all(axis=1)
    return int(wrong.sum()), int(identical.sum()), float(np.max(np.abs(excess))) if excess.size else 0.0


class Reference:
    """The float64 answers for one workload's sample, computed once, then used for every method."""

    def __init__(self, data, k, sample_size, name):
        rng = rng_for(name, 2)
        self.sample = np.sort(rng.choice(data.n, size=min(sample_size, data.n), replace=False))
        self.query64 = unit_vectors(data.obs_lat[self.sample], data.obs_lon[self.sample])
        self.refs64 = data.ref_unit64
        self.k = k
        self._answer = None

    def check(self, entry, rows):
        if self._answer is None:
            started = time.perf_counter()
            self._answer = exact_knn(self.query64, self.refs64, self.k)
            log(f"    float64 reference for {len(self.sample)} rows in {time.perf_counter() - started:.1f} s")
        wrong, identical, excess = check_rows(rows, self.query64, self.refs64, *self._answer)
        entry.update(checked=len(self.sample), wrong=wrong, identical_indices=identical, max_error_rad=excess)


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------

def device_sync_function():
    """A device-wide synchronisation usable whatever framework enqueued the work (one CUDA context)."""
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return cupy.cuda.runtime.deviceSynchronize
    except Exception:
        pass
    try:
        import torch
        if torch.cuda.is_available():
            return torch.cuda.synchronize
    except Exception:
        pass
    return lambda: None


class Clock:
    """Phases of one step: start(), then mark(name) after each phase (each synchronises the device)."""

    def __init__(self, sync):
        self.sync = sync
        self.phases = {}
        self._t = 0.0

    def start(self):
        self.sync()
        self.phases = {}
        self._t = time.perf_counter()

    def mark(self, name):
        self.sync()
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + (now - self._t) * 1e3
        self._t = now


def measure(step, clock, warmups, repeats):
    """Warm-ups, then `repeats` timed steps. Returns (summary dict, last step's output)."""
    output = None
    for _ in range(warmups):
        output = step(clock)
    runs = []
    for _ in range(repeats):
        output = step(clock)
        runs.append(dict(clock.phases))
    summary = {"runs": repeats, "warmups": warmups,
               "total_ms": statistics.median(sum(r.values()) for r in runs),
               "build_ms": statistics.median(r["build"] for r in runs) if "build" in runs[0] else None,
               "query_ms": statistics.median(r["query"] for r in runs) if "query" in runs[0] else None}
    return summary, output


def entry_for(method, status="ok", note="", **fields):
    entry = {"method": method, "status": status, "build_ms": None, "query_ms": None, "total_ms": None,
             "checked": 0, "wrong": None, "identical_indices": None, "max_error_rad": None, "note": note}
    entry.update(fields)
    return entry


def too_slow(ctx, method, step_ms, how):
    """A skipped entry if warm-ups + repeats at step_ms would exceed --max-method-seconds, else None."""
    total_s = step_ms * (ctx.warmups + ctx.repeat) / 1e3
    if total_s <= ctx.max_method_seconds:
        return None
    return entry_for(method, "skipped", estimated_ms=step_ms,
                     note=f"skipped: estimated > {ctx.max_method_seconds:g} s ({step_ms / 1e3:.1f} s per step x "
                          f"{ctx.warmups + ctx.repeat} runs, extrapolated from {how})")


# ------------------------------------------------------------------------------------------------
# streamkit (C++ CLI)
# ------------------------------------------------------------------------------------------------

def run_streamkit(ctx, files, n, m, k, engine, precision=None):
    """bench_nn_files once (`precision` "fast" or "exact"; None: the CLI's default, fast); returns (entry,
    indices (n, k) int64 or None)."""
    method = f"streamkit_{engine}"
    binary = Path(ctx.bench_binary)
    if not binary.is_file():
        return entry_for(method, "missing", note=f"missing: {binary} not found (build bench_nn_files)"), None
    out_file = Path(ctx.tmp) / f"indices_{engine}.bin"
    out_file.unlink(missing_ok=True)
    command = [str(binary), "--observations", str(files[0]), "--references", str(files[1]), "--k", str(k),
               "--engine", engine, "--repeat", str(ctx.repeat), "--indices", str(out_file)]
    if precision is not None:
        command += ["--precision", precision]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=ctx.cli_timeout)
    except subprocess.TimeoutExpired:
        return entry_for(method, "error", note=f"error: timed out after {ctx.cli_timeout} s"), None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        status = "skipped" if proc.returncode == 77 else "error"
        return entry_for(method, status, note=f"{status}: exit {proc.returncode}: {' | '.join(tail)}"), None
    record = None
    for line in reversed(proc.stdout.splitlines()):
        if line.strip().startswith("{"):
            try:
                record = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if record is None:
        return entry_for(method, "error", note=f"error: no JSON object on stdout: {proc.stdout[-300:]!r}"), None
    indices = np.fromfile(out_file, dtype="<i4") if out_file.is_file() else np.zeros(0, np.int32)
    if indices.size != n * k:
        return entry_for(method, "error", note=f"error: {out_file.name} holds {indices.size} indices, expected {n * k}"), None
    notes = []
    if (record.get("n"), record.get("m"), record.get("k")) != (n, m, k):
        notes.append(f"CLI reports n={record.get('n')} m={record.get('m')} k={record.get('k')}, expected {n}, {m}, {k}")
    entry = entry_for(method, build_ms=record.get("build_ms"), query_ms=record.get("query_ms"),
                      total_ms=record.get("total_ms"), engine_used=record.get("engine"),
                      bytes_per_reference=record.get("bytes_per_reference"), gpu=record.get("gpu"),
                      runs=ctx.repeat, note="; ".join(notes))
    return entry, indices.reshape(n, k).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# Peers
# ------------------------------------------------------------------------------------------------

def free_gpu_memory():
    """Hand cached blocks back so that the next method (or streamkit's process) finds the memory."""
    for free in (lambda: __import__("cupy").get_default_memory_pool().free_all_blocks(),
                 lambda: __import__("torch").cuda.empty_cache() if "torch" in sys.modules else None):
        try:
            free()
        except Exception:
            pass


CUPY_KNN_KERNELS = ("compute_morton_kernel", "compute_morton_points_kernel", "initialize_tree_kernel",
                    "construct_tree_kernel", "optimize_tree_kernel", "compute_free_indices_kernel",
                    "compact_tree_kernel")


def patch_cupy_knn(lbvh_index, cupy):
    """cupy-knn 0.4.0 compiles with --std=c++11; this CuPy's headers (CCCL) need C++17. The module's
    kernels compile lazily, so replacing its flag tuple and its tree-construction RawModule before the
    first LBVHIndex is made is enough (the query module reads the flags at prepare_knn_default)."""
    flags = tuple(f.replace("--std=c++11", "--std=c++17") for f in lbvh_index._compile_flags)
    if flags != lbvh_index._compile_flags:
        lbvh_index._compile_flags = flags
        lbvh_index._construct_tree_kernels = cupy.RawModule(code=lbvh_index._lbvh_src, options=flags,
                                                            name_expressions=CUPY_KNN_KERNELS)
    return flags


def run_cupy_knn(ctx, data, k, ref):
    try:
        import cupy as cp
        import cupy_knn
        from cupy_knn import lbvh_index
    except Exception as exc:
        return entry_for("cupy_knn", "missing", note=f"missing: {exc}")
    flags = patch_cupy_knn(lbvh_index, cp)
    refs, obs = cp.asarray(data.ref_unit32), cp.asarray(data.obs_unit32)
    index = cupy_knn.LBVHIndex()                 # defaults: leaf_size=32, sort_queries=True, compact=True
    index.prepare_knn_default(k)                 # compiles the query kernel for this K (once per k)

    def step(clock):
        clock.start()
        index.build(refs)
        clock.mark("build")
        indices, _, _ = index.query_knn(obs)
        clock.mark("query")
        return indices

    summary, indices = measure(step, Clock(ctx.sync), ctx.warmups, ctx.repeat)
    rows = indices[cp.asarray(ref.sample)].get().astype(np.int64)
    rows[rows == 0xFFFFFFFF] = -1
    entry = entry_for("cupy_knn", **summary, note=f"compile flags {' '.join(f.strip() for f in flags)}")
    ref.check(entry, rows)
    del refs, obs, index, indices
    return entry


def run_jztree(ctx, data, k, ref):
    try:
        import jax
        import jztree
        from jztree.config import KNNConfig
    except Exception as exc:
        return entry_for("jztree", "missing", note=f"missing: {exc}")
    if jax.default_backend() not in ("gpu", "cuda"):
        return entry_for("jztree", "error", note=f"error: JAX backend is {jax.default_backend()}, not gpu")
    refs, obs = jax.device_put(data.ref_unit32), jax.device_put(data.obs_unit32)
    cfg, notes = KNNConfig(), []
    for attempt in range(4):
        def step(clock, cfg=cfg):
            clock.start()
            _, indices = jztree.knn.knn.jit(refs, k=k, part_query=obs, cfg=cfg)
            indices.block_until_ready()
            clock.mark("build+query")
            return indices
        try:
            summary, indices = measure(step, Clock(ctx.sync), ctx.warmups, ctx.repeat)
            break
        except Exception as exc:  # jztree sizes its buffers ahead and says which factor to raise
            if "alloc_fac" not in str(exc) or attempt == 3:
                raise
            cfg = dataclasses.replace(cfg, alloc_fac_ilist=cfg.alloc_fac_ilist * 4,
                                      tree=dataclasses.replace(cfg.tree, alloc_fac_nodes=cfg.tree.alloc_fac_nodes * 2))
            notes.append(f"retried with alloc_fac_ilist={cfg.alloc_fac_ilist:g}, alloc_fac_nodes={cfg.tree.alloc_fac_nodes:g}")
    rows = np.asarray(indices)[ref.sample].astype(np.int64)
    entry = entry_for("jztree", **summary,
                      note="; ".join(["build and query in one jit call (tree over both sets)"] + notes))
    ref.check(entry, rows)
    del refs, obs, indices
    return entry


def run_torch(ctx, data, k, ref):
    try:
        import torch
    except Exception as exc:
        return entry_for("torch_cdist_topk", "missing", note=f"missing: {exc}")
    if not torch.cuda.is_available():
        return entry_for("torch_cdist_topk", "error", note="error: torch sees no GPU")
    device = torch.device("cuda")
    n, m, kk = data.n, data.m, min(k, data.m)
    chunk = max(1, min(n, TORCH_CHUNK_ELEMENTS // m))
    refs = torch.from_numpy(data.ref_unit32).to(device)
    obs = torch.from_numpy(data.obs_unit32).to(device)
    out = torch.full((n, k), -1, dtype=torch.int64, device=device)

    def rows(lo, hi):
        distances = torch.cdist(obs[lo:hi], refs)   # default compute mode: matrix-product form for > 25 rows
        out[lo:hi, :kk] = torch.topk(distances, kk, dim=1, largest=False, sorted=True).indices

    clock = Clock(ctx.sync)
    rows(0, chunk)                                  # warm-up of one chunk
    clock.start()
    rows(0, chunk)
    clock.mark("probe")
    step_ms = clock.phases["probe"] * n / chunk
    skipped = too_slow(ctx, "torch_cdist_topk", step_ms, f"one chunk of {chunk} x {m}")
    if skipped:
        del refs, obs, out
        return skipped

    def step(clock):
        clock.start()
        for lo in range(0, n, chunk):
            rows(lo, min(lo + chunk, n))
        clock.mark("query")
        return out

    summary, _ = measure(step, clock, ctx.warmups, ctx.repeat)
    picked = out[torch.from_numpy(ref.sample).to(device)].cpu().numpy()
    entry = entry_for("torch_cdist_topk", **summary,
                      note=f"no build; chunks of {chunk} observations; cdist's default compute mode (matrix product)")
    ref.check(entry, picked)
    del refs, obs, out
    return entry


def run_ckdtree(ctx, data, k, ref):
    try:
        from scipy.spatial import cKDTree
    except Exception as exc:
        return entry_for("scipy_ckdtree", "missing", note=f"missing: {exc}")
    n, kk = data.n, min(k, data.m)
    refs, obs = data.ref_unit32, data.obs_unit32
    tree = cKDTree(refs)
    probe = obs[:min(n, 1 << 16)]
    started = time.perf_counter()
    tree.query(probe, k=kk, workers=-1)
    per_row_s = (time.perf_counter() - started) / len(probe)
    subset = n if per_row_s * n <= HOST_QUERY_BUDGET_S else min(n, max(len(probe), int(HOST_QUERY_BUDGET_S / per_row_s)))
    queries = obs[:subset]

    def step(clock):
        clock.start()
        built = cKDTree(refs)
        clock.mark("build")
        built.query(queries, k=kk, workers=-1)
        clock.mark("query")
        return built

    summary, built = measure(step, Clock(lambda: None), ctx.warmups, ctx.repeat)
    note = f"host, {os.cpu_count()} CPUs, workers=-1, float32 unit vectors (converted to float64 by cKDTree)"
    if subset < n:
        summary["query_ms"] *= n / subset
        summary["total_ms"] = summary["build_ms"] + summary["query_ms"]
        note += f"; query run on the first {subset} of {n} observations and extrapolated linearly"
    _, found = built.query(obs[ref.sample], k=kk)
    found = np.asarray(found, dtype=np.int64).reshape(len(ref.sample), kk)
    rows = np.full((len(ref.sample), k), -1, dtype=np.int64)
    rows[:, :kk] = np.where(found >= data.m, -1, found)
    entry = entry_for("scipy_ckdtree", **summary, extrapolated=subset < n, subset=subset, note=note)
    ref.check(entry, rows)
    return entry


NUMBA_WARPS_PER_BLOCK = 8
NUMBA_OBS_PER_WARP = 4          # an observation tile of 32 per block
NUMBA_NO_INDEX = 2**31 - 1
_HALF, _TO_RAD, _INF = np.float32(0.5), np.float32(np.pi / 180.0), np.float32(np.inf)
_numba_kernels = None


def import_numba_cuda():
    """numba.cuda, importable with NumPy 2.5: numba-cuda still refers to numpy.row_stack, which NumPy 2.5
    removed (it was an alias of vstack)."""
    if not hasattr(np, "row_stack"):
        np.row_stack = np.vstack
    from numba import cuda
    return cuda


def numba_kernels():
    """The two-pass float32 haversine kernel (k = 1), defined on first use (Numba compiles at first launch).
    numba's names are made module globals here so that the kernels see them as globals."""
    global _numba_kernels, cuda, float32, int32
    if _numba_kernels is not None:
        return _numba_kernels
    from numba import cuda, float32, int32

    half, to_rad, inf = _HALF, _TO_RAD, _INF
    warps, per_warp, no_index = NUMBA_WARPS_PER_BLOCK, NUMBA_OBS_PER_WARP, NUMBA_NO_INDEX

    @cuda.jit
    def prepare(lat_deg, lon_deg, lat, lon, cos_lat):
        i = cuda.grid(1)
        if i < lat_deg.shape[0]:
            la = lat_deg[i] * to_rad
            lat[i] = la
            lon[i] = lon_deg[i] * to_rad
            cos_lat[i] = math.cos(la)

    @cuda.jit
    def pass1(o_lat, o_lon, o_cos, r_lat, r_lon, r_cos, slice_len, part_a, part_i):
        # block = (observation tile, reference slice); a warp per observation, each lane keeps the
        # minimum of hav = sin^2(dlat/2) + cos lat1 cos lat2 sin^2(dlon/2) over its strided references
        lane = cuda.threadIdx.x & 31
        warp = cuda.threadIdx.x >> 5
        s = cuda.blockIdx.y
        m = r_lat.shape[0]
        begin = s * slice_len
        end = min(begin + slice_len, m)
        first = (cuda.blockIdx.x * warps + warp) * per_warp
        for t in range(per_warp):
            i = first + t
            if i >= o_lat.shape[0]:
                return                               # the same for every lane of the warp
            la, lo, c = o_lat[i], o_lon[i], o_cos[i]
            best = inf
            best_j = int32(no_index)
            j = begin + lane
            while j < end:
                s_lat = math.sin((r_lat[j] - la) * half)
                s_lon = math.sin((r_lon[j] - lo) * half)
                a = s_lat * s_lat + c * r_cos[j] * s_lon * s_lon
                if a < best:
                    best = a
                    best_j = int32(j)
                j += 32
            offset = 16
            while offset > 0:                        # warp-shuffle (value, index) min, ties: smaller index
                other_a = cuda.shfl_down_sync(0xFFFFFFFF, best, offset)
                other_j = cuda.shfl_down_sync(0xFFFFFFFF, best_j, offset)
                if other_a < best or (other_a == best and other_j < best_j):
                    best = other_a
                    best_j = other_j
                offset //= 2
            if lane == 0:
                part_a[s, i] = best
                part_i[s, i] = best_j

    @cuda.jit
    def pass2(part_a, part_i, index, distance):
        i = cuda.grid(1)
        if i < index.shape[0]:
            best = part_a[0, i]
            best_j = part_i[0, i]
            for s in range(1, part_a.shape[0]):      # slices in index order: strict < keeps the smaller index
                if part_a[s, i] < best:
                    best = part_a[s, i]
                    best_j = part_i[s, i]
            index[i] = -1 if best_j == no_index else best_j
            distance[i] = float32(2.0) * math.asin(math.sqrt(min(best, float32(1.0))))

    _numba_kernels = (prepare, pass1, pass2)
    return _numba_kernels


class NumbaTwoPass:
    """Device buffers and launch shapes for one (n, m); step() runs prepare + pass 1 + pass 2."""

    def __init__(self, cuda, n, m, sm_count):
        self.cuda, self.n, self.m = cuda, n, m
        tile = NUMBA_WARPS_PER_BLOCK * NUMBA_OBS_PER_WARP
        self.tiles = (n + tile - 1) // tile
        # enough blocks to fill the GPU for any n, slices of at least 2048 references
        target_blocks = 16 * sm_count
        self.slices = int(max(1, min((target_blocks + self.tiles - 1) // self.tiles, m // 2048, 65535)))
        self.slice_len = (m + self.slices - 1) // self.slices
        f32, i32 = np.float32, np.int32
        self.obs = [cuda.device_array(n, f32) for _ in range(3)]
        self.refs = [cuda.device_array(m, f32) for _ in range(3)]
        self.part_a = cuda.device_array((self.slices, n), f32)
        self.part_i = cuda.device_array((self.slices, n), i32)
        self.index = cuda.device_array(n, i32)
        self.distance = cuda.device_array(n, f32)

    def build(self, ref_lat, ref_lon):
        prepare, _, _ = numba_kernels()
        prepare[(self.m + 255) // 256, 256](ref_lat, ref_lon, *self.refs)

    def query(self, obs_lat, obs_lon):
        prepare, pass1, pass2 = numba_kernels()
        prepare[(self.n + 255) // 256, 256](obs_lat, obs_lon, *self.obs)
        pass1[(self.tiles, self.slices), 32 * NUMBA_WARPS_PER_BLOCK](*self.obs, *self.refs, self.slice_len,
                                                                    self.part_a, self.part_i)
        pass2[(self.n + 255) // 256, 256](self.part_a, self.part_i, self.index, self.distance)


def run_numba(ctx, data, k, ref):
    if k != 1:
        return entry_for("numba_two_pass", "n/a", note="n/a: the notebook's kernel finds k = 1 only")
    try:
        cuda = import_numba_cuda()
        if not cuda.is_available():
            return entry_for("numba_two_pass", "error", note="error: numba.cuda sees no GPU")
        numba_kernels()
    except Exception as exc:
        return entry_for("numba_two_pass", "missing", note=f"missing: {exc}")
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    ref_lat, ref_lon = cuda.to_device(data.ref_lat), cuda.to_device(data.ref_lon)
    obs_lat, obs_lon = cuda.to_device(data.obs_lat), cuda.to_device(data.obs_lon)
    clock = Clock(ctx.sync)
    probe_n = min(data.n, 1 << 16)
    probe = NumbaTwoPass(cuda, probe_n, data.m, sm_count)
    probe.build(ref_lat, ref_lon)
    probe.query(obs_lat[:probe_n], obs_lon[:probe_n])   # compiles
    clock.start()
    probe.query(obs_lat[:probe_n], obs_lon[:probe_n])
    clock.mark("probe")
    step_ms = clock.phases["probe"] * data.n / probe_n
    del probe
    skipped = too_slow(ctx, "numba_two_pass", step_ms, f"{probe_n} observations")
    if skipped:
        return skipped
    search = NumbaTwoPass(cuda, data.n, data.m, sm_count)

    def step(clock):
        clock.start()
        search.build(ref_lat, ref_lon)
        clock.mark("build")
        search.query(obs_lat, obs_lon)
        clock.mark("query")
        return search.index

    summary, index = measure(step, clock, ctx.warmups, ctx.repeat)
    rows = index.copy_to_host()[ref.sample].astype(np.int64).reshape(-1, 1)
    entry = entry_for("numba_two_pass", **summary,
                      note=f"float32 haversine, {search.slices} reference slices, tiles of "
                           f"{NUMBA_WARPS_PER_BLOCK * NUMBA_OBS_PER_WARP} observations, buffers allocated before timing")
    ref.check(entry, rows)
    del search
    return entry


PEER_RUNNERS = {"cupy_knn": run_cupy_knn, "jztree": run_jztree, "torch_cdist_topk": run_torch,
                "scipy_ckdtree": run_ckdtree, "numba_two_pass": run_numba}


# ------------------------------------------------------------------------------------------------
# Driver
# ------------------------------------------------------------------------------------------------

def wanted(ctx, method):
    return any(method == w or method.startswith(w) for w in ctx.methods)


def run_workload(ctx, workload, places):
    started = time.perf_counter()
    data = make_data(workload, places, ctx.quick)
    log(f"{workload.name}: n={data.n} m={data.m} k={workload.k} (data in {time.perf_counter() - started:.1f} s)")
    ref = Reference(data, workload.k, ctx.sample, workload.name)
    files = data.write(ctx.tmp)
    result = {"name": workload.name, "n": data.n, "m": data.m, "k": workload.k, "kind": workload.kind, "methods": []}
    for engine in STREAMKIT_ENGINES:          # first, while this process holds little GPU memory
        method = f"streamkit_{engine}"
        if not wanted(ctx, method):
            continue
        entry, indices = run_streamkit(ctx, files, data.n, data.m, workload.k, engine)
        if indices is not None:
            ref.check(entry, indices[ref.sample])
        result["methods"].append(entry)
        log(f"  {method}: {summary_line(entry)}")
    for method in PEERS:
        if method not in workload.peers or not wanted(ctx, method):
            continue
        try:
            entry = PEER_RUNNERS[method](ctx, data, workload.k, ref)
        except Exception as exc:
            entry = entry_for(method, "error", note=f"error: {type(exc).__name__}: {str(exc).strip()[:400]}")
            log(traceback.format_exc())
        free_gpu_memory()
        result["methods"].append(entry)
        log(f"  {method}: {summary_line(entry)}")
    return result


def run_sweep(ctx):
    div = 16 if ctx.quick else 1
    n = SWEEP_N // div
    obs = uniform_points(rng_for("sweep", 0), n)
    points = []
    for m in (m // div for m in SWEEP_M):
        refs = uniform_points(rng_for(f"sweep_m{m}", 1), m)
        data = Data(obs[0], obs[1], refs[0], refs[1])
        ref = Reference(data, 1, ctx.sample, "sweep")
        files = data.write(ctx.tmp)
        for engine in SWEEP_ENGINES:
            if not wanted(ctx, f"streamkit_{engine}"):
                continue
            entry, indices = run_streamkit(ctx, files, n, m, 1, engine)
            if indices is not None:
                ref.check(entry, indices[ref.sample])
            point = {"m": m, "n": n, "k": 1, "engine": engine}
            point.update({key: value for key, value in entry.items() if key != "method"})
            points.append(point)
            log(f"  sweep m={m} {engine}: {summary_line(entry)}")
    return points


def summary_line(entry):
    if entry["status"] != "ok":
        return entry["note"]
    parts = [f"total {entry['total_ms']:.3f} ms"]
    if entry.get("build_ms") is not None:
        parts.append(f"build {entry['build_ms']:.3f} ms, query {entry['query_ms']:.3f} ms")
    if entry.get("engine_used"):
        parts.append(f"engine {entry['engine_used']}")
    parts.append(f"wrong {entry['wrong']}/{entry['checked']}")
    return "; ".join(parts)


def versions(ctx):
    def version(dist):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "missing"

    found = {"python": sys.version.split()[0]}
    for dist in ("numpy", "scipy", "torch", "jax", "jaxlib", "jax-cuda13-plugin", "numba", "numba-cuda",
                 "scikit-learn", "cupy-knn", "jztree", "jztree-cu13"):
        found[dist] = version(dist)
    cupy = {dist: version(dist) for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy")}
    found.update({dist: v for dist, v in cupy.items() if v != "missing"} or {"cupy": "missing"})
    found["nvidia_driver"] = shell(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    # A copy of the working tree (the device's) may carry older git metadata than its files: say so.
    dirty = shell(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    found["streamkit_commit"] = shell(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) + (
        " with uncommitted changes" if dirty not in ("", "unknown") else "")
    found["bench_nn_files"] = str(ctx.bench_binary)
    return found


def shell(command):
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except Exception:
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [w.name for w in WORKLOADS] + ["sweep"]
    parser.add_argument("--workloads", default="all", help="comma-separated, from: " + ", ".join(names) + " (default all)")
    parser.add_argument("--methods", default="all",
                        help="comma-separated method names or prefixes, from: " + ", ".join(METHODS) + " (default all)")
    parser.add_argument("--quick", action="store_true", help="divide every size by 16 (smoke run)")
    parser.add_argument("--out", default="peers_nearest.json")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per method (median; default 5)")
    parser.add_argument("--warmups", type=int, default=2)
    parser.add_argument("--sample", type=int, default=2000, help="observations checked per workload")
    parser.add_argument("--max-method-seconds", type=float, default=60.0,
                        help="skip a method whose warm-ups + timed runs are estimated to take longer (default 60)")
    parser.add_argument("--bench-binary", default=str(REPO / "build-bench/benchmarks/bench_nn_files"))
    parser.add_argument("--places", default=str(REPO / "examples/data/cities1000.csv"))
    parser.add_argument("--cli-timeout", type=int, default=300, help="seconds per bench_nn_files call")
    args = parser.parse_args()
    selected = names if args.workloads == "all" else [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(selected) - set(names))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {names}")
    args.methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    if not any(m.startswith(w) or m == w for m in METHODS for w in args.methods):
        parser.error(f"no method matches {args.methods}; choose from {list(METHODS)}")

    places = read_places(args.places) if any(w.kind in ("gps", "clustered") for w in WORKLOADS if w.name in selected) else None
    out_path = Path(args.out)
    with tempfile.TemporaryDirectory(prefix="peers_nearest_") as tmp:
        args.tmp = tmp
        args.sync = device_sync_function()
        gpu = shell(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
        report = {"gpu": gpu, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "command": shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv)),
                  "versions": versions(args),
                  "settings": {"repeat": args.repeat, "warmups": args.warmups, "sample": args.sample, "quick": args.quick,
                               "max_method_seconds": args.max_method_seconds, "relative_tolerance": RELATIVE_TOLERANCE,
                               "absolute_tolerance_rad": ABSOLUTE_TOLERANCE_RAD, "methods": args.methods,
                               "timing": "data on the device; device synchronised around each phase, wall clock; "
                                         "streamkit: the CLI's own figures"},
                  "complete": False, "workloads": [], "sweep": []}

        def save():
            if report["gpu"] == "unknown":   # no nvidia-smi: take the name streamkit's CLI printed
                report["gpu"] = next((e["gpu"] for w in report["workloads"] for e in w["methods"] if e.get("gpu")),
                                     next((p["gpu"] for p in report["sweep"] if p.get("gpu")), "unknown"))
            out_path.write_text(json.dumps(report, indent=1) + "\n")

        for workload in WORKLOADS:
            if workload.name in selected:
                report["workloads"].append(run_workload(args, workload, places))
                save()
        if "sweep" in selected:
            log("sweep:")
            report["sweep"] = run_sweep(args)
        report["complete"] = True
        save()
    log(f"wrote {out_path}")


if __name__ == "__main__":
    main()
