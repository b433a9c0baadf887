#!/usr/bin/env python3
"""CPU models of tree_index's walk on one meridian of references (twenty-seventh session), exact float64, no rounding
margins, leaves of 16 in Morton order (the library's implicit tree).

  session27_walk_model.py M K S meridian|uniform walk    one thread's walk (capsules as the only bound, the nearer child
        first): capsule tests and leaves scanned after the library's seed (the two leaves around the observation's Morton
        key), an oracle seed (the leaf of its nearest reference), or the leaves around the nearest reference of a point
        within rho of the observation (a cell centre's)
  session27_walk_model.py M K S meridian|uniform bands   the nodes whose lower bound lies below the observation's k-th
        nearest chord, for the capsule and for the larger of it and a great-circle band (the node's entries within angle
        r of the great-circle arc between two of them)
"""
import numpy as np, sys
rng = np.random.default_rng(2)
M = int(sys.argv[1]); K = int(sys.argv[2]); S = int(sys.argv[3]); CLS = sys.argv[4]; MODE = sys.argv[5] if len(sys.argv) > 5 else "walk"
if CLS == "meridian": lat = np.radians(rng.uniform(-90, 90, M)); lon = np.zeros(M)
else: lat = np.arcsin(rng.uniform(-1, 1, M)); lon = rng.uniform(-np.pi, np.pi, M)
P = np.stack([np.cos(lat)*np.cos(lon), np.cos(lat)*np.sin(lon), np.sin(lat)], 1)
def spread(v):
    v = v.astype(np.uint64) & np.uint64(0x1fffff); out = np.zeros_like(v)
    for b in range(21): out |= ((v >> np.uint64(b)) & np.uint64(1)) << np.uint64(3*b)
    return out
def keys(Q):
    cells = np.clip(((Q + 1) * 0.5 * 2**21).astype(np.int64), 0, 2**21 - 1)
    return (spread(cells[:,0]) << np.uint64(2)) | (spread(cells[:,1]) << np.uint64(1)) | spread(cells[:,2])
kr = keys(P); o = np.argsort(kr, kind='stable'); P = P[o]; kr = kr[o]
L = 16; leaves = 1 << int(np.ceil(np.log2(M / L)))
# heap arrays: capsule a, b, radius per node 1..2*leaves-1
A = np.zeros((2*leaves, 3)); B = np.zeros((2*leaves, 3)); R = np.full(2*leaves, np.inf); E = np.zeros(2*leaves, bool)
for v in range(1, 2*leaves):
    lvl = 1 << int(np.floor(np.log2(v))); span = leaves // lvl; first = (v - lvl) * span
    s, e = first * L, min((first + span) * L, M)
    if s >= M: continue
    Q = P[s:e]; lo, hi = Q.min(0), Q.max(0); ax = np.argmax(hi - lo)
    a, b = Q[np.argmin(Q[:, ax])], Q[np.argmax(Q[:, ax])]; d = b - a; dd = d @ d
    t = np.clip(((Q - a) @ d) / dd, 0, 1) if dd > 0 else np.zeros(len(Q))
    A[v], B[v], R[v], E[v] = a, b, np.sqrt(((Q - a - t[:, None] * d) ** 2).sum(1)).max(), True
def lb(p, v):
    if not E[v]: return np.inf
    d = B[v] - A[v]; dd = d @ d; t = np.clip(((p - A[v]) @ d) / dd, 0, 1) if dd > 0 else 0.0
    return np.linalg.norm(p - A[v] - t * d) - R[v]
def walk(p, seed_leaves):
    best = []  # chords of the k nearest
    def scan(leaf):
        c = np.sqrt(((P[leaf*L:min((leaf+1)*L, M)] - p) ** 2).sum(1))
        best.extend(c); best.sort(); del best[K:]
    for l in seed_leaves: scan(l)
    kth = lambda: best[K-1] if len(best) >= K else np.inf
    tests = 0; scans = len(seed_leaves); stack = [1]
    while stack:
        v = stack.pop(); tests += 1
        if lb(p, v) > kth(): continue
        if v >= leaves:
            if v - leaves not in seed_leaves: scan(v - leaves); scans += 1
            continue
        l, r = 2*v, 2*v+1; tests += 2
        bl, br = lb(p, l), lb(p, r)
        near, far = (l, r) if bl <= br else (r, l)
        stack.append(far); stack.append(near)
    return tests, scans

def bands():
    """Per node: the great-circle band (plane normal n, in-plane basis u, w, angular span t0..t1, half-width r)."""
    N = np.zeros((2*leaves, 3)); U = np.zeros((2*leaves, 3)); W = np.zeros((2*leaves, 3)); T = np.zeros((2*leaves, 2))
    RR = np.zeros(2*leaves); H = np.zeros(2*leaves, bool)
    for v in range(1, 2*leaves):
        if not E[v]: continue
        lvl = 1 << int(np.floor(np.log2(v))); span = leaves // lvl; first = (v - lvl) * span
        Q = P[first * L:min((first + span) * L, M)]; n = np.cross(A[v], B[v]); nn = np.linalg.norm(n)
        if nn == 0: continue
        n /= nn; u = A[v]; w = np.cross(n, u); ang = np.arctan2(Q @ w, Q @ u)
        N[v], U[v], W[v], T[v], RR[v], H[v] = n, u, w, (ang.min(), ang.max()), np.abs(np.arcsin(np.clip(Q @ n, -1, 1))).max(), True
    obs = rng.normal(size=(S, 3)); obs /= np.linalg.norm(obs, axis=1)[:, None]
    live = np.nonzero(E)[0]; D = B[live] - A[live]; dd = (D * D).sum(1)
    cap_nodes, band_nodes = [], []
    for p in obs:
        kth = np.partition(np.sqrt(((P - p) ** 2).sum(1)), K - 1)[K - 1]
        t = np.where(dd > 0, np.clip(((p - A[live]) * D).sum(1) / np.where(dd > 0, dd, 1), 0, 1), 0)
        cap = np.linalg.norm(p - A[live] - t[:, None] * D, axis=1) - R[live]
        n, u, w, t0, t1 = N[live], U[live], W[live], T[live, 0], T[live, 1]
        phi = np.arctan2(w @ p, u @ p)
        ends = [np.cos(x)[:, None] * u + np.sin(x)[:, None] * w for x in (t0, t1)]
        th = np.where((phi >= t0) & (phi <= t1), np.abs(np.arcsin(np.clip(n @ p, -1, 1))),
                      np.minimum(*[np.arccos(np.clip(e @ p, -1, 1)) for e in ends]))
        band = np.where(H[live], np.maximum(2 * np.sin(np.maximum(th - RR[live], 0) / 2), cap), cap)
        cap_nodes.append((cap <= kth).sum()); band_nodes.append((band <= kth).sum())
    print(f"M = {M}, k = {K}, {S} uniform observations, references {CLS}: nodes below the k-th chord")
    for name, v in (("capsule", cap_nodes), ("capsule and band", band_nodes)):
        print(f"{name:17s} mean {np.mean(v):7.1f} p90 {np.percentile(v, 90):7.1f} max {np.max(v):6d}")

if MODE == "bands":
    bands()
    sys.exit(0)
obs = rng.normal(size=(S, 3)); obs /= np.linalg.norm(obs, axis=1)[:, None]
ko = keys(obs)
res = {"library seed": [], "oracle seed": []}
for i, p in enumerate(obs):
    pos = min(np.searchsorted(kr, ko[i]), M - 1) // L
    first = (pos // 2) * 2
    res["library seed"].append(walk(p, [first, first + 1]))
    nearest = np.argmin(((P - p) ** 2).sum(1)) // L
    res["oracle seed"].append(walk(p, [nearest]))
    # the seed a walker of a cell-list query could take: the leaves around the nearest reference of its cell's centre,
    # which lies within the cell's radius rho of the observation (0.0055 rad: a cell of the lists' grid at M = 2^17)
    for rho in (0.0055, 0.02):
        q = p + rng.normal(size=3) * rho / np.sqrt(3); q /= np.linalg.norm(q)
        leaf = np.argmin(((P - q) ** 2).sum(1)) // L
        res.setdefault(f"centre seed, rho {rho}", []).append(walk(p, [(leaf // 2) * 2, (leaf // 2) * 2 + 1]))
print(f"M = {M}, k = {K}, {S} uniform observations, references {CLS}")
for name, v in res.items():
    v = np.array(v); print(f"{name:22s} capsule tests mean {v[:,0].mean():7.1f} p90 {np.percentile(v[:,0],90):7.1f}; leaves scanned mean {v[:,1].mean():6.1f} p90 {np.percentile(v[:,1],90):6.1f}")
