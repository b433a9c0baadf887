#!/usr/bin/env python3
"""Per-step communication model of streamkit's distributed nearest-neighbour search (docs/distributed.md).

For R ranks (one GPU each), N observations and M references in total, k neighbours:

  bytes per rank and step, as distributed_nearest counts them (exchange_stats):
    replicated  update: the other ranks' references, 16 (M - M/R) bytes in, 16 M/R (R - 1) out;
                query: nothing.
    sharded     update: one 48-byte cap per rank;
                query: 16 bytes per observation sent to another shard, 16 k bytes per candidate list
                returned, V N/R of each way (V: other shards an observation visits), and the counts
                (4 bytes per rank).
  time per collective: (R - 1) latencies plus the bytes over the link (ring all-gather, pairwise
  all-to-all); the replicated update makes 2 all-gathers (latitudes, longitudes), the sharded query
  1 all-to-all and 4 all-to-allv.
  compute: from one rank's measured step on the GPU, scaled by the rank's share of the work
  (observations searched; each search's cost taken as linear in its observations).
  V: R - 1 when every shard spreads over the sphere (random shares: every observation must visit every
  shard); for spatially compact shards, counted by simulating the search's routing (the same caps,
  the same bound: the k-th distance within the own shard) on generated points.

Checked against the two-rank measurement of examples/distributed_nearest_neighbor (its printed lines,
read from --measured): the link's bandwidth is calibrated on the replicated update and the sharded
query's exchange time predicted from it; the predicted visits (uniform: N (R - 1); clustered: the
simulation of the example's own generator) against the counted ones.

  python3 benchmarks/distributed_model.py --measured docs/results/h100_mpi_example.txt \
      --plot docs/distributed_model.png > docs/results/distributed_model.txt
"""
import argparse
import math
import re
import sys

import numpy as np

CAP_BYTES = 48  # sizeof(detail::sphere_cap)
CAP_MARGIN = 1e-9


# ----------------------------------------------------------------------------------------------------
# Geometry: the routing of sphere_cap.hpp, vectorised.

def unit_vectors(lat, lon):
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=1)


def cap_of(vectors):
    """Centre (normalised mean) and radius (largest angle from it, plus the margin), as cap_of()."""
    if len(vectors) == 0:
        return np.array([0.0, 0.0, 1.0]), -1.0
    mean = vectors.sum(axis=0)
    norm = np.linalg.norm(mean)
    centre = mean / norm if norm > 1e-6 * len(vectors) else np.array([0.0, 0.0, 1.0])
    cross = np.linalg.norm(np.cross(vectors, centre), axis=1)
    return centre, float(np.max(np.arctan2(cross, vectors @ centre))) + CAP_MARGIN


def kth_angle(queries, points, k):
    """The k-th smallest angle from each query to the points (exact, by a 3-d k-d tree on chords)."""
    from scipy.spatial import cKDTree
    if len(points) < k:
        return np.full(len(queries), np.inf)
    chord, _ = cKDTree(points).query(queries, k=[k])
    return 2 * np.arcsin(np.minimum(chord[:, 0] / 2, 1.0))


def visits_per_observation(observations, obs_owner, references, ref_owner, ranks, k):
    """Mean number of other shards each observation visits under the search's routing."""
    caps = [cap_of(references[ref_owner == r]) for r in range(ranks)]
    visits = 0
    for r in range(ranks):
        mine = observations[obs_owner == r]
        if len(mine) == 0:
            continue
        bound = kth_angle(mine, references[ref_owner == r], k)
        for s, (centre, radius) in enumerate(caps):
            if s == r or radius < 0:
                continue
            to_centre = np.arctan2(np.linalg.norm(np.cross(mine, centre), axis=1), mine @ centre)
            visits += int(np.count_nonzero(to_centre <= radius + bound))
    return visits / len(observations)


def uniform_points(count, rng):
    return np.arcsin(2 * rng.random(count) - 1), math.pi * (2 * rng.random(count) - 1)


def fibonacci_sites(count):
    """`count` nearly evenly spread unit vectors (the Fibonacci lattice)."""
    i = np.arange(count) + 0.5
    z = 1 - 2 * i / count
    phi = math.pi * (3 - math.sqrt(5)) * i
    r = np.sqrt(1 - z * z)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def compact_owner(vectors, ranks):
    """Spatially compact shards: each point belongs to the nearest of `ranks` evenly spread sites
    (Voronoi cells of about equal area, the decomposition a geographic code would choose)."""
    from scipy.spatial import cKDTree
    return cKDTree(fibonacci_sites(ranks)).query(vectors)[1]


def simulated_visits(ranks, references, k, sample, rng):
    """V for compact shards of uniform points: M references split by compact_owner(), a sample of
    observations (owned the same way) routed as the search routes them."""
    refs, obs = unit_vectors(*uniform_points(references, rng)), unit_vectors(*uniform_points(sample, rng))
    return visits_per_observation(obs, compact_owner(obs, ranks), refs, compact_owner(refs, ranks), ranks, k)


def example_clustered(count, rank, rng):
    """examples/distributed_nearest_neighbor's --clustered points of one rank (its generator's law)."""
    centre_lat, centre_lon = 0.9 * math.sin(1.7 * rank), math.remainder(2.3 * rank, 2 * math.pi)
    lat = np.clip(centre_lat + rng.normal(0, 0.2, count), -math.pi / 2, math.pi / 2)
    lon = np.remainder(centre_lon + rng.normal(0, 0.2, count) + math.pi, 2 * math.pi) - math.pi
    return lat, lon


def example_clustered_visits(ranks, observations, references, k, rng):
    """Total visits the example's --clustered run should count (every observation routed)."""
    shares = lambda total: [total // ranks + (1 if r < total % ranks else 0) for r in range(ranks)]
    obs, obs_owner, refs, ref_owner = [], [], [], []
    for r, (n, m) in enumerate(zip(shares(observations), shares(references))):
        lat, lon = example_clustered(m, r, rng)
        refs.append(unit_vectors(lat, lon)), ref_owner.append(np.full(m, r))
        lat, lon = example_clustered(n, r, rng)
        obs.append(unit_vectors(lat, lon)), obs_owner.append(np.full(n, r))
    return observations * visits_per_observation(np.concatenate(obs), np.concatenate(obs_owner), np.concatenate(refs),
                                                 np.concatenate(ref_owner), ranks, k)


# ----------------------------------------------------------------------------------------------------
# Bytes and time.

def replicated_bytes(ranks, references):
    """Bytes one rank receives per step (the update's all-gather)."""
    return 16 * references * (ranks - 1) / ranks


def sharded_bytes(ranks, observations, k, visits):
    """Bytes one rank sends (and receives, the traffic being balanced) per step."""
    return CAP_BYTES * (ranks - 1) + (16 + 16 * k) * visits * observations / ranks + 4 * ranks


def collective_time(ranks, messages, nbytes, link_bytes_per_s, latency_s):
    return messages * (ranks - 1) * latency_s + nbytes / link_bytes_per_s


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


def replicated_step(ranks, observations, references, step, link, latency):
    """step(n): one rank's measured step for n observations against all the references."""
    exchange = collective_time(ranks, 2, replicated_bytes(ranks, references), link, latency) if ranks > 1 else 0.0
    return step(observations / ranks) + exchange, exchange


def sharded_step(ranks, observations, references, k, visits, step, per_visit, link, latency):
    """step(n): one rank's measured step for n observations against n M / N references (update, caps,
    phase 1); each visit adds one observation to phase 3's search (per_visit seconds) besides the
    exchange."""
    n = observations / ranks
    if ranks == 1:
        return step(n), 0.0
    exchange = collective_time(ranks, 1, CAP_BYTES * (ranks - 1), link, latency)
    exchange += collective_time(ranks, 5, sharded_bytes(ranks, observations, k, visits), link, latency)
    return step(n) + visits * n * per_visit + exchange, exchange


# ----------------------------------------------------------------------------------------------------
# The example's printed lines.

LINE = re.compile(r"^(?P<layout>replicated|sharded)\s+ranks (?P<ranks>\d+)\s+N (?P<n>\d+)\s+M (?P<m>\d+)\s+k (?P<k>\d+)\s+"
                  r"(?P<data>uniform|clustered): step (?P<step>[\d.]+) ms .*?exchange: update (?P<uex>[\d.]+) ms "
                  r"(?P<ub>[\d.]+) MB, query (?P<qex>[\d.]+) ms (?P<qb>[\d.]+) MB, (?P<visits>\d+) observation visits; "
                  r"(?P<wrong>\d+) wrong")


def read_measured(path):
    rows = []
    with open(path) as f:
        for line in f:
            m = LINE.match(line.strip())
            if m:
                row = {key: (value if key in ("layout", "data") else float(value)) for key, value in m.groupdict().items()}
                rows.append(row)
    return rows


def find(rows, **want):
    for row in rows:
        if all(row[key] == value for key, value in want.items()):
            return row
    sys.exit(f"--measured has no line with {want}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--measured", required=True, help="output of the example's runs (docs/results/h100_mpi_example.txt)")
    parser.add_argument("--link-gbytes", type=float, default=25.0, help="link bandwidth per node and direction, GB/s "
                        "(default 25: one 200 Gb/s InfiniBand HDR/NDR200 port)")
    parser.add_argument("--latency-us", type=float, default=3.0, help="per-message latency, µs (default 3)")
    parser.add_argument("--max-ranks", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=5, help="simulations per clustered check")
    parser.add_argument("--plot", help="write the plot here (PNG)")
    parser.add_argument("--seed", type=int, default=20261123)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = read_measured(args.measured)
    link, latency = args.link_gbytes * 1e9, args.latency_us * 1e-6
    n_rep, m_rep, n_sh, m_sh = 2**26, 2**16, 2**24, 2**22

    # Compute terms: one-rank steps (no exchange) at the shares the projection needs.
    rep_points = [(r["n"], r["step"]) for r in rows if r["layout"] == "replicated" and r["ranks"] == 1 and r["m"] == m_rep]
    sh_points = [(r["n"], r["step"]) for r in rows if r["layout"] == "sharded" and r["ranks"] == 1 and r["n"] == 4 * r["m"]]
    if len(rep_points) < 2 or len(sh_points) < 2:
        sys.exit("--measured needs one-rank replicated runs with M = 2^16 and one-rank sharded runs with N = 4 M, two each")
    rep_step, sh_step = one_rank_step(rep_points), one_rank_step(sh_points)
    (n0, t0), (n1, t1) = sorted(sh_points)[-2:]
    per_visit = (t1 - t0) * 1e-3 / (n1 - n0)  # phase 3's cost per visiting observation: the sharded step's slope
    print("compute, one rank (measured steps, ms): replicated, M = 2^16: "
          + ", ".join(f"N {n:.0f}: {t:.2f}" for n, t in sorted(rep_points))
          + "; sharded, N = 4 M: " + ", ".join(f"N {n:.0f}: {t:.2f}" for n, t in sorted(sh_points))
          + f"; a visiting observation costs {per_visit * 1e9:.2f} ns (the slope of the two largest)")

    # The check against two (and four) ranks on one host.
    print("\n## Check against the measured runs (one host: ranks share its GPU, MPI's shared-memory transport)\n")
    big = max((r for r in rows if r["layout"] == "sharded" and r["ranks"] == 2), key=lambda r: r["qb"])
    shm = big["qb"] * 1e6 / big["ranks"] / (big["qex"] * 1e-3)  # the example sums bytes over ranks
    print(f"link calibrated on the largest query exchange ({big['ranks']:.0f} ranks, {big['n']:.0f} x {big['m']:.0f}): "
          f"{big['qb']:.1f} MB (all ranks) in {big['qex']:.2f} ms -> {shm / 1e9:.2f} GB/s per rank; latency taken as 0")
    print("\n| run | visits predicted | visits counted | query MB predicted (all ranks) | counted | "
          "query exchange ms predicted | measured |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        if row["layout"] != "sharded" or row["ranks"] < 2:
            continue
        ranks, n, m, k = int(row["ranks"]), int(row["n"]), int(row["m"]), int(row["k"])
        if row["data"] == "uniform":
            low = high = n * (ranks - 1)
        else:
            runs = [example_clustered_visits(ranks, n, m, k, rng) for _ in range(args.seeds)]
            low, high = min(runs), max(runs)
        shown = f"{low:,.0f}" if low == high else f"{low:,.0f} to {high:,.0f} ({args.seeds} draws)"
        nbytes = [(16 + 16 * k) * v + 4 * ranks * ranks for v in (low, high)]
        mb = "/".join(sorted({f"{b / 1e6:.2f}" for b in nbytes}))
        ms = "/".join(sorted({f"{collective_time(ranks, 5, b / ranks, shm, 0.0) * 1e3:.2f}" for b in nbytes}))
        print(f"| {ranks} ranks, {n} x {m}, k {k}, {row['data']} | {shown} | {row['visits']:,.0f} | {mb} | {row['qb']:.2f} | "
              f"{ms} | {row['qex']:.2f} |")

    # The projection.
    print(f"\n## Projection: one rank (GPU) per node, link {args.link_gbytes:g} GB/s per node and direction, "
          f"{args.latency_us:g} µs per message\n")
    counts = [2**e for e in range(int(math.log2(args.max_ranks)) + 1)]
    compact = {r: (simulated_visits(r, m_sh, 1, 2**17, rng) if r > 1 else 0.0) for r in counts}
    print(f"| nodes | replicated 2^26 x 2^16: step ms (exchange) | efficiency | MB per rank | "
          f"sharded 2^24 x 2^22, compact shards: V | step ms (exchange) | efficiency | MB per rank | "
          f"random shards: step ms | MB per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    series = {"replicated": [], "compact": [], "random": []}
    rep_base = replicated_step(1, n_rep, m_rep, rep_step, link, latency)[0]
    sh_base = sharded_step(1, n_sh, m_sh, 1, 0, sh_step, per_visit, link, latency)[0]
    for r in counts:
        rep, rep_ex = replicated_step(r, n_rep, m_rep, rep_step, link, latency)
        cmp_, cmp_ex = sharded_step(r, n_sh, m_sh, 1, compact[r], sh_step, per_visit, link, latency)
        rnd, _ = sharded_step(r, n_sh, m_sh, 1, r - 1, sh_step, per_visit, link, latency)
        series["replicated"].append(rep), series["compact"].append(cmp_), series["random"].append(rnd)
        print(f"| {r} | {rep * 1e3:.2f} ({rep_ex * 1e3:.3f}) | {rep_base / (r * rep):.2f} | {replicated_bytes(r, m_rep) / 1e6:.2f} | "
              f"{compact[r]:.3f} | {cmp_ * 1e3:.2f} ({cmp_ex * 1e3:.3f}) | {sh_base / (r * cmp_):.2f} | "
              f"{sharded_bytes(r, n_sh, 1, compact[r]) / 1e6:.2f} | {rnd * 1e3:.2f} | {sharded_bytes(r, n_sh, 1, r - 1) / 1e6:.2f} |")

    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        ax.loglog(counts, np.array(series["replicated"]) * 1e3, "o-", label="replicated, 2^26 x 2^16")
        ax.loglog(counts, rep_base * 1e3 / np.array(counts), ":", color="C0", alpha=0.6, label="replicated, perfect scaling")
        ax.loglog(counts, np.array(series["compact"]) * 1e3, "s-", label="sharded, 2^24 x 2^22, compact shards")
        ax.loglog(counts, sh_base * 1e3 / np.array(counts), ":", color="C1", alpha=0.6, label="sharded, perfect scaling")
        ax.loglog(counts, np.array(series["random"]) * 1e3, "^-", label="sharded, 2^24 x 2^22, random shards")
        ax.set_xlabel("nodes (one GPU each)")
        ax.set_ylabel("predicted step time (ms)")
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_title(f"Distributed nearest neighbours, k = 1, host in/out: link {args.link_gbytes:g} GB/s, "
                     f"{args.latency_us:g} µs\ncompute from one H100's measured one-rank steps (docs/distributed.md)", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
