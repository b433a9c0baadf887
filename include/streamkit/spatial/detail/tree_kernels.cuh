#pragma once
// Kernels of tree_index (see tree_index.cuh): Morton keys, leaves of consecutive sorted references
// with their bounding boxes, the implicit binary tree of boxes above them, and the k-nearest search
// that walks it.

#include <streamkit/spatial/detail/knn_list.cuh>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

namespace streamkit::detail {

/// References per leaf: half a warp builds a leaf's box. Measured on an H100 against 32: 4–12 % faster
/// searches (2^20 × 2^20 with k = 16, 2^24 × 2^14 and clustered 2^22 × 2^20 with k = 1).
inline constexpr int tree_leaf_size = 16;
/// Threads per block of the tree search.
inline constexpr int tree_search_threads = 128;
/// Deepest stack a search needs: one entry per level of a tree of up to 2^31 leaves.
inline constexpr int tree_stack_depth = 32;

/// An axis-aligned box around unit vectors, in float rounded outward; heap order: node 1 is the
/// root, node v has children 2v and 2v + 1, and leaf l is node leaves + l. An empty box has
/// low = +inf and high = −inf, so that its distance is infinite.
struct alignas(16) tree_node {
  float4 low;   // x, y, z, unused
  float4 high;  // x, y, z, unused
};

/// Spreads the low 21 bits of v to every third bit.
__host__ __device__ constexpr std::uint64_t spread_bits_3d(std::uint64_t v)
{
  v &= 0x1fffffull;
  v = (v | v << 32) & 0x1f00000000ffffull;
  v = (v | v << 16) & 0x1f0000ff0000ffull;
  v = (v | v << 8) & 0x100f00f00f00f00full;
  v = (v | v << 4) & 0x10c30c30c30c30c3ull;
  v = (v | v << 2) & 0x1249249249249249ull;
  return v;
}

/// Morton code of a unit vector on a 2^bits grid per axis over [−1, 1]^3 (bits ≤ 21).
template <int bits>
__device__ inline std::uint64_t morton_code(vec4<double> const& p)
{
  constexpr double cells = static_cast<double>(1u << bits);
  auto const cell = [](double x) {
    double const c = floor((x + 1.0) * 0.5 * cells);
    return static_cast<std::uint64_t>(fmin(fmax(c, 0.0), cells - 1.0));
  };
  return spread_bits_3d(cell(p.x)) << 2 | spread_bits_3d(cell(p.y)) << 1 | spread_bits_3d(cell(p.z));
}

/// Reads every reference, writes its float64 coordinates (NaN for an invalid point), its 63-bit
/// Morton key (the largest key for an invalid point, which sorts it last) and its index; counts invalid ones.
template <class U>
__global__ void tree_reference_keys(points_ref<U> source, std::size_t count, lat_lon* coordinates, std::uint64_t* keys,
                                    std::uint32_t* ids, unsigned long long* invalid)
{
  unsigned long long local = 0;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < count; j += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    bool const valid = load_point(source, j, lat, lon);
    local += valid ? 0 : 1;
    double const nan = cuda::std::numeric_limits<double>::quiet_NaN();
    coordinates[j] = valid ? lat_lon{lat, lon} : lat_lon{nan, nan};
    keys[j] = valid ? morton_code<21>(unit_vector<double>(lat, lon, true)) : ~std::uint64_t{0};
    ids[j] = static_cast<std::uint32_t>(j);
  }
  if (local > 0) { atomicAdd(invalid, local); }
}

/// A group of tree_leaf_size lanes per leaf: writes the leaf's references in sorted order as float unit vectors (the
/// search's filter) and float64 ones whose w holds the reference index (its ranking), and the
/// leaf's box (its node in the heap). Slots past the last reference are NaN points (never chosen) up
/// to a whole leaf; leaves past those get empty boxes.
static __global__ void tree_build_leaves(lat_lon const* coordinates, std::uint32_t const* sorted_ids, std::size_t count,
                                  std::size_t leaves, float4* points, vec4<double>* precise_points, tree_node* nodes)
{
  std::size_t const position = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  std::size_t const leaf = position / tree_leaf_size;
  if (leaf >= leaves) { return; }  // whole leaves (leaves × 16 threads, a multiple of 16): the shuffles stay within a leaf
  float const infinity = cuda::std::numeric_limits<float>::infinity();
  float3 low{infinity, infinity, infinity}, high{-infinity, -infinity, -infinity};
  bool const used_leaf = leaf * tree_leaf_size < count;
  if (used_leaf) {
    bool const real = position < count;
    std::uint32_t const j = real ? sorted_ids[position] : no_reference;
    lat_lon const c = real ? coordinates[j] : lat_lon{cuda::std::numeric_limits<double>::quiet_NaN(), 0.0};
    bool const valid = !isnan(c.lat);
    vec4<double> p = unit_vector<double>(c.lat, c.lon, valid);
    p.w = static_cast<double>(j);
    precise_points[position] = p;
    points[position] = {static_cast<float>(p.x), static_cast<float>(p.y), static_cast<float>(p.z), 0.f};
    if (valid) {
      low = {__double2float_rd(p.x), __double2float_rd(p.y), __double2float_rd(p.z)};
      high = {__double2float_ru(p.x), __double2float_ru(p.y), __double2float_ru(p.z)};
    }
  }
  for (int offset = tree_leaf_size / 2; offset > 0; offset /= 2) {
    low.x = fminf(low.x, __shfl_xor_sync(0xffffffffu, low.x, offset));
    low.y = fminf(low.y, __shfl_xor_sync(0xffffffffu, low.y, offset));
    low.z = fminf(low.z, __shfl_xor_sync(0xffffffffu, low.z, offset));
    high.x = fmaxf(high.x, __shfl_xor_sync(0xffffffffu, high.x, offset));
    high.y = fmaxf(high.y, __shfl_xor_sync(0xffffffffu, high.y, offset));
    high.z = fmaxf(high.z, __shfl_xor_sync(0xffffffffu, high.z, offset));
  }
  if (position % tree_leaf_size == 0) { nodes[leaves + leaf] = {{low.x, low.y, low.z, 0.f}, {high.x, high.y, high.z, 0.f}}; }
}

/// Fills the inner nodes bottom-up in one launch: a thread starts at each pair of sibling leaves and
/// climbs; of two children's threads, the second to arrive at their parent (counted in `arrivals`,
/// zeroed before) merges the two boxes and goes on, the first stops.
static __global__ void tree_build_inner(tree_node* nodes, unsigned* arrivals, std::size_t leaves)
{
  std::size_t const pair = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (pair >= leaves / 2) { return; }
  std::size_t node = (leaves + 2 * pair) / 2;
  while (true) {
    // The children were written by this thread or by one that published them before its arrival.
    float4 const low_a = __ldcg(&nodes[2 * node].low), high_a = __ldcg(&nodes[2 * node].high);
    float4 const low_b = __ldcg(&nodes[2 * node + 1].low), high_b = __ldcg(&nodes[2 * node + 1].high);
    nodes[node] = {{fminf(low_a.x, low_b.x), fminf(low_a.y, low_b.y), fminf(low_a.z, low_b.z), 0.f},
                   {fmaxf(high_a.x, high_b.x), fmaxf(high_a.y, high_b.y), fmaxf(high_a.z, high_b.z), 0.f}};
    if (node == 1) { return; }
    __threadfence();
    if (atomicAdd(&arrivals[node / 2], 1u) == 0) { return; }  // the sibling's thread merges later
    __threadfence();
    node /= 2;
  }
}

/// Squared distance from p (float) to the nearest point of a box, in float (0 inside, +inf for an
/// empty box). A reference in the box can enter a list whose worst entry is W only if this is at most
/// float_chord2_filter(W): p is off its float64 vector by at most √3u, the computation by a relative
/// 5u, both within that bound's margins (2√3u + 2u·c and 8u).
__device__ __forceinline__ float box_distance2(float3 const& p, tree_node const& box)
{
  float const dx = fmaxf(fmaxf(box.low.x - p.x, p.x - box.high.x), 0.f);
  float const dy = fmaxf(fmaxf(box.low.y - p.y, p.y - box.high.y), 0.f);
  float const dz = fmaxf(fmaxf(box.low.z - p.z, p.z - box.high.z), 0.f);
  return __fmaf_rn(dx, dx, __fmaf_rn(dy, dy, __fmul_rn(dz, dz)));
}

/// 30-bit Morton keys of the observations (the largest key for an invalid one), so that a warp
/// searches neighbouring observations and walks the same nodes.
template <class T>
__global__ void tree_observation_keys(points_ref<T> observations, std::size_t count, std::uint32_t* keys, std::uint32_t* ids)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    bool const valid = load_point(observations, i, lat, lon);
    keys[i] = valid ? static_cast<std::uint32_t>(morton_code<10>(unit_vector<double>(lat, lon, true))) : ~std::uint32_t{0};
    ids[i] = static_cast<std::uint32_t>(i);
  }
}

/// What a search needs of a built tree.
struct tree_view {
  float4 const* points;               // sorted, whole leaves (NaN padding)
  vec4<double> const* precise_points;  // the same in float64; w = reference index
  tree_node const* nodes;              // heap, 2 × leaves
  lat_lon const* coordinates;          // by reference index
  std::uint64_t const* keys;           // the references' Morton keys, sorted
  std::size_t count;                   // references
  std::size_t leaves;                  // a power of two
};

/// The node above the two leaves around the place the point with Morton key `key` takes in the
/// sorted references: their 32 references are near it, and scanning them first gives every thread a
/// tight bound before the warp walks the tree (a walk led by the warp's other threads would otherwise
/// enter boxes only this thread's loose bound reaches).
__device__ inline std::size_t seed_node(tree_view const& tree, std::uint64_t key)
{
  std::size_t low = 0, high = tree.count;
  while (low < high) {
    std::size_t const middle = (low + high) / 2;
    if (tree.keys[middle] < key) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  std::size_t const leaf = min_of(low, tree.count - 1) / tree_leaf_size;
  return tree.leaves == 1 ? 1 : (tree.leaves + leaf) / 2;
}

/// Offers the 32 references of leaf `leaf` to `list`: a float32 filter over batches of loads issued
/// together, then float64 ranking of the references that pass (one copy of the list update).
template <int K>
__device__ __forceinline__ void scan_leaf(tree_view const& tree, std::size_t leaf, float3 const& p, vec4<double> const& precise_p,
                                          knn_list<K>& list, float& filter)
{
  constexpr int batch = 8;
  std::size_t const first = leaf * tree_leaf_size;
  for (int b = 0; b < tree_leaf_size; b += batch) {
    float4 q[batch];
#pragma unroll
    for (int s = 0; s < batch; ++s) { q[s] = tree.points[first + b + s]; }
    unsigned passed = 0;
#pragma unroll
    for (int s = 0; s < batch; ++s) {
      passed |= chord2(p.x, p.y, p.z, vec4<float>{q[s].x, q[s].y, q[s].z, 0.f}) <= filter ? 1u << s : 0u;
    }
    while (passed != 0) {
      int const s = __ffs(static_cast<int>(passed)) - 1;
      passed &= passed - 1;
      vec4<double> const precise_q = tree.precise_points[first + b + s];
      if (list.offer(chord2(precise_p.x, precise_p.y, precise_p.z, precise_q), static_cast<std::uint32_t>(precise_q.w))) {
        filter = float_chord2_filter(list.worst());
      }
    }
  }
}

/// The smallest `value` over the (full) warp.
__device__ __forceinline__ unsigned warp_min(unsigned value)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_min_sync(0xffffffffu, value);
#else
  for (int offset = 16; offset > 0; offset /= 2) { value = min(value, __shfl_xor_sync(0xffffffffu, value, offset)); }
  return value;
#endif
}

/// The k nearest references of each observation within `limit` (squared chord). The threads of a warp
/// (neighbouring observations, once sorted) walk the tree together: depth first, a box is entered
/// when any thread may still find a point in it (its float distance to that thread is at most
/// float_chord2_filter() of the thread's worst entry), the child nearer to the nearest interested
/// thread first; every thread scans every leaf entered, with its own filter. Control flow and the
/// node and leaf loads are the same across the warp (broadcasts); the stack is one per warp in
/// shared memory. Thread t searches observation order[t] (t itself when order is null); writes row
/// order[t] of `result` and adds the invalid observations to result.invalid_count when it is set.
template <int K, class Index, class T>
__global__ void __launch_bounds__(tree_search_threads)
  tree_search(points_ref<T> observations, std::size_t n, std::uint32_t const* order, tree_view tree,
              neighbors_ref<Index, T> result, int k, double limit, double scale)
{
  constexpr unsigned all = 0xffffffffu;
  __shared__ std::uint32_t stacks[tree_search_threads / 32][tree_stack_depth];
  std::uint32_t* const stack = stacks[threadIdx.x / 32];
  std::size_t const t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  bool const active = t < n;
  std::size_t const i = !active ? 0 : (order != nullptr ? order[t] : t);
  double lat = 0.0, lon = 0.0;
  bool const valid = active && load_point(observations, i, lat, lon);
  knn_list<K> list(k, limit);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, true);
  float3 const p{static_cast<float>(precise_p.x), static_cast<float>(precise_p.y), static_cast<float>(precise_p.z)};
  // A thread with nothing to find (past n, or invalid) never wants a box but walks with its warp.
  float filter = valid ? float_chord2_filter(list.worst()) : -cuda::std::numeric_limits<float>::infinity();
  auto const wanted = [&](std::size_t node) { return box_distance2(p, tree.nodes[node]) <= filter; };
  // The seed: the leaves under seed_node(), scanned first and skipped by the walk.
  std::size_t seed = 0;
  if (valid) {
    seed = seed_node(tree, morton_code<21>(precise_p));
    std::size_t const first_leaf = tree.leaves == 1 ? 0 : 2 * seed - tree.leaves;
    for (std::size_t leaf = first_leaf; leaf < min_of(first_leaf + 2, tree.leaves); ++leaf) {
      if (leaf * tree_leaf_size < tree.count) { scan_leaf(tree, leaf, p, precise_p, list, filter); }
    }
  }

  int depth = 0;  // the same in every thread of the warp, as is `node`
  std::size_t node = __any_sync(all, wanted(1)) ? 1 : 0;
  while (node != 0) {
    if (node < tree.leaves) {
      float const bound_left = box_distance2(p, tree.nodes[2 * node]);
      float const bound_right = box_distance2(p, tree.nodes[2 * node + 1]);
      bool const want_left = bound_left <= filter;
      bool const want_right = bound_right <= filter;
      // Non-negative floats order as their bits: the nearest interested thread's bound for each child.
      unsigned const nearest_left = warp_min(want_left ? __float_as_uint(bound_left) : ~0u);
      unsigned const nearest_right = warp_min(want_right ? __float_as_uint(bound_right) : ~0u);
      if (nearest_left != ~0u || nearest_right != ~0u) {
        bool const left_first = nearest_left <= nearest_right;
        if (nearest_left != ~0u && nearest_right != ~0u) {
          if (threadIdx.x % 32 == 0) { stack[depth] = static_cast<std::uint32_t>(left_first ? 2 * node + 1 : 2 * node); }
          __syncwarp();
          ++depth;
        }
        node = left_first ? 2 * node : 2 * node + 1;
        continue;
      }
    } else if (valid && (tree.leaves == 1 ? node : node / 2) != seed) {
      scan_leaf(tree, node - tree.leaves, p, precise_p, list, filter);
    }
    node = 0;  // back up to the nearest pending box some thread may still want
    while (depth > 0) {
      --depth;
      std::size_t const pending = stack[depth];
      if (__any_sync(all, wanted(pending))) {
        node = pending;
        break;
      }
    }
    __syncwarp();  // every lane has read the entry before lane 0 may overwrite it
  }
  if (!active) { return; }
  list.write(result, i, k, lat, lon, tree.coordinates, scale);
  if (!valid && result.invalid_count != nullptr) { atomicAdd(result.invalid_count, 1ull); }
}

}  // namespace streamkit::detail
