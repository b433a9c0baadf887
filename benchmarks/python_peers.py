#!/usr/bin/env python3
"""streamkit's Python package against the methods of the motivating notebooks, in one process on the same data.

Groups of workloads (fixed seeds; the nearest-neighbour points are those of benchmarks/peers_nearest.py):

  nearest        (n, 2) float32 (lat, lon) degrees on the device, k = 1:
                   streamkit_cupy       streamkit.nearest on CuPy arrays (new result arrays per call)
                   streamkit_torch      streamkit.nearest on torch tensors
                   streamkit_index      streamkit.NearestIndex: update(references) + query(observations) per step
                   cpp_bench_nn_files   the C++ benchmark `bench_nn_files` on the same points (its own CUDA events,
                                        update + query per step, engine auto, the same precision)
                   numba_two_pass       the seed notebook's float32 Numba kernel (peers_harness.py, as in peers_nearest.py)
                   cupy_broadcast       CuPy broadcasting haversine in float32, as the notebook wrote it: radians,
                                        the (chunk x m) distance matrix in km, argmin, over chunks of observations
                   torch_cdist          torch.cdist on float32 3-D unit vectors (chord order = great-circle order;
                                        converted before timing) + argmin, over chunks of observations
  minmax_host    18 NumPy arrays of 60 x 98450 float64, host in, host out, each scaled per column (wall clock):
                   streamkit_normalize_many_pinned    inputs and `out=` arrays in pinned memory (cupyx.empty_pinned)
                   streamkit_normalize_many_pageable  ordinary NumPy inputs and `out=` arrays
                   streamkit_normalize_many_new       ordinary NumPy inputs, new outputs returned
                   sklearn_minmaxscaler               scikit-learn MinMaxScaler().fit_transform per array, on the CPU
                   numba_stream_pipeline              one CUDA stream per array, pinned host buffers, device buffers
                                                      allocated before timing, async H2D, a Numba kernel (a thread per
                                                      column: NaN-ignoring min/max, then the scaling), async D2H
                   torch_pinned_streams               pinned tensors, one torch stream per array, non_blocking copies,
                                                      amin/amax along dim 0, scaling, non_blocking copy back
  minmax_device  one device array, scaled per column (CUDA events):
                   streamkit_minmaxscaler_cupy / _torch  streamkit.MinMaxScaler().fit_transform(x)
                   cupy_expression       (x - x.min(0)) / (x.max(0) - x.min(0))
                   cupy_nan_expression   the same with cupy.nanmin / cupy.nanmax
                   torch_expression      (x - x.amin(0)) / (x.amax(0) - x.amin(0))
  overhead       tiny inputs (16 observations, 8 references; a 16 x 4 array): host time per call, the mean over
                 `--overhead-calls` calls enqueued in batches of 100 (the device synchronised between batches,
                 outside the timing, so the launch queue never fills), and the GPU time per call (CUDA events
                 around a batch enqueued behind a 20 ms busy kernel, so that the events see device time, not the
                 host's gaps; a call that waits for the device is noted). Context rows: a pair of cupy.empty and
                 one CuPy elementwise kernel.

Timing: device work on one stream (CuPy's and torch's default stream), CUDA events around each step; host-to-host
pipelines by wall clock (time.perf_counter) with a synchronisation at the end of the step. `--warmups` steps
(at least 2), then the median of `--repeat` steps (default 5; 20 for steps under 20 ms, 50 under 1 ms). A method
whose timed steps are estimated (from one timed chunk) to take over `--max-method-seconds` is skipped and its
estimate recorded.

Checks, for every method: nearest: the indices of `--sample` observations against a float64 CPU brute force
(peers_harness.Reference: a row is wrong when a neighbour's float64 great-circle distance differs from the
reference's by more than 1e-6 relative + 1e-9 rad); min-max: the largest absolute difference from a float64
NumPy reference (x - min) / (max - min) against 1e-12 (float64 results) or 1e-5 (float32). A wrong answer gets
the status "wrong" and is shown as such in the table. The script exits with 1 when a streamkit method (or the
C++ binary) errs or answers wrongly, after writing the JSON and the table; wrong peers are reported, not fatal.
Data, checker, timers and the JSON file come from benchmarks/peers_harness.py (shared with peers_nearest.py).

Usage (repository root, streamkit installed: python3 -m pip install ./python):

  PYTHONUNBUFFERED=1 python3 benchmarks/python_peers.py --bench-binary build-bench/benchmarks/bench_nn_files \\
      --out docs/results/h100_python_peers.json
  python3 benchmarks/python_peers.py --quick --out /tmp/quick.json         # smoke run (sizes / 16)
  python3 benchmarks/python_peers.py --workloads overhead,minmax_device --methods streamkit,cupy

Output JSON: {"gpu", "driver", "date", "command", "versions", "settings", "complete", "workloads": [{"group",
"name", "description", "baseline", "methods": [{"method", "status", "timing", "median_ms", "samples_ms",
"build_ms", "query_ms", "checked", "wrong", "identical_indices", "max_error_rad", "max_abs_error", "tolerance",
"host_us_per_call", "gpu_us_per_call", "calls", "note"}]}]}, rewritten after every workload ("complete": false
until the end). Statuses: ok, wrong, skipped, missing (package, API or binary absent), n/a, error.
Turn it into docs with: python3 benchmarks/make_report.py ... --python-peers FILE.json
"""
import argparse
import dataclasses
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_harness as h  # noqa: E402  (data, float64 checker, timers, JSON report, the C++ CLI, the Numba kernel)

GROUPS = ("nearest", "minmax_host", "minmax_device", "overhead")
NEAREST_METHODS = ("streamkit_cupy", "streamkit_torch", "streamkit_index", "cpp_bench_nn_files", "numba_two_pass",
                   "cupy_broadcast", "torch_cdist")
STREAMKIT_NEAREST = NEAREST_METHODS[:4]
HOST_METHODS = ("streamkit_normalize_many_pinned", "streamkit_normalize_many_pageable", "streamkit_normalize_many_new",
                "sklearn_minmaxscaler", "numba_stream_pipeline", "torch_pinned_streams")
DEVICE_METHODS = ("streamkit_minmaxscaler_cupy", "streamkit_minmaxscaler_torch", "cupy_expression",
                  "cupy_nan_expression", "torch_expression")
OVERHEAD_METHODS = ("streamkit_nearest_cupy", "streamkit_nearest_cupy_out", "streamkit_nearest_cupy_no_rows", "streamkit_nearest_torch",
                    "streamkit_index_query_cupy", "streamkit_minmax_transform_cupy", "cupy_empty_pair",
                    "cupy_elementwise")
METHODS = NEAREST_METHODS + HOST_METHODS + DEVICE_METHODS + OVERHEAD_METHODS
BROADCAST_CHUNK_ELEMENTS = 1 << 26    # distances per CuPy chunk: 256 MiB of float32 per temporary
OVERHEAD_BATCH = 100                  # calls enqueued between two synchronisations
TOLERANCE = {np.dtype(np.float64): 1e-12, np.dtype(np.float32): 1e-5}
TORCH_CHUNK_ELEMENTS = 1 << 30       # distances per torch.cdist chunk (as in peers_nearest.py)
EARTH_RADIUS_KM = h.EARTH_RADIUS_KM


@dataclasses.dataclass(frozen=True)
class Workload:
    group: str
    name: str
    description: str
    baseline: str                  # the method the others are compared with
    methods: tuple
    data: str = ""                 # nearest: the points used (a name of peers_harness.NEAREST_DATA)
    exact: bool = False            # nearest: streamkit's `exact` (the C++ CLI's --precision exact)
    shape: tuple = ()              # min-max: (arrays, rows, columns)
    dtype: str = "float64"


WORKLOADS = (
    Workload("overhead", "tiny_16x8", "16 observations, 8 references (CuPy / torch, float32); MinMaxScaler.transform "
             "of a fitted 16 x 4 float32 array", "streamkit_nearest_cupy", OVERHEAD_METHODS),
    Workload("nearest", "small_2^16x2^13_k1", "uniform, 65,536 x 8,192, k = 1, exact=False (float32 ranking)",
             "streamkit_cupy", NEAREST_METHODS, data="small_2^16x2^13_k1"),
    Workload("nearest", "small_2^16x2^13_k1_exact", "the same points, exact=True (float64 ranking, the default)",
             "streamkit_cupy", STREAMKIT_NEAREST, data="small_2^16x2^13_k1", exact=True),
    Workload("nearest", "uniform_2^24x2^14_k1", "uniform, 16,777,216 x 16,384, k = 1, exact=False",
             "streamkit_cupy", NEAREST_METHODS, data="uniform_2^24x2^14_k1"),
    Workload("nearest", "gps_1M_places_k1", "1,000,000 GPS-like points x the 144,563 places of cities1000.csv, k = 1, "
             "exact=False", "streamkit_cupy", NEAREST_METHODS, data="gps_1M_places_k1"),
    Workload("minmax_host", "many_arrays_18x60x98450", "18 host arrays of 60 x 98450 float64 (850 MB), host in, "
             "host out", "streamkit_normalize_many_pinned", HOST_METHODS, shape=(18, 60, 98450)),
    Workload("minmax_device", "device_60x98450_float64", "one device array of 60 x 98450 float64",
             "streamkit_minmaxscaler_cupy", DEVICE_METHODS, shape=(1, 60, 98450)),
    Workload("minmax_device", "device_2^20x64_float32", "one device array of 1,048,576 x 64 float32",
             "streamkit_minmaxscaler_cupy", DEVICE_METHODS, shape=(1, 1 << 20, 64), dtype="float32"),
)


log = h.log


class Missing(Exception):
    """A package or API a method needs is absent: the method is recorded as missing."""


def need(module_name):
    try:
        return __import__(module_name)
    except Exception as exc:
        raise Missing(f"{module_name}: {exc}") from exc


def need_streamkit(*names):
    streamkit = need("streamkit")
    absent = [name for name in names if not hasattr(streamkit, name)]
    if absent:
        raise Missing(f"streamkit has no {', '.join(absent)}")
    return streamkit


def need_torch_cuda():
    torch = need("torch")
    if not torch.cuda.is_available():
        raise Missing("torch sees no GPU")
    return torch


def need_numba_cuda():
    try:
        cuda = h.import_numba_cuda()
    except Exception as exc:
        raise Missing(f"numba.cuda: {exc}") from exc
    if not cuda.is_available():
        raise Missing("numba.cuda sees no GPU")
    return cuda


def entry_for(method, status="ok", note="", **fields):
    entry = {"method": method, "status": status, "timing": None, "median_ms": None, "samples_ms": None, "note": note}
    entry.update(fields)
    return entry


# ------------------------------------------------------------------------------------------------
# Timing
# ------------------------------------------------------------------------------------------------

EventTimer, wall_clock = h.EventTimer, h.wall_clock


def measure(ctx, step, timing):
    """`ctx.warmups` steps, then the timed ones (more for short steps: peers_harness.repeats_for); `step()`
    returns ({phase: ms}, output). Returns (this script's fields, the last output)."""
    timed, output = h.measure(step, ctx.warmups, ctx.repeat, more_for_short=True)
    fields = {"timing": timing, "median_ms": timed.total_ms, "samples_ms": timed.totals,
              "warmups": ctx.warmups, "repeat": len(timed.runs)}
    if len(timed.runs[0]) > 1:
        fields.update({f"{name}_ms": timed.phase_ms(name) for name in timed.runs[0]})
    return fields, output


def too_slow(ctx, method, step_ms, how):
    """A skipped entry when the warm-ups and timed steps at `step_ms` would take over --max-method-seconds."""
    steps = ctx.warmups + h.repeats_for(step_ms, ctx.repeat)
    skipped = h.skip_estimate(step_ms, steps, ctx.max_method_seconds, how)
    return entry_for(method, "skipped", **skipped) if skipped else None


# ------------------------------------------------------------------------------------------------
# Nearest neighbours
# ------------------------------------------------------------------------------------------------

def haversine_argmin(xp, obs_deg, ref_deg, out, chunk):
    """The notebook's CuPy (or NumPy, `xp`) broadcasting search: per chunk of observations the full matrix of
    haversine distances in km in the inputs' dtype, then argmin over the references (ties: the smaller index)."""
    ref_lat, ref_lon = xp.radians(ref_deg[:, 0]), xp.radians(ref_deg[:, 1])
    cos_ref_lat = xp.cos(ref_lat)
    for lo in range(0, len(obs_deg), chunk):
        lat = xp.radians(obs_deg[lo:lo + chunk, 0])[:, None]
        lon = xp.radians(obs_deg[lo:lo + chunk, 1])[:, None]
        a = xp.sin((ref_lat - lat) / 2) ** 2 + xp.cos(lat) * cos_ref_lat * xp.sin((ref_lon - lon) / 2) ** 2
        km = 2 * EARTH_RADIUS_KM * xp.arcsin(xp.sqrt(a))
        out[lo:lo + chunk] = xp.argmin(km, axis=1)
    return out


class NearestCase:
    """One nearest workload's points on the host, their float64 reference, and the device copies made on demand."""

    def __init__(self, ctx, workload, places):
        started = time.perf_counter()
        self.workload = workload
        self.k = 1
        self.data = h.make_data(h.NEAREST_DATA[workload.data], places, ctx.quick)
        self.obs = np.ascontiguousarray(np.stack([self.data.obs_lat, self.data.obs_lon], axis=1))
        self.refs = np.ascontiguousarray(np.stack([self.data.ref_lat, self.data.ref_lon], axis=1))
        self.reference = h.Reference(self.data, self.k, ctx.sample, workload.data)
        self.files = None
        log(f"{workload.name}: n={self.data.n} m={self.data.m} (data in {time.perf_counter() - started:.1f} s)")

    def check(self, entry, indices):
        """Checks the sampled rows of `indices` (n, k), any framework's array; marks the entry wrong if need be."""
        rows = to_numpy(indices)
        rows = rows.reshape(len(rows), -1)[self.reference.sample].astype(np.int64)
        self.reference.check(entry, rows)
        if entry["wrong"]:
            entry["status"] = "wrong"
        return entry


def to_numpy(array):
    if hasattr(array, "get"):                  # CuPy
        return array.get()
    if hasattr(array, "detach"):               # torch
        return array.detach().cpu().numpy()
    if hasattr(array, "copy_to_host"):         # Numba
        return array.copy_to_host()
    return np.asarray(array)


def nearest_streamkit(ctx, case, framework):
    streamkit = need_streamkit("nearest")
    obs, refs = device_arrays(framework, case.obs, case.refs)
    exact, k = case.workload.exact, case.k
    timer = EventTimer(framework)
    fields, (indices, _) = measure(ctx, lambda: timer(search=lambda: streamkit.nearest(obs, refs, k, exact=exact)),
                                   "cuda events")
    entry = entry_for(f"streamkit_{framework}", **fields, note=f"exact={exact}; new result arrays every call")
    return case.check(entry, indices)


def device_arrays(framework, *arrays):
    if framework == "torch":
        torch = need_torch_cuda()
        return [torch.from_numpy(a).cuda() for a in arrays]
    cupy = need("cupy")
    return [cupy.asarray(a) for a in arrays]


def nearest_index(ctx, case):
    streamkit = need_streamkit("NearestIndex")
    obs, refs = device_arrays("cupy", case.obs, case.refs)
    index = streamkit.NearestIndex(refs, exact=case.workload.exact)
    timer = EventTimer("cupy")
    fields, (indices, _) = measure(ctx, lambda: timer(build=lambda: index.update(refs),
                                                      query=lambda: index.query(obs, case.k)), "cuda events")
    entry = entry_for("streamkit_index", **fields, note=f"exact={case.workload.exact}; {index!r}")
    return case.check(entry, indices)


def nearest_cpp(ctx, case):
    if case.files is None:
        case.files = case.data.write(ctx.tmp)
    precision = "exact" if case.workload.exact else "fast"
    cli = h.run_bench_nn_files(ctx.bench_binary, case.files, case.data.n, case.data.m, case.k, "auto", ctx.repeat,
                               ctx.tmp, ctx.cli_timeout, precision)
    record = cli.record or {}
    fields = {"build_ms": record.get("build_ms"), "query_ms": record.get("query_ms"),
              "engine_used": record.get("engine"), "gpu": record.get("gpu"), "runs": ctx.repeat if record else None}
    entry = entry_for("cpp_bench_nn_files", cli.status, cli.note, median_ms=record.get("total_ms"),
                      timing="C++ CUDA events (its own), 2 warm-ups", **fields)
    if cli.indices is None:
        return entry
    entry["note"] = "; ".join(filter(None, [f"--precision {precision}, engine auto ({record.get('engine')})",
                                            entry["note"]]))
    return case.check(entry, cli.indices)


def nearest_numba(ctx, case):
    cuda = need_numba_cuda()
    cupy = need("cupy")
    h.numba_kernels()
    data = case.data
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    ref_lat, ref_lon = cuda.to_device(data.ref_lat), cuda.to_device(data.ref_lon)
    obs_lat, obs_lon = cuda.to_device(data.obs_lat), cuda.to_device(data.obs_lon)
    timer = EventTimer("cupy")      # Numba launches on the legacy default stream, CuPy's default stream too
    probe_n = min(data.n, 1 << 16)
    probe = h.NumbaTwoPass(cuda, probe_n, data.m, sm_count)
    probe.build(ref_lat, ref_lon)
    probe.query(obs_lat[:probe_n], obs_lon[:probe_n])        # compiles
    phases, _ = timer(query=lambda: probe.query(obs_lat[:probe_n], obs_lon[:probe_n]))
    del probe
    skipped = too_slow(ctx, "numba_two_pass", phases["query"] * data.n / probe_n, f"{probe_n} observations")
    if skipped:
        return skipped
    search = h.NumbaTwoPass(cuda, data.n, data.m, sm_count)
    fields, index = measure(ctx, lambda: timer(build=lambda: search.build(ref_lat, ref_lon),
                                               query=lambda: search.query(obs_lat, obs_lon)), "cuda events")
    entry = entry_for("numba_two_pass", **fields,
                      note=f"float32 haversine, {search.slices} reference slices; buffers allocated before timing")
    case.check(entry, index)
    del search
    cupy.cuda.Device().synchronize()
    return entry


def nearest_cupy_broadcast(ctx, case):
    cupy = need("cupy")
    obs, refs = device_arrays("cupy", case.obs, case.refs)
    n, m = case.data.n, case.data.m
    chunk = max(1, min(n, BROADCAST_CHUNK_ELEMENTS // m))
    out = cupy.empty(n, dtype=cupy.int64)
    timer = EventTimer("cupy")
    haversine_argmin(cupy, obs[:chunk], refs, out, chunk)                        # compiles the kernels
    phases, _ = timer(chunk=lambda: haversine_argmin(cupy, obs[:chunk], refs, out, chunk))
    skipped = too_slow(ctx, "cupy_broadcast", phases["chunk"] * n / chunk, f"one chunk of {chunk} x {m}")
    if skipped:
        return skipped
    fields, indices = measure(ctx, lambda: timer(search=lambda: haversine_argmin(cupy, obs, refs, out, chunk)),
                              "cuda events")
    entry = entry_for("cupy_broadcast", **fields, note=f"float32 haversine in km; chunks of {chunk} observations")
    return case.check(entry, indices)


def nearest_torch_cdist(ctx, case):
    torch = need_torch_cuda()
    n, m = case.data.n, case.data.m
    obs = torch.from_numpy(case.data.obs_unit32).cuda()
    refs = torch.from_numpy(case.data.ref_unit32).cuda()
    chunk = max(1, min(n, TORCH_CHUNK_ELEMENTS // m))
    out = torch.empty(n, dtype=torch.int64, device="cuda")

    def search(stop=n):
        for lo in range(0, stop, chunk):
            out[lo:lo + chunk] = torch.cdist(obs[lo:lo + chunk], refs).argmin(dim=1)
        return out

    timer = EventTimer("torch")
    search(chunk)
    phases, _ = timer(chunk=lambda: search(chunk))
    skipped = too_slow(ctx, "torch_cdist", phases["chunk"] * n / chunk, f"one chunk of {chunk} x {m}")
    if skipped:
        return skipped
    fields, indices = measure(ctx, lambda: timer(search=search), "cuda events")
    entry = entry_for("torch_cdist", **fields,
                      note=f"Euclidean distance between float32 unit vectors (matrix-product form), argmin; chunks of "
                           f"{chunk} observations")
    return case.check(entry, indices)


NEAREST_RUNNERS = {
    "streamkit_cupy": lambda ctx, case: nearest_streamkit(ctx, case, "cupy"),
    "streamkit_torch": lambda ctx, case: nearest_streamkit(ctx, case, "torch"),
    "streamkit_index": nearest_index, "cpp_bench_nn_files": nearest_cpp, "numba_two_pass": nearest_numba,
    "cupy_broadcast": nearest_cupy_broadcast, "torch_cdist": nearest_torch_cdist,
}


# ------------------------------------------------------------------------------------------------
# Min-max scaling
# ------------------------------------------------------------------------------------------------

def scaled_reference(x):
    """Per-column min-max scaling to [0, 1] in float64, NaN ignored, constant columns to 0 (as scikit-learn)."""
    x = np.asarray(x, dtype=np.float64)
    low = np.nanmin(x, axis=0)
    span = np.nanmax(x, axis=0) - low
    return (x - low) / np.where(span == 0, 1.0, span)


def check_scaled(entry, results, references, dtype):
    """Largest absolute difference of every result from its reference; marks the entry wrong above tolerance."""
    worst = max(float(np.max(np.abs(to_numpy(r).astype(np.float64) - ref))) for r, ref in zip(results, references))
    tolerance = TOLERANCE[np.dtype(dtype)]
    entry.update(max_abs_error=worst, tolerance=tolerance, checked=len(references))
    if not worst <= tolerance:        # NaN too
        entry["status"] = "wrong"
    return entry


class MinMaxCase:
    """One min-max workload: host arrays (normal, mean 10, sigma 4; fixed seed) and their float64 references."""

    def __init__(self, ctx, workload):
        count, rows, columns = workload.shape
        if ctx.quick:
            rows, columns = max(1, rows // 4), max(1, columns // 4)
        rng = h.rng_for(workload.name, 0)
        self.workload = workload
        self.arrays = [rng.normal(10.0, 4.0, (rows, columns)).astype(workload.dtype) for _ in range(count)]
        self.references = [scaled_reference(a) for a in self.arrays]
        self.bytes = sum(a.nbytes for a in self.arrays)
        log(f"{workload.name}: {count} x {rows} x {columns} {workload.dtype}")

    def check(self, entry, results):
        return check_scaled(entry, results, self.references, self.workload.dtype)


def cupy_synchronize():
    import cupy
    cupy.cuda.Device().synchronize()


def pinned_copies(arrays):
    """Copies of NumPy arrays in pinned host memory (NumPy arrays over cupyx.empty_pinned buffers)."""
    cupyx = need("cupyx")
    copies = []
    for a in arrays:
        pinned = cupyx.empty_pinned(a.shape, a.dtype)
        pinned[...] = a
        copies.append(pinned)
    return copies


def host_streamkit(ctx, case, method):
    streamkit = need_streamkit("normalize_many")
    if method == "streamkit_normalize_many_new":
        work, note = lambda: streamkit.normalize_many(case.arrays), "pageable inputs, new NumPy outputs each call"
    else:
        pinned = method == "streamkit_normalize_many_pinned"
        inputs = pinned_copies(case.arrays) if pinned else case.arrays
        outputs = pinned_copies(case.arrays) if pinned else [np.empty_like(a) for a in case.arrays]
        note = "pinned inputs and out= arrays" if pinned else "pageable inputs and out= arrays"

        def work():
            streamkit.normalize_many(inputs, out=outputs)
            return outputs
    fields, results = measure(ctx, lambda: wall_clock(work), "wall clock")
    entry = entry_for(method, **fields, note=note + f", {streamkit.device_count()} GPU(s)")
    return case.check(entry, results)


def host_sklearn(ctx, case):
    preprocessing = need("sklearn.preprocessing").preprocessing
    work = lambda: [preprocessing.MinMaxScaler().fit_transform(a) for a in case.arrays]
    fields, results = measure(ctx, lambda: wall_clock(work), "wall clock")
    return case.check(entry_for("sklearn_minmaxscaler", **fields, note="CPU, one array after the other"), results)


_numba_minmax_kernel = None


def numba_minmax_kernel():
    """A thread per column: the NaN-ignoring min and max over the rows, then the scaled column written out.
    numba.cuda is made a module global so that the kernel sees it as one (as Numba and its simulator expect)."""
    global _numba_minmax_kernel, cuda
    if _numba_minmax_kernel is None:
        cuda = h.import_numba_cuda()

        @cuda.jit
        def minmax_columns(x, out):
            j = cuda.grid(1)
            if j >= x.shape[1]:
                return
            low, high = math.inf, -math.inf
            for i in range(x.shape[0]):
                value = x[i, j]
                if value < low:            # NaN compares false: ignored
                    low = value
                if value > high:
                    high = value
            span = high - low
            if span == 0:
                span = 1.0                 # a constant column scales to 0, as scikit-learn's
            for i in range(x.shape[0]):
                out[i, j] = (x[i, j] - low) / span

        _numba_minmax_kernel = minmax_columns
    return _numba_minmax_kernel


def numba_stream_pipeline(cuda, kernel, host_in, host_out, device_in, device_out, streams):
    """Per array on its own stream: async copy in, the kernel, async copy out; then waits for every stream."""
    threads = 256
    for x, y, dx, dy, stream in zip(host_in, host_out, device_in, device_out, streams):
        dx.copy_to_device(x, stream=stream)
        kernel[(x.shape[1] + threads - 1) // threads, threads, stream](dx, dy)
        dy.copy_to_host(y, stream=stream)
    for stream in streams:
        stream.synchronize()
    return host_out


def host_numba(ctx, case):
    cuda = need_numba_cuda()
    kernel = numba_minmax_kernel()
    host_in = [cuda.pinned_array(a.shape, a.dtype) for a in case.arrays]
    for pinned, a in zip(host_in, case.arrays):
        pinned[...] = a
    host_out = [cuda.pinned_array(a.shape, a.dtype) for a in case.arrays]
    device_in = [cuda.device_array(a.shape, a.dtype) for a in case.arrays]
    device_out = [cuda.device_array(a.shape, a.dtype) for a in case.arrays]
    streams = [cuda.stream() for _ in case.arrays]
    work = lambda: numba_stream_pipeline(cuda, kernel, host_in, host_out, device_in, device_out, streams)
    fields, results = measure(ctx, lambda: wall_clock(work), "wall clock")
    entry = entry_for("numba_stream_pipeline", **fields,
                      note=f"{len(streams)} streams; pinned inputs and outputs (cuda.pinned_array), device buffers "
                           "allocated before timing; a thread per column")
    return case.check(entry, results)


def torch_pinned_pipeline(torch, host_in, host_out, device_in, streams):
    """Per array on its own stream: non_blocking copy in, amin/amax along dim 0, scaling, non_blocking copy out."""
    for x, y, dx, stream in zip(host_in, host_out, device_in, streams):
        with torch.cuda.stream(stream):
            dx.copy_(x, non_blocking=True)
            low = dx.amin(dim=0)
            span = dx.amax(dim=0) - low
            y.copy_((dx - low) / torch.where(span == 0, 1.0, span), non_blocking=True)
    torch.cuda.synchronize()
    return host_out


def host_torch(ctx, case):
    torch = need_torch_cuda()
    host_in = [torch.from_numpy(a).pin_memory() for a in case.arrays]
    host_out = [torch.empty_like(x).pin_memory() for x in host_in]
    device_in = [torch.empty_like(x, device="cuda") for x in host_in]
    streams = [torch.cuda.Stream() for _ in host_in]
    work = lambda: torch_pinned_pipeline(torch, host_in, host_out, device_in, streams)
    fields, results = measure(ctx, lambda: wall_clock(work), "wall clock")
    entry = entry_for("torch_pinned_streams", **fields,
                      note=f"{len(streams)} streams; pinned tensors, device inputs allocated before timing, "
                           "temporaries from torch's caching allocator; amin/amax propagate NaN")
    return case.check(entry, results)


def device_minmax(ctx, case, method):
    """One device-resident method on the workload's (single) array."""
    framework = "torch" if "torch" in method else "cupy"
    if method.startswith("streamkit"):
        scaler = need_streamkit("MinMaxScaler").MinMaxScaler()
    (x,) = device_arrays(framework, case.arrays[0])
    if method.startswith("streamkit"):
        work, note = lambda: scaler.fit_transform(x), "fit + transform each step"
    elif method == "cupy_expression":
        work, note = lambda: (x - x.min(0)) / (x.max(0) - x.min(0)), "min computed twice, as written"
    elif method == "cupy_nan_expression":
        cupy = need("cupy")

        def work():
            low = cupy.nanmin(x, axis=0)
            return (x - low) / (cupy.nanmax(x, axis=0) - low)
        note = "nanmin / nanmax"
    else:
        work, note = lambda: (x - x.amin(0)) / (x.amax(0) - x.amin(0)), "amin computed twice, as written"
    timer = EventTimer(framework)
    fields, result = measure(ctx, lambda: timer(step=work), "cuda events")
    gb_per_s = 2 * case.bytes / (fields["median_ms"] * 1e6)
    return case.check(entry_for(method, **fields, gb_per_s=gb_per_s, note=note), [result])


HOST_RUNNERS = {name: (lambda ctx, case, name=name: host_streamkit(ctx, case, name)) for name in HOST_METHODS[:3]}
HOST_RUNNERS.update(sklearn_minmaxscaler=host_sklearn, numba_stream_pipeline=host_numba,
                    torch_pinned_streams=host_torch)


# ------------------------------------------------------------------------------------------------
# Per-call overhead
# ------------------------------------------------------------------------------------------------

SPIN_SOURCE = r"""
extern "C" __global__ void spin(unsigned long long nanoseconds) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < nanoseconds);
}
"""
SPIN_MS = 20.0


def per_call(ctx, call, timer):
    """Host and device cost of `call`, a tiny operation. Host: µs per call over batches of OVERHEAD_BATCH calls,
    the device synchronised between batches outside the timing (so that no call waits on a full launch queue);
    the mean and the median of the batches' means. Device: CUDA events around a batch enqueued behind a kernel
    that keeps the device busy for SPIN_MS (so that the events see the device's time, not the host's gaps);
    if enqueueing that batch took longer than the spin, the calls waited for the device."""
    import cupy
    spin = cupy.RawKernel(SPIN_SOURCE, "spin")
    for _ in range(10):
        call()
    batches = max(1, ctx.overhead_calls // OVERHEAD_BATCH)
    batch_us = []
    for _ in range(batches):
        timer(sync=lambda: None)                       # waits for the device
        started = time.perf_counter_ns()
        for _ in range(OVERHEAD_BATCH):
            call()
        batch_us.append((time.perf_counter_ns() - started) / 1e3 / OVERHEAD_BATCH)
    enqueue_us = []

    def batch():
        started = time.perf_counter_ns()
        for _ in range(OVERHEAD_BATCH):
            call()
        enqueue_us.append((time.perf_counter_ns() - started) / 1e3)

    spin((1,), (1,), (np.uint64(SPIN_MS * 1e6),))
    phases, _ = timer(batch=batch)
    return {"host_us_per_call": statistics.fmean(batch_us), "host_us_median_batch": statistics.median(batch_us),
            "gpu_us_per_call": phases["batch"] * 1e3 / OVERHEAD_BATCH, "calls": batches * OVERHEAD_BATCH,
            "waited_for_device": enqueue_us[0] > SPIN_MS * 1e3}


def overhead_method(ctx, method):
    if method.startswith("streamkit"):
        streamkit = need_streamkit("MinMaxScaler" if "minmax" in method else "NearestIndex")
    cupy = need("cupy")
    obs_host = np.stack(h.uniform_points(h.rng_for("tiny", 0), 16), axis=1)
    refs_host = np.stack(h.uniform_points(h.rng_for("tiny", 1), 8), axis=1)
    framework = "torch" if method.endswith("torch") else "cupy"
    obs, refs = device_arrays(framework, obs_host, refs_host)
    check = None
    if method == "streamkit_nearest_cupy_no_rows":
        # Zero observations: every check, the stream lookup and the (empty) results, and no CUDA call:
        # the cost of the Python layer alone.
        none = cupy.empty((0, 2), cupy.float32)
        call = lambda: streamkit.nearest(none, refs)
    elif method.startswith("streamkit_nearest") or method == "streamkit_index_query_cupy":
        data = h.Data(obs_host[:, 0], obs_host[:, 1], refs_host[:, 0], refs_host[:, 1])
        reference = h.Reference(data, 1, 16, "tiny")
        if method == "streamkit_nearest_cupy_out":
            out = (cupy.empty((16, 1), cupy.int64), cupy.empty((16, 1), cupy.float32))
            call = lambda: streamkit.nearest(obs, refs, out=out)
        elif method == "streamkit_index_query_cupy":
            index = streamkit.NearestIndex(refs)
            call = lambda: index.query(obs)
        else:
            call = lambda: streamkit.nearest(obs, refs)

        def check(entry):
            entry["note"] = "; ".join(filter(None, [entry["note"], "indices checked against the float64 brute force"]))
            rows = to_numpy(call()[0]).astype(np.int64)
            reference.check(entry, rows)
            if entry["wrong"]:
                entry["status"] = "wrong"
    elif method == "streamkit_minmax_transform_cupy":
        x_host = h.rng_for("tiny", 2).normal(10.0, 4.0, (16, 4)).astype(np.float32)
        (x,) = device_arrays("cupy", x_host)
        scaler = streamkit.MinMaxScaler().fit(x)
        call = lambda: scaler.transform(x)
        check = lambda entry: check_scaled(entry, [call()], [scaled_reference(x_host)], np.float32)
    elif method == "cupy_empty_pair":
        call = lambda: (cupy.empty((16, 1), cupy.int64), cupy.empty((16, 1), cupy.float32))
    else:
        call = lambda: obs * 2
    measured = per_call(ctx, call, EventTimer(framework))
    if method in ("streamkit_nearest_cupy", "streamkit_nearest_torch"):
        # The same search's host cost in C++ (arrays imported once, the same placement of results): the part of
        # the Python call that is not Python's.
        from streamkit import _nearest, _streamkit
        placement = _nearest._Placement(obs, 1, None, None)
        ns = _streamkit._nearest_enqueue_ns(obs, refs, 1, True, placement, ctx.overhead_calls)  # nearest's exact=True
        cupy.cuda.Device().synchronize()
        measured["cpp_host_us_per_call"] = ns / 1e3
    entry = entry_for(method, timing="host: perf_counter_ns; GPU: cuda events", **measured)
    if entry["waited_for_device"]:
        entry["note"] = f"a call waited for the device (a batch took over the {SPIN_MS:g} ms of a busy device)"
    if check:
        check(entry)
    return entry


# ------------------------------------------------------------------------------------------------
# Driver, JSON and tables
# ------------------------------------------------------------------------------------------------

def run_method(ctx, workload, case, method):
    if workload.group == "nearest":
        return NEAREST_RUNNERS[method](ctx, case)
    if workload.group == "minmax_host":
        return HOST_RUNNERS[method](ctx, case)
    if workload.group == "minmax_device":
        return device_minmax(ctx, case, method)
    return overhead_method(ctx, method)


def run_workload(ctx, workload, places):
    if workload.group == "nearest":
        case = NearestCase(ctx, workload, places)
        sizes = {"n": case.data.n, "m": case.data.m, "k": case.k, "exact": workload.exact}
    elif workload.group in ("minmax_host", "minmax_device"):
        case = MinMaxCase(ctx, workload)
        sizes = {"arrays": len(case.arrays), "shape": list(case.arrays[0].shape), "dtype": workload.dtype,
                 "bytes": case.bytes}
    else:
        case, sizes = None, {}
        log(f"{workload.name}:")
    result = {"group": workload.group, "name": workload.name, "description": workload.description,
              "baseline": workload.baseline, **sizes, "methods": []}
    for method in workload.methods:
        if not any(method.startswith(prefix) for prefix in ctx.methods):
            continue
        result["methods"].append(h.run_guarded(method, lambda: run_method(ctx, workload, case, method), entry_for,
                                               summary_line, missing=Missing))
    return result


def summary_line(entry):
    if entry.get("host_us_per_call") is not None:
        text = f"host {entry['host_us_per_call']:.2f} µs/call, GPU {entry['gpu_us_per_call']:.2f} µs/call"
    elif entry.get("median_ms") is not None:
        text = f"median {entry['median_ms']:.4g} ms of {entry.get('repeat') or entry.get('runs')}"
    else:
        return entry["note"]
    return f"{entry['status']}: {text}; {check_cell(entry)}"


def format_ms(ms):
    for floor, digits in ((100, 0), (10, 1), (1, 2)):
        if ms >= floor:
            return f"{ms:.{digits}f}"
    return f"{ms:.3f}"


def time_cell(entry):
    if entry is None:
        return ""
    if entry["status"] == "skipped" and entry.get("estimated_ms"):
        return f"skipped (est. {format_ms(entry['estimated_ms'])})"
    if entry.get("median_ms") is None:
        return entry["status"]
    text = format_ms(entry["median_ms"])
    if entry.get("build_ms") is not None and entry.get("query_ms") is not None:
        text += f" ({format_ms(entry['build_ms'])} + {format_ms(entry['query_ms'])})"
    return text


def check_cell(entry):
    if entry.get("checked") is None:
        return ""
    if entry.get("max_abs_error") is not None:
        text = f"max error {entry['max_abs_error']:.1e}"
        return f"**WRONG: {text} > {entry['tolerance']:g}**" if entry["status"] == "wrong" else \
            f"{text} (≤ {entry['tolerance']:g})"
    if entry.get("wrong") is None:
        return ""
    text = f"{entry['wrong']} / {entry['checked']} rows wrong"
    return f"**WRONG: {text}**" if entry["wrong"] else text


def ratio(entry, other):
    if not entry or not other or entry.get("median_ms") is None or not other.get("median_ms"):
        return ""
    return f"{entry['median_ms'] / other['median_ms']:.2f}"


def tables(report):
    """Markdown lines: a table per group of workloads, then the runs' notes."""
    lines = []
    workloads = report["workloads"]
    nearest = [w for w in workloads if w["group"] == "nearest"]
    if nearest:
        lines += ["", "Nearest neighbour, data on the device (ms; build + query where a method separates them). "
                      "/ C++ = time over the C++ `bench_nn_files` on the same points (target ≤ 1.05); "
                      "/ base = time over `streamkit_cupy`.", "",
                  "| workload | n x m, k | method | median ms | / C++ | / base | check |",
                  "|---|---|---|---|---|---|---|"]
        for w in nearest:
            by_method = {e["method"]: e for e in w["methods"]}
            cpp, base = by_method.get("cpp_bench_nn_files"), by_method.get(w["baseline"])
            for e in w["methods"]:
                to_cpp = ratio(e, cpp) if e["method"].startswith("streamkit") else ""
                lines.append(f"| `{w['name']}` | {w['n']:,} x {w['m']:,}, {w['k']} | {e['method']} | {time_cell(e)} | "
                             f"{to_cpp} | {ratio(e, base)} | {check_cell(e)} |")
    for group, title in (("minmax_host", "Min-max scaling, host in, host out (wall clock, ms)"),
                         ("minmax_device", "Min-max scaling of one device array (CUDA events, ms)")):
        mine = [w for w in workloads if w["group"] == group]
        if not mine:
            continue
        lines += ["", f"{title}. / base = time over the workload's first streamkit method; GB/s = bytes in + out "
                      "over the median time.", "",
                  "| workload | method | median ms | GB/s | / base | check |", "|---|---|---|---|---|---|"]
        for w in mine:
            base = next((e for e in w["methods"] if e["method"] == w["baseline"]), None)
            for e in w["methods"]:
                rate = f"{2 * w['bytes'] / (e['median_ms'] * 1e6):.1f}" if e.get("median_ms") else ""
                lines.append(f"| `{w['name']}` | {e['method']} | {time_cell(e)} | {rate} | {ratio(e, base)} | "
                             f"{check_cell(e)} |")
    for w in (w for w in workloads if w["group"] == "overhead"):
        lines += ["", f"Per-call cost, {w['description']}: host µs per call (mean over the calls; median of the "
                      f"batches' means) and GPU µs per call (CUDA events around a batch of {OVERHEAD_BATCH} enqueued "
                      f"behind a {SPIN_MS:g} ms busy kernel, so that they see device time only). Target: "
                      "Python's share ≤ 20 µs over the C++ call's host cost.", "",
                  "| method | host µs/call | host µs/call (median batch) | C++ host µs/call | Python's share µs (mean; median batch) | "
                  "GPU µs/call | calls | check |",
                  "|---|---|---|---|---|---|---|---|"]
        for e in w["methods"]:
            if e.get("host_us_per_call") is None:
                lines.append(f"| {e['method']} | {e['status']} | | | | | | |")
                continue
            cpp = e.get("cpp_host_us_per_call")
            cpp_cells = (f"{cpp:.2f} | {e['host_us_per_call'] - cpp:.2f}; {e['host_us_median_batch'] - cpp:.2f}"
                         if cpp is not None else " | ")
            lines.append(f"| {e['method']} | {e['host_us_per_call']:.2f} | {e['host_us_median_batch']:.2f} | "
                         f"{cpp_cells} | {e['gpu_us_per_call']:.2f} | {e['calls']:,} | {check_cell(e)} |")
    notes = {}
    for w in workloads:
        for e in w["methods"]:
            if e.get("note"):
                notes.setdefault((e["method"], e["note"]), []).append(w["name"])
    if notes:
        lines += ["", "Notes from the run:", ""]
        lines += [f"- {method} ({', '.join(f'`{name}`' for name in names)}): {note}"
                  for (method, note), names in notes.items()]
    return lines


def failures(report):
    """(fatal, warnings): streamkit's own wrong answers and errors; the peers' wrong answers and errors."""
    fatal, warnings = [], []
    for w in report["workloads"]:
        for e in w["methods"]:
            ours = e["method"].startswith(("streamkit", "cpp_"))
            absent = e["status"] == "missing" and e["method"].startswith("streamkit")
            bad = e["status"] in ("wrong", "error") or absent
            if bad:
                (fatal if ours else warnings).append(f"{w['name']} {e['method']}: {check_cell(e) or e['note']}")
    return fatal, warnings


def versions(ctx):
    found = h.versions(ctx.bench_binary)
    found["streamkit"] = h.package_version("streamkit")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    names = [w.name for w in WORKLOADS]
    parser.add_argument("--workloads", default="all",
                        help="comma-separated workload or group names, from: " + ", ".join(GROUPS + tuple(names)))
    parser.add_argument("--methods", default="all",
                        help="comma-separated method names or prefixes, from: " + ", ".join(METHODS))
    parser.add_argument("--quick", action="store_true", help="smoke run: nearest sizes / 16, min-max rows and "
                                                             "columns / 4, 2,000 overhead calls")
    parser.add_argument("--out", default="python_peers.json")
    parser.add_argument("--repeat", type=int, default=5, help="timed steps per method (at least; median)")
    parser.add_argument("--warmups", type=int, default=2)
    parser.add_argument("--sample", type=int, default=2000, help="observations checked per nearest workload")
    parser.add_argument("--overhead-calls", type=int, help="calls per overhead method (default 20,000; quick 2,000)")
    parser.add_argument("--max-method-seconds", type=float, default=60.0,
                        help="skip a method whose warm-ups + timed steps are estimated to take longer (default 60)")
    parser.add_argument("--bench-binary", default=str(h.REPO / "build-bench/benchmarks/bench_nn_files"),
                        help="the C++ bench_nn_files (optional: recorded as missing when absent)")
    parser.add_argument("--places", default=str(h.REPO / "examples/data/cities1000.csv"))
    parser.add_argument("--cli-timeout", type=int, default=300, help="seconds per bench_nn_files call")
    args = parser.parse_args()
    chosen = set(GROUPS + tuple(names)) if args.workloads == "all" else {w.strip() for w in args.workloads.split(",")}
    unknown = sorted(chosen - set(GROUPS) - set(names) - {""})
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {list(GROUPS) + names}")
    args.methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    if not any(m.startswith(prefix) for m in METHODS for prefix in args.methods):
        parser.error(f"no method matches {args.methods}; choose from {list(METHODS)}")
    if args.warmups < 2 or args.repeat < 5:
        parser.error("--warmups at least 2 and --repeat at least 5")
    if args.overhead_calls is None:
        args.overhead_calls = 2000 if args.quick else 20000
    selected = [w for w in WORKLOADS if w.name in chosen or w.group in chosen]
    needs_places = any(h.NEAREST_DATA[w.data].kind != "uniform" for w in selected if w.group == "nearest")
    places = h.read_places(args.places) if needs_places else None

    found = versions(args)
    settings = {"repeat": args.repeat, "warmups": args.warmups, "sample": args.sample, "quick": args.quick,
                "overhead_calls": args.overhead_calls, "overhead_batch": OVERHEAD_BATCH,
                "max_method_seconds": args.max_method_seconds, "methods": args.methods,
                "relative_tolerance": h.RELATIVE_TOLERANCE, "absolute_tolerance_rad": h.ABSOLUTE_TOLERANCE_RAD,
                "minmax_tolerance": {str(dtype): value for dtype, value in TOLERANCE.items()}}
    report = h.Report(args.out, found, settings, driver=found.get("nvidia_driver", "unknown"))
    with tempfile.TemporaryDirectory(prefix="python_peers_") as tmp:
        args.tmp = tmp
        for workload in selected:
            report["workloads"].append(run_workload(args, workload, places))
            report.save()
    report.finish()
    log(f"wrote {args.out}")
    fatal, warnings = failures(report.data)
    print(f"# streamkit Python benchmark: {report['gpu']}, {report['date']}")
    print("\n".join(tables(report.data)))
    for line in warnings:
        log(f"WARNING (a peer): {line}")
    for line in fatal:
        log(f"FAILED (streamkit): {line}")
    return 1 if fatal else 0


if __name__ == "__main__":
    sys.exit(main())
