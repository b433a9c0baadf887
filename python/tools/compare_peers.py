#!/usr/bin/env python3
"""Wheel against source build: the streamkit rows of two python_peers.py JSON files, and the ratio."""
import json, sys
wheel, source = (json.load(open(p)) for p in sys.argv[1:3])
def rows(d):
    out = {}
    for w in d["workloads"]:
        for m in w["methods"]:
            if m.get("median_ms") is not None:
                out[(w["name"], m["method"])] = (m["median_ms"], m["status"])
    return out
a, b = rows(wheel), rows(source)
worst = 0.0
for key in sorted(set(a) & set(b)):
    ratio = a[key][0] / b[key][0]
    worst = max(worst, abs(ratio - 1))
    print(f"{key[0]:<28} {key[1]:<36} wheel {a[key][0]:10.4g} ms  source {b[key][0]:10.4g} ms  ratio {ratio:6.3f}  {a[key][1]}/{b[key][1]}")
print(f"rows {len(set(a) & set(b))}; largest |wheel/source - 1| = {worst:.3f}")
