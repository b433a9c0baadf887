#!/usr/bin/env python3
"""Radius queries (issue 27): streamkit's bench_radius and cuBQL's radius query on the same data, in one call.

1. Compiles benchmarks/peers/cubql_cukd_driver.cu against the cuBQL source named by --cubql-src, as
   peers_nearest.py does (the same nvcc flags; --driver-binary names one compiled already instead).
2. Runs `bench_radius PLACES REPEAT --write-points DIR`: the benchmark writes the points it generates (raw float32
   (lat, lon) degree pairs) and DIR/cases.tsv (case, observation file, reference file, r in km, sphere radius)
   before it runs, so both sides search the very same float32 inputs with the very same radii: 1M GPS-like
   observations x the 144,563 shipped places within 1, 10 and 50 km; 2^20 x 2^20 uniform (and 2^14 x 2^20)
   with r giving about 16 neighbours per row.
3. Runs the driver's radius mode once per case and cuBQL method (cubql: gpuBuilder, cubql_radix: radixBuilder):
   build, count pass (cuBQL::fixedRadiusQuery::forEachPrim + cub::DeviceScan), unsorted fill, per-row sort
   (cub::DeviceSegmentedSort), each the median of --repeat CUDA-event timings after --warmups, and its check of
   --check-rows rows against a float64 CPU haversine.
4. Prints bench_radius's own table, every driver JSON line, then one table per case.

In the tables: streamkit's count pass is its offsets pass (count + scan), its unsorted fill the unsorted fill,
its sorted fill the best sorted fill it reports (the one its blocking form takes), its totals offsets + fill;
its index is built before the timings (bench_radius times no build). cuBQL's count pass is count + scan, its
sorted fill = unsorted fill + the separate sort; its build is the box kernel + the builder. Both take float32
points: streamkit (lat, lon) degrees converted inside its kernels, cuBQL float32 unit vectors made on the host
before the timings (float64 arithmetic, rounded). streamkit decides "within" by a float64 haversine; cuBQL by the
float32 squared chord, so its rows may differ from the float64 truth by pairs within float32 rounding of r (the
check's "in band" counts); "wrong" counts the rest.

Usage (repository root; the device machine: nvcc there, the cuBQL tree staged by benchmarks/peers/stage_sources.sh):

  PYTHONUNBUFFERED=1 python3 benchmarks/peers_radius.py --bench-radius build-radius-peer/benchmarks/bench_radius \\
      --cubql-src .carry/peers/cuBQL
"""
import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers_harness as h  # noqa: E402
import peers_nearest as pn  # noqa: E402  (the driver's source, flags, nvcc and commit lookup)

REPO = h.REPO
METHODS = ("cubql", "cubql_radix")
log = h.log


def compile_driver(args, tmp):
    """The driver binary: --driver-binary, else compiled here like peers_nearest.py; returns (path, info)."""
    src = Path(args.cubql_src).resolve()
    commit, commit_from = pn.source_commit(src)
    info = {"source": str(src), "commit": commit, "commit_from": commit_from}
    if args.driver_binary:
        info["command"] = f"prebuilt: {args.driver_binary}"
        return Path(args.driver_binary), info
    nvcc = pn.find_nvcc(args.nvcc)
    if nvcc is None:
        sys.exit(f"peers_radius: {args.nvcc} not found")
    binary = Path(tmp) / "cubql_driver"
    command = [nvcc, *pn.DRIVER_FLAGS, f"-arch={args.peer_arch}", "-DSTREAMKIT_WITH_CUBQL", "-I", str(src),
               str(pn.DRIVER_SOURCE), "-o", str(binary)]
    info["command"] = shlex.join(command)
    info["nvcc"] = pn.nvcc_version(nvcc)
    log(f"compiling the cuBQL driver: {info['command']}")
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.compile_timeout)
    info["compile_s"] = round(time.perf_counter() - started, 1)
    if done.returncode != 0:
        sys.exit(f"peers_radius: the driver did not compile:\n{done.stdout}\n{done.stderr}")
    return binary, info


def bench_rows(text):
    """bench_radius's table rows: [{case, engine, r, mean, largest, k, offsets, fill_radix, fill_told, fill_unsorted,
    radius, knn, ratio}]."""
    keys = ("case", "engine", "r", "mean", "largest", "k", "offsets", "fill_radix", "fill_told", "fill_unsorted",
            "radius", "knn", "ratio")
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(keys) or not line.startswith("|"):
            continue
        try:
            values = [cells[0], cells[1]] + [float(c) for c in cells[2:]]
        except ValueError:
            continue   # the header and the rule
        rows.append(dict(zip(keys, values)))
    return rows


def cell(value, digits=4):
    return "—" if value is None else f"{value:.{digits}f}"


def case_table(case, radius_km, streamkit, cubql):
    lines = [f"### {case}, r = {radius_km:.2f} km",
             "",
             "| method | mean row | largest row | build | count pass | unsorted fill | sorted fill | unsorted total "
             "| sorted total | rows checked | identical | wrong (outside band) | in band |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in streamkit:
        sorted_fill = row["radius"] - row["offsets"]
        lines.append(f"| streamkit {row['engine']} | {row['mean']:.2f} | {int(row['largest'])} | — (not timed) | "
                     f"{row['offsets']:.4f} | {row['fill_unsorted']:.4f} | {sorted_fill:.4f} | "
                     f"{row['offsets'] + row['fill_unsorted']:.4f} | {row['radius']:.4f} | — | — | — | — |")
    for entry in cubql:
        if entry.get("status") != "ok":
            lines.append(f"| {entry['method']} | {entry.get('note', 'error')} |" + " |" * 11)
            continue
        c = entry["check"]
        wrong = (c["missing_outside_band"] + c["extra_outside_band"] + c["duplicates"] + c["out_of_range"]
                 + c["sorted_rows_bad"] + entry["fill_mismatched_rows"])
        lines.append(f"| {entry['method']} | {entry['mean_row']:.2f} | {entry['largest_row']} | {entry['build_ms']:.4f} | "
                     f"{entry['count_ms']:.4f} | {entry['fill_ms']:.4f} | {entry['fill_ms'] + entry['sort_ms']:.4f} "
                     f"(sort {entry['sort_ms']:.4f}) | {entry['unsorted_ms']:.4f} | {entry['sorted_ms']:.4f} | "
                     f"{c['rows']} | {c['rows_identical']} | {wrong} | {c['missing_in_band']} missing, "
                     f"{c['extra_in_band']} extra |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bench-radius", default=str(REPO / "build-radius-peer/benchmarks/bench_radius"))
    parser.add_argument("--places", default=str(REPO / "examples/data/cities1000.csv"))
    parser.add_argument("--cubql-src", required=True, help="top folder of a cuBQL tree (holds cuBQL/bvh.h)")
    parser.add_argument("--driver-binary", help="a driver compiled already (with -DSTREAMKIT_WITH_CUBQL)")
    parser.add_argument("--nvcc", default="nvcc")
    parser.add_argument("--peer-arch", default="sm_90")
    parser.add_argument("--compile-timeout", type=int, default=900)
    parser.add_argument("--methods", default=",".join(METHODS), help="cubql, cubql_radix (default both)")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per phase (median; default 5)")
    parser.add_argument("--warmups", type=int, default=2, help="driver warm-ups per phase (bench_radius takes one)")
    parser.add_argument("--check-rows", type=int, default=2000, help="rows the driver checks per case (default 2000)")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per bench_radius or driver call")
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if set(methods) - set(METHODS):
        parser.error(f"--methods: from {METHODS}")

    with tempfile.TemporaryDirectory(prefix="peers_radius_") as tmp:
        driver, info = compile_driver(args, tmp)
        versions = {"gpu": h.gpu_name(),
                    "nvidia_driver": h.shell(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
                    "streamkit_commit": h.shell(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"]),
                    "cuBQL": info["commit"], "driver": info}
        print(f"# peers_radius: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
        print(f"command: {shlex.join(sys.argv)}")
        print("versions: " + json.dumps(versions))
        print()
        points = Path(tmp) / "points"
        points.mkdir()
        command = [args.bench_radius, args.places, str(args.repeat), "--write-points", str(points)]
        log("running " + shlex.join(command))
        bench = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        print(f"## bench_radius (exit {bench.returncode}): {shlex.join(command)}")
        print()
        print(bench.stdout.rstrip())
        if bench.stderr.strip():
            print("stderr: " + bench.stderr.strip())
        print()
        rows = bench_rows(bench.stdout)
        cases = [line.split("\t") for line in (points / "cases.tsv").read_text().splitlines() if line.strip()]
        results = []
        print("## cuBQL radius query (driver JSON lines)")
        print()
        for case, obs, refs, radius_km, sphere_km in cases:
            for method in methods:
                command = [str(driver), "--method", method, "--radius-km", radius_km, "--sphere-radius-km", sphere_km,
                           "--observations", str(points / obs), "--references", str(points / refs),
                           "--repeat", str(args.repeat), "--warmups", str(args.warmups),
                           "--check-rows", str(args.check_rows)]
                log(f"{case}, r = {float(radius_km):.2f} km: {method}")
                done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
                entry = {"case": case, "method": method, "status": "error",
                         "note": f"exit {done.returncode}: {done.stderr.strip()[-300:]}"}
                if done.returncode == 0:
                    try:
                        entry = {"case": case, "status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}
                    except (ValueError, IndexError) as exc:
                        entry["note"] = f"unreadable output ({exc}): {done.stdout[-300:]}"
                print(json.dumps(entry))
                sys.stdout.flush()
                results.append((case, float(radius_km), entry))
        print()
        print("## Per case (ms; medians)")
        print()
        for case, _, _, radius_km, _ in cases:
            r = float(radius_km)
            streamkit = [row for row in rows if row["case"] == case and abs(row["r"] - r) < 0.006]
            cubql = [entry for c, rr, entry in results if c == case and rr == r]
            print(case_table(case, r, streamkit, cubql))
            print()


if __name__ == "__main__":
    main()
