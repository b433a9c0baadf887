// Built against the library as of d133d78 (calls 1-3) and against copies of it with box_room's variants (calls 4-4e,
// main's walk only: the radix tree's nodes keep their links in tree_node::low.w, which thin nodes now use, so its
// column in those calls is not the prototype's). Prototype (not part of the library): a radix tree (Morton prefixes, leaves = maximal subtrees of at most
// 16 groups, explicit children, built bottom-up in one climb) over the groups main's tree_index already
// sorted, and a k-nearest walk over it. Times main's query and this walk on the same data in the same
// process and compares their answers entry by entry.
//
//   radix_proto --observations OBS.bin --references REFS.bin --k K [--repeat R]
//   radix_proto --class NAME --uniform N M --k K    (uniform observations; references of class NAME)
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/tree_index.cuh>

#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace proto {
using namespace streamkit;
using namespace streamkit::detail;

#ifndef STACK_DEPTH
#define STACK_DEPTH 164
#endif
constexpr int stack_depth = STACK_DEPTH;
#ifndef SEED_REACH
#define SEED_REACH 16
#endif  // 126 key bits (in 128) + 32 index bits, + margin

struct radix_view {
  tree_view base;  // groups (points, precise points, keys, runs, members), coordinates
  tree_node const* nodes;                  // 1 … L−1 inner (node 1 + b splits at leaf boundary b), L … 2L−1 leaves
  tree_precise_node const* precise_nodes;  //
  tree_capsule const* capsules;            //
  std::uint32_t const* leaf_of;            // group → leaf
  std::uint32_t const* leaf_count;         // L (device)
  std::uint32_t const* root;               // root node (device)
};

__device__ inline unsigned key_prefix(tree_key const& a, tree_key const& b, std::uint32_t ia, std::uint32_t ib)
{
  std::uint64_t const h = a.high ^ b.high;
  if (h != 0) { return static_cast<unsigned>(__clzll(static_cast<long long>(h))); }
  std::uint64_t const l = a.low ^ b.low;
  if (l != 0) { return 64u + static_cast<unsigned>(__clzll(static_cast<long long>(l))); }
  return 128u + static_cast<unsigned>(__clz(static_cast<int>(ia ^ ib)));
}

// boundary[g] (1 ≤ g < G): common prefix of the augmented keys of groups g − 1 and g.
__global__ void radix_boundaries(vec4<double> const* precise_points, std::uint32_t const* group_count, std::size_t m,
                                 unsigned char* boundary)
{
  std::size_t const groups = *group_count;
  for (std::size_t g = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; g < m; g += std::size_t{gridDim.x} * blockDim.x) {
    unsigned b = 0;
    if (g >= 1 && g < groups) {
      b = key_prefix(reference_key(precise_points[g - 1]), reference_key(precise_points[g]), static_cast<std::uint32_t>(g - 1),
                     static_cast<std::uint32_t>(g));
    }
    boundary[g] = static_cast<unsigned char>(b);
  }
}

// starts[g] = 1 when group g starts a leaf: g = 0, or the node split between g − 1 and g holds more than 16 groups.
__global__ void radix_leaf_starts(unsigned char const* boundary, std::uint32_t const* group_count, std::size_t m, std::uint32_t* starts)
{
  std::size_t const groups = *group_count;
  for (std::size_t g = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; g < m; g += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t start = 0;
    if (g == 0 && groups > 0) {
      start = 1;
    } else if (g < groups) {
      unsigned const b = boundary[g];
      int size = 2;
      for (std::size_t i = g - 1; i >= 1 && size <= tree_leaf_size && boundary[i] > b; --i) { ++size; }
      for (std::size_t i = g + 1; i < groups && size <= tree_leaf_size && boundary[i] > b; ++i) { ++size; }
      start = size > tree_leaf_size ? 1u : 0u;
    }
    starts[g] = start;
  }
}

__global__ void radix_leaf_firsts(std::uint32_t const* starts, std::uint32_t const* places, std::uint32_t const* group_count, std::size_t m,
                                  std::uint32_t* leaf_first, std::uint32_t* leaf_of, std::uint32_t* leaf_count, std::uint32_t* root)
{
  std::size_t const groups = *group_count;
  for (std::size_t g = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; g < groups; g += std::size_t{gridDim.x} * blockDim.x) {
    if (starts[g] != 0) { leaf_first[places[g]] = static_cast<std::uint32_t>(g); }
    leaf_of[g] = places[g] + starts[g] - 1;
    if (g + 1 == groups) {
      std::uint32_t const leaves = places[g] + starts[g];
      leaf_first[leaves] = static_cast<std::uint32_t>(groups);
      *leaf_count = leaves;
      if (leaves == 1) { *root = 1; }
    }
  }
}

// 16 lanes a leaf: its boxes and capsule, node L + leaf; w: first group, group count.
__global__ void radix_build_leaves(std::uint32_t const* leaf_count, std::uint32_t const* leaf_first, vec4<double> const* precise_points,
                                   tree_node* nodes, tree_precise_node* precise_nodes, tree_capsule* capsules)
{
  std::size_t const leaves = *leaf_count;
  std::size_t const stride = std::size_t{gridDim.x} * blockDim.x;
  double const infinity = cuda::std::numeric_limits<double>::infinity();
  double const nan = cuda::std::numeric_limits<double>::quiet_NaN();
  for (std::size_t position = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; position - threadIdx.x % 32 < leaves * tree_leaf_size;
       position += stride) {
    std::size_t const leaf = position / tree_leaf_size;
    bool const real_leaf = leaf < leaves;
    std::uint32_t const first = real_leaf ? leaf_first[leaf] : 0u, end = real_leaf ? leaf_first[leaf + 1] : 0u;
    std::size_t const g = first + position % tree_leaf_size;
    vec4<double> low{infinity, infinity, infinity, 0.0}, high{-infinity, -infinity, -infinity, 0.0};
    if (g < end) {
      low = precise_points[g];
      high = low;
    }
    unsigned const lanes = 0xffffffffu;
    vec4<double> const point = low;
    bool const has_point = point.x <= high.x;
    auto const min_op = [](double x, double y) { return fmin(x, y); };
    auto const max_op = [](double x, double y) { return fmax(x, y); };
    low = {leaf_reduce(lanes, low.x, min_op), leaf_reduce(lanes, low.y, min_op), leaf_reduce(lanes, low.z, min_op), 0.0};
    high = {leaf_reduce(lanes, high.x, max_op), leaf_reduce(lanes, high.y, max_op), leaf_reduce(lanes, high.z, max_op), 0.0};
    int const axis = longest_axis(low, high);
    double const along = has_point ? coordinate(point, axis) : nan;
    vec4<double> const a = leaf_pick(lanes, point, along, coordinate(low, axis));
    vec4<double> const b = leaf_pick(lanes, point, along, coordinate(high, axis));
    double const radius = leaf_reduce(lanes, has_point ? segment_distance_above(point, a, b) : 0.0, max_op);
    if (real_leaf && position % tree_leaf_size == 0) {
      std::size_t const node = leaves + leaf;
      capsules[node] = {{a.x, a.y, a.z, radius}, {b.x, b.y, b.z, inverse_squared_length(a, b)}};
      nodes[node] = {{__double2float_rd(low.x), __double2float_rd(low.y), __double2float_rd(low.z), __uint_as_float(first)},
                     {__double2float_ru(high.x), __double2float_ru(high.y), __double2float_ru(high.z), __uint_as_float(end - first)}};
      precise_nodes[node] = {low, high};
    }
  }
}

// Bottom-up (agglomerative, as Apetrei's LBVH): a thread per leaf climbs; a range [lo, hi] of leaves joins the
// neighbour across the boundary with the longer common prefix; the second child to arrive builds the parent.
__global__ void radix_build_inner(std::uint32_t const* leaf_count, std::uint32_t const* leaf_first, unsigned char const* boundary,
                                  tree_node* nodes, tree_precise_node* precise_nodes, tree_capsule* capsules, uint2* children,
                                  std::uint32_t* other_end, std::uint32_t* root)
{
  std::uint32_t const leaves = *leaf_count;
  if (leaves < 2) { return; }
  auto const delta = [&](std::uint32_t b) { return boundary[leaf_first[b + 1]]; };  // leaf boundary b: between leaves b, b + 1
  for (std::uint32_t l = blockIdx.x * blockDim.x + threadIdx.x; l < leaves; l += gridDim.x * blockDim.x) {
    std::uint32_t lo = l, hi = l, node = leaves + l;
    while (true) {
      bool const left_child = lo == 0 || (hi != leaves - 1 && delta(hi) > delta(lo - 1));
      std::uint32_t const parent = 1 + (left_child ? hi : lo - 1);
      if (left_child) {
        children[parent].x = node;
      } else {
        children[parent].y = node;
      }
      __threadfence();
      std::uint32_t const previous = atomicExch(&other_end[parent], left_child ? lo : hi);
      if (previous == 0xffffffffu) { break; }
      __threadfence();
      if (left_child) {
        hi = previous;
      } else {
        lo = previous;
      }
      uint2 const kids{__ldcg(&children[parent].x), __ldcg(&children[parent].y)};
      vec4<double> const low_a = load_uncached(precise_nodes[kids.x].low), high_a = load_uncached(precise_nodes[kids.x].high);
      vec4<double> const low_b = load_uncached(precise_nodes[kids.y].low), high_b = load_uncached(precise_nodes[kids.y].high);
      vec4<double> const low{fmin(low_a.x, low_b.x), fmin(low_a.y, low_b.y), fmin(low_a.z, low_b.z), 0.0};
      vec4<double> const high{fmax(high_a.x, high_b.x), fmax(high_a.y, high_b.y), fmax(high_a.z, high_b.z), 0.0};
      precise_nodes[parent] = {low, high};
      capsules[parent] = merge_capsules(load_capsule(capsules[kids.x]), true, load_capsule(capsules[kids.y]), true, low, high);
      nodes[parent] = {{__double2float_rd(low.x), __double2float_rd(low.y), __double2float_rd(low.z), __uint_as_float(kids.x)},
                       {__double2float_ru(high.x), __double2float_ru(high.y), __double2float_ru(high.z), __uint_as_float(kids.y)}};
      node = parent;
      if (lo == 0 && hi == leaves - 1) {
        *root = node;
        break;
      }
    }
  }
}

template <int K>
__device__ __forceinline__ void scan_range(tree_view const& tree, std::uint32_t first, std::uint32_t count, float3 const& p,
                                           vec4<double> const& precise_p, knn_list<K>& list, search_bounds& bounds)
{
  constexpr int batch = 8;
  for (std::uint32_t b = 0; b < count; b += batch) {
    float4 q[batch];
#pragma unroll
    for (int s = 0; s < batch; ++s) { q[s] = tree.points[first + b + s]; }
    unsigned passed = 0;
#pragma unroll
    for (int s = 0; s < batch; ++s) {
      passed |= (b + s < count && chord2(p.x, p.y, p.z, vec4<float>{q[s].x, q[s].y, q[s].z, 0.f}) <= bounds.upper) ? 1u << s : 0u;
    }
    bool taken = false;
    while (passed != 0) {
      int const s = __ffs(static_cast<int>(passed)) - 1;
      passed &= passed - 1;
      taken |= rank_entry(tree, first + b + s, precise_p, list);
    }
    if (taken) { bounds = search_bounds(list.worst()); }
  }
}

template <int K, class Index, class T>
__device__ __forceinline__ void radix_search_one(points_ref<T> const& observations, std::size_t t, std::size_t searched,
                                                 std::uint32_t const* order, radix_view const& tree, neighbors_ref<Index, T> const& result,
                                                 int k, double limit, double scale, std::uint32_t* stack)
{
  constexpr unsigned all = 0xffffffffu;
  bool const active = t < searched;
  std::size_t const i = !active ? 0 : (order != nullptr ? order[t] : t);
  double lat = 0.0, lon = 0.0;
  bool const valid = active && load_point(observations, i, lat, lon);
  knn_list<K> list(k, limit);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, true);
  float3 const p{static_cast<float>(precise_p.x), static_cast<float>(precise_p.y), static_cast<float>(precise_p.z)};
  search_bounds bounds(list.worst());
  if (!valid) { bounds.upper = -cuda::std::numeric_limits<float>::infinity(); }
  std::uint32_t const leaves = *tree.leaf_count;
  // room and links of a node in one load of its float box
  auto const visit = [&](std::uint32_t node, uint2& links) {
    tree_node const box = tree.nodes[node];
    links = {__float_as_uint(box.low.w), __float_as_uint(box.high.w)};
    return box_room(p, precise_p, box, tree.precise_nodes[node], tree.capsules[node], bounds, list.worst());
  };
  std::size_t const groups = *tree.base.group_count;
  std::uint32_t seed_a = 0, seed_b = 0;
  if (valid && groups > 0) {
    std::uint64_t const key = morton_code<21>(precise_p);
    std::size_t low = 0, high = groups;
    while (low < high) {
      std::size_t const middle = (low + high) / 2;
      if (tree.base.keys[middle] < key) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    // The leaves holding the groups within SEED_REACH of the key's place, scanned first (at least 2 × reach entries).
    std::size_t const at = min_of(low, groups - 1);
    constexpr std::size_t reach = K == 1 ? 0 : SEED_REACH;  // k = 1: the key's leaf alone
    seed_a = leaves + tree.leaf_of[at >= reach ? at - reach : 0];
    seed_b = leaves + tree.leaf_of[min_of(at + (reach > 0 ? reach - 1 : 0), groups - 1)];
    for (std::uint32_t leaf = seed_a; leaf <= seed_b; ++leaf) {
      uint2 links;
      visit(leaf, links);
      scan_range(tree.base, links.x, links.y, p, precise_p, list, bounds);
    }
  }
  auto const is_seed = [&](std::uint32_t node) { return node >= seed_a && node <= seed_b; };

  int depth = 0;
  uint2 links{0u, 0u};
  std::uint32_t const root = groups > 0 ? *tree.root : 0u;
  unsigned mine = root != 0u ? visit(root, links) : 0u;
  std::uint32_t node = __any_sync(all, mine != 0u) ? root : 0u;
  int useful = 0;
  for (int step = 0; node != 0; ++step) {
    if (step >= tree_shared_walk_min_steps && step % 16 == 0 && step > tree_shared_walk_share * static_cast<int>(warp_max(useful))) {
      break;
    }
    useful += mine != 0u ? 1 : 0;
    if (node < leaves) {
      uint2 left_links, right_links;
      unsigned const mine_left = visit(links.x, left_links), mine_right = visit(links.y, right_links);
      unsigned const left = warp_max(mine_left);
      unsigned const right = warp_max(mine_right);
      if (left != 0u || right != 0u) {
        bool const left_first = left >= right;
        if (left != 0u && right != 0u) {
          if (threadIdx.x % 32 == 0) { stack[depth] = left_first ? links.y : links.x; }
          __syncwarp();
          ++depth;
        }
        node = left_first ? links.x : links.y;
        mine = left_first ? mine_left : mine_right;
        links = left_first ? left_links : right_links;
        continue;
      }
    } else if (mine != 0u && !is_seed(node)) {
      scan_range(tree.base, links.x, links.y, p, precise_p, list, bounds);
    }
    node = 0;
    while (depth > 0) {
      --depth;
      std::uint32_t const pending = stack[depth];
      mine = visit(pending, links);
      if (__any_sync(all, mine != 0u)) {
        node = pending;
        break;
      }
    }
    __syncwarp();
  }
  if (node != 0) {
    std::uint32_t own[2 * stack_depth];
    unsigned own_room[stack_depth + 1] = {};
    int kept = 0;
    auto const keep = [&](std::uint32_t box, unsigned box_room_now) {
      if (box_room_now == 0u) { return; }
      int slot = kept++;
      for (; slot > 0 && own_room[slot - 1] > box_room_now; --slot) {
        own_room[slot] = own_room[slot - 1];
        own[slot] = own[slot - 1];
      }
      own_room[slot] = box_room_now;
      own[slot] = box;
    };
    uint2 ignored;
    for (int d = 0; d < depth; ++d) { keep(stack[d], visit(stack[d], ignored)); }
    __syncwarp();
    keep(node, mine);
    depth = kept;
    std::uint32_t at = 0;
    while (true) {
      while (at == 0 && depth > 0) {
        std::uint32_t const pending = own[--depth];
        if (visit(pending, links) != 0u) { at = pending; }
      }
      if (at == 0) { break; }
      if (at < leaves) {
        uint2 left_links, right_links;
        unsigned const left = visit(links.x, left_links), right = visit(links.y, right_links);
        bool const left_first = left >= right;
        if (left != 0u && right != 0u) { own[depth++] = left_first ? links.y : links.x; }
        at = left == 0u && right == 0u ? 0u : (left_first ? links.x : links.y);
        links = left_first ? left_links : right_links;
        continue;
      }
      if (!is_seed(at)) { scan_range(tree.base, links.x, links.y, p, precise_p, list, bounds); }
      at = 0;
    }
  }
  if (!active) { return; }
  list.write(result, i, k, lat, lon, tree.base.coordinates, scale);
  if (!valid && result.invalid_count != nullptr) { atomicAdd(result.invalid_count, 1ull); }
}

template <int K, class Index, class T>
__global__ void __launch_bounds__(tree_search_threads, tree_search_min_blocks(K))
  radix_search(points_ref<T> observations, std::size_t n, std::uint32_t const* order, radix_view tree, neighbors_ref<Index, T> result,
               int k, double limit, double scale)
{
  __shared__ std::uint32_t stacks[tree_search_threads / 32][stack_depth];
  for (std::size_t base = blockIdx.x * std::size_t{blockDim.x}; base < n; base += std::size_t{gridDim.x} * blockDim.x) {
    radix_search_one<K>(observations, base + threadIdx.x, n, order, tree, result, k, limit, scale, stacks[threadIdx.x / 32]);
  }
}

// The library's tree_index with its protected parts in reach.
struct exposed : tree_index<float> {
  using tree_index<float>::tree_index;
  tree_view tree() const { return this->view(); }
  nearest_options const& opts() const { return this->options_; }
};

struct radix_tree {
  std::size_t m;
  device_buffer<std::byte> memory;
  tree_node* nodes;
  tree_precise_node* precise_nodes;
  tree_capsule* capsules;
  std::uint32_t *leaf_of, *leaf_count, *root, *starts, *places, *leaf_first, *other_end;
  uint2* children;
  unsigned char* boundary;
  std::byte* temporary;
  std::size_t temporary_bytes;
  radix_tree(std::size_t m_, stream_ref s) : m(m_)
  {
    std::size_t const nodes_count = 2 * m + 2;
    temporary_bytes = 0;
    cub::DeviceScan::ExclusiveSum(nullptr, temporary_bytes, static_cast<std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
                                  static_cast<std::int64_t>(m));
    std::size_t offsets[14];
    std::size_t sizes[13] = {nodes_count * sizeof(tree_node), nodes_count * sizeof(tree_precise_node), nodes_count * sizeof(tree_capsule),
                             m * 4, 4, 4, m * 4, m * 4, (m + 1) * 4, m * 4, m * sizeof(uint2), m + 1, temporary_bytes};
    offsets[0] = 0;
    for (int i = 0; i < 13; ++i) { offsets[i + 1] = offsets[i] + align_up(sizes[i]); }
    memory = device_buffer<std::byte>(offsets[13], s);
    std::byte* b = memory.data();
    nodes = reinterpret_cast<tree_node*>(b + offsets[0]);
    precise_nodes = reinterpret_cast<tree_precise_node*>(b + offsets[1]);
    capsules = reinterpret_cast<tree_capsule*>(b + offsets[2]);
    leaf_of = reinterpret_cast<std::uint32_t*>(b + offsets[3]);
    leaf_count = reinterpret_cast<std::uint32_t*>(b + offsets[4]);
    root = reinterpret_cast<std::uint32_t*>(b + offsets[5]);
    starts = reinterpret_cast<std::uint32_t*>(b + offsets[6]);
    places = reinterpret_cast<std::uint32_t*>(b + offsets[7]);
    leaf_first = reinterpret_cast<std::uint32_t*>(b + offsets[8]);
    other_end = reinterpret_cast<std::uint32_t*>(b + offsets[9]);
    children = reinterpret_cast<uint2*>(b + offsets[10]);
    boundary = reinterpret_cast<unsigned char*>(b + offsets[11]);
    temporary = b + offsets[12];
  }
  void build(tree_view const& base, stream_ref s)
  {
    int const blocks = static_cast<int>(std::min<std::size_t>((m + 255) / 256, 132 * 16));
    cudaMemsetAsync(other_end, 0xff, m * 4, s.value());
    cudaMemsetAsync(root, 0, 4, s.value());
    radix_boundaries<<<blocks, 256, 0, s.value()>>>(base.precise_points, base.group_count, m, boundary);
    radix_leaf_starts<<<blocks, 256, 0, s.value()>>>(boundary, base.group_count, m, starts);
    cub::DeviceScan::ExclusiveSum(temporary, temporary_bytes, starts, places, static_cast<std::int64_t>(m), s.value());
    radix_leaf_firsts<<<blocks, 256, 0, s.value()>>>(starts, places, base.group_count, m, leaf_first, leaf_of, leaf_count, root);
    radix_build_leaves<<<static_cast<int>(std::min<std::size_t>((m * 16 + 255) / 256, 132 * 16)), 256, 0, s.value()>>>(
      leaf_count, leaf_first, base.precise_points, nodes, precise_nodes, capsules);
    radix_build_inner<<<blocks, 256, 0, s.value()>>>(leaf_count, leaf_first, boundary, nodes, precise_nodes, capsules, children, other_end,
                                                     root);
    STREAMKIT_CHECK_LAUNCH();
  }
  radix_view view(tree_view const& base) const { return {base, nodes, precise_nodes, capsules, leaf_of, leaf_count, root}; }
};

std::vector<float> read_pairs(std::string const& path)
{
  std::ifstream file(path, std::ios::binary);
  if (!file) { throw std::runtime_error(path + ": cannot open"); }
  std::vector<char> const bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<float> values(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(values.data()));
  return values;
}

std::vector<float> make_pairs(std::string const& cls, std::size_t count, std::uint64_t seed)
{
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> v(2 * count);
  double const deg = 180.0 / streamkit::pi;
  for (std::size_t i = 0; i < count; ++i) {
    double lat = std::asin(2.0 * u(rng) - 1.0) * deg, lon = 360.0 * u(rng) - 180.0;
    if (cls == "pole_circle") {
      lat = 90.0 - 1e-7 * deg;
    } else if (cls == "one_point") {
      lat = 12.5;
      lon = 45.25;
    } else if (cls == "half_one_point" && i % 2 == 0) {
      lat = 12.5;
      lon = 45.25;
    } else if (cls == "cell_3m") {
      double const r = 3.0 / 6371008.8 * std::sqrt(u(rng)), a = 2 * streamkit::pi * u(rng);
      lat = 37.0 + r * std::sin(a) * deg;
      lon = -122.0 + r * std::cos(a) * deg / std::cos(37.0 / deg);
    } else if (cls == "one_meridian" || cls == "one_meridian_both") {
      lon = 0.0;
    } else if (cls == "depots" && i % 3 == 0) {
      std::mt19937_64 d(1000 + (i / 3) % 2000);
      lat = std::asin(2.0 * u(d) - 1.0) * deg;
      lon = 360.0 * u(d) - 180.0;
    }
    v[2 * i] = static_cast<float>(lat);
    v[2 * i + 1] = static_cast<float>(lon);
  }
  return v;
}

double median(std::vector<double> v)
{
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <int K>
void launch(radix_view const& view, points_ref<float> obs, std::uint32_t const* order, neighbors_ref<std::int32_t, float> result,
            double limit, double scale, stream_ref s)
{
  radix_search<K, std::int32_t, float><<<grid_size("radix_search", obs.count, tree_search_threads), tree_search_threads, 0, s.value()>>>(
    obs, obs.count, order, view, result, static_cast<int>(result.k), limit, scale);
  STREAMKIT_CHECK_LAUNCH();
}

int run(int argc, char** argv)
{
  std::string obs_path, ref_path, cls;
  std::size_t k = 1, un = 0, um = 0;
  int repeat = 20;
  double exclude_caps = 0.0;  // rad: observations within this of (0, ±90) deg (the poles of the meridian 0 great circle) redrawn
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const key = argv[i], value = argv[i + 1];
    if (key == "--observations") { obs_path = value; }
    else if (key == "--references") { ref_path = value; }
    else if (key == "--k") { k = std::stoul(value); }
    else if (key == "--repeat") { repeat = std::stoi(value); }
    else if (key == "--class") { cls = value; }
    else if (key == "--uniform") { un = std::stoul(value); um = std::stoul(argv[i + 2]); ++i; }
    else if (key == "--exclude-caps") { exclude_caps = std::stod(value); }
  }
  std::vector<float> obs = cls.empty() ? read_pairs(obs_path) : make_pairs(cls == "one_meridian_both" ? "one_meridian" : "uniform", un, 1);
  if (exclude_caps > 0.0) {
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (std::size_t i = 0; i < obs.size() / 2; ++i) {
      while (true) {
        double const lat = obs[2 * i] * streamkit::pi / 180.0, lon = obs[2 * i + 1] * streamkit::pi / 180.0;
        if (std::abs(std::cos(lat) * std::sin(lon)) < std::cos(exclude_caps)) { break; }
        obs[2 * i] = static_cast<float>(std::asin(2.0 * u(rng) - 1.0) * 180.0 / streamkit::pi);
        obs[2 * i + 1] = static_cast<float>(360.0 * u(rng) - 180.0);
      }
    }
  }
  std::vector<float> const refs = cls.empty() ? read_pairs(ref_path) : make_pairs(cls, um, 2);
  std::size_t const n = obs.size() / 2, m = refs.size() / 2;
  streamkit::stream const s(0);
  device_buffer<float> d_obs(obs.size(), s), d_refs(refs.size(), s);
  d_obs.copy_from_host_async(cuda::std::span<float const>(obs.data(), obs.size()), s);
  d_refs.copy_from_host_async(cuda::std::span<float const>(refs.data(), refs.size()), s);
  device_buffer<std::int32_t> index_a(n * k, s), index_b(n * k, s);
  device_buffer<float> distance_a(n * k, s), distance_b(n * k, s);
  auto const observations = points_ref<float>::interleaved(d_obs.data(), n, angle_unit::degrees);
  auto const references = points_ref<float>::interleaved(d_refs.data(), m, angle_unit::degrees);
  auto const result_a = neighbors_ref<std::int32_t, float>::dense(index_a.data(), distance_a.data(), n, k);
  auto const result_b = neighbors_ref<std::int32_t, float>::dense(index_b.data(), distance_b.data(), n, k);
  nearest_options options;
  options.precision = nn_precision::exact;
  options.on_invalid = invalid_points::mark;
  exposed index(references, options, s);
  radix_tree radix(m, s);
  std::size_t const order_bytes = observation_order_bytes(n);
  device_buffer<std::byte> order_memory(std::max<std::size_t>(order_bytes, 1), s);
  double const limit = max_chord2(index.opts()), scale = distance_scale(index.opts());
  timed_event e0(s.ref()), e1(s.ref()), e2(s.ref()), e3(s.ref()), e4(s.ref());
  std::vector<double> main_build, main_query, radix_build, radix_query;
  for (int step = 0; step < repeat + 2; ++step) {
    e0.record(s);
    index.update(references, s);
    e1.record(s);
    index.query_async(observations, result_a, s);
    e2.record(s);
    tree_view const base = index.tree();
    radix.build(base, s);
    e3.record(s);
    std::uint32_t const* order = observation_order(observations, order_bytes > 0 ? order_memory.data() : nullptr, s);
    radix_view const view = radix.view(base);
    if (k == 1) { launch<1>(view, observations, order, result_b, limit, scale, s); }
    else if (k == 16) { launch<16>(view, observations, order, result_b, limit, scale, s); }
    else if (k == 32) { launch<32>(view, observations, order, result_b, limit, scale, s); }
    else { throw std::invalid_argument("k: 1, 16 or 32"); }
    e4.record(s);
    e4.sync();
    if (step < 2) { continue; }
    main_build.push_back(elapsed(e0, e1).count());
    main_query.push_back(elapsed(e1, e2).count());
    radix_build.push_back(elapsed(e2, e3).count());
    radix_query.push_back(elapsed(e3, e4).count());
  }
  std::vector<std::int32_t> ia(n * k), ib(n * k);
  std::vector<float> da(n * k), db(n * k);
  index_a.copy_to_host_async(cuda::std::span<std::int32_t>(ia.data(), ia.size()), s);
  index_b.copy_to_host_async(cuda::std::span<std::int32_t>(ib.data(), ib.size()), s);
  distance_a.copy_to_host_async(cuda::std::span<float>(da.data(), da.size()), s);
  distance_b.copy_to_host_async(cuda::std::span<float>(db.data(), db.size()), s);
  std::uint32_t leaves = 0, groups = 0;
  cudaMemcpyAsync(&leaves, radix.leaf_count, 4, cudaMemcpyDeviceToHost, s.value());
  cudaMemcpyAsync(&groups, index.tree().group_count, 4, cudaMemcpyDeviceToHost, s.value());
  s.sync();
  std::size_t differ = 0;
  for (std::size_t j = 0; j < n * k; ++j) { differ += (ia[j] != ib[j] || !(da[j] == db[j] || (std::isnan(da[j]) && std::isnan(db[j])))) ? 1 : 0; }
  // depth and leaf sizes
  int deepest = 0;
  if (leaves > 1) {
    std::vector<tree_node> nodes(2 * leaves);
    std::uint32_t root = 0;
    cudaMemcpy(nodes.data(), radix.nodes, 2 * leaves * sizeof(tree_node), cudaMemcpyDeviceToHost);
    cudaMemcpy(&root, radix.root, 4, cudaMemcpyDeviceToHost);
    std::vector<std::pair<std::uint32_t, int>> st{{root, 1}};
    while (!st.empty()) {
      auto [v, d] = st.back();
      st.pop_back();
      deepest = std::max(deepest, d);
      if (v < leaves) {
        std::uint32_t a, b;
        std::memcpy(&a, &nodes[v].low.w, 4);
        std::memcpy(&b, &nodes[v].high.w, 4);
        st.push_back({a, d + 1});
        st.push_back({b, d + 1});
      }
    }
  }
  std::printf("{\"class\": \"%s\", \"n\": %zu, \"m\": %zu, \"k\": %zu, \"groups\": %u, \"radix_leaves\": %u, \"depth\": %d, "
              "\"main_build_ms\": %.4f, \"main_query_ms\": %.4f, \"radix_extra_build_ms\": %.4f, \"radix_query_ms\": %.4f, "
              "\"entries_differing\": %zu, \"gpu\": \"%s\"}\n",
              cls.empty() ? obs_path.c_str() : cls.c_str(), n, m, k, groups, leaves, deepest, median(main_build), median(main_query),
              median(radix_build), median(radix_query), differ, streamkit::device(0).name().c_str());
  return differ == 0 ? 0 : 1;
}
}  // namespace proto

int main(int argc, char** argv)
{
  try {
    return proto::run(argc, argv);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "radix_proto: %s\n", e.what());
    return 2;
  }
}
