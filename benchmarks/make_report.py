#!/usr/bin/env python3
"""Turns Google Benchmark output into docs/performance.md and a PNG plot.

Reads JSON files (--benchmark_out=F --benchmark_out_format=json; a file cut short by a timeout is
read up to its last complete entry) and console logs (lines with 'median'). Only medians are used.
Numbers are copied from the files, never typed in.

  python3 benchmarks/make_report.py --gpu "NVIDIA H100 80GB HBM3" --date 2026-11-22 \
      --command "bench_nearest_neighbor --benchmark_out=nn.json --benchmark_out_format=json" \
      docs/results/h100_*.json \
      --scaling "NVIDIA H200 x2=docs/results/h200x2_dispatcher.json,docs/results/h200x2_minmax.json" \
      --scaling "NVIDIA H200 x4=docs/results/h200x4_dispatcher.json,docs/results/h200x4_minmax.json"

Scaling files hold benchmarks named NAME/GPUS (nearest_on_gpus, host_pinned_gpus); each is compared
with 1 GPU of the same machine: efficiency = t(1) / (GPUS x t(GPUS)).

--peers FILE.json (written by benchmarks/peers_nearest.py) adds the section "Nearest neighbours: streamkit
against its peers" (times, the best peer over streamkit auto, the checks; GPU, date and command taken from
the file) and the plot --peers-plot (time against M for fixed N from the file's sweep).

--python-peers FILE.json (written by benchmarks/python_peers.py) adds the section "Python package: streamkit
against the notebooks' methods" (nearest neighbours, min-max host to host and on the device, per-call cost, with
the checks; GPU, driver, date, command and versions taken from the file). Repeat it for later runs (each gets
its own part) and give each a --python-note saying what it measured.
"""
import argparse
import json
import re
import sys
from pathlib import Path

TARGETS = {  # the issues' targets: (benchmark name prefix, limit in ms or None, wording)
    "fast/16777216/16384": "<= 75 ms (>= 3.6 T pairs/s)",
    "fast/65536/8192": "<= 0.25 ms",
    "fast/1024/4194304": ">= 2.5 T pairs/s",
    "exact/16777216/16384": "<= 150 ms",
    "device_resident_18x60x98450": "<= 0.8 ms",
    "tall_2p24x16_float_row_major": ">= 80 % of 2.95 TB/s",
    "column_major_98450x60_double": ">= 80 % of 2.95 TB/s",
    "column_major_4000x1500_double": ">= 80 % of 2.95 TB/s",
    "column_major_200x500000_float": ">= 80 % of 2.95 TB/s",
    "device_copy_": "reference (cudaMemcpyAsync, read + write)",
    "host_pinned/": "<= 16.5 ms",
    "host_pageable_staged/16": "<= 40 ms",
    "sum_normalize_10x10M/": "<= 8.0 ms",
}
SCALING_TARGETS = {("nearest_on_gpus", 2): ">= 0.92", ("nearest_on_gpus", 4): ">= 0.88"}


def json_entries(text):
    """Entries of the 'benchmarks' array, tolerating a file cut short."""
    start = text.find('"benchmarks"')
    if start < 0:
        return []
    position = text.find("[", start) + 1
    decoder = json.JSONDecoder()
    entries = []
    while True:
        while position < len(text) and text[position] in " \n\r\t,":
            position += 1
        try:
            entry, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return entries
        entries.append(entry)


def rows_from_json(path):
    rows = []
    for entry in json_entries(path.read_text()):
        if entry.get("aggregate_name") != "median" and entry.get("run_type") == "aggregate":
            continue
        if entry.get("run_type") == "aggregate" or entry.get("repetitions", 1) == 1:
            name = entry["run_name"]
            if "error_occurred" in entry:
                continue
            rows.append({"name": name, "ms": float(entry["real_time"]), "unit": entry["time_unit"],
                         "pairs_per_s": entry.get("pairs_per_s"),
                         "bytes_per_s": entry.get("bytes_per_s", entry.get("bytes_per_s_each_way")), "source": path.name})
    return rows


CONSOLE = re.compile(r"^(?P<name>\S+?)(/repeats:\d+)?(/manual_time)?(_median)?\s+(?P<time>[\d.]+) (?P<unit>ms|us)\s.*?"
                     r"(bytes_per_s=(?P<bytes>[\d.]+)(?P<bscale>[kMGT]?)/s)?(.*pairs_per_s=(?P<pairs>[\d.]+)(?P<pscale>[kMGT]?)/s)?\s*$")
SCALE = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def rows_from_console(path):
    rows = []
    for line in path.read_text().splitlines():
        if "median" not in line and "iterations:" not in line:
            continue
        match = CONSOLE.match(line.strip())
        if not match:
            continue
        name = re.sub(r"/(repeats|iterations):\d+.*", "", match["name"])
        rows.append({"name": name, "ms": float(match["time"]) / (1000 if match["unit"] == "us" else 1), "unit": "ms",
                     "bytes_per_s": float(match["bytes"]) * SCALE[match["bscale"]] if match["bytes"] else None,
                     "pairs_per_s": float(match["pairs"]) * SCALE[match["pscale"]] if match["pairs"] else None,
                     "source": path.name})
    return rows


def scaling_rows(specs):
    rows = []
    for spec in specs:
        machine, files = spec.split("=", 1)
        found = [r for path in files.split(",") for r in rows_from_json(Path(path))]
        for row in found:
            base, _, gpus = re.sub(r"/(repeats|iterations):.*", "", row["name"]).rpartition("/")
            if not gpus.isdigit() or not base.endswith("_gpus"):
                continue
            one = next((r for r in found if re.sub(r"/(repeats|iterations):.*", "", r["name"]) == f"{base}/1"), None)
            if one:
                rows.append({"machine": machine, "base": base, "gpus": int(gpus), "ms": row["ms"],
                             "efficiency": one["ms"] / (int(gpus) * row["ms"]), "source": row["source"]})
    return rows


def plot_scaling(rows, path, date):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(7, 4))
    for (machine, base) in sorted({(r["machine"], r["base"]) for r in rows}):
        mine = sorted((r for r in rows if r["machine"] == machine and r["base"] == base), key=lambda r: r["gpus"])
        one = mine[0]["ms"]
        axes.plot([r["gpus"] for r in mine], [one / r["ms"] for r in mine], marker="o", label=f"{base}, {machine}")
    top = max(r["gpus"] for r in rows)
    axes.plot([1, top], [1, top], color="grey", linestyle=":", label="linear")
    axes.set_xlabel("GPUs")
    axes.set_ylabel("speed-up over 1 GPU")
    axes.set_title(f"streamkit dispatcher scaling (host in / host out), {date}", fontsize=9)
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


PEER_LABELS = {  # column order of the peers table
    "streamkit_auto": "streamkit auto", "streamkit_brute_force": "streamkit brute force", "streamkit_tree": "streamkit tree",
    "cubql": "cuBQL (gpuBuilder)", "cubql_radix": "cuBQL (radixBuilder)", "cudakdtree": "cudaKDTree (cct)",
    "cudakdtree_stack": "cudaKDTree (stackBased)",
    "cupy_knn": "cupy-knn (LBVH)", "jztree": "jztree (JAX)", "torch_cdist_topk": "torch cdist + topk",
    "scipy_ckdtree": "scipy cKDTree (host)", "numba_two_pass": "Numba two-pass (seed)",
}


PEER_SHORT = {"cubql": "cuBQL", "cubql_radix": "cuBQL radix", "cudakdtree": "cudaKDTree",
              "cudakdtree_stack": "cudaKDTree stack",
              "cupy_knn": "cupy-knn", "jztree": "jztree", "torch_cdist_topk": "torch", "scipy_ckdtree": "cKDTree",
              "numba_two_pass": "Numba"}


def format_ms(ms):
    """Milliseconds, about three significant digits, no unit (the tables say ms)."""
    for floor, digits in ((100, 0), (10, 1), (1, 2)):
        if ms >= floor:
            return f"{ms:.{digits}f}"
    return f"{ms:.3f}"


def peer_cell(entry):
    """Total time, with (build + query) where the method separates them; a word where it did not run."""
    if entry is None:
        return ""
    status = entry.get("status", "ok")
    if status == "skipped" and entry.get("estimated_ms"):
        return f"skipped (est. {format_ms(entry['estimated_ms'])})"
    if status != "ok":
        return status
    text = ("~" if entry.get("extrapolated") else "") + format_ms(entry["total_ms"])
    if entry.get("build_ms") is not None and entry.get("query_ms") is not None:
        text += f" ({format_ms(entry['build_ms'])} + {format_ms(entry['query_ms'])})"
    if entry["method"] == "streamkit_auto" and entry.get("engine_used"):
        text += f", {entry['engine_used']}"
    return text


def best_peer(methods):
    """The fastest peer measured on the whole workload (extrapolated and skipped ones left out)."""
    measured = [e for e in methods if not e["method"].startswith("streamkit_") and e.get("status") == "ok"
                and e.get("total_ms") and not e.get("extrapolated")]
    return min(measured, key=lambda e: e["total_ms"], default=None)


def peers_section(path, plot_path):
    """Lines of the peers section, and the sweep plot (if the file has a sweep)."""
    data = json.loads(Path(path).read_text())
    present = {e["method"] for w in data["workloads"] for e in w["methods"]}
    columns = [m for m in PEER_LABELS if m in present] + sorted(present - set(PEER_LABELS))
    label = lambda m: PEER_LABELS.get(m, m)
    settings = data.get("settings", {})
    lines = ["", "## Nearest neighbours: streamkit against its peers", ""]
    lines += run_header(data, path, "peers_nearest.py", "every size divided by 16") + ["",
              f"Times in ms per step = build + query, data already on the device (host memory for cKDTree), median of "
              f"{settings.get('repeat', '?')} runs after {settings.get('warmups', '?')} warm-ups; (build + query) where the "
              "method separates them; streamkit's figures are those its CLI `bench_nn_files` prints. The peers get "
              "float32 unit vectors converted before timing. ~ = extrapolated from a subset of the observations; "
              "skipped (est. T) = not run, its timed runs were estimated to take too long. Ratio = the fastest peer "
              "measured on the whole workload / streamkit auto (above 1: streamkit is faster)."]
    drivers = [d for d in settings.get("peer_drivers", {}).values() if d.get("status") == "ok"]
    if drivers:
        lines += ["", "cuBQL and cudaKDTree ran in our driver `benchmarks/peers/cubql_cukd_driver.cu` (build and query "
                      "timed by CUDA events), compiled in the same run against these sources:", ""]
        lines += [f"- {d['library']} {d['commit']} ({d['url']}; commit from {d['commit_from']}): `{d['command']}`"
                  for d in drivers]
    if data["workloads"]:
        lines += ["", "| workload | N x M, k | " + " | ".join(label(m) for m in columns) + " | best peer / streamkit auto |",
                  "|---|---|" + "---|" * len(columns) + "---|"]
        for workload in data["workloads"]:
            by_method = {e["method"]: e for e in workload["methods"]}
            auto, best = by_method.get("streamkit_auto"), best_peer(workload["methods"])
            ratio = ""
            if best and auto and auto.get("status") == "ok" and auto.get("total_ms"):
                ratio = f"{best['total_ms'] / auto['total_ms']:.2f} ({PEER_SHORT.get(best['method'], best['method'])})"
            lines.append(f"| `{workload['name']}` | {workload['n']:,} x {workload['m']:,}, {workload['k']} | "
                         + " | ".join(peer_cell(by_method.get(m)) for m in columns) + f" | {ratio} |")
        lines += ["", f"Checks: wrong rows of the {settings.get('sample', '?')} sampled observations per workload against a "
                      "float64 CPU brute force (a row is wrong if a neighbour's distance differs from the reference's "
                      f"j-th by more than {settings.get('relative_tolerance', '?')} relative + "
                      f"{settings.get('absolute_tolerance_rad', '?')} rad); for streamkit also the rows whose indices are "
                      "identical to the reference's (ties by smallest index) and the memory per reference point.", "",
                  "| workload | " + " | ".join(label(m) for m in columns) + " |", "|---|" + "---|" * len(columns)]
        for workload in data["workloads"]:
            by_method = {e["method"]: e for e in workload["methods"]}
            lines.append(f"| `{workload['name']}` | " + " | ".join(check_cell(by_method.get(m)) for m in columns) + " |")
        notes = {}
        for workload in data["workloads"]:
            for entry in workload["methods"]:
                if entry.get("note"):
                    notes.setdefault((entry["method"], entry["note"]), []).append(workload["name"])
        if notes:
            lines += ["", "Notes from the run:", ""]
            lines += [f"- {label(method)} ({', '.join(f'`{w}`' for w in notes[(method, note)])}): {note}"
                      for method, note in sorted(notes, key=lambda key: columns.index(key[0]))]
    sweep = [p for p in data.get("sweep", []) if p.get("status", "ok") == "ok" and p.get("total_ms")]
    if sweep:
        plot_sweep(sweep, plot_path, data)
        engines = sorted({p["engine"] for p in sweep})
        lines += ["", f"Time against the number of references M for N = {sweep[0]['n']:,} uniform observations, k = 1 "
                      f"(same run; plot `{plot_path}`):", "",
                  "| M | " + " | ".join(label(f"streamkit_{e}") for e in engines) + " |", "|---|" + "---|" * len(engines)]
        for m in sorted({p["m"] for p in sweep}):
            row = {p["engine"]: dict(p, method=f"streamkit_{p['engine']}") for p in sweep if p["m"] == m}
            lines.append(f"| {m:,} | " + " | ".join(peer_cell(row.get(e)) for e in engines) + " |")
        checked = sum(p.get("checked") or 0 for p in sweep)
        wrong = sum(p.get("wrong") or 0 for p in sweep)
        lines += ["", f"Sweep checks: {wrong} wrong rows of {checked} checked over every M and engine."]
    return lines


def run_header(data, path, script, quick_sizes):
    """The lines a section of one benchmark run starts with: GPU, date, the command, warnings for a smoke
    or unfinished run, the versions (ending with the versions line)."""
    driver = f", driver {data['driver']}" if data.get("driver") else ""
    lines = [f"GPU: {data['gpu']}{driver}. Date: {data['date']}. Generated by `benchmarks/make_report.py` from "
             f"`{Path(path).name}`, written by one run of `benchmarks/{script}` (all methods in one process, on the "
             "same generated data):", "", f"- `{data['command']}`", ""]
    if data.get("settings", {}).get("quick"):
        lines += [f"**Smoke run (`--quick`: {quick_sizes}); not a measurement to compare.**", ""]
    if not data.get("complete", True):
        lines += ["**The run did not finish; the workloads below are those it completed.**", ""]
    return lines + ["Versions: " + ", ".join(f"{name} {version}" for name, version in data.get("versions", {}).items())
                    + "."]


def python_peers_section(path, note, first):
    """Lines of one run's part of the Python package's section (`first`: with the section heading); its
    tables are those benchmarks/python_peers.py prints. `note` (may be empty) says what was measured."""
    import python_peers
    data = json.loads(Path(path).read_text())
    settings = data.get("settings", {})
    heading = ("## Python package: streamkit against the notebooks' methods" if first
               else f"### Another run: {', '.join(sorted({w['group'] for w in data['workloads']}))}")
    lines = ["", heading, ""] + ([note, ""] if note else []) + run_header(data, path, "python_peers.py", "smaller sizes")
    lines += ["", f"Median of at least {settings.get('repeat', '?')} timed steps after {settings.get('warmups', '?')} "
              "warm-ups (more for short steps); device work timed by CUDA events on one stream, host-to-host work by "
              "wall clock. Every method's answer is checked: nearest neighbours on "
              f"{settings.get('sample', '?')} sampled observations against a float64 CPU brute force (a row is wrong "
              f"when a distance differs by more than {settings.get('relative_tolerance', '?')} relative + "
              f"{settings.get('absolute_tolerance_rad', '?')} rad), min-max results by their largest difference from a "
              "float64 NumPy reference. skipped (est. T) = not run, its timed steps were estimated to take too long."]
    return lines + python_peers.tables(data)


def check_cell(entry):
    if entry is None or entry.get("status") != "ok" or not entry.get("checked"):
        return ""
    cell = f"{entry['wrong']} / {entry['checked']}"
    if entry["method"].startswith("streamkit_"):
        cell += f", identical {entry['identical_indices']}"
        if entry.get("bytes_per_reference") is not None:
            cell += f", {entry['bytes_per_reference']:g} B/ref"
    return cell


def plot_sweep(points, path, data):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(figsize=(7, 4.2))
    styles = {"brute_force": dict(marker="o", color="#4477aa"), "tree": dict(marker="s", color="#228833"),
              "auto": dict(marker="x", color="#cc6677", linestyle="--")}
    for engine in sorted({p["engine"] for p in points}, key=lambda e: list(styles).index(e) if e in styles else 9):
        mine = sorted((p for p in points if p["engine"] == engine), key=lambda p: p["m"])
        name = {"brute_force": "brute force", "tree": "index (tree)", "auto": "auto (picks an engine)"}.get(engine, engine)
        axes.plot([p["m"] for p in mine], [p["total_ms"] for p in mine], label=f"streamkit {name}", **styles.get(engine, {}))
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xlabel("references M")
    axes.set_ylabel("build + query per step (ms)")
    smoke = " (smoke run, --quick)" if data.get("settings", {}).get("quick") else ""
    axes.set_title(f"Nearest neighbour (brute force: fast mode; tree: float64 ranking), N = {points[0]['n']:,} observations, k = 1{smoke}\n{data['gpu']}, {data['date']}",
                   fontsize=9)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--command", action="append", required=True)
    parser.add_argument("--out", default="docs/performance.md")
    parser.add_argument("--plot", default="docs/nearest_neighbor.png")
    parser.add_argument("--scaling", action="append", default=[], metavar="MACHINE=FILE[,FILE]")
    parser.add_argument("--scaling-plot", default="docs/scaling.png")
    parser.add_argument("--peers", type=Path, help="JSON written by benchmarks/peers_nearest.py")
    parser.add_argument("--peers-plot", default="docs/nearest_index_vs_m.png")
    parser.add_argument("--python-peers", type=Path, action="append", default=[],
                        help="JSON written by benchmarks/python_peers.py (repeatable: one part per run)")
    parser.add_argument("--python-note", action="append", default=[],
                        help="what the matching --python-peers run measured (the tree, what changed since)")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()

    rows = []
    for path in args.files:
        rows += rows_from_json(path) if path.suffix == ".json" else rows_from_console(path)
    if not rows:
        sys.exit("no benchmark results found")

    lines = ["# Measured performance", "",
             f"GPU: {args.gpu}. Date: {args.date}. Generated by `benchmarks/make_report.py` from the files in",
             "`docs/results/` (medians of the repetitions; GPU time from CUDA events for device work, wall time",
             "for host-to-host work). Commands:", ""]
    lines += [f"- `{command}`" for command in args.command]
    lines += ["", "| benchmark | median time | pairs/s | bytes/s | target | source |", "|---|---|---|---|---|---|"]
    for row in rows:
        target = next((text for prefix, text in TARGETS.items() if row["name"].startswith(prefix)), "")
        pairs = f"{row['pairs_per_s'] / 1e12:.2f} T" if row["pairs_per_s"] else ""
        moved = f"{row['bytes_per_s'] / 1e9:.0f} GB/s" if row["bytes_per_s"] else ""
        lines.append(f"| `{row['name']}` | {row['ms']:.3f} ms | {pairs} | {moved} | {target} | {row['source']} |")
    scaling = scaling_rows(args.scaling)
    if scaling:
        lines += ["", "## Multi-GPU scaling", "",
                  "Host in, host out, wall time; efficiency against 1 GPU of the same machine, t(1) / (GPUs x t(GPUs)).", "",
                  "| machine | benchmark | GPUs | time | efficiency | target | source |", "|---|---|---|---|---|---|---|"]
        for row in scaling:
            target = SCALING_TARGETS.get((row["base"], row["gpus"]), "")
            lines.append(f"| {row['machine']} | `{row['base']}` | {row['gpus']} | {row['ms']:.1f} ms | {row['efficiency']:.2f} | {target} | {row['source']} |")
        plot_scaling(scaling, args.scaling_plot, args.date)
    if args.peers:
        lines += peers_section(args.peers, args.peers_plot)
    notes = args.python_note + [""] * (len(args.python_peers) - len(args.python_note))
    for number, (path, note) in enumerate(zip(args.python_peers, notes)):
        lines += python_peers_section(path, note, number == 0)
    Path(args.out).write_text("\n".join(lines) + "\n")

    fast = sorted((r for r in rows if r["name"].startswith("fast/") and r["pairs_per_s"]),
                  key=lambda r: int(r["name"].split("/")[1]) * int(r["name"].split("/")[2]))
    if fast:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        figure, axes = plt.subplots(figsize=(7, 4))
        labels = [f"{int(r['name'].split('/')[1]):,} x {int(r['name'].split('/')[2]):,}" for r in fast]
        axes.bar(labels, [r["pairs_per_s"] / 1e12 for r in fast], color="#4477aa")
        axes.axhline(3.6, color="#cc6677", linestyle="--", label="target for 2^24 x 2^14 (3.6 T pairs/s)")
        axes.set_ylabel("T pairs / s")
        axes.set_xlabel("observations x references (float32, fast mode)")
        axes.set_title(f"Haversine nearest neighbour, {args.gpu}, {args.date}", fontsize=9)
        axes.legend()
        plt.setp(axes.get_xticklabels(), rotation=15)
        figure.tight_layout()
        figure.savefig(args.plot, dpi=110)
    print(f"wrote {args.out}" + (f" and {args.plot}" if fast else "") + (f" (peers section from {args.peers})" if args.peers else "")
          + (f" (Python section from {', '.join(map(str, args.python_peers))})" if args.python_peers else ""))


if __name__ == "__main__":
    main()
