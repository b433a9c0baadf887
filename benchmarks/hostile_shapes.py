#!/usr/bin/env python3
"""The hostile-input classes (bench_hostile) over several shapes N × M, and one table of them: the bound of issue 26
(no class more than 10× uniform inputs of the same shape) is for every shape, and the two shapes of the hostile tables
in docs/performance.md hid a cliff (the pole circle at k = 1 once M >= 2^22, twentieth session).

  hostile_shapes.py run --binary build-rel/benchmarks/bench_hostile --out-dir DIR [--shapes 2^20x2^22,...]
                        [-- further bench_hostile options, e.g. --engines tree_index --precisions exact --ks 1]
  hostile_shapes.py table DIR/hostile_*.json ...

`run` runs bench_hostile once a shape (--n N --m M --out DIR/hostile_<N>x<M>.json, the further options passed as they
are; without them --engines nearest_index,tree_index --precisions exact --ks 1,16,32 --repeat 3 --max-seconds 1) and then
prints the table; `table` prints it from existing JSONs. One row a shape: the cases timed and those with wrong rows, the
worst ratio to uniform of tree_index and of the front end (class, k, precision when both ran), the pole circle's k = 1
time against uniform's, and the worst class other than that circle. Ratios above 10 are marked.
"""
import argparse
import json
import math
import os
import subprocess
import sys

DEFAULT_SHAPES = "2^12x2^12,2^16x2^20,2^18x2^22,2^20x2^22,2^20x2^24,2^21x2^17,2^22x2^16,2^22x2^22"
CIRCLE = "pole_circle_1e-7rad"


def size(text):
    """2^20 or 1048576."""
    return 2 ** int(text[2:]) if text.startswith("2^") else int(text)


def power(x):
    e = math.log2(x)
    return f"2^{int(e)}" if e == int(e) else str(x)


def worst(cases, engine, precisions, keep=lambda c: True):
    timed = [c for c in cases if c["engine"] == engine and c.get("ratio_to_uniform") is not None and keep(c)]
    if not timed:
        return "—"
    c = max(timed, key=lambda c: c["ratio_to_uniform"])
    mark = "**" if c["ratio_to_uniform"] > 10 else ""
    precision = f", {c['precision']}" if len(precisions) > 1 else ""
    return f"{mark}{c['ratio_to_uniform']:.1f}×{mark} ({c['class']}, k = {c['k']}{precision})"


def row(path):
    cases = json.load(open(path))["cases"]
    timed = [c for c in cases if c.get("median_ms") is not None]
    n, m = cases[0]["n"], cases[0]["m"]
    engines = sorted({c["engine"] for c in cases})
    precisions = sorted({c["precision"] for c in cases})
    ks = sorted({c["k"] for c in cases})
    classes, ran = {c["class"] for c in cases}, {c["class"] for c in timed}
    wrong = sum(1 for c in cases if c.get("wrong", 0) > 0)
    pick = lambda cls: [c for c in timed if c["engine"] == "tree_index" and c["class"] == cls and c["k"] == 1 and c["precision"] == "exact"]
    circle, uniform = pick(CIRCLE), pick("uniform")
    if circle and uniform:
        r = circle[0]["ratio_to_uniform"]
        mark = "**" if r > 10 else ""
        circle_text = f"{circle[0]['median_ms']:.2f} ({uniform[0]['median_ms']:.3f}): {mark}{r:.1f}×{mark}"
    else:
        circle_text = "—"
    covered = f"{len(ran)}" if ran == classes else f"{len(ran)} of {len(classes)}: the budget"
    run = f"{', '.join(e.replace('_index', '') for e in engines)}; {', '.join(precisions)}; {', '.join(map(str, ks))} ({covered})"
    other = worst(cases, "tree_index", precisions, lambda c: c["class"] != CIRCLE)
    return (f"| {power(n)} × {power(m)} | {run} | {len(timed)} / {wrong} | {worst(cases, 'tree_index', precisions)} | "
            f"{worst(cases, 'nearest_index', precisions)} | {circle_text} | {other} |")


def table(paths):
    print("| N × M | run: engines; precisions; k (classes) | cases timed / wrong | worst, tree_index | worst, front end |"
          f" {CIRCLE}, k = 1: ms (uniform) | worst other class, tree |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        print(row(path))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--binary", required=True)
    r.add_argument("--out-dir", required=True)
    r.add_argument("--shapes", default=DEFAULT_SHAPES)
    r.add_argument("options", nargs=argparse.REMAINDER)
    t = sub.add_parser("table")
    t.add_argument("json", nargs="+")
    args = ap.parse_args()
    if args.command == "table":
        table(args.json)
        return
    options = [o for o in args.options if o != "--"] or \
        ["--engines", "nearest_index,tree_index", "--precisions", "exact", "--ks", "1,16,32", "--repeat", "3", "--max-seconds", "1"]
    os.makedirs(args.out_dir, exist_ok=True)
    paths = []
    for shape in args.shapes.split(","):
        n, m = (size(x) for x in shape.split("x"))
        path = os.path.join(args.out_dir, f"hostile_{power(n)}x{power(m)}.json".replace("^", "p"))
        with open(path[:-5] + ".log", "w") as log:
            code = subprocess.call([args.binary, "--n", str(n), "--m", str(m), *options, "--out", path], stdout=log, stderr=subprocess.STDOUT)
        print(f"{shape}: exit {code}", file=sys.stderr, flush=True)
        if os.path.exists(path):
            paths.append(path)
    table(paths)


if __name__ == "__main__":
    main()
