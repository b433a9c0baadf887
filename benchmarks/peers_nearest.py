#!/usr/bin/env python3
"""Exact k-nearest neighbours on the sphere: streamkit's engines against their GPU and CPU peers.

One process, the same generated data for every method. For each workload the script writes the points
to raw files, runs streamkit's CLI `bench_nn_files` once per engine (auto, brute_force, tree), then the
peers on the same points as 3-D float32 unit vectors (Euclidean chord order is great-circle order):

  cubql             NVIDIA cuBQL (BVH over points): cuBQL::gpuBuilder (spatial median) over a box per point,
                    cuBQL::points::findClosest (k = 1) / findKNN (k > 1)  [our driver, see below]
  cubql_radix       the same with cuBQL::cuda::radixBuilder (Morton codes)  [our driver]
  cudakdtree        cudaKDTree (left-balanced k-d tree): cukd::buildTree over (point, index) records,
                    cukd::cct::fcp / cct::knn with FixedCandidateList<K>  [our driver]
  cudakdtree_stack  the same tree, cukd::stackBased::fcp / stackBased::knn  [our driver]
  cupy_knn          cupy-knn 0.4.0, LBVH: LBVHIndex.build(refs) + query_knn(obs)
  jztree            jztree 1.1.0 (JAX, z-order tree): jztree.knn.knn.jit(refs, k=k, part_query=obs),
                    one call (the tree over both sets is built inside; build and query not separable)
  torch_cdist_topk  torch.cdist + topk(k, largest=False) over chunks of observations
  scipy_ckdtree     scipy cKDTree on the host, workers=-1 (a subset of observations on big shapes,
                    query time extrapolated linearly)
  numba_two_pass    the motivating notebook's method, k = 1 only: a Numba CUDA float32 haversine kernel,
                    pass 1 = blocks of observation tiles x reference slices, per-thread minima, a
                    warp-shuffle (value, index) reduction into per-slice partial minima; pass 2 merges slices

cuBQL and cudaKDTree: the user fetches their sources (the script never downloads) and names them with
`--cubql-src PATH` (PATH/cuBQL/bvh.h, github.com/NVIDIA/cuBQL) and `--cudakdtree-src PATH` (PATH/cukd/builder.h,
github.com/ingowald/cudaKDTree); a method whose source is not given is "missing". At the start the script compiles
our driver once per library with nvcc (`--nvcc`, default nvcc on PATH, else /usr/local/cuda/bin/nvcc):
  nvcc -O3 -std=c++17 --extended-lambda --expt-relaxed-constexpr -cudart static -arch=sm_90 (--peer-arch)
       -DSTREAMKIT_WITH_CUBQL -I CUBQL_SRC  (or -DSTREAMKIT_WITH_CUKD -I CUDAKDTREE_SRC)
       benchmarks/peers/cubql_cukd_driver.cu -o TMP/cubql_driver (cudakdtree_driver)
The exact commit of each source goes into the JSON: the first word of the file PATH/COMMIT when there is one (what
benchmarks/peers/stage_sources.sh writes next to an exported tree), else `git -C PATH rev-parse HEAD` when PATH is
the top of a git checkout ("with local changes" added when it has some), else "unknown". The driver reads the same
raw files as bench_nn_files and makes the float32 unit vectors itself (float64 arithmetic, then rounded, as here);
it times each build and query with CUDA events (`--warmups` steps, then the median of `--repeat`), one thread per
observation in input order, and writes the indices the checker reads.

Timing: data already on the device (host arrays for cKDTree); per step build + query, the device
synchronised before and after each phase, wall clock between (time.perf_counter); `--warmups` runs
(default 2), then the median of `--repeat` runs (default 5). streamkit's numbers are the ones its CLI
prints (it times itself, given `--repeat`), cuBQL's and cudaKDTree's those the driver prints (CUDA events).
The unit-vector conversion of the peers' inputs is done once before timing (not timed); streamkit's CLI
converts latitudes/longitudes in degrees itself. A method whose timed runs would take more than
`--max-method-seconds` (estimated from one measured chunk) is skipped and its estimate recorded.

Checking: a sample of `--sample` observations (default 2,000) per workload; the exact k nearest in
float64 on the CPU (chord between float64 unit vectors computed from the float32 inputs; ties by the
smallest index). A row is wrong if a returned neighbour's float64 great-circle distance differs from the
reference's j-th distance by more than 1e-6 relative + 1e-9 rad absolute, if an index repeats or is out
of range. `identical_indices` counts rows equal to the reference's indices.
Data, checker, timers and the JSON file come from benchmarks/peers_harness.py (shared with python_peers.py).

Usage (repository root; the device machine has no internet: the two Python peers and jztree's CUDA backend
travel as wheels in .whl/, the cuBQL and cudaKDTree sources as trees staged by benchmarks/peers/stage_sources.sh):

  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
      .whl/*.whl && export PYTHONPATH=/tmp/site
  PYTHONUNBUFFERED=1 python3 benchmarks/peers_nearest.py --out docs/results/h100_peers_nearest.json \\
      --cubql-src .carry/peers/cuBQL --cudakdtree-src .carry/peers/cudaKDTree
  python3 benchmarks/peers_nearest.py --quick --out /tmp/quick.json              # smoke run (sizes / 16)
  python3 benchmarks/peers_nearest.py --workloads gps_1M_places_k1,sweep --methods streamkit,cupy_knn

Workloads (fixed seeds): uniform_2^24x2^14_k1, gps_1M_places_k1, clustered_2^22x2^20_k1,
uniform_2^20x2^20_k16, small_2^16x2^13_k1, and `sweep` (N = 2^20 uniform observations, M = 2^10 ... 2^22
uniform references, k = 1, streamkit engines only; for the plot of time against M).

Output JSON: {"gpu", "date", "command", "versions", "settings", "complete", "workloads": [{"name", "n", "m",
"k", "methods": [{"method", "status", "build_ms", "query_ms", "total_ms", "checked", "wrong",
"identical_indices", "max_error_rad", "note", ...}]}], "sweep": [{"m", "engine", "build_ms", "query_ms",
"total_ms", ...}]}. "versions" also names the cuBQL and cudaKDTree commits and nvcc; "settings"."peer_drivers"
holds, per library, the source path, commit (and where it was read), the exact nvcc command, the compile time,
the methods compiled in, and a status. The driver's entries add "k_compiled", "runs_ms", "gpu", "source_commit" and
"unit_vectors_differing" (coordinates of the references' unit vectors that the driver made otherwise than the
script did for the other peers: 0 expected; -1 when they could not be compared). The file
is rewritten after every workload, so a run cut short keeps what it finished ("complete": false).
Statuses: ok, missing (package, binary or source absent), skipped, n/a, error.
Turn it into docs with: python3 benchmarks/make_report.py ... --peers FILE.json
"""
import os

# JAX must not take 75 % of the GPU at import: streamkit's CLI and the other peers share the device.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse
import dataclasses
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_harness as h  # noqa: E402  (data, float64 checker, timers, JSON report, shared runners)

REPO = h.REPO
TORCH_CHUNK_ELEMENTS = 1 << 30   # distances per torch.cdist chunk: 4 GiB of float32, peak well under 20 GB
HOST_QUERY_BUDGET_S = 0.5        # cKDTree: largest observation subset whose query takes about this long
STREAMKIT_ENGINES = ("auto", "brute_force", "tree")
DRIVER_METHODS = ("cubql", "cubql_radix", "cudakdtree", "cudakdtree_stack")
# The driver's methods first: a process of their own, run while this one holds little GPU memory.
PEERS = DRIVER_METHODS + ("cupy_knn", "jztree", "torch_cdist_topk", "scipy_ckdtree", "numba_two_pass")
METHODS = tuple(f"streamkit_{e}" for e in STREAMKIT_ENGINES) + PEERS


@dataclasses.dataclass(frozen=True)
class Workload(h.NearestData):
    peers: tuple = ()


WORKLOADS = tuple(Workload(**dataclasses.asdict(h.NEAREST_DATA[name]), peers=peers) for name, peers in (
    ("uniform_2^24x2^14_k1", PEERS),
    ("gps_1M_places_k1", PEERS),
    ("clustered_2^22x2^20_k1", PEERS),
    ("uniform_2^20x2^20_k16", PEERS),
    ("small_2^16x2^13_k1", ("torch_cdist_topk",)),
))
SWEEP_N = 1 << 20
SWEEP_M = tuple(1 << e for e in range(10, 23, 2))
SWEEP_ENGINES = ("brute_force", "tree", "auto")
log = h.log


# ------------------------------------------------------------------------------------------------
# Entries and timing (the harness's timers; this script's entry format)
# ------------------------------------------------------------------------------------------------

def entry_for(method, status="ok", note="", **fields):
    entry = {"method": method, "status": status, "build_ms": None, "query_ms": None, "total_ms": None,
             "checked": 0, "wrong": None, "identical_indices": None, "max_error_rad": None, "note": note}
    entry.update(fields)
    return entry


def measure(ctx, step):
    """--warmups, then --repeat timed calls of `step()` (which returns ({phase: ms}, output)); returns (this
    script's summary fields, the last output)."""
    timed, output = h.measure(step, ctx.warmups, ctx.repeat)
    return {"runs": ctx.repeat, "warmups": ctx.warmups, "total_ms": timed.total_ms,
            "build_ms": timed.phase_ms("build"), "query_ms": timed.phase_ms("query")}, output


def too_slow(ctx, method, step_ms, how):
    """A skipped entry if warm-ups + repeats at step_ms would exceed --max-method-seconds, else None."""
    skipped = h.skip_estimate(step_ms, ctx.warmups + ctx.repeat, ctx.max_method_seconds, how)
    return entry_for(method, "skipped", **skipped) if skipped else None


# ------------------------------------------------------------------------------------------------
# streamkit (C++ CLI)
# ------------------------------------------------------------------------------------------------

def run_streamkit(ctx, files, n, m, k, engine, precision=None):
    """bench_nn_files once (`precision` "fast" or "exact"; None: the CLI's default, fast); returns (entry,
    indices (n, k) int64 or None)."""
    method = f"streamkit_{engine}"
    result = h.run_bench_nn_files(ctx.bench_binary, files, n, m, k, engine, ctx.repeat, ctx.tmp, ctx.cli_timeout,
                                  precision)
    if result.status != "ok":
        return entry_for(method, result.status, note=result.note), None
    record = result.record
    entry = entry_for(method, build_ms=record.get("build_ms"), query_ms=record.get("query_ms"),
                      total_ms=record.get("total_ms"), engine_used=record.get("engine"),
                      bytes_per_reference=record.get("bytes_per_reference"), gpu=record.get("gpu"),
                      runs=ctx.repeat, note=result.note)
    return entry, result.indices


# ------------------------------------------------------------------------------------------------
# cuBQL and cudaKDTree (our driver, compiled once per run against the user's sources)
# ------------------------------------------------------------------------------------------------

DRIVER_SOURCE = REPO / "benchmarks/peers/cubql_cukd_driver.cu"
DRIVER_FLAGS = ("-O3", "-std=c++17", "--extended-lambda", "--expt-relaxed-constexpr", "-cudart", "static")


@dataclasses.dataclass(frozen=True)
class PeerLibrary:
    key: str           # the JSON's and the binary's name
    label: str         # the library's name (the versions' key)
    option: str        # the command-line option naming its source
    header: str        # a file the source must hold, relative to it
    define: str        # the driver's macro that compiles its methods in
    methods: tuple
    url: str


PEER_LIBRARIES = (
    PeerLibrary("cubql", "cuBQL", "--cubql-src", "cuBQL/bvh.h", "STREAMKIT_WITH_CUBQL", ("cubql", "cubql_radix"),
                "https://github.com/NVIDIA/cuBQL"),
    PeerLibrary("cudakdtree", "cudaKDTree", "--cudakdtree-src", "cukd/builder.h", "STREAMKIT_WITH_CUKD",
                ("cudakdtree", "cudakdtree_stack"), "https://github.com/ingowald/cudaKDTree"),
)


def library_of(method):
    return next(lib for lib in PEER_LIBRARIES if method in lib.methods)


def source_commit(path):
    """(commit, where it was read): the first word of PATH/COMMIT, else the HEAD of the git checkout whose top
    is PATH (not that of a repository PATH merely lies in), else "unknown"."""
    commit_file = Path(path) / "COMMIT"
    if commit_file.is_file():
        words = commit_file.read_text(errors="replace").split()
        if words:
            return words[0], f"{commit_file}"
    top = h.shell(["git", "-C", str(path), "rev-parse", "--show-toplevel"])
    if top != "unknown" and Path(top).resolve() == Path(path).resolve():
        commit = h.shell(["git", "-C", str(path), "rev-parse", "HEAD"])
        dirty = h.shell(["git", "-C", str(path), "status", "--porcelain", "--untracked-files=no"])
        return commit + (" with local changes" if dirty not in ("", "unknown") else ""), "git rev-parse HEAD"
    return "unknown", "no COMMIT file, not the top of a git checkout"


def find_nvcc(name):
    found = shutil.which(name)
    if found is None and name == "nvcc" and Path("/usr/local/cuda/bin/nvcc").is_file():
        found = "/usr/local/cuda/bin/nvcc"
    return found


def build_peer_drivers(ctx, libraries):
    """Compiles the driver once per library in `libraries` whose source was given (the compilations run side by
    side); returns {key: info}, info holding status, note, source, commit, command, compile_s, methods, binary."""
    infos, jobs = {}, []
    nvcc = find_nvcc(ctx.nvcc)
    for lib in libraries:
        src = getattr(ctx, lib.option[2:].replace("-", "_"))
        info = infos[lib.key] = {"library": lib.label, "url": lib.url, "source": src, "commit": None,
                                 "commit_from": None, "command": None, "compile_s": None, "methods": [],
                                 "status": "missing", "note": ""}
        if not src:
            info["note"] = (f"missing: {lib.option} not given (a checkout of {lib.url}, or a tree exported by "
                            "benchmarks/peers/stage_sources.sh)")
            continue
        src = Path(src).resolve()
        info["source"] = str(src)
        if not (src / lib.header).is_file():
            info.update(status="error", note=f"error: {src} holds no {lib.header} ({lib.option} names the "
                                             f"checkout's top folder)")
            continue
        info["commit"], info["commit_from"] = source_commit(src)
        if nvcc is None:
            info.update(status="error", note=f"error: {ctx.nvcc} not found")
            continue
        binary = Path(ctx.tmp) / f"{lib.key}_driver"
        command = [nvcc, *DRIVER_FLAGS, f"-arch={ctx.peer_arch}", f"-D{lib.define}", "-I", str(src),
                   str(DRIVER_SOURCE), "-o", str(binary)]
        info.update(command=shlex.join(command), binary=str(binary))
        log(f"compiling the {lib.label} driver: {info['command']}")
        jobs.append((info, time.perf_counter(), subprocess.Popen(command, stdout=subprocess.PIPE,
                                                                 stderr=subprocess.STDOUT, text=True)))
    for info, started, proc in jobs:
        try:
            output, _ = proc.communicate(timeout=ctx.peer_compile_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0]
            output += f"\ntimed out after {ctx.peer_compile_timeout} s"
        info["compile_s"] = round(time.perf_counter() - started, 1)
        if proc.returncode != 0:
            tail = " | ".join(output.strip().splitlines()[-4:])
            info.update(status="error", note=f"error: the driver did not compile (exit {proc.returncode}): {tail}")
            log(f"  {info['library']}: {info['note']}")
            continue
        listed = h.run_json_program([info["binary"], "--list"], None, 0, 0, 60, "--list")
        info["methods"] = (listed.record or {}).get("methods", [])
        info.update(status="ok" if listed.status == "ok" else "error", note=listed.note)
        log(f"  {info['library']}: compiled in {info['compile_s']} s, methods {info['methods']}, "
            f"commit {info['commit']} ({info['commit_from']})")
    return infos


def driver_inputs_differ(ctx, binary, files, data):
    """How many coordinates of the unit vectors the driver makes of the references differ from the float32 unit
    vectors the other peers get (the driver's --convert, no GPU needed); computed once per workload."""
    if getattr(data, "driver_differing", None) is None:
        out_file = Path(ctx.tmp) / "driver_references_unit.bin"
        proc = subprocess.run([binary, "--convert", str(files[1]), str(out_file)], capture_output=True, text=True,
                              timeout=ctx.cli_timeout)
        converted = np.fromfile(out_file, dtype="<f4") if proc.returncode == 0 and out_file.is_file() else None
        data.driver_differing = (int(np.count_nonzero(converted != data.ref_unit32.reshape(-1)))
                                 if converted is not None and converted.size == data.ref_unit32.size else -1)
        out_file.unlink(missing_ok=True)
    return data.driver_differing


def run_driver_method(ctx, files, data, k, ref, method):
    lib = library_of(method)
    info = ctx.peer_drivers.get(lib.key)
    if info is None:
        return entry_for(method, "error", note="error: the driver was not built")
    if info["status"] != "ok" or method not in info["methods"]:
        return entry_for(method, info["status"] if info["status"] != "ok" else "error",
                         note=info["note"] or f"error: {method} is not in the driver ({info['methods']})")
    out_file = Path(ctx.tmp) / f"indices_{method}.bin"
    command = [info["binary"], "--method", method, "--observations", str(files[0]), "--references", str(files[1]),
               "--k", str(k), "--repeat", str(ctx.repeat), "--warmups", str(ctx.warmups), "--indices", str(out_file)]
    result = h.run_json_program(command, out_file, data.n, k, ctx.cli_timeout, out_file.name)
    if result.status != "ok":
        return entry_for(method, result.status, note=result.note)
    record = result.record
    differing = driver_inputs_differ(ctx, info["binary"], files, data)
    notes = [record.get("description", ""), f"{lib.label} {info['commit']}",
             "CUDA events; a thread per observation, observations in input order"]
    if differing:
        notes.append("the driver's reference unit vectors could not be compared with the other peers'" if differing < 0
                     else f"{differing} of the {3 * data.m} coordinates of the driver's reference unit vectors differ "
                          "from the other peers'")
    if record.get("k_compiled") not in (None, k):
        notes.append(f"kernels for K = {record['k_compiled']}, the first {k} written")
    if (record.get("n"), record.get("m"), record.get("k")) != (data.n, data.m, k):
        notes.append(f"driver reports n={record.get('n')} m={record.get('m')} k={record.get('k')}")
    entry = entry_for(method, build_ms=record.get("build_ms"), query_ms=record.get("query_ms"),
                      total_ms=record.get("total_ms"), runs=ctx.repeat, warmups=ctx.warmups,
                      k_compiled=record.get("k_compiled"), runs_ms=record.get("total_runs_ms"), gpu=record.get("gpu"),
                      source_commit=info["commit"], unit_vectors_differing=differing,
                      note="; ".join(n for n in notes if n))
    ref.check(entry, result.indices[ref.sample])
    return entry


# ------------------------------------------------------------------------------------------------
# Python peers
# ------------------------------------------------------------------------------------------------

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
    timer = h.WallTimer(ctx.sync)
    summary, indices = measure(ctx, lambda: timer(build=lambda: index.build(refs),
                                                  query=lambda: index.query_knn(obs)[0]))
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
    timer = h.WallTimer(ctx.sync)
    for attempt in range(4):
        def search(cfg=cfg):
            _, indices = jztree.knn.knn.jit(refs, k=k, part_query=obs, cfg=cfg)
            return indices.block_until_ready()
        try:
            summary, indices = measure(ctx, lambda: timer(**{"build+query": search}))
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

    def search():
        for lo in range(0, n, chunk):
            rows(lo, min(lo + chunk, n))
        return out

    timer = h.WallTimer(ctx.sync)
    rows(0, chunk)                                  # warm-up of one chunk
    phases, _ = timer(probe=lambda: rows(0, chunk))
    skipped = too_slow(ctx, "torch_cdist_topk", phases["probe"] * n / chunk, f"one chunk of {chunk} x {m}")
    if skipped:
        del refs, obs, out
        return skipped
    summary, _ = measure(ctx, lambda: timer(query=search))
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
    timer, built = h.WallTimer(), {}

    def build():
        built["tree"] = cKDTree(refs)

    summary, _ = measure(ctx, lambda: timer(build=build, query=lambda: built["tree"].query(queries, k=kk, workers=-1)))
    note = f"host, {os.cpu_count()} CPUs, workers=-1, float32 unit vectors (converted to float64 by cKDTree)"
    if subset < n:
        summary["query_ms"] *= n / subset
        summary["total_ms"] = summary["build_ms"] + summary["query_ms"]
        note += f"; query run on the first {subset} of {n} observations and extrapolated linearly"
    _, found = built["tree"].query(obs[ref.sample], k=kk)
    found = np.asarray(found, dtype=np.int64).reshape(len(ref.sample), kk)
    rows = np.full((len(ref.sample), k), -1, dtype=np.int64)
    rows[:, :kk] = np.where(found >= data.m, -1, found)
    entry = entry_for("scipy_ckdtree", **summary, extrapolated=subset < n, subset=subset, note=note)
    ref.check(entry, rows)
    return entry


def run_numba(ctx, data, k, ref):
    if k != 1:
        return entry_for("numba_two_pass", "n/a", note="n/a: the notebook's kernel finds k = 1 only")
    try:
        cuda = h.import_numba_cuda()
        if not cuda.is_available():
            return entry_for("numba_two_pass", "error", note="error: numba.cuda sees no GPU")
        h.numba_kernels()
    except Exception as exc:
        return entry_for("numba_two_pass", "missing", note=f"missing: {exc}")
    sm_count = cuda.get_current_device().MULTIPROCESSOR_COUNT
    ref_lat, ref_lon = cuda.to_device(data.ref_lat), cuda.to_device(data.ref_lon)
    obs_lat, obs_lon = cuda.to_device(data.obs_lat), cuda.to_device(data.obs_lon)
    timer = h.WallTimer(ctx.sync)
    probe_n = min(data.n, 1 << 16)
    probe = h.NumbaTwoPass(cuda, probe_n, data.m, sm_count)
    probe.build(ref_lat, ref_lon)
    probe.query(obs_lat[:probe_n], obs_lon[:probe_n])   # compiles
    phases, _ = timer(probe=lambda: probe.query(obs_lat[:probe_n], obs_lon[:probe_n]))
    step_ms = phases["probe"] * data.n / probe_n
    del probe
    skipped = too_slow(ctx, "numba_two_pass", step_ms, f"{probe_n} observations")
    if skipped:
        return skipped
    search = h.NumbaTwoPass(cuda, data.n, data.m, sm_count)
    summary, index = measure(ctx, lambda: timer(build=lambda: search.build(ref_lat, ref_lon),
                                                query=lambda: search.query(obs_lat, obs_lon)))
    rows = index.copy_to_host()[ref.sample].astype(np.int64).reshape(-1, 1)
    entry = entry_for("numba_two_pass", **summary,
                      note=f"float32 haversine, {search.slices} reference slices, tiles of "
                           f"{h.NUMBA_WARPS_PER_BLOCK * h.NUMBA_OBS_PER_WARP} observations, buffers allocated before timing")
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
    data = h.make_data(workload, places, ctx.quick)
    log(f"{workload.name}: n={data.n} m={data.m} k={workload.k} (data in {time.perf_counter() - started:.1f} s)")
    ref = h.Reference(data, workload.k, ctx.sample, workload.name)
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
        if method in DRIVER_METHODS:
            runner = lambda: run_driver_method(ctx, files, data, workload.k, ref, method)  # noqa: E731
        else:
            runner = lambda: PEER_RUNNERS[method](ctx, data, workload.k, ref)  # noqa: E731
        result["methods"].append(h.run_guarded(method, runner, entry_for, summary_line))
    return result


def run_sweep(ctx):
    div = 16 if ctx.quick else 1
    n = SWEEP_N // div
    obs = h.uniform_points(h.rng_for("sweep", 0), n)
    points = []
    for m in (m // div for m in SWEEP_M):
        refs = h.uniform_points(h.rng_for(f"sweep_m{m}", 1), m)
        data = h.Data(obs[0], obs[1], refs[0], refs[1])
        ref = h.Reference(data, 1, ctx.sample, "sweep")
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
    found = h.versions(ctx.bench_binary)
    for info in ctx.peer_drivers.values():
        if info.get("commit"):
            found[info["library"]] = info["commit"]
    if ctx.peer_drivers:
        found["nvcc"] = nvcc_version(find_nvcc(ctx.nvcc))
    return found


def nvcc_version(nvcc):
    """The last line of `nvcc --version` (e.g. "Build cuda_13.0.r13.0/compiler.36424714_0"), or "missing"."""
    if nvcc is None:
        return "missing"
    try:
        lines = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout.strip().splitlines()
        return lines[-1] if lines else "unknown"
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
    parser.add_argument("--cli-timeout", type=int, default=300,
                        help="seconds per bench_nn_files (or cuBQL / cudaKDTree driver) call")
    parser.add_argument("--cubql-src", help="top folder of a cuBQL source tree (holds cuBQL/bvh.h): methods "
                                            "cubql, cubql_radix; absent: they are recorded as missing")
    parser.add_argument("--cudakdtree-src", help="top folder of a cudaKDTree source tree (holds cukd/builder.h): "
                                                 "methods cudakdtree, cudakdtree_stack")
    parser.add_argument("--nvcc", default="nvcc", help="the CUDA compiler for the cuBQL / cudaKDTree driver")
    parser.add_argument("--peer-arch", default="sm_90", help="nvcc -arch for the driver (default sm_90)")
    parser.add_argument("--peer-compile-timeout", type=int, default=900, help="seconds per driver compilation")
    args = parser.parse_args()
    selected = names if args.workloads == "all" else [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = sorted(set(selected) - set(names))
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {names}")
    args.methods = list(METHODS) if args.methods == "all" else [m.strip() for m in args.methods.split(",") if m.strip()]
    if not any(m.startswith(w) or m == w for m in METHODS for w in args.methods):
        parser.error(f"no method matches {args.methods}; choose from {list(METHODS)}")

    chosen = [w for w in WORKLOADS if w.name in selected]
    places = h.read_places(args.places) if any(w.kind in ("gps", "clustered") for w in chosen) else None
    driver_methods = {m for w in chosen for m in w.peers if m in DRIVER_METHODS and wanted(args, m)}
    with tempfile.TemporaryDirectory(prefix="peers_nearest_") as tmp:
        args.tmp = tmp
        args.sync = h.device_sync_function()
        libraries = [lib for lib in PEER_LIBRARIES if driver_methods & set(lib.methods)]
        args.peer_drivers = build_peer_drivers(args, libraries)
        settings = {"repeat": args.repeat, "warmups": args.warmups, "sample": args.sample, "quick": args.quick,
                    "max_method_seconds": args.max_method_seconds, "relative_tolerance": h.RELATIVE_TOLERANCE,
                    "absolute_tolerance_rad": h.ABSOLUTE_TOLERANCE_RAD, "methods": args.methods,
                    "timing": "data on the device; device synchronised around each phase, wall clock; "
                              "streamkit: the CLI's own figures; cuBQL, cudaKDTree: the driver's CUDA events",
                    "peer_drivers": {key: {k: v for k, v in info.items() if k != "binary"}
                                     for key, info in args.peer_drivers.items()}}
        report = h.Report(args.out, versions(args), settings, sweep=[])

        def save():
            if report["gpu"] == "unknown":   # no nvidia-smi: take the name a CLI printed
                report["gpu"] = next((e["gpu"] for w in report["workloads"] for e in w["methods"] if e.get("gpu")),
                                     next((p["gpu"] for p in report["sweep"] if p.get("gpu")), "unknown"))
            report.save()

        for workload in chosen:
            report["workloads"].append(run_workload(args, workload, places))
            save()
        if "sweep" in selected:
            log("sweep:")
            report["sweep"] = run_sweep(args)
        save()
        report.finish()
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
