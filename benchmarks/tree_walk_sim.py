#!/usr/bin/env python3
"""What a walk of tree_index costs, on the CPU, with the references ordered by one of two keys:

  morton   the library's 126-bit Morton key (42 bits per axis, interleaved)
  hilbert  a 126-bit 3-D Hilbert key of the same cells (Skilling's transpose), whose consecutive
           cells are neighbours, so that a node (a range of leaves) covers one piece of a curve

For a sample of observations, one thread's walk alone from the root after its seed (tree_search_one's
rules before thin nodes, d133d78: the float box test, then the float64 box and capsule tests between the float
bounds, the child with more room first; the library now also tests a thin node's capsule where the float test
accepts its box, thin_node_flag in tree_kernels.cuh, which this model leaves out): the boxes it tests, the float64 tests and the leaves it scans. With --warps W,
also W warps' shared walks (without the switch to the walk alone) over N uniform observations sorted by
a 30-bit key (the tree's, or --observation-keys), or with --observation-keys cell in the order the walk of a
cell-list query took them before the nineteenth session (by the cube-map cell of the grid cell_plan picks for M, in
random order within a cell), or with --observation-keys walkcell as it takes them now (by the cell of the finer grid of
walk_grid_for): steps, leaves entered, scans and float64 tests per thread. With --no-margins, the float64 tests
without their rounding margins (6u and 2^-49 of the chord, the capsules' radii): the walk of tests whose rounding
would not grow with the distance to the observation (anchored at a reference near it), the cost the margins add; as
computed here (absolute float64 chords) that also prunes by rounding noise, so it is a lower bound. With --anchored, the
list ranks δ(x) = |p − x|² − |p − a|² from an anchor a (the seed's first entry) and a box the float test cannot decide
is tested from a in float (the smallest δ of its box and capsule, decided where it clears 2^-21 of its error scale),
then in float64 (2^-47): the walk of branch proto/anchored-rank with anchored float box tests added (counted apart).

With --peer-workload NAME (a workload of benchmarks/peers_harness.py, its observations and references), W warps of
its observations in the tree's order: the box tests a lane makes in the warp's shared walk (every lane tests every box
the warp visits) against those each of its threads would make walking alone.

usage: tree_walk_sim.py [--classes a,b] [--m M] [--sample S] [--k K] [--keys morton,hilbert]
                        [--warps W] [--n N] [--observation-keys morton|hilbert|cell|walkcell] [--no-margins|--anchored] [--near-tie E]
       tree_walk_sim.py --peer-workload gps_1M_places_k1|clustered_2^22x2^20_k1|... --warps W
       tree_walk_sim.py --peer-workload NAME --compare-trees [--sample S]
       tree_walk_sim.py --classes a,b --m M --compare-trees [--sample S]     (uniform observations)

--compare-trees counts, for S of the workload's observations, the boxes and points a nearest-point query (k = 1, the
nearer child first, exact float64 boxes, no float filter) tests in three kinds of tree with leaves of at most 16 points: the
library's (an implicit binary tree over the points in Morton order, split by count), the same with the library's seed
(the two leaves around the observation's key, scanned first), a radix tree that splits each Morton-ordered range at the
highest bit in which its first and last primary keys differ (Karras), from its root and after a seed (the leaf that
holds the observation's key), and a BVH split at the spatial median of each node's longest axis (cuBQL's gpuBuilder's
rule).
classes: uniform, pole_circle (1e-7 rad, float32 degrees), cell_3m (distinct points within 3 m),
one_meridian, grid_region (bench_hostile's grid_0.01deg_region references).

It counts the walk's work, not its time: on an H200 the Hilbert order that takes a uniform warp's walk
from 124 to 88 steps here (2^20 x 2^20, k = 16) left the search's time within 2.5 % (docs/performance.md,
twelfth session), since list insertions, not box tests, take most of a k = 16 search's instructions.
"""
import argparse
import numpy as np

from distributed_model import spread_bits_2d  # the cube map's 2-D Morton interleave

LEAF = 16
U24 = 2.0 ** -24
# The float64 tests' rounding margins (6u on the reach and on the capsule's square, 2^-49 on the box; the capsules' of their own
# scale); --no-margins sets them to 0:
# the walk of tests whose rounding no longer depends on where the points lie (anchored at a nearby reference).
MARGIN = 1.0
# --anchored: distances measured from an anchor a (each thread's seed's first entry), δ(x) = |p − x|² − |p − a|²
# = e·(e − 2v), e = x − a, v = p − a, whose rounding is relative to |e| (|e| + 2|v|): the list ranks δ, and a box the float
# test cannot decide gets an anchored float test of its box and capsule (error 2^-21 of that scale), then, if still
# undecided, the same in float64 (2^-47).
ANCHORED = False
# --near-tie E: a box tested in float64 is measured against (1 − E) times the worst entry instead of the worst entry (branch
# near-tie-threshold's tree_near_tie, here from the first step on).
NEAR_TIE = 0.0
# --sphere-bound: a box is also pruned when 2 − 2 max(q·x over its corners) (a lower bound of the squared chord to any unit
# vector in it) minus 2^-19 exceeds the worst entry, once the worst entry is above 0.5 (box_room's far test,
# sphere_box_distance2, thirty-fifth session).
SPHERE_BOUND = False


def unit(lat, lon):
    lat = np.radians(np.asarray(lat, np.float64))
    lon = np.radians(np.asarray(lon, np.float64))
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], 1)


def spread(v):
    v = v & np.uint64(0x1fffff)
    v = (v | v << np.uint64(32)) & np.uint64(0x1f00000000ffff)
    v = (v | v << np.uint64(16)) & np.uint64(0x1f0000ff0000ff)
    v = (v | v << np.uint64(8)) & np.uint64(0x100f00f00f00f00f)
    v = (v | v << np.uint64(4)) & np.uint64(0x10c30c30c30c30c3)
    v = (v | v << np.uint64(2)) & np.uint64(0x1249249249249249)
    return v


def cells(P, bits):
    return np.clip(np.floor((P + 1.0) * 0.5 * 2.0 ** bits), 0, 2.0 ** bits - 1).astype(np.uint64)


def hilbert_transpose(X, bits):
    """Skilling's AxesToTranspose on three arrays of `bits`-bit cells (in place on copies)."""
    X = [x.copy() for x in X]
    q = np.uint64(1) << np.uint64(bits - 1)
    one = np.uint64(1)
    while q > one:
        p = q - one
        for i in range(3):
            hit = (X[i] & q) != 0
            X[0] = np.where(hit, X[0] ^ p, X[0])
            t = np.where(hit, np.uint64(0), (X[0] ^ X[i]) & p)
            X[0] ^= t
            X[i] ^= t
        q >>= one
    for i in range(1, 3):
        X[i] ^= X[i - 1]
    t = np.zeros_like(X[0])
    q = np.uint64(1) << np.uint64(bits - 1)
    while q > one:
        t = np.where((X[2] & q) != 0, t ^ (q - one), t)
        q >>= one
    return [x ^ t for x in X]


def in_key_order(O, kind):
    """Observations O in the order of their 30-bit keys of `kind` (the tree's order for its searches), from their
    float32 vectors as tree_observation_keys computes them."""
    return O[np.argsort(keys(O.astype(np.float32).astype(np.float64), kind, 10), kind="stable")]


def keys(P, kind, bits):
    """(high, low) words of the 3*bits-bit key (bits = 42: 63 + 63 bits), or one word for bits <= 21."""
    c = [cells(P[:, a], bits) for a in range(3)]
    if kind == "hilbert":
        c = hilbert_transpose(c, bits)
    if bits <= 21:
        return (spread(c[0]) << np.uint64(2)) | (spread(c[1]) << np.uint64(1)) | spread(c[2])
    s = np.uint64(bits - 21)
    m = np.uint64((1 << (bits - 21)) - 1)
    hi = (spread(c[0] >> s) << np.uint64(2)) | (spread(c[1] >> s) << np.uint64(1)) | spread(c[2] >> s)
    lo = (spread(c[0] & m) << np.uint64(2)) | (spread(c[1] & m) << np.uint64(1)) | spread(c[2] & m)
    return hi, lo


def cube_cells(P, m, n=0):
    """Each point's cube-map cell (tree_cells.cuh's cube_grid) on the grid cell_plan picks for m references, or
    with n > 0 on the walkers' finer grid for n observations (walk_grid_for in tree_impl.cuh)."""
    grid, wanted = 1, np.sqrt(m / 3.0)
    while grid < 1024 and 2 * grid <= wanted * np.sqrt(2.0):
        grid *= 2
    if n > 0:
        list_grid = grid
        while grid < 16 * list_grid and 6 * (2 * grid) ** 2 * 32 <= n:
            grid *= 2
    a = np.abs(P)
    axis = np.where((a[:, 0] >= a[:, 1]) & (a[:, 0] >= a[:, 2]), 0, np.where(a[:, 1] >= a[:, 2], 1, 2))
    major = P[np.arange(len(P)), axis]
    u = np.where(axis == 0, P[:, 1], P[:, 0]) / np.abs(major)
    v = np.where(axis == 2, P[:, 1], P[:, 2]) / np.abs(major)
    along = lambda x: np.clip(np.floor((x + 1) * 0.5 * grid), 0, grid - 1).astype(np.uint64)
    face = (2 * axis + (major < 0)).astype(np.uint64)
    return face * np.uint64(grid * grid) + (spread_bits_2d(along(u)) << np.uint64(1) | spread_bits_2d(along(v)))


def widened(radius, a, b):
    """make_capsule's radius: widened by 2^-51 of itself and 2^-49 |b − a|₁ (capsule_room's offset error along the segment)."""
    return radius * (1 + MARGIN * 2 ** -51) + MARGIN * np.abs(b - a).sum() * 2 ** -49


def seg_d2(P, a, b):
    u = b - a
    w = P - a
    uu = (u * u).sum(-1)
    t = np.where(uu > 0, (w * u).sum(-1) / np.where(uu > 0, uu, 1.0), 0.0)
    t = np.clip(t, 0.0, 1.0)
    r = w - t[..., None] * u
    return (r * r).sum(-1)


class Tree:
    def __init__(self, R, kind):
        hi, lo = keys(R, kind, 42)
        order = np.lexsort((np.arange(len(R)), lo, hi))
        Rs = R[order]
        keep = np.ones(len(Rs), bool)
        keep[1:] = np.any(Rs[1:] != Rs[:-1], axis=1)  # identical vectors: one entry
        self.points = Rs[keep]
        self.keys = hi[order][keep]
        g = len(self.points)
        leaves = 1
        while leaves * LEAF < g:
            leaves *= 2
        self.leaves = leaves
        pts = np.full((leaves * LEAF, 3), np.nan)
        pts[:g] = self.points
        self.padded = pts
        L = pts.reshape(leaves, LEAF, 3)
        low = np.full((2 * leaves, 3), np.inf)
        high = np.full((2 * leaves, 3), -np.inf)
        ca = np.zeros((2 * leaves, 3))
        cb = np.zeros((2 * leaves, 3))
        cr = np.zeros(2 * leaves)
        used = np.zeros(2 * leaves, bool)
        with np.errstate(invalid="ignore"):
            low[leaves:] = np.where(np.isnan(L), np.inf, L).min(1)
            high[leaves:] = np.where(np.isnan(L), -np.inf, L).max(1)
        used[leaves:] = ~np.isnan(L[:, 0, 0])
        for leaf in np.nonzero(used[leaves:])[0]:
            v = leaves + leaf
            e = L[leaf][~np.isnan(L[leaf][:, 0])]
            axis = np.argmax(high[v] - low[v])
            a = e[np.argmin(e[:, axis])]
            b = e[np.argmax(e[:, axis])]
            ca[v], cb[v] = a, b
            # segment_distance_above: the rounding is relative to |e − a|₁ + |b − a|₁, the leaf's own scale
            local = np.abs(e - a).sum(1) + np.abs(b - a).sum()
            cr[v] = widened((np.sqrt(seg_d2(e, a, b)) * (1 + MARGIN * 2 ** -50) + MARGIN * local * 2 ** -50).max(), a, b)
        level = leaves // 2
        while level >= 1:
            v = np.arange(level, 2 * level)
            l, r = 2 * v, 2 * v + 1
            low[v] = np.minimum(low[l], low[r])
            high[v] = np.maximum(high[l], high[r])
            used[v] = used[l] | used[r]
            for node in v[used[v]]:
                axis = np.argmax(high[node] - low[node])
                ends, radii = [], []
                for c in (2 * node, 2 * node + 1):
                    if used[c]:
                        ends += [ca[c], cb[c]]
                        radii += [cr[c], cr[c]]
                ends = np.array(ends)
                a = ends[np.argmin(ends[:, axis])]
                b = ends[np.argmax(ends[:, axis])]
                ca[node], cb[node] = a, b
                cr[node] = widened(((np.sqrt(seg_d2(ends, a, b)) + np.array(radii)).max()) * (1 + MARGIN * 2 ** -52), a, b)
            level //= 2
        self.low, self.high, self.ca, self.cb, self.cr = low, high, ca, cb, cr
        with np.errstate(over="ignore"):
            self.flow = np.nextafter(low.astype(np.float32), np.float32(-np.inf))
            self.fhigh = np.nextafter(high.astype(np.float32), np.float32(np.inf))
        self.kind = kind


def upper_of(worst):
    chord = np.sqrt(worst) * (1 + 2 * U24) + 3.5 * U24
    return np.float32(chord * chord * (1 + 4 * U24))


def lower_of(worst):
    chord = np.sqrt(worst) * (1 - 2 * U24) - 3.5 * U24
    return np.float32(chord * chord * (1 - 4 * U24)) if chord > 0 else np.float32(0)


class Threads:
    """The search's state for observations Q (one per thread): their lists of the k smallest squared
    chords, the seed each scanned, and counts of box tests, float64 box tests and leaf scans (the
    seeds' apart)."""

    def __init__(self, tree, Q, k):
        self.tree, self.Q, self.fQ, self.k = tree, Q, Q.astype(np.float32), k
        self.boxes = self.float64 = self.scans = self.anchored_float = 0
        g = len(tree.points)
        at = np.minimum(np.searchsorted(tree.keys, keys(Q, tree.kind, 21)), g - 1) // LEAF
        self.seeds = np.ones(len(Q), np.int64) if tree.leaves == 1 else (tree.leaves + at) // 2
        # The anchor (--anchored; else base 0 and the list holds squared chords): the seed's first entry.
        first = np.zeros(len(Q), np.int64) if tree.leaves == 1 else 2 * self.seeds - tree.leaves
        self.anchor = tree.padded[first * LEAF] if ANCHORED else Q
        self.v = Q - self.anchor
        self.base = (self.v * self.v).sum(1)
        self.best = np.full((len(Q), k), 4.0 + 1e-9) - self.base[:, None]  # an unfilled slot: beyond any chord
        self.best_scale = np.zeros((len(Q), k))  # the error scale of each entry's δ (--anchored)
        for t, seed in enumerate(self.seeds):
            for leaf in self.seed_leaves(seed):
                if leaf * LEAF < g:
                    self.scan(leaf, np.array([t]))
        self.seed_scans, self.scans = self.scans, 0

    def seed_leaves(self, seed):
        """The leaves under seed node `seed` (tree_search_one's seed: the two around the observation's key)."""
        first = 0 if self.tree.leaves == 1 else 2 * seed - self.tree.leaves
        return range(first, min(first + 2, self.tree.leaves))

    def is_seed(self, leaf_node):
        """Per thread: whether this leaf's node was scanned as its seed."""
        return (leaf_node if self.tree.leaves == 1 else leaf_node // 2) == self.seeds

    def scan(self, leaf, who):
        self.scans += len(who)
        e = self.tree.padded[leaf * LEAF:(leaf + 1) * LEAF]
        e = e[~np.isnan(e[:, 0])]
        if ANCHORED:
            d = e[None, :, :] - self.anchor[who][:, None, :]
            v = self.v[who][:, None, :]
            c2 = (d * (d - 2 * v)).sum(-1)
            scale = (np.abs(d) * (np.abs(d) + 2 * np.abs(v))).sum(-1)
        else:
            c2 = ((self.Q[who][:, None, :] - e[None, :, :]) ** 2).sum(-1)
            scale = np.zeros_like(c2)
        both = np.concatenate([self.best[who], c2], 1)
        order = np.argsort(both, 1, kind="stable")[:, :self.k]
        self.best[who] = np.take_along_axis(both, order, 1)
        self.best_scale[who] = np.take_along_axis(np.concatenate([self.best_scale[who], scale], 1), order, 1)

    def room(self, v):
        """Each thread's room in node v (0: none), as box_room computes it."""
        tree, Q, fQ = self.tree, self.Q, self.fQ
        self.boxes += 1
        w = self.base + self.best[:, -1]  # the worst entry's squared chord
        up = np.array([upper_of(x) for x in w], np.float32)
        lo = np.array([lower_of(x) for x in w], np.float32)
        d = np.maximum(np.maximum(tree.flow[v] - fQ, fQ - tree.fhigh[v]), np.float32(0))
        with np.errstate(over="ignore"):  # an empty box: +inf
            bound = (d * d).sum(1, dtype=np.float32)
        if SPHERE_BOUND and np.all(np.isfinite(tree.low[v])):
            corner = np.maximum(Q * tree.low[v], Q * tree.high[v]).sum(1)
            far = (up > 0.5) & (2 - 2 * corner - 2.0 ** -19 > up)
            bound = np.where(far, np.float32(np.inf), bound)
        r = np.zeros(len(Q))
        sure = bound < lo
        r[sure] = (up - bound)[sure] + 1.0
        mid = (bound <= up) & ~sure
        if mid.any() and ANCHORED:
            r[mid] = self.anchored_room(v, np.nonzero(mid)[0])
        elif mid.any():
            self.float64 += int(mid.sum())
            ww = w[mid] * (1 - NEAR_TIE)
            reach = np.sqrt(ww) * (1 + MARGIN * 6 * 2 ** -53)
            limit = reach + tree.cr[v] + MARGIN * 2 ** -68
            along = limit * limit * (1 + MARGIN * 6 * 2 ** -53) - seg_d2(Q[mid], tree.ca[v], tree.cb[v])
            dd = np.maximum(np.maximum(tree.low[v] - Q[mid], Q[mid] - tree.high[v]), 0)
            rr = np.minimum(ww - (dd * dd).sum(1) * (1 - MARGIN * 2 ** -49), along)
            r[mid] = np.where((along >= 0) & (rr >= 0), rr, 0.0)
        return r

    def anchored_room(self, node, who):
        """--anchored: the rooms of threads `who` in `node` from the smallest δ of its box and capsule, decided in float
        where the float error scale (2^-21) allows, else in float64 (2^-47); counts both kinds of test."""
        tree = self.tree
        a, v, wd = self.anchor[who], self.v[who], self.best[who, -1]
        lo, hi = tree.low[node] - a, tree.high[node] - a
        c = np.clip(v, lo, hi)
        box = (c * (c - 2 * v)).sum(1)
        extent = np.maximum(np.abs(lo), np.abs(hi))
        box_scale = (extent * (extent + 2 * np.abs(v))).sum(1)
        u = tree.cb[node] - tree.ca[node]
        w = v + (a - tree.ca[node])
        uu = (u * u).sum()
        t = np.clip((w * u).sum(1) / uu, 0.0, 1.0) if uu > 0 else np.zeros(len(who))
        e = (tree.ca[node] - a) + t[:, None] * u
        s_delta = (e * (e - 2 * v)).sum(1)
        radius = tree.cr[node]
        d = np.sqrt(np.maximum(self.base[who] + s_delta, 0.0))
        capsule = np.where(d > radius, s_delta - radius * (2 * d - radius), -self.base[who])
        span = (np.abs(e) + np.abs(u) + radius).sum(1)
        capsule_scale = span * (span + 2 * np.abs(v).sum(1)) + radius * (2 * d + radius)
        low = np.maximum(box, capsule)
        scale = box_scale + capsule_scale + self.best_scale[who, -1]
        room = wd - low
        in_float = np.abs(room) > 2.0 ** -21 * scale
        self.anchored_float += int(in_float.sum())
        self.float64 += int((~in_float).sum())
        room = np.where(in_float, room, room + 2.0 ** -47 * scale)
        return np.where(room >= 0, np.maximum(room, 1e-300), 0.0)


def walk(tree, q, k):
    """One thread alone: seed leaves, then the walk; returns (box tests, float64 tests, leaves scanned)."""
    th = Threads(tree, q[None, :], k)
    room = lambda v: th.room(v)[0]
    stack = []
    at = 1 if room(1) > 0 else 0
    while True:
        while at == 0 and stack:
            v = stack.pop()
            if room(v) > 0:
                at = v
        if at == 0:
            break
        if at < tree.leaves:
            left, right = room(2 * at), room(2 * at + 1)
            lf = left >= right
            if left > 0 and right > 0:
                stack.append(2 * at + 1 if lf else 2 * at)
            at = 0 if left == 0 and right == 0 else (2 * at if lf else 2 * at + 1)
            continue
        if not th.is_seed(at)[0]:
            th.scan(at - tree.leaves, np.array([0]))
        at = 0
    return th.boxes, th.float64, th.seed_scans + th.scans, th.anchored_float


def warp_walk(tree, Q, k):
    """A warp's shared walk (tree_search_one without the switch to the walk alone): Q, 32 observations;
    returns (steps, leaves the warp enters, leaves scanned and float64 tests summed over its threads, box tests a lane
    makes)."""
    th = Threads(tree, Q, k)
    stack = []
    mine = th.room(1)
    node = 1 if (mine > 0).any() else 0
    steps = 0
    entered = 0
    while node != 0:
        steps += 1
        if node < tree.leaves:
            ml, mr = th.room(2 * node), th.room(2 * node + 1)
            left, right = ml.max(), mr.max()
            if left > 0 or right > 0:
                lf = left >= right
                if left > 0 and right > 0:
                    stack.append(2 * node + 1 if lf else 2 * node)
                node = 2 * node if lf else 2 * node + 1
                mine = ml if lf else mr
                continue
        else:
            entered += 1
            who = np.nonzero((mine > 0) & ~th.is_seed(node))[0]
            if len(who):
                th.scan(node - tree.leaves, who)
        node = 0
        while stack:
            pending = stack.pop()
            mine = th.room(pending)
            if (mine > 0).any():
                node = pending
                break
    return steps, entered, th.scans, th.float64, th.boxes


def union_cost(tree, Q, k):
    """A warp's shared walk over Q against its threads alone: (box tests a lane makes in the shared walk, mean box
    tests of a thread alone)."""
    lane = warp_walk(tree, Q, k)[4]
    return lane, float(np.mean([walk(tree, q, k)[0] for q in Q]))


class ExplicitTree:
    """A binary tree over R with explicit children, leaves of at most LEAF points: split="radix" cuts a Morton-ordered
    range where the highest bit in which its first and last primary keys differ turns to 1 (in half where they are
    equal), split="median" cuts at the middle of the node's box along its longest axis (in half by position when one side
    would be empty)."""

    def __init__(self, R, split):
        high, low = keys(R, "morton", 42)
        self.R = R[np.lexsort((low, high))] if split == "radix" else R
        self.key = np.sort(high) if split == "radix" else None
        self.low, self.high, self.kids, self.range, self.split = [], [], [], [], split
        self.order = np.arange(len(R))
        stack = [(0, len(R), None, 0)]
        while stack:  # iterative, children after their parent: (first, last, parent, side)
            i, j, parent, side = stack.pop()
            node = len(self.low)
            if parent is not None:
                self.kids[parent][side] = node
            P = self.R[self.order[i:j]] if split == "median" else self.R[i:j]
            self.low.append(P.min(0))
            self.high.append(P.max(0))
            self.kids.append([-1, -1])
            self.range.append((i, j))
            if j - i <= LEAF:
                continue
            cut = self.cut(i, j, P)
            stack += [(cut, j, node, 1), (i, cut, node, 0)]
        self.low, self.high = np.array(self.low), np.array(self.high)

    def cut(self, i, j, P):
        if self.split == "radix":
            a, b = int(self.key[i]), int(self.key[j - 1])
            if a == b:
                return (i + j) // 2
            bit = np.uint64((a ^ b).bit_length() - 1)
            return i + int(np.searchsorted((self.key[i:j] >> bit) & np.uint64(1), 1))
        axis = np.argmax(P.max(0) - P.min(0))
        middle = 0.5 * (P[:, axis].min() + P[:, axis].max())
        left = P[:, axis] < middle
        if left.all() or not left.any():
            left = np.zeros(j - i, bool)
            left[np.argsort(P[:, axis], kind="stable")[:(j - i) // 2]] = True
        self.order[i:j] = np.concatenate([self.order[i:j][left], self.order[i:j][~left]])
        return i + int(left.sum())

    def children(self, node):
        return None if self.kids[node][0] < 0 else self.kids[node]

    def points(self, node):
        i, j = self.range[node]
        return self.R[self.order[i:j]] if self.split == "median" else self.R[i:j]


class ImplicitTree:
    """The library's tree (Tree) seen through ExplicitTree's interface."""

    def __init__(self, tree):
        self.tree, self.low, self.high = tree, tree.low, tree.high

    def children(self, node):
        return None if node >= self.tree.leaves else (2 * node, 2 * node + 1)

    def points(self, node):
        e = self.tree.padded[(node - self.tree.leaves) * LEAF:(node - self.tree.leaves + 1) * LEAF]
        return e[~np.isnan(e[:, 0])]


def nearest_cost(tree, root, q, best=np.inf, scanned=()):
    """Boxes and points a nearest-point query of q tests from `root`, the nearer child first, with exact boxes; leaves
    in `scanned` (the seed's) are not scanned again."""
    def distance(node):
        d = np.maximum(np.maximum(tree.low[node] - q, q - tree.high[node]), 0.0)
        return float((d * d).sum())
    boxes = points = 0
    stack = [root]
    while stack:
        node = stack.pop()
        while True:
            kids = tree.children(node)
            if kids is None:
                e = tree.points(node)
                if node not in scanned and len(e):
                    points += len(e)
                    best = min(best, float(((e - q) ** 2).sum(1).min()))
                break
            a, b = kids
            da, db = distance(a), distance(b)
            boxes += 2
            if da > db:
                a, b, da, db = b, a, db, da
            if da > best:
                break
            if db <= best:
                stack.append(b)
            node = a
        while stack and distance(stack[-1]) > best:  # popped boxes are tested again against the shrunk bound
            stack.pop()
            boxes += 1
    return boxes, points


def seeded_cost(radix, q):
    """nearest_cost in a radix ExplicitTree after scanning the leaf that holds the place of q's primary key."""
    at = int(np.searchsorted(radix.key, keys(q[None, :], "morton", 21)[0]))  # 21-bit cells: the primary key
    at = min(at, len(radix.R) - 1)
    node = 0
    while radix.children(node) is not None:  # down to the leaf whose range holds position `at`
        left, right = radix.children(node)
        node = left if at < radix.range[left][1] else right
    e = radix.points(node)
    best = float(((e - q) ** 2).sum(1).min())
    boxes, points = nearest_cost(radix, 0, q, best, (node,))
    return boxes, points + len(e)


def compare_trees(R, O, sample):
    tree = Tree(R, "morton")
    implicit = ImplicitTree(tree)
    picks = O[np.random.default_rng(5).choice(len(O), min(sample, len(O)), replace=False)]
    rows = [("library's tree (implicit, split by count)", [nearest_cost(implicit, 1, q) for q in picks])]
    seeded = []
    for q in picks:
        th = Threads(tree, q[None, :], 1)  # scans the seed's leaves
        seed = [tree.leaves + leaf for leaf in th.seed_leaves(th.seeds[0])]
        b, p = nearest_cost(implicit, 1, q, th.base[0] + th.best[0, 0], seed)
        seeded.append((b, p + sum(len(implicit.points(leaf)) for leaf in seed)))
    rows.append(("library's tree after its seed", seeded))
    for split, label in (("radix", "radix tree (Morton prefixes)"), ("median", "spatial-median BVH")):
        explicit = ExplicitTree(R, split)
        rows.append((label, [nearest_cost(explicit, 0, q) for q in picks]))
        if split == "radix":
            rows.append(("radix tree after a seed (the key's leaf)", [seeded_cost(explicit, q) for q in picks]))
    for label, c in rows:
        c = np.array(c)
        print(f"  {label:44s} boxes tested {c[:, 0].mean():6.1f}   points tested {c[:, 1].mean():6.1f}")


def make(cls, m, rng):
    if cls == "uniform":
        z = rng.uniform(-1, 1, m)
        return unit(np.degrees(np.arcsin(z)).astype(np.float32), rng.uniform(-180, 180, m).astype(np.float32))
    if cls == "pole_circle":
        lat = np.full(m, np.float32(90 - 1e-7 * 180 / np.pi))
        return unit(lat, rng.uniform(-180, 180, m).astype(np.float32))
    if cls == "cell_3m":
        # distinct points within 3 m (4.7e-7 rad) of a point
        r = 3.0 / 6371008.8 * np.sqrt(rng.uniform(0, 1, m))
        a = rng.uniform(0, 2 * np.pi, m)
        lat0, lon0 = 37.0, -122.0
        return unit(lat0 + np.degrees(r * np.sin(a)), lon0 + np.degrees(r * np.cos(a)) / np.cos(np.radians(lat0)))
    if cls == "one_meridian":
        return unit(rng.uniform(-90, 90, m).astype(np.float32), np.zeros(m, np.float32))
    if cls == "grid_region":  # bench_hostile's grid_0.01deg_region: a 1 x 1 degree region rounded to 0.01 degree
        lat = np.round(rng.uniform(40, 41, m) * 100) / 100
        lon = np.round(rng.uniform(-74, -73, m) * 100) / 100
        return unit(lat.astype(np.float32), lon.astype(np.float32))
    raise SystemExit("unknown class " + cls)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--classes", default="uniform,pole_circle,cell_3m")
    ap.add_argument("--m", type=int, default=1 << 14)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--k", type=int, default=1)
    ap.add_argument("--keys", default="morton,hilbert")
    ap.add_argument("--warps", type=int, default=0, help="also simulate this many warps' shared walks")
    ap.add_argument("--n", type=int, default=1 << 20, help="observations the warps are drawn from")
    ap.add_argument("--observation-keys", default="", help="order the warps' observations by this key instead of the tree's")
    ap.add_argument("--peer-workload", default="", help="a benchmarks/peers_harness.py workload instead of --classes")
    ap.add_argument("--compare-trees", action="store_true", help="three trees' nearest-point costs")
    ap.add_argument("--no-margins", action="store_true", help="the float64 tests without their rounding margins")
    ap.add_argument("--anchored", action="store_true", help="ranking and undecided boxes measured from an anchor")
    ap.add_argument("--near-tie", type=float, default=0.0, help="float64 box tests against (1 - E) times the worst entry")
    ap.add_argument("--sphere-bound", action="store_true", help="far walks also test the sphere's bound (box_room's far test)")
    ap.add_argument("--by-distance", action="store_true", help="also the leaves a walk scans by the observation's angle to the references' mean")
    args = ap.parse_args()
    global MARGIN, ANCHORED, NEAR_TIE, SPHERE_BOUND
    NEAR_TIE = args.near_tie
    SPHERE_BOUND = args.sphere_bound
    MARGIN = 0.0 if args.no_margins else 1.0
    ANCHORED = args.anchored
    if args.peer_workload:
        import peers_harness
        from pathlib import Path
        spec = peers_harness.NEAREST_DATA[args.peer_workload]
        places = peers_harness.read_places(str(Path(__file__).resolve().parents[1] / "examples/data/cities1000.csv"))
        data = peers_harness.make_data(spec, places, False)
        R, O = unit(data.ref_lat, data.ref_lon), unit(data.obs_lat, data.obs_lon)
        if args.compare_trees:
            print(f"{args.peer_workload}: {min(args.sample, len(O))} observations, nearest point, leaves of at most {LEAF}:")
            compare_trees(R, O, args.sample)
            return
        tree = Tree(R, "morton")
        O = in_key_order(O, "morton")
        picks = np.random.default_rng(3).choice(len(O) // 32, args.warps or 40, replace=False)
        c = np.array([union_cost(tree, O[p * 32:(p + 1) * 32], spec.k) for p in picks])
        print(f"{args.peer_workload}: {len(picks)} warps; box tests a lane in the shared walk: mean {c[:, 0].mean():.0f}, p90 "
              f"{np.percentile(c[:, 0], 90):.0f}; a thread alone: mean {c[:, 1].mean():.0f}; ratio {c[:, 0].mean() / c[:, 1].mean():.2f}")
        return
    for cls in args.classes.split(","):
        rng = np.random.default_rng(7)
        R = make(cls, args.m, rng)
        z = rng.uniform(-1, 1, args.sample)
        obs = unit(np.degrees(np.arcsin(z)).astype(np.float32), rng.uniform(-180, 180, args.sample).astype(np.float32))
        if args.compare_trees:
            print(f"{cls} m={args.m}: {args.sample} uniform observations, nearest point, leaves of at most {LEAF}:")
            compare_trees(R, obs, args.sample)
            continue
        for kind in args.keys.split(","):
            tree = Tree(R, kind)
            c = np.array([walk(tree, q, args.k) for q in obs])
            print(f"{cls:12s} m={args.m} k={args.k} {kind:8s} boxes mean {c[:, 0].mean():7.1f} p90 {np.percentile(c[:, 0], 90):7.1f}"
                  f"  float64 {c[:, 1].mean():7.1f}  leaves mean {c[:, 2].mean():6.1f} p90 {np.percentile(c[:, 2], 90):6.1f}"
                  + (f"  anchored float {c[:, 3].mean():7.1f}" if args.anchored else ""), flush=True)
            if args.by_distance:
                centre = R.mean(0) / np.linalg.norm(R.mean(0))
                angle = np.degrees(np.arccos(np.clip(obs @ centre, -1, 1)))
                for low in range(0, 180, 30):
                    sel = (angle >= low) & (angle < low + 30)
                    if sel.any():
                        print(f"{'':12s}   {low:3d}-{low + 30:3d} deg: {sel.sum():4d} observations, leaves mean {c[sel, 2].mean():6.1f}"
                              f" max {c[sel, 2].max():4.0f}, boxes mean {c[sel, 0].mean():6.1f}", flush=True)
            if args.warps:
                wr = np.random.default_rng(11)
                z = wr.uniform(-1, 1, args.n)
                O = unit(np.degrees(np.arcsin(z)).astype(np.float32), wr.uniform(-180, 180, args.n).astype(np.float32))
                order_key = args.observation_keys or kind
                if order_key in ("cell", "walkcell"):  # O is in random order: a stable sort keeps it so within a cell
                    O = O[np.argsort(cube_cells(O, args.m, args.n if order_key == "walkcell" else 0), kind="stable")]
                else:
                    O = in_key_order(O, order_key)
                picks = wr.choice(args.n // 32, args.warps, replace=False)
                w = np.array([warp_walk(tree, O[p * 32:(p + 1) * 32], args.k) for p in picks])
                print(f"{'':12s} warps of n={args.n} ({args.observation_keys or kind} order): steps mean {w[:, 0].mean():7.1f} p90 {np.percentile(w[:, 0], 90):7.1f}"
                      f"  leaves entered {w[:, 1].mean():6.1f}  scans/thread {w[:, 2].mean() / 32:5.2f}  float64 tests/thread {w[:, 3].mean() / 32:6.1f}", flush=True)


if __name__ == "__main__":
    main()
