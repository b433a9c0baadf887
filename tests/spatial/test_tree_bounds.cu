// The tree walk's pruning tests (detail/tree_kernels.cuh, box_room): a box and capsule that hold a reference whose
// float64 squared chord to the observation is at most the list's worst entry must leave room (never pruned), or the
// search would miss it. Checked on the device on random piles of 16 points (a leaf, its boxes and capsule made as
// tree_build_leaves makes them) and on pairs of such piles (an inner node, merge_capsules), from 1 rad down to 1e-15
// rad across (blobs, lines, small circles round a pole), seen from afar, from near their antipode, from nearby and from
// one of the points, with the worst entry set to each point's own squared chord: the tightest list a search ever holds;
// box_room with and without its far test (sphere_box_distance2).
#include "gpu_test.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/spatial/detail/tree_kernels.cuh>

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace {

using streamkit::detail::vec4;

constexpr int pile = streamkit::detail::tree_leaf_size;

struct failures {
  unsigned long long count;
  unsigned long long first_trial;
  unsigned long long thin_nodes;  // nodes thin_node_flag marked, whose capsule box_room tests whatever the float test says
  unsigned long long far_pruned;  // nodes only sphere_box_distance2 pruned, all their points just beyond the worst entry
};

/// splitmix64: a stream of random bits per trial.
__device__ std::uint64_t next_bits(std::uint64_t& state)
{
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ double uniform(std::uint64_t& state) { return static_cast<double>(next_bits(state) >> 11) * 0x1.0p-53; }

/// A pile of `pile` points round (lat, lon) within `scale` rad: a blob, a line, or (shape 2) a small circle of
/// radius `scale` round the north pole.
__device__ void make_pile(std::uint64_t& state, int shape, double lat, double lon, double scale, vec4<double>* points)
{
  double const slope = uniform(state) * 2.0 - 1.0;
  for (int i = 0; i < pile; ++i) {
    double a = lat, b = lon;
    if (shape == 0) {
      a += scale * (uniform(state) - 0.5);
      b += scale * (uniform(state) - 0.5);
    } else if (shape == 1) {
      double const t = scale * (uniform(state) - 0.5);
      a += t;
      b += slope * t;
    } else {
      a = 1.5707963267948966 - scale;
      b = lon + 6.283185307179586 * uniform(state) * 1e-3;
    }
    points[i] = streamkit::detail::unit_vector<double>(a, b, true);
  }
}

/// A trial's pile: its random stream, shape (make_pile), size in rad and place.
struct trial_pile {
  std::uint64_t state;
  int shape;
  double scale, lat, lon;
  __device__ trial_pile(std::uint64_t seed, unsigned long long trial) : state(seed ^ (trial * 0x2545f4914f6cdd1dull))
  {
    shape = static_cast<int>(next_bits(state) % 3);
    scale = pow(10.0, -15.0 * uniform(state));
    lat = asin(2.0 * uniform(state) - 1.0);
    lon = 6.283185307179586 * uniform(state) - 3.141592653589793;
  }
  /// The observation (`where`): 0 anywhere, 1 near the pile, 2 one of the `count` points, 3 near the pile's
  /// antipode (within 1e-6 to 1 rad), where a box seen edge-on reaches furthest towards it (sphere_box_distance2).
  __device__ vec4<double> observation(vec4<double> const* points, int count, int& where)
  {
    using streamkit::detail::unit_vector;
    where = static_cast<int>(next_bits(state) % 4);
    if (where == 3) {
      double const reach = pow(10.0, -6.0 * uniform(state));
      return unit_vector<double>(-lat + reach * (uniform(state) - 0.5), lon + 3.141592653589793 + reach * (uniform(state) - 0.5), true);
    }
    if (where == 0) {
      return unit_vector<double>(asin(2.0 * uniform(state) - 1.0), 6.283185307179586 * uniform(state) - 3.141592653589793, true);
    }
    if (where == 1) {
      double const reach = scale * pow(10.0, 3.0 * uniform(state));
      return unit_vector<double>(lat + reach * (uniform(state) - 0.5), lon + reach * (uniform(state) - 0.5), true);
    }
    return points[next_bits(state) % count];
  }
};

/// Runs `kernel` over `trials` trials of `seed` (1,024 blocks of 128 threads) and returns the counts it left.
template <class Counts>
Counts run_trials(void (*kernel)(std::uint64_t, unsigned long long, Counts*), std::uint64_t seed, unsigned long long trials)
{
  Counts* out = nullptr;
  STREAMKIT_CUDA_TRY(cudaMalloc(&out, sizeof(Counts)));
  STREAMKIT_CUDA_TRY(cudaMemset(out, 0, sizeof(Counts)));
  kernel<<<1024, 128>>>(seed, trials, out);
  STREAMKIT_CUDA_TRY(cudaGetLastError());
  Counts host{};
  STREAMKIT_CUDA_TRY(cudaMemcpy(&host, out, sizeof(Counts), cudaMemcpyDeviceToHost));
  STREAMKIT_CUDA_TRY(cudaFree(out));
  return host;
}

struct node {
  streamkit::detail::tree_node box;
  streamkit::detail::tree_precise_node precise;
  streamkit::detail::tree_capsule capsule;
};

/// The boxes of `count` points, in float64 and in float rounded outward.
__device__ void bound_points(vec4<double> const* points, int count, node& out)
{
  double const infinity = 1.0 / 0.0;
  vec4<double> low{infinity, infinity, infinity, 0.0}, high{-infinity, -infinity, -infinity, 0.0};
  for (int i = 0; i < count; ++i) {
    low = {fmin(low.x, points[i].x), fmin(low.y, points[i].y), fmin(low.z, points[i].z), 0.0};
    high = {fmax(high.x, points[i].x), fmax(high.y, points[i].y), fmax(high.z, points[i].z), 0.0};
  }
  out.precise = {low, high};
  out.box = {{__double2float_rd(low.x), __double2float_rd(low.y), __double2float_rd(low.z), 0.f},
             {__double2float_ru(high.x), __double2float_ru(high.y), __double2float_ru(high.z), 0.f}};
}

/// A leaf as tree_build_leaves makes it: the capsule from the point lowest to the point highest along the box's
/// longest axis (the first of equals), as wide as the farthest point from that segment.
__device__ node make_leaf(vec4<double> const* points)
{
  using namespace streamkit::detail;
  node leaf;
  bound_points(points, pile, leaf);
  int const axis = longest_axis(leaf.precise.low, leaf.precise.high);
  int lowest = -1, highest = -1;
  for (int i = 0; i < pile; ++i) {
    if (lowest < 0 && coordinate(points[i], axis) == coordinate(leaf.precise.low, axis)) { lowest = i; }
    if (highest < 0 && coordinate(points[i], axis) == coordinate(leaf.precise.high, axis)) { highest = i; }
  }
  vec4<double> const a = points[lowest], b = points[highest];
  double radius = 0.0;
  for (int i = 0; i < pile; ++i) { radius = fmax(radius, segment_distance_above(points[i], a, b)); }
  leaf.capsule = make_capsule(a, b, radius);
  leaf.box.low.w = thin_node_flag(leaf.precise.low, leaf.precise.high, radius);
  return leaf;
}

/// Counts the points of `points` (count of them) that `n`'s tests would prune for observation p with the worst
/// entry at that point's own squared chord; adds to `far_pruned` when, with the worst entry 2^-12 below the
/// nearest point's, only the far test (box_room's `Far`, sphere_box_distance2) prunes the node.
__device__ int pruned(vec4<double> const& p, node const& n, vec4<double> const* points, int count, unsigned long long& far_pruned)
{
  using namespace streamkit::detail;
  float3 const p_float{static_cast<float>(p.x), static_cast<float>(p.y), static_cast<float>(p.z)};
  int missed = 0;
  double nearest = 4.0;
  for (int i = 0; i < count; ++i) {
    double const worst = chord2(p.x, p.y, p.z, points[i]);
    nearest = fmin(nearest, worst);
    search_bounds const bounds(worst);
    // Both forms of the float64 tests: inlined (lists of k < 32) and called (k >= 32); with and without the far test.
    missed += box_room<false>(p_float, p, n.box, n.precise, n.capsule, bounds, worst) == 0u ? 1 : 0;
    missed += box_room<true>(p_float, p, n.box, n.precise, n.capsule, bounds, worst) == 0u ? 1 : 0;
    missed += box_room<false, true>(p_float, p, n.box, n.precise, n.capsule, bounds, worst) == 0u ? 1 : 0;
    missed += box_room<true, true>(p_float, p, n.box, n.precise, n.capsule, bounds, worst) == 0u ? 1 : 0;
  }
  double const below = nearest * (1.0 - 0x1.0p-12);
  search_bounds const bounds(below);
  if (box_room<false>(p_float, p, n.box, n.precise, n.capsule, bounds, below) != 0u &&
      box_room<false, true>(p_float, p, n.box, n.precise, n.capsule, bounds, below) == 0u) {
    ++far_pruned;
  }
  return missed;
}

__global__ void check_bounds(std::uint64_t seed, unsigned long long trials, failures* out)
{
  using namespace streamkit::detail;
  for (unsigned long long trial = blockIdx.x * 1ull * blockDim.x + threadIdx.x; trial < trials; trial += 1ull * gridDim.x * blockDim.x) {
    trial_pile t(seed, trial);
    vec4<double> points[2 * pile];
    make_pile(t.state, t.shape, t.lat, t.lon, t.scale, points);
    // The second pile of an inner node: beside the first (shape 2: further along the same circle).
    make_pile(t.state, t.shape, t.lat + t.scale, t.shape == 2 ? t.lon + 6.283185307179586e-3 : t.lon + t.scale, t.scale, points + pile);
    int where;
    vec4<double> const p = t.observation(points, 2 * pile, where);
    node const left = make_leaf(points), right = make_leaf(points + pile);
    node inner;
    bound_points(points, 2 * pile, inner);
    inner.capsule = merge_capsules(left.capsule, true, right.capsule, true, inner.precise.low, inner.precise.high);
    inner.box.low.w = thin_node_flag(inner.precise.low, inner.precise.high, inner.capsule.a.w);
    int const thin = (left.box.low.w != 0.f ? 1 : 0) + (right.box.low.w != 0.f ? 1 : 0) + (inner.box.low.w != 0.f ? 1 : 0);
    if (thin > 0) { atomicAdd(&out->thin_nodes, static_cast<unsigned long long>(thin)); }
    unsigned long long far_pruned = 0;
    int const missed = pruned(p, left, points, pile, far_pruned) + pruned(p, right, points + pile, pile, far_pruned) +
                       pruned(p, inner, points, 2 * pile, far_pruned);
    if (far_pruned > 0) { atomicAdd(&out->far_pruned, far_pruned); }
    if (missed > 0) {
      unsigned long long const before = atomicAdd(&out->count, static_cast<unsigned long long>(missed));
      if (before == 0) { out->first_trial = trial; }
    }
  }
}

/// anchored_filter over a leaf of `pile` points made as tree_build_leaves makes it: for each point, with the worst entry
/// at its own squared chord, the filter must pass it (`missed` counts those it would not). With the worst entry at the
/// nearest point's chord, `anchored` and `chord` add the points the anchored filter and the float chord filter pass.
__device__ void check_anchored(vec4<double> const& p, vec4<double> const* points, int& missed, int& anchored, int& chord)
{
  using namespace streamkit::detail;
  float4 offsets[pile];
  float largest = 0.f;
  for (int i = 0; i < pile; ++i) {
    offsets[i] = anchored_offset(points[i], points[0]);
    largest = fmaxf(largest, offset_reach(offsets[i]));
  }
  tree_node nodes[2] = {};
  nodes[1].high.w = leaf_reach(largest);
  tree_view tree{};
  tree.precise_points = points;
  tree.offsets = offsets;
  tree.nodes = nodes;
  tree.leaves = 1;
  double nearest = 1.0 / 0.0;
  for (int i = 0; i < pile; ++i) {
    double const worst = chord2(p.x, p.y, p.z, points[i]);
    nearest = fmin(nearest, worst);
    anchored_filter const filter(tree, 0, p, worst);
    unsigned const passed = filter_batch(tree, 0, filter, 0) | filter_batch(tree, tree_scan_batch, filter, tree_scan_batch);
    missed += (passed >> i & 1u) != 0u ? 0 : 1;
  }
  anchored_filter const filter(tree, 0, p, nearest);
  anchored += __popc(filter_batch(tree, 0, filter, 0) | filter_batch(tree, tree_scan_batch, filter, tree_scan_batch));
  float const upper = float_chord2_filter(nearest);
  float3 const q{static_cast<float>(p.x), static_cast<float>(p.y), static_cast<float>(p.z)};
  for (int i = 0; i < pile; ++i) {
    chord += chord2(q.x, q.y, q.z, vec4<float>{static_cast<float>(points[i].x), static_cast<float>(points[i].y), static_cast<float>(points[i].z), 0.f}) <= upper ? 1 : 0;
  }
}

struct anchored_counts {
  unsigned long long missed, first_trial, far_circle_anchored, far_circle_chord;
};

__global__ void check_anchored_filter(std::uint64_t seed, unsigned long long trials, anchored_counts* out)
{
  using namespace streamkit::detail;
  for (unsigned long long trial = blockIdx.x * 1ull * blockDim.x + threadIdx.x; trial < trials; trial += 1ull * gridDim.x * blockDim.x) {
    trial_pile t(seed, trial);
    vec4<double> points[pile];
    make_pile(t.state, t.shape, t.lat, t.lon, t.scale, points);
    int where;
    vec4<double> const p = t.observation(points, pile, where);
    int missed = 0, anchored = 0, chord = 0;
    check_anchored(p, points, missed, anchored, chord);
    if (missed > 0 && atomicAdd(&out->missed, static_cast<unsigned long long>(missed)) == 0) { out->first_trial = trial; }
    if (t.shape == 2 && where == 0 && t.scale > 1e-8 && t.scale < 1e-6) {  // circles round a pole of 0.06 to 6 m
      atomicAdd(&out->far_circle_anchored, static_cast<unsigned long long>(anchored));
      atomicAdd(&out->far_circle_chord, static_cast<unsigned long long>(chord));
    }
  }
}

TEST(TreeBounds, AnchoredFilterNeverDropsAPointWithinTheWorstEntry)
{
  STREAMKIT_REQUIRE_GPU();
  constexpr unsigned long long trials = 1ull << 22;
  std::uint64_t const seed = 0xa7c40fee5ull;
  anchored_counts const host = run_trials(check_anchored_filter, seed, trials);
  EXPECT_EQ(host.missed, 0u) << "points the anchored filter would drop although their squared chord equals the worst entry; first in trial "
                             << host.first_trial << " of seed " << seed;
  // Its purpose: small circles seen from afar, which float unit vectors make one point, are told apart.
  EXPECT_GT(host.far_circle_chord, 0u);
  EXPECT_LT(host.far_circle_anchored * 4, host.far_circle_chord)
    << "anchored " << host.far_circle_anchored << " against the float chord's " << host.far_circle_chord;
}

TEST(TreeBounds, BoxAndCapsuleNeverPruneAPointWithinTheWorstEntry)
{
  STREAMKIT_REQUIRE_GPU();
  constexpr unsigned long long trials = 1ull << 22;
  std::uint64_t const seed = 0x5eed0f7ee5ull;
  failures const host = run_trials(check_bounds, seed, trials);
  // Lines (shape 1) and circle arcs (shape 2) make thin nodes, whose capsule the float test's accepted boxes get too.
  EXPECT_GT(host.thin_nodes, trials / 10) << "too few thin nodes: their capsule test went unchecked";
  // Piles seen from near their antipode: the far test must prune some nodes the box test lets in, or it went unchecked.
  EXPECT_GT(host.far_pruned, trials / 1000) << "too few nodes only the far test pruned";
  RecordProperty("far_pruned", std::to_string(host.far_pruned));
  EXPECT_EQ(host.count, 0u) << "points a box or capsule test would prune although their squared chord equals the worst entry; first in trial "
                            << host.first_trial << " of seed " << seed << " (" << trials << " trials, 64 points tested each)";
}

}  // namespace
