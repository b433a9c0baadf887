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


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("--command", action="append", required=True)
    parser.add_argument("--out", default="docs/performance.md")
    parser.add_argument("--plot", default="docs/nearest_neighbor.png")
    parser.add_argument("--scaling", action="append", default=[], metavar="MACHINE=FILE[,FILE]")
    parser.add_argument("--scaling-plot", default="docs/scaling.png")
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()

    rows = []
    for path in args.files:
        rows += rows_from_json(path) if path.suffix == ".json" else rows_from_console(path)
    if not rows:
        sys.exit("no benchmark results found")

    lines = [f"# Measured performance", "",
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
    print(f"wrote {args.out}" + (f" and {args.plot}" if fast else ""))


if __name__ == "__main__":
    main()
