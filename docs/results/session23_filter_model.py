#!/usr/bin/env python3
"""Twenty-third session: how many of a pole circle's points the leaf filters of tree_index let through to float64 ranking.

usage: session23_filter_model.py LOG2_M   (2^LOG2_M distinct references on a circle of 1e-7 rad round the north pole,
float64 radians, uniform longitudes; the unit vectors as tree_index stores them, float32 and float64)

For 5 random observations: the share of the circle that passes the float chord filter (float_chord2_filter of the
k-th nearest float64 squared chord W, knn_list.cuh) that lists of k > 1 use. Then, for 3 more, the entries of the 20
leaves of 16 points (in longitude order, standing in for the tree's Morton order) nearest the observation that pass
anchored_filter (tree_kernels.cuh: the float part against the leaf's first point, its error bound and the 2^-48
float64 margin) at W.
"""
import sys
import numpy as np

rng = np.random.default_rng(1)
m = 1 << int(sys.argv[1])
lat = np.pi / 2 - 1e-7
lon = rng.uniform(-np.pi, np.pi, m)
q = np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.full(m, np.sin(lat))], 1)
qf = q.astype(np.float32)
u = 2.0 ** -24


def observation():
    ol, oo = rng.uniform(-1.2, 1.4), rng.uniform(-np.pi, np.pi)
    return ol, np.array([np.cos(ol) * np.cos(oo), np.cos(ol) * np.sin(oo), np.sin(ol)])


for _ in range(5):
    ol, p = observation()
    c = ((q - p) ** 2).sum(1)
    d = qf - p.astype(np.float32)
    cf = (d * d).sum(1, dtype=np.float32)
    for k in (1, 2, 8):
        w = np.partition(c, k - 1)[k - 1]
        chord = np.sqrt(w) * (1 + 2 * u) + 3.5 * u
        print(f"observation at latitude {ol:+.2f} rad, k = {k}: the float chord filter passes "
              f"{np.mean(cf <= np.float32(chord * chord * (1 + 4 * u))) * 100:.1f} % of the circle")
print("anchored filter, the 20 nearest leaves of 16 (points in longitude order)")
order = np.argsort(lon)
qs = q[order]
leaf = 16
for _ in range(3):
    ol, p = observation()
    c = ((qs - p) ** 2).sum(1)
    nearest = np.argsort(c.reshape(-1, leaf).min(1))[:20]
    for k in (2, 8):
        w = np.partition(c, k - 1)[k - 1]
        passed = 0
        for lf in nearest:
            entries = qs[lf * leaf:(lf + 1) * leaf]
            a = entries[0]
            x = p - a
            reach = np.abs(entries - a).max()
            dx, dy, dz = (np.float32(-2 * v) for v in x)
            base = (x * x).sum()
            error = 2.0 ** -20 * (2 * np.abs(x).sum() * reach + 3 * reach * reach)
            threshold = np.float32((w - base) + 2.0 ** -48 * (w + base) + error)
            o = (entries - a).astype(np.float32)
            o2 = (o.astype(np.float64) ** 2).sum(1).astype(np.float32)
            passed += int((dx * o[:, 0] + dy * o[:, 1] + dz * o[:, 2] + o2 <= threshold).sum())
        print(f"observation at latitude {ol:+.2f} rad, k = {k}: anchored_filter passes {passed} of {20 * leaf} entries")
