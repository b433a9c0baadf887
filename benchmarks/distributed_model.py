#!/usr/bin/env python3
"""Per-step model of streamkit's distributed nearest-neighbour search (docs/distributed.md): bytes,
visits and time per rank and step, for R ranks (one GPU each), N observations and M references in
total, k neighbours, every rank holding an even, arbitrary share of both (as the example does).

Sharded layout (references repartitioned by space at every update):
  update: each rank samples 1,024 keys of its references (and 1,024 of its last query's
    observations), the samples are all-gathered (32 bytes each), and one all-to-all moves every
    reference to the rank of its key range (24 bytes: coordinates and global id); with an arbitrary
    split (M / R)(R - 1) / R of a rank's references change rank.
  query: each observation goes to its owner (the rank of its key; (N / R)(R - 1) / R of a rank's
    observations live elsewhere) and comes back with its k answers; the owner sends it on to every
    other rank within its k-th distance (a visit) and gets k candidates back: (16 + 16 k) bytes per
    observation away from home and per visit, both ways, plus the counts.
  The visits are counted, not estimated: this script runs the search's own partition and routing
  (space_partition.hpp: the same keys, splitters, boxes and cell walk, in the same double
  arithmetic) on generated points, the owner's k-th distance from a search of its shard.
Replicated layout: the update all-gathers every reference (16 M (R - 1) / R bytes per rank); a query
  moves nothing.

Time per step and rank: the collectives at the link's bandwidth plus a latency per message and
peer; the rest from the example's measured one-rank runs on the H200 (docs/results/h200_issue28_model.txt):
its step at the rank's share (N / R observations against M / R references, sharded; N / R against
M, replicated), plus, sharded, what one rank does not do:
  the repartition of the references (the update's sample sort: keys, ranks, send order and the
    copies between GPU and host that the all-to-all brings; at the rate per reference of the rank
    measured at two ranks, the update's phases `host` and `staging`, less the one-rank update's
    same phases per reference, which the one-rank step already holds) and its all-to-all (bytes
    above);
  the routing of each observation (its owner, packing, reach test, merging and placing, with the
    copies of the rows between the GPU and the host that it brings; at the rate per observation
    measured at two ranks, the phases `host` and `staging` of a query) and the search of the
    visiting observations (the visits counted as above).

  python3 benchmarks/distributed_model.py --measured docs/results/h200_issue28_model.txt \
      --plot docs/distributed_model.png > docs/results/distributed_model.txt
"""
import argparse
import bisect
import math
import re
import sys

import numpy as np

# ----------------------------------------------------------------------------------------------------
# The spatial partition of the sharded layout, as include/streamkit/distributed/detail/space_partition.hpp
# and nearest_neighbor.hpp compute it (same double operations, so the same keys, splitters and routes).

CELL_BITS = 31
LAST_CELL = (1 << CELL_BITS) - 1
NOWHERE = (1 << 64) - 1
REACH_MARGIN = 1e-9
SAMPLES_PER_RANK = 1024
OBSERVATIONS_WEIGHT = 4.0
PI = math.pi


def _cells(values, offset, span):
    """latitude_cell / longitude_cell: the value + offset scaled to 2^31 cells over `span`, truncated,
    clamped to [0, LAST_CELL]."""
    scaled = (np.asarray(values, np.float64) + offset) * (float(1 << CELL_BITS) / span)
    out = np.zeros(scaled.shape, np.uint64)
    inside = (scaled > 0) & (scaled < LAST_CELL)
    out[inside] = scaled[inside].astype(np.uint64)
    out[scaled >= LAST_CELL] = LAST_CELL
    return out


def latitude_cells(latitude):
    return _cells(latitude, PI / 2, PI)


def longitude_cells(longitude):
    return _cells(longitude, PI, 2 * PI)


def spread_bits_2d(v):
    """Spreads the low 32 bits of each value to every other bit (the even places of a 64-bit key)."""
    x = np.asarray(v, np.uint64)
    for shift, mask in ((16, 0x0000FFFF0000FFFF), (8, 0x00FF00FF00FF00FF), (4, 0x0F0F0F0F0F0F0F0F), (2, 0x3333333333333333),
                        (1, 0x5555555555555555)):
        x = (x | (x << np.uint64(shift))) & np.uint64(mask)
    return x


def cell_keys(latitude_cell, longitude_cell):
    return (spread_bits_2d(latitude_cell) << np.uint64(1)) | spread_bits_2d(longitude_cell)


def valid_points(latitude, longitude):
    return np.isfinite(latitude) & np.isfinite(longitude) & (np.abs(latitude) <= PI / 2)


def reduced_longitudes(longitude):
    longitude = np.asarray(longitude, np.float64)
    out = longitude.copy()
    far = np.abs(longitude) > PI
    out[far] = [math.remainder(x, 2 * PI) for x in longitude[far]]
    return out


def space_keys(latitude, longitude):
    """space_key(): the Morton key of each point (radians); NOWHERE for an invalid one."""
    latitude, longitude = np.asarray(latitude, np.float64), np.asarray(longitude, np.float64)
    valid = valid_points(latitude, longitude)
    keys = np.full(latitude.shape, NOWHERE, np.uint64)
    keys[valid] = cell_keys(latitude_cells(latitude[valid]), longitude_cells(reduced_longitudes(longitude[valid])))
    return keys


def samples_of(keys, first_id, reference):
    """sample_keys(): up to SAMPLES_PER_RANK evenly spaced (key, id, weight, reference) of one rank's keys."""
    count = len(keys)
    taken = min(count, SAMPLES_PER_RANK)
    at = [s * count // taken for s in range(taken)]
    return [(int(keys[i]), first_id + i if reference else 0, count / taken, 1 if reference else 0) for i in at]


def choose_splitters(samples, ranks):
    """choose_splitters(): ranks - 1 (key, id) cuts at equal running weight, each on a reference sample."""
    samples = sorted(samples, key=lambda s: (s[0], s[1], -s[3]))
    references = sum(s[2] for s in samples if s[3])
    observations = sum(s[2] for s in samples if not s[3])
    scale = OBSERVATIONS_WEIGHT * references / observations if observations > 0 else 1.0
    weights = [s[2] if s[3] else s[2] * scale for s in samples]
    total = sum(weights)
    splitters, running, at = [], 0.0, 0
    for j in range(1, ranks):
        target = total * j / ranks
        while at < len(samples) and (running + weights[at] <= target or samples[at][3] == 0):
            running += weights[at]
            at += 1
        if at < len(samples):
            splitters.append((samples[at][0], samples[at][1]))
            running += weights[at]
            at += 1
        else:
            splitters.append((NOWHERE, NOWHERE))
    return splitters


def ranks_of(splitters, keys, ids):
    """rank_of(): how many splitters are <= (key, id), for arrays of keys and ids."""
    keys, ids = np.asarray(keys, np.uint64), np.asarray(ids, np.uint64)
    rank = np.zeros(keys.shape, np.int64)
    for key, ident in splitters:
        rank += (np.uint64(key) < keys) | ((np.uint64(key) == keys) & (np.uint64(ident) <= ids))
    return rank


def cos_lower_bound(angle):
    t = PI / 2 - angle
    t2 = t * t
    return t * (1 - t2 / 6 * (1 - t2 / 20 * (1 - t2 / 42)))


def _cell(value, offset, span):
    return int(_cells(np.array([value]), offset, span)[0])


def neighbourhood_boxes(latitude, longitude, reach):
    """neighbourhood_boxes(): the one or two cell boxes (lat_low, lat_high, lon_low, lon_high) holding
    every point within `reach` of a valid point."""
    d = reach + REACH_MARGIN
    low, high = latitude - d, latitude + d
    lat_low, lat_high = _cell(max(low, -PI / 2), PI / 2, PI), _cell(min(high, PI / 2), PI / 2, PI)
    polar = max(abs(low), abs(high))
    if not (polar < PI / 2) or not (d < PI):
        return [(lat_low, lat_high, 0, LAST_CELL)]
    cos_polar = cos_lower_bound(polar)
    x = (d / 2) / (cos_polar * (1 - 1e-9)) if cos_polar > 1e-6 else 1.0
    if not (x < 0.5):
        return [(lat_low, lat_high, 0, LAST_CELL)]
    half = 2 * x / math.sqrt(1 - x * x) * (1 + 1e-12) + REACH_MARGIN
    centre = longitude if abs(longitude) <= PI else math.remainder(longitude, 2 * PI)
    west, east = centre - half, centre + half
    lon = lambda v: _cell(v, PI, 2 * PI)  # noqa: E731
    if west < -PI:
        return [(lat_low, lat_high, 0, lon(east)), (lat_low, lat_high, lon(west + 2 * PI), LAST_CELL)]
    if east > PI:
        return [(lat_low, lat_high, lon(west), LAST_CELL), (lat_low, lat_high, 0, lon(east - 2 * PI))]
    return [(lat_low, lat_high, lon(west), lon(east))]


def _key_span(latitude_cell, longitude_cell, level):
    below = CELL_BITS - level
    first = int(cell_keys(np.array([latitude_cell >> below << below]), np.array([longitude_cell >> below << below]))[0])
    return first, (first if below == 0 else first + (1 << (2 * below)) - 1)


def _common_bits(a, b):
    differ = a ^ b
    return CELL_BITS if differ == 0 else CELL_BITS - differ.bit_length()


def reachable_ranks(splitters, box, depth=12):
    """reachable_ranks(): every rank whose key range meets a cell that meets the box."""
    lat_low, lat_high, lon_low, lon_high = box
    top = min(_common_bits(lat_low, lat_high), _common_bits(lon_low, lon_high))
    split_keys = [s[0] for s in splitters]
    found, stack = set(), [(lat_low >> (CELL_BITS - top), lon_low >> (CELL_BITS - top), top)]
    deepest = min(CELL_BITS, top + depth)
    while stack:
        lat, lon, level = stack.pop()
        below = CELL_BITS - level
        first_key, last_key = _key_span(lat << below, lon << below, level)
        first = bisect.bisect_left(split_keys, first_key)
        last = bisect.bisect_right(split_keys, last_key)
        if first == last or level == deepest:
            found.update(range(first, last + 1))
            continue
        for a in (0, 1):
            for o in (0, 1):
                child = (lat << 1 | a, lon << 1 | o, level + 1)
                cb = below - 1
                lat0, lon0 = child[0] << cb, child[1] << cb
                lat1, lon1 = lat0 + (1 << cb) - 1, lon0 + (1 << cb) - 1
                if lat1 < lat_low or lat0 > lat_high or lon1 < lon_low or lon0 > lon_high:
                    continue
                stack.append(child)
    return found


def sharded_routing(reference_parts, observation_parts, k, kth_angles=None, observation_samples=True):
    """What one sharded update and query of these points moves and visits. reference_parts and
    observation_parts: each rank's (latitude, longitude) arrays in radians, in rank order (global ids
    follow). kth_angles(obs_lat, obs_lon, shard_lat, shard_lon, k): each observation's k-th angle
    in the shard (NaN where it holds fewer than k); default: a k-d tree. observation_samples: the
    splitters also weigh these observations (a steady state; the C++ part's first update has none).
    Returns a dict of per-rank arrays: references_moved (sent away by the update), held, away
    (observations whose owner is another rank), owned, visits (sent on by each owner)."""
    ranks = len(reference_parts)
    kth_angles = kth_angles or _kth_angles_by_tree
    counts = [len(lat) for lat, _ in reference_parts]
    first_ids = np.concatenate([[0], np.cumsum(counts)])[:-1]
    keys = [space_keys(lat, lon) for lat, lon in reference_parts]
    samples = [s for r in range(ranks) for s in samples_of(keys[r], int(first_ids[r]), True)]
    obs_keys = [space_keys(lat, lon) for lat, lon in observation_parts]
    if observation_samples:
        samples += [s for r in range(ranks) for s in samples_of(obs_keys[r][obs_keys[r] != NOWHERE], 0, False)]
    splitters = choose_splitters(samples, ranks)
    shard_of = [ranks_of(splitters, keys[r], first_ids[r] + np.arange(counts[r], dtype=np.uint64)) for r in range(ranks)]
    ref_lat, ref_lon = np.concatenate([p[0] for p in reference_parts]), np.concatenate([p[1] for p in reference_parts])
    shards = np.concatenate(shard_of)
    held = np.bincount(shards, minlength=ranks)
    moved = np.array([int(np.count_nonzero(shard_of[r] != r)) for r in range(ranks)])
    away, owned, visits = np.zeros(ranks, np.int64), np.zeros(ranks, np.int64), np.zeros(ranks, np.int64)
    owners = []
    for r, (lat, lon) in enumerate(observation_parts):
        valid = obs_keys[r] != NOWHERE
        owner = np.where(valid, ranks_of(splitters, obs_keys[r], np.zeros(len(lat), np.uint64)), -1)
        away[r] = int(np.count_nonzero(valid & (owner != r)))
        owners.append(owner)
    obs_lat, obs_lon = np.concatenate([p[0] for p in observation_parts]), np.concatenate([p[1] for p in observation_parts])
    owner = np.concatenate(owners)
    for o in range(ranks):
        mine = np.flatnonzero(owner == o)
        owned[o] = len(mine)
        if len(mine) == 0:
            continue
        in_shard = shards == o
        bound = kth_angles(obs_lat[mine], obs_lon[mine], ref_lat[in_shard], ref_lon[in_shard], k)
        alone = _keys_held_alone(splitters, o)
        for i, reach in zip(mine, bound):
            if not np.isfinite(reach):  # fewer than k in the owner's shard: every other rank
                reached = set(range(ranks))
            else:
                reached = set()
                for box in neighbourhood_boxes(obs_lat[i], obs_lon[i], float(reach)):
                    if not _cell_within(box, alone):
                        reached |= reachable_ranks(splitters, box)
            visits[o] += sum(1 for r in reached if r != o and held[r] > 0)
    return dict(references_moved=moved, held=held, away=away, owned=owned, visits=visits, samples=len(samples) / ranks)


def _keys_held_alone(splitters, rank):
    low, high = 0, NOWHERE
    if rank > 0:
        if splitters[rank - 1][0] == NOWHERE:
            return 1, 0
        low = splitters[rank - 1][0] + 1
    if rank < len(splitters):
        if splitters[rank][0] == 0:
            return 1, 0
        high = splitters[rank][0] - 1
    return low, high


def _cell_within(box, span):
    lat_low, lat_high, lon_low, lon_high = box
    level = min(_common_bits(lat_low, lat_high), _common_bits(lon_low, lon_high))
    first, last = _key_span(lat_low, lon_low, level)
    return span[0] <= first and last <= span[1]


def unit_vectors(lat, lon):
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)


def _kth_angles_by_tree(obs_lat, obs_lon, ref_lat, ref_lon, k):
    from scipy.spatial import cKDTree
    if len(ref_lat) < k:
        return np.full(len(obs_lat), np.nan)
    chord, _ = cKDTree(unit_vectors(ref_lat, ref_lon)).query(unit_vectors(obs_lat, obs_lon), k=[k])
    return 2 * np.arcsin(np.minimum(chord[:, 0] / 2, 1.0))


def uniform_points(count, rng):
    return np.arcsin(2 * rng.random(count) - 1), math.pi * (2 * rng.random(count) - 1)


def example_clustered(count, rank, rng):
    """examples/distributed_nearest_neighbor's --clustered points of one rank (its generator's law)."""
    centre_lat, centre_lon = 0.9 * math.sin(1.7 * rank), math.remainder(2.3 * rank, 2 * math.pi)
    lat = np.clip(centre_lat + rng.normal(0, 0.2, count), -math.pi / 2, math.pi / 2)
    lon = np.remainder(centre_lon + rng.normal(0, 0.2, count) + math.pi, 2 * math.pi) - math.pi
    return lat, lon


def example_routing(ranks, observations, references, k, clustered, rng, sample):
    """sharded_routing() of the example's points: every rank an even share of N and M (uniform, or
    clustered per rank), the observations subsampled to `sample` in all (visits and away scaled
    back to N)."""
    shares = lambda total: [total // ranks + (1 if r < total % ranks else 0) for r in range(ranks)]  # noqa: E731
    draw = (lambda n, r: example_clustered(n, r, rng)) if clustered else (lambda n, r: uniform_points(n, rng))
    refs = [draw(m, r) for r, m in enumerate(shares(references))]
    scale = observations / min(sample, observations)
    obs = [draw(n, r) for r, n in enumerate(shares(min(sample, observations)))]
    routing = sharded_routing(refs, obs, k)
    for name in ("away", "owned", "visits"):
        routing[name] = routing[name] * scale
    return routing


# ----------------------------------------------------------------------------------------------------
# Bytes, as distributed_nearest counts them (exchange_stats::bytes_sent), per rank.

REFERENCE_BYTES, POINT_BYTES, SAMPLE_BYTES = 24, 16, 32


def sharded_update_bytes(ranks, routing):
    return REFERENCE_BYTES * routing["references_moved"] + SAMPLE_BYTES * routing["samples"] * (ranks - 1)


def sharded_query_bytes(ranks, k, routing):
    return (POINT_BYTES + 16 * k) * (routing["away"] + routing["visits"]) + 2 * ranks * 4


def replicated_update_bytes(ranks, references):
    return 16 * references / ranks * (ranks - 1)


def collective_time(ranks, messages, nbytes, link_bytes_per_s, latency_s):
    """`messages` collectives each costing a latency per peer, and `nbytes` over the link."""
    return messages * (ranks - 1) * latency_s + nbytes / link_bytes_per_s


# Collectives per step: update (sample counts and samples all-gathered, counts all-to-all, three
# all-to-allv, the shard sizes all-gathered); query (two all-to-alls of counts, eight all-to-allv).
SHARDED_UPDATE_MESSAGES, SHARDED_QUERY_MESSAGES, REPLICATED_UPDATE_MESSAGES = 7, 10, 2


# ----------------------------------------------------------------------------------------------------
# The example's printed lines.

LINE = re.compile(r"^(?P<layout>replicated|sharded)\s+ranks (?P<ranks>\d+)\s+N (?P<n>\d+)\s+M (?P<m>\d+)\s+k (?P<k>\d+)\s+"
                  r"(?P<data>uniform|clustered)(?P<device> device-resident)?: step (?P<step>[\d.]+) ms .*?exchange: update "
                  r"(?P<uex>[\d.]+) ms (?P<ub>[\d.]+) MB, query (?P<qex>[\d.]+) ms (?P<qb>[\d.]+) MB; observations sent "
                  r"(?P<sent>\d+), visits (?P<visits>\d+);.*?(?P<wrong>\d+) wrong")
PHASES = re.compile(r"phases \(ms, slowest rank, median\): update search (?P<us>[\d.]+) host (?P<uh>[\d.]+) staging "
                    r"(?P<ust>[\d.]+); query search (?P<qs>[\d.]+) host (?P<qh>[\d.]+) staging (?P<qst>[\d.]+)")


def read_measured(path):
    """The example's result lines, each with its phases line (when it printed one)."""
    rows = []
    with open(path) as f:
        for line in f:
            m = LINE.search(line)
            if m and any(m.group(0) == row["line"] for row in rows):  # the same run quoted twice
                continue
            if m:
                rows.append({"line": m.group(0)})
                rows[-1].update({key: (value if key in ("layout", "data") else value is not None if key == "device" else float(value))
                                 for key, value in m.groupdict().items()})
                continue
            m = PHASES.search(line)
            if m and rows:
                rows[-1].update({key: float(value) for key, value in m.groupdict().items()})
    return rows


def find(rows, **want):
    for row in rows:
        if all(row.get(key) == value for key, value in want.items()):
            return row
    sys.exit(f"--measured has no line with {want}")


def one_rank_step(points):
    """t(n): one rank's measured step times [(n, ms)], interpolated in log-log, extrapolated along the
    nearest segment."""
    points = sorted(points)
    logs = np.log([n for n, _ in points]), np.log([ms * 1e-3 for _, ms in points])

    def at(n):
        x = math.log(n)
        segment = min(max(int(np.searchsorted(logs[0], x)) - 1, 0), len(points) - 2)
        slope = (logs[1][segment + 1] - logs[1][segment]) / (logs[0][segment + 1] - logs[0][segment])
        return math.exp(logs[1][segment] + slope * (x - logs[0][segment]))
    return at


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measured", required=True, help="the example's output (docs/results/h200_issue28_model.txt)")
    parser.add_argument("--link-gbytes", type=float, default=25.0, help="link bandwidth per node and direction, GB/s "
                        "(default 25: one 200 Gb/s InfiniBand HDR/NDR200 port)")
    parser.add_argument("--latency-us", type=float, default=3.0, help="per-message latency, µs (default 3)")
    parser.add_argument("--max-ranks", type=int, default=64)
    parser.add_argument("--sample", type=int, default=1 << 16, help="observations routed per simulation (visits scaled to N)")
    parser.add_argument("--draws", type=int, default=3, help="simulations per checked run (their range is shown)")
    parser.add_argument("--plot", help="write the plot here (PNG)")
    parser.add_argument("--seed", type=int, default=20261124)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = read_measured(args.measured)
    link, latency = args.link_gbytes * 1e9, args.latency_us * 1e-6
    n_rep, m_rep, n_sh, m_sh = 2**26, 2**16, 2**24, 2**22

    # Compute terms, from the one-rank runs: the step at each size, and what a rank does at two ranks
    # that one rank does not (the routing per observation and the copies it brings; the search of a visitor).
    host_rows = [r for r in rows if not r["device"]]
    rep_points = [(r["n"], r["step"]) for r in host_rows if r["layout"] == "replicated" and r["ranks"] == 1 and r["m"] == m_rep]
    sh_points = [(r["n"], r["step"]) for r in host_rows if r["layout"] == "sharded" and r["ranks"] == 1 and r["n"] == 4 * r["m"]
                 and r["data"] == "uniform"]
    if len(rep_points) < 2 or len(sh_points) < 2:
        sys.exit("--measured needs one-rank replicated runs with M = 2^16 and one-rank sharded runs with N = 4 M, two each")
    rep_step, sh_step = one_rank_step(rep_points), one_rank_step(sh_points)
    one = find(rows, layout="sharded", ranks=1, n=n_sh, m=m_sh, data="uniform", device=False)
    two = find(rows, layout="sharded", ranks=2, n=n_sh, m=m_sh, data="uniform", device=False)
    per_visit = one["qs"] * 1e-3 / n_sh  # the search of one observation
    host_per_observation = (two["qh"] + two["qst"]) * 1e-3 / (n_sh / 2)  # routing and its copies, not done at one rank
    # The repartition's sample sort per reference of the rank at two ranks, less what one rank's update does per reference.
    repartition_per_reference = (two["uh"] + two["ust"]) * 1e-3 / (m_sh / 2) - (one["uh"] + one["ust"]) * 1e-3 / m_sh
    print("### Compute, from the one-rank runs on the H200 (ms)\n")
    print("replicated, M = 2^16: " + ", ".join(f"N {n:.0f}: {t:.2f}" for n, t in sorted(rep_points)))
    print("sharded, N = 4 M: " + ", ".join(f"N {n:.0f}: {t:.2f}" for n, t in sorted(sh_points)))
    print(f"a visiting observation's search: {per_visit * 1e9:.2f} ns (one rank's query search time per observation); "
          f"the routing (with its copies between host and GPU) at two ranks: {host_per_observation * 1e9:.2f} ns per observation of the rank; "
          f"the repartition's sample sort (keys, ranks, send order and their copies between host and GPU) at two ranks beyond one rank's: "
          f"{repartition_per_reference * 1e9:.2f} ns per reference of the rank")

    print("\n### Check against the runs at two ranks (one host: the ranks share its GPU, MPI's shared-memory transport)\n")
    big = max((r for r in host_rows if r["layout"] == "sharded" and r["ranks"] == 2), key=lambda r: r["qb"])
    shm = big["qb"] * 1e6 / big["ranks"] / (big["qex"] * 1e-3)  # the example sums bytes over ranks
    print(f"link calibrated on the largest query exchange ({big['ranks']:.0f} ranks, {big['n']:.0f} x {big['m']:.0f}): "
          f"{big['qb']:.1f} MB (all ranks) in {big['qex']:.2f} ms -> {shm / 1e9:.2f} GB/s per rank; latency taken as 0\n")
    print("| run | visits predicted | counted | observations sent predicted | counted | update MB predicted | counted | "
          "query MB predicted | counted | update exchange ms predicted | measured | query exchange ms predicted | measured |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        if row["layout"] != "sharded" or row["ranks"] < 2:
            continue
        ranks, n, m, k = int(row["ranks"]), int(row["n"]), int(row["m"]), int(row["k"])
        draws = [example_routing(ranks, n, m, k, row["data"] == "clustered", rng, args.sample) for _ in range(args.draws)]

        def shown(value, digits=0):  # the draws' range
            low, high = min(value(d) for d in draws), max(value(d) for d in draws)
            return f"{low:,.{digits}f}" if f"{low:,.{digits}f}" == f"{high:,.{digits}f}" else f"{low:,.{digits}f} to {high:,.{digits}f}"
        print(f"| {ranks} ranks, {n} x {m}, k {k}, {row['data']}{' device-resident' if row['device'] else ''} | "
              f"{shown(lambda d: d['visits'].sum())} | {row['visits']:,.0f} | {shown(lambda d: d['away'].sum() + d['visits'].sum())} | "
              f"{row['sent']:,.0f} | {shown(lambda d: sharded_update_bytes(ranks, d).sum() / 1e6, 2)} | {row['ub']:.2f} | "
              f"{shown(lambda d: sharded_query_bytes(ranks, k, d).sum() / 1e6, 2)} | {row['qb']:.2f} | "
              f"{shown(lambda d: collective_time(ranks, 0, sharded_update_bytes(ranks, d).max(), shm, 0.0) * 1e3, 2)} | {row['uex']:.2f} | "
              f"{shown(lambda d: collective_time(ranks, 0, sharded_query_bytes(ranks, k, d).max(), shm, 0.0) * 1e3, 2)} | {row['qex']:.2f} |")

    print(f"\n### Projection: one rank (GPU) per node, link {args.link_gbytes:g} GB/s per node and direction, "
          f"{args.latency_us:g} µs per message and peer\n")
    counts = [2**e for e in range(int(math.log2(args.max_ranks)) + 1)]
    print("| nodes | replicated 2^26 x 2^16: step ms (exchange) | efficiency | MB per rank | sharded 2^24 x 2^22: visits per "
          "observation | observations away per rank | repartition ms (all-to-all) | step ms (exchange) | efficiency | "
          "update + query MB per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    series = {"replicated": [], "sharded": []}
    for r in counts:
        rep_exchange = collective_time(r, REPLICATED_UPDATE_MESSAGES, replicated_update_bytes(r, m_rep), link, latency) if r > 1 else 0.0
        rep = rep_step(n_rep / r) + rep_exchange
        if r == 1:
            routing = dict(visits=np.zeros(1), away=np.zeros(1))
            sh, sh_exchange, sh_mb, repartition, repartition_exchange = sh_step(n_sh), 0.0, 0.0, 0.0, 0.0
        else:
            routing = example_routing(r, n_sh, m_sh, 1, False, rng, args.sample)
            update_bytes, query_bytes = sharded_update_bytes(r, routing).max(), sharded_query_bytes(r, 1, routing).max()
            repartition_exchange = collective_time(r, SHARDED_UPDATE_MESSAGES, update_bytes, link, latency)
            repartition = repartition_per_reference * m_sh / r + repartition_exchange
            sh_exchange = repartition_exchange + collective_time(r, SHARDED_QUERY_MESSAGES, query_bytes, link, latency)
            sh = (sh_step(n_sh / r) + repartition_per_reference * m_sh / r + host_per_observation * n_sh / r
                  + per_visit * routing["visits"].max() + sh_exchange)
            sh_mb = (update_bytes + query_bytes) / 1e6
        series["replicated"].append(rep), series["sharded"].append(sh)
        print(f"| {r} | {rep * 1e3:.2f} ({rep_exchange * 1e3:.3f}) | {series['replicated'][0] / (r * rep):.2f} | "
              f"{replicated_update_bytes(r, m_rep) / 1e6:.2f} | {routing['visits'].sum() / n_sh:.4f} | {routing['away'].max():,.0f} | "
              f"{repartition * 1e3:.2f} ({repartition_exchange * 1e3:.3f}) | {sh * 1e3:.2f} ({sh_exchange * 1e3:.3f}) | {series['sharded'][0] / (r * sh):.2f} | {sh_mb:.2f} |")

    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, label, marker in (("replicated", "replicated, 2^26 x 2^16", "o-"), ("sharded", "sharded, 2^24 x 2^22", "s-")):
            line, = ax.loglog(counts, np.array(series[name]) * 1e3, marker, label=label)
            ax.loglog(counts, series[name][0] * 1e3 / np.array(counts), ":", color=line.get_color(), alpha=0.6,
                      label=f"{name}, perfect scaling")
        ax.set_xlabel("nodes (one GPU each)")
        ax.set_ylabel("predicted step time (ms)")
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_title(f"Distributed nearest neighbours, k = 1, host in/out: link {args.link_gbytes:g} GB/s, "
                     f"{args.latency_us:g} µs\ncompute from one H200's measured one-rank steps (docs/distributed.md)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
