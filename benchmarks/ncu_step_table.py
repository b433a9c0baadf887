#!/usr/bin/env python3
"""Where one build + query step of tree_index spends its time, from an ncu CSV.

  ncu --metrics gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active \\
      --csv bench_nn_files --uniform N M --k K --engine tree --precision exact --repeat 1 > step.csv
  python3 benchmarks/ncu_step_table.py step.csv

Takes the last step in the file (the kernels from the last tree_reference_keys on), groups them by phase
(build: up to the observations' keys; query: from them on) and kernel, and prints a Markdown table of
their summed durations in microseconds (under ncu, whose serialised launches make them longer than a
timed run).
"""
import collections
import csv
import re
import sys


def main(path):
    lines = open(path).read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    kernel, metric, value, ident = (header.index(name) for name in ("Kernel Name", "Metric Name", "Metric Value", "ID"))
    launches = collections.OrderedDict()
    for row in rows[1:]:
        if len(row) == len(header):
            launches.setdefault((int(row[ident]), row[kernel]), {})[row[metric]] = row[value]
    keys = list(launches)
    first = max(i for i, (_, name) in enumerate(keys) if "tree_reference_keys" in name)
    query = max(i for i, (_, name) in enumerate(keys) if "tree_observation_keys" in name)
    groups = collections.OrderedDict()
    for i in range(first, len(keys)):
        name = keys[i][1]
        if "Onesweep" in name or "Histogram" in name or "ExclusiveSum" in name:
            short = "radix sort (CUB)"
        elif "Scan" in name:
            short = "exclusive sum (CUB)"
        else:
            short = re.sub(r"^void |\(.*$|<.*$", "", name).replace("streamkit::detail::", "").replace("streamkit::", "")
        group = groups.setdefault(("build" if i < query else "query", short), [0.0, 0])
        group[0] += float(launches[keys[i]]["gpu__time_duration.sum"].replace(",", "")) / 1e3
        group[1] += 1
    print("| phase | kernel | launches | µs |")
    print("|---|---|---|---|")
    for (phase, short), (micro, count) in groups.items():
        print(f"| {phase} | {short} | {count} | {micro:.1f} |")
    print(f"| | total | | {sum(g[0] for g in groups.values()):.1f} |")


if __name__ == "__main__":
    main(sys.argv[1])
