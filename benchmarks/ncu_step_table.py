#!/usr/bin/env python3
"""Where one build + query step of tree_index spends its time, from an ncu CSV.

  ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__inst_executed.avg.per_cycle_active \\
      --csv bench_nn_files --uniform N M --k K --engine tree --precision exact --repeat 1 > step.csv
  python3 benchmarks/ncu_step_table.py step.csv
  python3 benchmarks/ncu_step_table.py --peer cubql_query peer.csv     (a peer's one step: build, then its query kernel)

Takes the last step in the file (the kernels from the last tree_reference_keys on; with --peer, every kernel),
groups them by phase (build: up to the query's first kernel, the observations' keys of a walk or the cells'
centres of a cell-list query, or the --peer kernel; query: from it on) and kernel, and prints a Markdown table of
their summed durations in microseconds (under ncu, whose serialised launches make them longer than a timed run)
and, when the file holds them, their warp instructions. The file may be gzipped.
"""
import argparse
import collections
import csv
import re

from ncu_source_lines import read_text

QUERY_STARTS = ("tree_observation_keys", "tree_cell_centres")


def main(path, peer_query=None):
    lines = read_text(path).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    kernel, metric, value, ident = (header.index(name) for name in ("Kernel Name", "Metric Name", "Metric Value", "ID"))
    launches = collections.OrderedDict()
    for row in rows[1:]:
        if len(row) == len(header):
            launches.setdefault((int(row[ident]), row[kernel]), {})[row[metric]] = row[value]
    keys = list(launches)
    starts = (peer_query,) if peer_query else QUERY_STARTS
    first = 0 if peer_query else max(i for i, (_, name) in enumerate(keys) if "tree_reference_keys" in name)
    query = next(i for i in range(first, len(keys)) if any(s in keys[i][1] for s in starts))
    number = lambda launch, name: float(launches[launch][name].replace(",", ""))
    counted = all("smsp__inst_executed.sum" in launches[keys[i]] for i in range(first, len(keys)))
    groups = collections.OrderedDict()
    for i in range(first, len(keys)):
        name = keys[i][1]
        if "Onesweep" in name or "Histogram" in name or "ExclusiveSum" in name:
            short = "radix sort (CUB)"
        elif "Merge" in name:
            short = "merge sort (CUB)"
        elif "Scan" in name:
            short = "exclusive sum (CUB)"
        else:
            short = re.sub(r"^void |\(.*$|<.*$", "", name.replace("<unnamed>::", ""))
            short = short.replace("streamkit::detail::", "").replace("streamkit::", "")
        group = groups.setdefault(("build" if i < query else "query", short), [0.0, 0, 0.0])
        group[0] += number(keys[i], "gpu__time_duration.sum") / 1e3
        group[1] += 1
        if counted:
            group[2] += number(keys[i], "smsp__inst_executed.sum")
    columns = ["phase", "kernel", "launches", "µs"] + (["warp instructions (M)"] if counted else [])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for (phase, short), (micro, count, instructions) in groups.items():
        print(f"| {phase} | {short} | {count} | {micro:.1f} |" + (f" {instructions / 1e6:.1f} |" if counted else ""))
    total = sum(g[0] for g in groups.values())
    print(f"| | total | | {total:.1f} |" + (f" {sum(g[2] for g in groups.values()) / 1e6:.1f} |" if counted else ""))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("csv")
    parser.add_argument("--peer", metavar="QUERY_KERNEL", help="a peer's step: every kernel, the query from this kernel on")
    arguments = parser.parse_args()
    main(arguments.csv, arguments.peer)
