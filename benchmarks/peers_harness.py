"""The harness shared by benchmarks/peers_nearest.py and benchmarks/python_peers.py.

One place for what both scripts do the same way, so that their numbers stay comparable:

  data      the nearest-neighbour workloads' points (fixed seeds): uniform on the sphere, GPS-like points round
            the places of a CSV, clustered points; float32 (lat, lon) degrees, float32 unit vectors for the peers,
            float64 unit vectors for the checker; the raw files the C++ CLIs read
  checking  the exact k nearest in float64 on the CPU for a sample of observations (ties by the smallest index),
            and the test of a method's rows against them
  timing    timers that run named phases and return {phase: ms} (wall clock with the device synchronised around
            each phase, or CUDA events on CuPy's / torch's current stream), warm-ups then timed steps, medians,
            the estimate that skips a method whose timed steps would take too long
  JSON      the report both scripts write (gpu, date, command, versions, settings, complete, workloads, ...),
            rewritten after every workload so that a run cut short keeps what it finished
  shared    the runners of external programs that print one JSON line and write int32 indices (streamkit's
            `bench_nn_files`, the cuBQL / cudaKDTree driver), and the seed notebook's Numba two-pass kernel

Each script keeps its own methods, its own entry format and its command line (their docstrings describe them).
"""
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


def log(*parts):
    print(*parts, file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class NearestData:
    """A nearest-neighbour workload's points: n observations, m references (None: every place of the CSV)."""
    name: str
    n: int
    m: int | None
    k: int
    kind: str          # uniform, gps, clustered


NEAREST_DATA = {d.name: d for d in (
    NearestData("uniform_2^24x2^14_k1", 1 << 24, 1 << 14, 1, "uniform"),
    NearestData("gps_1M_places_k1", 1_000_000, None, 1, "gps"),
    NearestData("clustered_2^22x2^20_k1", 1 << 22, 1 << 20, 1, "clustered"),
    NearestData("uniform_2^20x2^20_k16", 1 << 20, 1 << 20, 16, "uniform"),
    NearestData("small_2^16x2^13_k1", 1 << 16, 1 << 13, 1, "uniform"),
)}


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
        """Raw little-endian float32 (lat, lon) pairs in degrees, as bench_nn_files (and the cuBQL / cudaKDTree
        driver) read them: observations.bin and references.bin in `directory`."""
        obs_file, ref_file = Path(directory) / "observations.bin", Path(directory) / "references.bin"
        np.stack([self.obs_lat, self.obs_lon], axis=1).astype("<f4").tofile(obs_file)
        np.stack([self.ref_lat, self.ref_lon], axis=1).astype("<f4").tofile(ref_file)
        return obs_file, ref_file


def make_data(spec, places, quick):
    """The points of `spec` (a NearestData or anything with its fields); `quick` divides the sizes by 16."""
    div = 16 if quick else 1
    n = spec.n // div
    obs_rng, ref_rng = rng_for(spec.name, 0), rng_for(spec.name, 1)
    if spec.kind == "uniform":
        obs, refs = uniform_points(obs_rng, n), uniform_points(ref_rng, spec.m // div)
    elif spec.kind == "gps":
        place_lat, place_lon = places
        if quick:  # a subset of the places, in file order
            keep = np.sort(ref_rng.choice(len(place_lat), len(place_lat) // div, replace=False))
            place_lat, place_lon = place_lat[keep], place_lon[keep]
        near = points_near(obs_rng, place_lat, place_lon, n // 2, "disc", 5.0)
        far = uniform_points(obs_rng, n - n // 2)
        order = obs_rng.permutation(n)
        obs = (np.concatenate([near[0], far[0]])[order], np.concatenate([near[1], far[1]])[order])
        refs = (place_lat, place_lon)
    elif spec.kind == "clustered":
        obs = points_near(obs_rng, places[0], places[1], n, "gaussian", 2.0)
        refs = points_near(ref_rng, places[0], places[1], spec.m // div, "gaussian", 2.0)
    else:
        raise ValueError(spec.kind)
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
        """Checks `rows` (the sampled rows, (sample, k) integers); adds checked, wrong, identical_indices and
        max_error_rad to `entry`."""
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


class WallTimer:
    """Runs named phases, `timer(build=f, query=g)`, and returns ({phase: ms}, the last phase's result): wall
    clock (time.perf_counter), `sync` (e.g. a device synchronisation) called before the first phase and after
    each one."""

    def __init__(self, sync=lambda: None):
        self.sync = sync

    def __call__(self, **phases):
        self.sync()
        times, result = {}, None
        started = time.perf_counter()
        for name, work in phases.items():
            result = work()
            self.sync()
            now = time.perf_counter()
            times[name] = (now - started) * 1e3
            started = now
        return times, result


class EventTimer:
    """The same interface, device work enqueued on the current stream of CuPy or torch timed by CUDA events."""

    def __init__(self, framework):
        if framework == "torch":
            import torch
            self._event = lambda: torch.cuda.Event(enable_timing=True)
            self._elapsed = lambda start, end: start.elapsed_time(end)
        else:
            import cupy
            self._event = cupy.cuda.Event
            self._elapsed = cupy.cuda.get_elapsed_time

    def __call__(self, **phases):
        events = [self._event()]
        events[0].record()
        result = None
        for work in phases.values():
            result = work()
            events.append(self._event())
            events[-1].record()
        events[-1].synchronize()
        return {name: self._elapsed(events[i], events[i + 1]) for i, name in enumerate(phases)}, result


def wall_clock(work, synchronize=lambda: None):
    """A single step timed on the host: `work()`, then `synchronize()`; returns ({"step": ms}, result)."""
    return WallTimer(synchronize)(step=work)


def repeats_for(step_ms, repeat):
    """More timed steps for short ones (their medians need them and they cost little)."""
    return max(repeat, 50 if step_ms < 1.0 else 20 if step_ms < 20.0 else repeat)


@dataclasses.dataclass
class Measurement:
    """Timed steps: `runs` holds each step's {phase: ms}."""
    runs: list
    warmups: int

    @property
    def totals(self):
        return [sum(run.values()) for run in self.runs]

    @property
    def total_ms(self):
        return statistics.median(self.totals)

    def phase_ms(self, name):
        """The median of one phase, None when the steps have no such phase."""
        return statistics.median(run[name] for run in self.runs) if name in self.runs[0] else None


def measure(step, warmups, repeat, more_for_short=False):
    """`warmups` calls of `step()`, then `repeat` timed ones (with `more_for_short`, as many as repeats_for()
    asks for after the last warm-up's time); `step()` returns ({phase: ms}, output). Returns (Measurement, the
    last step's output)."""
    phases, output = None, None
    for _ in range(warmups):
        phases, output = step()
    if more_for_short and phases is not None:
        repeat = repeats_for(sum(phases.values()), repeat)
    runs = []
    for _ in range(repeat):
        phases, output = step()
        runs.append(phases)
    return Measurement(runs, warmups), output


def skip_estimate(step_ms, steps, max_seconds, how):
    """None when `steps` steps of `step_ms` fit in `max_seconds`; else the fields of a skipped entry
    (estimated_ms and the note)."""
    if step_ms * steps / 1e3 <= max_seconds:
        return None
    return {"estimated_ms": step_ms,
            "note": f"skipped: estimated {step_ms / 1e3:.1f} s per step x {steps} steps > {max_seconds:g} s "
                    f"(extrapolated from {how})"}


# ------------------------------------------------------------------------------------------------
# Environment and the JSON report
# ------------------------------------------------------------------------------------------------

def shell(command, timeout=30):
    """The first line of a command's output, or "unknown"."""
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except Exception:
        return "unknown"


def package_version(dist):
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "missing"


VERSIONED = ("numpy", "scipy", "torch", "jax", "jaxlib", "jax-cuda13-plugin", "numba", "numba-cuda", "scikit-learn",
             "cupy-knn", "jztree", "jztree-cu13")


def versions(bench_binary):
    """Python, the packages of VERSIONED, CuPy, the NVIDIA driver, streamkit's commit and the CLI's path."""
    found = {"python": sys.version.split()[0]}
    for dist in VERSIONED:
        found[dist] = package_version(dist)
    cupy = {dist: package_version(dist) for dist in ("cupy-cuda13x", "cupy-cuda12x", "cupy")}
    found.update({dist: v for dist, v in cupy.items() if v != "missing"} or {"cupy": "missing"})
    found["nvidia_driver"] = shell(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    # A copy of the working tree (the device's) may carry older git metadata than its files: say so.
    dirty = shell(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    found["streamkit_commit"] = shell(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]) + (
        " with uncommitted changes" if dirty not in ("", "unknown") else "")
    found["bench_nn_files"] = str(bench_binary)
    return found


def gpu_name():
    name = shell(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"])
    if name != "unknown":
        return name
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:
        return "unknown"


class Report:
    """The JSON both scripts write: {"gpu", "date", "command", "versions", "settings", "complete", "workloads",
    ...extra}; save() rewrites the file (after every workload), finish() marks it complete."""

    def __init__(self, path, versions, settings, **extra):
        self.path = Path(path)
        self.data = {"gpu": gpu_name(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "command": shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv)),
                     "versions": versions, "settings": settings, "complete": False, "workloads": []}
        self.data.update(extra)

    def __getitem__(self, key):
        return self.data[key]

    def __setitem__(self, key, value):
        self.data[key] = value

    def save(self):
        self.path.write_text(json.dumps(self.data, indent=1) + "\n")

    def finish(self):
        self.data["complete"] = True
        self.save()


# ------------------------------------------------------------------------------------------------
# Shared runners: programs that print one JSON line, the seed notebook's Numba kernel
# ------------------------------------------------------------------------------------------------

def free_gpu_memory():
    """Hand cached blocks back so that the next method (or another process) finds the memory."""
    for free in (lambda: __import__("cupy").get_default_memory_pool().free_all_blocks(),
                 lambda: __import__("torch").cuda.empty_cache() if "torch" in sys.modules else None):
        try:
            free()
        except Exception:
            pass


def run_guarded(method, runner, entry_for, summary_line, missing=()):
    """One method of a workload: `runner()` returns its entry; an exception of a type in `missing` makes an entry
    of status "missing", any other one of status "error" (traceback logged). Then cached GPU memory is handed back
    and the entry's summary_line() logged. Returns the entry."""
    try:
        entry = runner()
    except missing as exc:
        entry = entry_for(method, "missing", note=f"missing: {exc}")
    except Exception as exc:
        entry = entry_for(method, "error", note=f"error: {type(exc).__name__}: {str(exc).strip()[:400]}")
        log(traceback.format_exc())
    free_gpu_memory()
    log(f"  {method}: {summary_line(entry)}")
    return entry


@dataclasses.dataclass
class ProgramResult:
    """What a run of a JSON-printing program gave: status ok / missing / skipped / error, a note, its last JSON
    object (record), and its indices (n, k) int64 (None unless ok)."""
    status: str
    note: str = ""
    record: dict | None = None
    indices: np.ndarray | None = None


def run_json_program(command, indices_file, n, k, timeout, name):
    """Runs `command`, which prints one JSON object (its last line that parses) and writes n x k int32 indices
    to `indices_file` (None: writes none). Exit status 77 means "skipped" (no GPU)."""
    if indices_file is not None:
        indices_file = Path(indices_file)
        indices_file.unlink(missing_ok=True)
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return ProgramResult("error", f"error: timed out after {timeout} s")
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        status = "skipped" if proc.returncode == 77 else "error"
        return ProgramResult(status, f"{status}: exit {proc.returncode}: {' | '.join(tail)}")
    record = None
    for line in reversed(proc.stdout.splitlines()):
        if line.strip().startswith("{"):
            try:
                record = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
    if record is None:
        return ProgramResult("error", f"error: no JSON object on stdout: {proc.stdout[-300:]!r}")
    if indices_file is None:
        return ProgramResult("ok", "", record)
    indices = np.fromfile(indices_file, dtype="<i4") if indices_file.is_file() else np.zeros(0, np.int32)
    if indices.size != n * k:
        return ProgramResult("error", f"error: {name} wrote {indices.size} indices, expected {n * k}", record)
    return ProgramResult("ok", "", record, indices.reshape(n, k).astype(np.int64))


def run_bench_nn_files(binary, files, n, m, k, engine, repeat, tmp, timeout, precision=None):
    """streamkit's CLI bench_nn_files once (`precision` "fast" or "exact"; None: the CLI's default, fast)."""
    binary = Path(binary)
    if not binary.is_file():
        return ProgramResult("missing", f"missing: {binary} not found (build bench_nn_files)")
    out_file = Path(tmp) / f"indices_{engine}.bin"
    command = [str(binary), "--observations", str(files[0]), "--references", str(files[1]), "--k", str(k),
               "--engine", engine, "--repeat", str(repeat), "--indices", str(out_file)]
    if precision is not None:
        command += ["--precision", precision]
    result = run_json_program(command, out_file, n, k, timeout, out_file.name)
    record = result.record or {}
    if result.status == "ok" and (record.get("n"), record.get("m"), record.get("k")) != (n, m, k):
        result.note = f"CLI reports n={record.get('n')} m={record.get('m')} k={record.get('k')}, expected {n}, {m}, {k}"
    return result


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
    import_numba_cuda()
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
    """Device buffers and launch shapes for one (n, m); build() converts the references, query() runs
    prepare + pass 1 + pass 2 on the observations."""

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
        return self.index
