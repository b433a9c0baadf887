#!/usr/bin/env python3
"""What a warp-wide region scan would test instead of tree_index's walk, counted on the CPU for one of
benchmarks/peers_harness.py's workloads (the same points as peers_nearest.py).

A warp holds 32 neighbouring observations (the search's 30-bit Morton order). Its region is the box around
them grown by the largest reach of its threads (the k-th nearest chord after a seed); the leaves (16
references each, in the tree's 126-bit Morton order) whose box meets the region are what every thread
would scan, found by box tests a lane a node instead of every lane testing every box. Prints, over random
warps: the references in the region, the leaves meeting it, the union of the threads' own balls (what the
warp really needs), the leaves one thread alone needs, and the share of warps over a cap of leaves (those
would walk the tree instead).

  --seed exact   the reach is each thread's exact k-th nearest chord (a perfect seed)
  --seed lane    the k-th nearest within the two leaves around the thread's key (seed_node's leaves)
  --seed warp    the k-th nearest within the leaves the warp's keys span, one more each side (16 at most)

  PYTHONPATH=<scipy> python3 benchmarks/warp_region_sim.py gps_1M_places_k1 --warps 1000 --seed warp

Needs numpy and scipy (cKDTree); a minute or a few on one core.
"""
import argparse
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

import peers_harness
from tree_walk_sim import in_key_order, keys, unit

LEAF = 16


def box_gap(low_a, high_a, low_b, high_b):
    """Euclidean distance between boxes (points are boxes of zero size), broadcast over rows."""
    return np.sqrt((np.maximum(0, np.maximum(low_a - high_b, low_b - high_a)) ** 2).sum(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=sorted(peers_harness.NEAREST_DATA))
    ap.add_argument("--warps", type=int, default=300)
    ap.add_argument("--seed", choices=("exact", "lane", "warp"), default="warp")
    ap.add_argument("--caps", default="32,64,128")
    args = ap.parse_args()
    spec = peers_harness.NEAREST_DATA[args.workload]
    places = peers_harness.read_places(str(Path(__file__).resolve().parents[1] / "examples/data/cities1000.csv"))
    data = peers_harness.make_data(spec, places, False)
    R, O = unit(data.ref_lat, data.ref_lon), unit(data.obs_lat, data.obs_lon)
    high, low = keys(R, "morton", 42)
    order = np.lexsort((np.arange(len(R)), low, high))
    refs = R[order]
    ref_keys = high[order].astype(object) * (1 << 63) + low[order].astype(object)
    leaves = (len(refs) + LEAF - 1) // LEAF
    padded = np.concatenate([refs, np.repeat(refs[-1:], leaves * LEAF - len(refs), 0)])
    box_low, box_high = padded.reshape(leaves, LEAF, 3).min(1), padded.reshape(leaves, LEAF, 3).max(1)
    O = in_key_order(O, "morton")
    obs_high, obs_low = keys(O.astype(np.float32).astype(np.float64), "morton", 42)
    tree = cKDTree(refs)
    k = spec.k
    picks = np.random.default_rng(5).choice(len(O) // 32, args.warps, replace=False)

    def kth(points, q):
        c2 = np.sort(((points - q) ** 2).sum(1))
        return np.sqrt(c2[min(k, len(c2)) - 1])

    rows = []
    for w in picks:
        Q = O[w * 32:(w + 1) * 32]
        dist = tree.query(Q, k)[0]
        exact = dist if k == 1 else dist[:, -1]
        place = np.searchsorted(ref_keys, obs_high[w * 32:(w + 1) * 32].astype(object) * (1 << 63)
                                + obs_low[w * 32:(w + 1) * 32].astype(object))
        if args.seed == "exact":
            reach = exact.max()
        elif args.seed == "lane":  # seed_node: the two leaves under the node above the key's leaf
            firsts = (np.minimum(place, len(refs) - 1) // LEAF) // 2 * 2 * LEAF
            reach = max(kth(refs[f:f + 2 * LEAF], q) for f, q in zip(firsts, Q))
        else:
            first, last = max(place.min() // LEAF - 1, 0), min(place.max() // LEAF + 1, leaves - 1)
            seed = refs[first * LEAF:min((last + 1) * LEAF, len(refs))][:16 * LEAF]
            reach = max(kth(seed, q) for q in Q)
        q_low, q_high = Q.min(0), Q.max(0)
        centre, half = (q_low + q_high) / 2, np.linalg.norm(q_high - q_low) / 2
        near = refs[np.array(tree.query_ball_point(centre, half + reach * (1 + 1e-9)), dtype=np.int64)]
        in_region = (box_gap(q_low, q_high, near, near) <= reach * (1 + 1e-9)).sum()
        region_leaves = (box_gap(q_low, q_high, box_low, box_high) <= reach).sum()
        union = len(set().union(*map(set, tree.query_ball_point(Q, exact * (1 + 1e-9)))))
        alone = np.mean([(box_gap(q, q, box_low, box_high) <= d).sum() for q, d in zip(Q, exact)])
        rows.append((in_region, region_leaves, union, alone, reach / exact.max()))
    rows = np.array(rows, float)
    print(f"{args.workload}: {args.warps} warps, k = {k}, seed '{args.seed}'")
    for i, label in enumerate(["references in the warp's region", "leaves meeting the region", "union of the threads' balls",
                               "leaves one thread alone needs", "the region's reach / largest k-th chord"]):
        column = rows[:, i]
        print(f"  {label:42s} mean {column.mean():8.1f}  median {np.median(column):8.1f}  p90 {np.percentile(column, 90):8.1f}"
              f"  max {column.max():8.1f}")
    for cap in map(int, args.caps.split(",")):
        over = rows[:, 1] > cap
        print(f"  cap {cap:3d} leaves: {over.mean() * 100:5.1f} % of warps over it; the others' mean {rows[~over, 1].mean():5.1f} leaves")


if __name__ == "__main__":
    main()
