#pragma once
// Kernels of tree_index (see tree_index.cuh): 126-bit Morton keys, the grouping of identical references
// into one entry each, leaves of consecutive entries with their bounding boxes (float, and float64 for
// boxes too small for a float test to tell apart), the implicit binary tree of boxes above them, and
// the k-nearest search that walks it.

#include <streamkit/spatial/detail/knn_list.cuh>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>

#include <cuda/std/limits>
#include <cuda/std/tuple>

#include <cstddef>
#include <cstdint>

namespace streamkit::detail {

/// References per leaf: half a warp builds a leaf's box. Measured on an H100 against 32: 4–12 % faster
/// searches (2^20 × 2^20 with k = 16, 2^24 × 2^14 and clustered 2^22 × 2^20 with k = 1).
inline constexpr int tree_leaf_size = 16;
/// Threads per block of the tree search.
inline constexpr int tree_search_threads = 128;
/// Blocks of tree_search an SM should hold for lists of K entries, which caps its registers: for K = 1,
/// 8 (64 registers, against the compiler's 74: 32 warps an SM instead of 28), for K = 16, 5 (96 against
/// 122), each 2–10 % faster on uniform and hostile inputs on an H200 although a few registers spill
/// (6 and 8 for K = 16: 12 % and 33 % slower on uniform inputs); for K = 32, 3 (at most 170 registers):
/// uniform 2^20 × 2^20 4 %, the pole circle 13 % and cell_3m_distinct 17 % faster, antimeridian 6 % slower
/// (with the final code cell_3m 12 % slower; 4 blocks: uniform 3 % slower). For K = 2 and 4, 8 too (64
/// registers, against the compiler's 96 and 94 with scan_leaf's two filters; 60 and 122 B of spill
/// stores, 72 for K = 2 since it ranks leaves warp-wide too): against 7 (72 registers), the circle at
/// 2^22 × 2^22 5.5 % (k = 2) and 9.7 % (k = 4) faster and uniform inputs there 3.4 % and 1.9 %, the circle at 2^22 × 2^16 11 % and 12 %, but one meridian at
/// 2^21 × 2^17 6.7 % and 8.0 % and grid_0.01deg_region at 2^20 × 2^20 4–7 % slower (H200, twenty-sixth
/// session; 7 had been 4–10 % faster than 6 on uniform inputs and the circle). For K = 8, 5 (96
/// registers, no spill; the compiler's 105 with the anchored filter took uniform 2^22 × 2^22 15 % longer).
/// Other list sizes keep the compiler's choice.
[[nodiscard]] constexpr int tree_search_min_blocks(int k) { return k <= 4 ? 8 : (k == 8 || k == 16 ? 5 : (k == 32 ? 3 : 1)); }
/// Deepest stack a search needs: one entry per level of a tree of up to 2^31 leaves.
inline constexpr int tree_stack_depth = 32;

/// An axis-aligned box around unit vectors, in float rounded outward; heap order: node 1 is the
/// root, node v has children 2v and 2v + 1, and leaf l is node leaves + l. An empty box has
/// low = +inf and high = −inf, so that its distance is infinite.
struct alignas(16) tree_node {
  float4 low;   // x, y, z; w: 1 for a thin node (thin_node_flag), whose capsule box_room always tests, else 0
  float4 high;  // x, y, z; w: of a leaf, at least its entries' largest offset coordinate (anchored_filter), else 0
};

/// The same box in float64, exact (minima and maxima of the float64 vectors): the search tests it
/// when the float test cannot decide (box_wanted).
struct alignas(32) tree_precise_node {
  vec4<double> low;
  vec4<double> high;
};

/// A capsule around a node's references, in float64: each lies within `a.w` (the radius) of the segment
/// from `a` (the node's first entry in sorted order) to `b` (its last). Along a curve (a small circle
/// round a pole, a road, a track) the radius shrinks with the square of the node's length while its
/// boxes shrink only linearly: seen from afar, the points of such a curve near the nearest one lie
/// within rounding of each other, and every axis-aligned box over them would reach past the nearest
/// point (measured on an H200: a circle of 1.3e-7 rad round a pole, 2^20 × 2^20, k = 1: 75 ms with
/// the boxes alone). The search tests it where it tests the float64 box (box_room).
struct alignas(32) tree_capsule {
  vec4<double> a;  // w: the radius
  vec4<double> b;  // w: 1 / |b − a|² as computed (0 when a = b), so that a search divides by nothing
};

/// The float64 vector from q to the point of the segment from a to b nearest to it, as its squared
/// length `squared` and the 1-norm of q − a (`scale`); `inverse`: 1 / |b − a|² (0 when a = b). It works
/// on the differences q − a and b − a, each within half an ulp of itself, so it stays accurate when all
/// three points lie nanometres apart; the computed t is off the optimum by some 2^-50, which lengthens
/// the vector by at most 2^-50 |b − a| (tree_capsule's radius includes that). `Below`: the squared length
/// rounded down, at most that of the computed vector (capsule_room).
struct segment_offset {
  double squared;
  double scale;
};
template <bool Below = false>
__device__ __forceinline__ segment_offset offset_to_segment(vec4<double> const& q, vec4<double> const& a, vec4<double> const& b,
                                                            double inverse)
{
  double const ux = b.x - a.x, uy = b.y - a.y, uz = b.z - a.z;
  double const wx = q.x - a.x, wy = q.y - a.y, wz = q.z - a.z;
  double const t = fmin(fmax(fma(wx, ux, fma(wy, uy, wz * uz)) * inverse, 0.0), 1.0);
  double const rx = fma(-t, ux, wx), ry = fma(-t, uy, wy), rz = fma(-t, uz, wz);
  double const squared = Below ? __fma_rd(rx, rx, __fma_rd(ry, ry, __dmul_rd(rz, rz))) : fma(rx, rx, fma(ry, ry, rz * rz));
  return {squared, fabs(wx) + fabs(wy) + fabs(wz)};
}
/// A node is thin when its capsule is narrower than 1 / tree_thin_ratio of its box's longest side.
inline constexpr double tree_thin_ratio = 8.0;
/// tree_node::low.w of a node whose float64 box is low … high and whose capsule has `radius`: 1 when thin.
/// Along a curve (references on one meridian) the box reaches past the node's references towards an
/// observation by up to its length while the capsule hugs them: the float test alone let in the boxes
/// of ~1e-2 rad of the curve beside an observation's nearest reference, and ordered them by their
/// boxes. Measured on an H200, 2^20 references on one meridian, uniform observations, k = 1, a query:
/// 96.9 ms; a thin node's capsule tested, 17.6 ms; and its room from the capsule too, 9.4 ms (2–6 %
/// slower on uniform, GPS-like and clustered inputs, the same with thin at 1/32 or 1/128; testing
/// every box's capsule instead: 17.0 ms on the meridian, 17–23 % slower on those inputs). The grid of
/// 0.01-degree references has few thin nodes; what it paid at 2^24 × 2^14 was code, see box_room.
__device__ inline float thin_node_flag(vec4<double> const& low, vec4<double> const& high, double radius)
{
  double const length = fmax(high.x - low.x, fmax(high.y - low.y, high.z - low.z));
  return radius * tree_thin_ratio < length ? 1.f : 0.f;
}

/// 1 / |b − a|² (0 when a = b).
__device__ inline double inverse_squared_length(vec4<double> const& a, vec4<double> const& b)
{
  double const ux = b.x - a.x, uy = b.y - a.y, uz = b.z - a.z;
  double const uu = fma(ux, ux, fma(uy, uy, uz * uz));
  return uu > 0.0 ? 1.0 / uu : 0.0;
}
/// At least the distance from q to the segment from a to b: the computed offset is off by at most 2^-53
/// of each component of q − a and of itself, and by the error of t (2^-50 |b − a|).
__device__ inline double segment_distance_above(vec4<double> const& q, vec4<double> const& a, vec4<double> const& b)
{
  segment_offset const d = offset_to_segment(q, a, b, inverse_squared_length(a, b));
  double const length = fabs(b.x - a.x) + fabs(b.y - a.y) + fabs(b.z - a.z);
  return sqrt(d.squared) * (1.0 + 0x1.0p-50) + (d.scale + length) * 0x1.0p-50;
}
/// The capsule from a to b around points within `radius` of that segment, its radius widened by 2^-49 |b − a|₁
/// for capsule_room's offset error along the segment (and 2^-51 of itself, so that the sum's rounding loses none).
__device__ inline tree_capsule make_capsule(vec4<double> const& a, vec4<double> const& b, double radius)
{
  double const length = fabs(b.x - a.x) + fabs(b.y - a.y) + fabs(b.z - a.z);
  return {{a.x, a.y, a.z, radius * (1.0 + 0x1.0p-51) + length * 0x1.0p-49}, {b.x, b.y, b.z, inverse_squared_length(a, b)}};
}

/// A reference's sort key: 42 bits per axis of its unit vector (cells of 4.5e-13, the resolution of
/// float64 coordinates near 1), interleaved (Morton order), the top 21 bits of each axis in `high` (the
/// top bit set only for an invalid reference, which sorts last), the next 21 in `low`. Fewer bits put
/// every reference of a pile within a cell in index order, and the leaves over such a cell would each
/// span all of it (measured on an H200 with 31 bits: 2^20 distinct points within 1 cm, 280 ms a query).
struct tree_key {
  std::uint64_t high;
  std::uint64_t low;
};
/// Tells CUB's radix sort the key's bits, most significant first.
struct tree_key_bits {
  __host__ __device__ cuda::std::tuple<std::uint64_t&, std::uint64_t&> operator()(tree_key& key) const
  {
    return {key.high, key.low};
  }
};
/// Orders tree_keys: by the high word, then the low one.
struct tree_key_less {
  __host__ __device__ bool operator()(tree_key const& a, tree_key const& b) const
  {
    return a.high < b.high || (a.high == b.high && a.low < b.low);
  }
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

/// Cell of coordinate x ∈ [−1, 1] on a grid of 2^bits cells.
template <int bits>
__device__ inline std::uint64_t morton_cell(double x)
{
  constexpr double cells = static_cast<double>(1ull << bits);
  double const c = floor((x + 1.0) * 0.5 * cells);
  return static_cast<std::uint64_t>(fmin(fmax(c, 0.0), cells - 1.0));
}

/// Interleaves three cells of up to 21 bits (x in the most significant place).
__device__ inline std::uint64_t interleave(std::uint64_t x, std::uint64_t y, std::uint64_t z)
{
  return spread_bits_3d(x) << 2 | spread_bits_3d(y) << 1 | spread_bits_3d(z);
}

/// Morton code of a unit vector on a 2^bits grid per axis over [−1, 1]^3 (bits ≤ 21).
template <int bits>
__device__ inline std::uint64_t morton_code(vec4<double> const& p)
{
  return interleave(morton_cell<bits>(p.x), morton_cell<bits>(p.y), morton_cell<bits>(p.z));
}

/// The tree_key of a valid unit vector.
__device__ inline tree_key reference_key(vec4<double> const& p)
{
  std::uint64_t const x = morton_cell<42>(p.x), y = morton_cell<42>(p.y), z = morton_cell<42>(p.z);
  constexpr std::uint64_t low_mask = (std::uint64_t{1} << 21) - 1;
  return {interleave(x >> 21, y >> 21, z >> 21), interleave(x & low_mask, y & low_mask, z & low_mask)};
}

/// Reads every reference, writes its float64 coordinates (NaN for an invalid point), its tree_key
/// (the largest key for an invalid point, which sorts it last) and its index; counts invalid ones.
template <class U>
__global__ void tree_reference_keys(points_ref<U> source, std::size_t count, lat_lon* coordinates, tree_key* keys,
                                    std::uint32_t* ids, unsigned long long* invalid)
{
  unsigned long long local = 0;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < count; j += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    bool const valid = load_point(source, j, lat, lon);
    local += valid ? 0 : 1;
    double const nan = cuda::std::numeric_limits<double>::quiet_NaN();
    coordinates[j] = valid ? lat_lon{lat, lon} : lat_lon{nan, nan};
    keys[j] = valid ? reference_key(unit_vector<double>(lat, lon, true)) : tree_key{~std::uint64_t{0}, ~std::uint64_t{0}};
    ids[j] = static_cast<std::uint32_t>(j);
  }
  if (local > 0) { atomicAdd(invalid, local); }
}

/// Float64 unit vector of the reference at sorted position i (NaN when invalid).
__device__ inline vec4<double> sorted_vector(lat_lon const* coordinates, std::uint32_t const* sorted_ids, std::size_t i)
{
  lat_lon const c = coordinates[sorted_ids[i]];
  return unit_vector<double>(c.lat, c.lon, !isnan(c.lat));
}

__device__ inline bool same_vector(vec4<double> const& a, vec4<double> const& b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

__device__ inline bool same_key(tree_key const& a, tree_key const& b) { return a.high == b.high && a.low == b.low; }
/// Whether vector a precedes vector b (lexicographic; tree_order_ties).
__device__ inline bool vector_before(vec4<double> const& a, vec4<double> const& b)
{
  return a.x < b.x || (a.x == b.x && (a.y < b.y || (a.y == b.y && a.z < b.z)));
}

/// Longest run of equal keys that tree_order_ties puts in order (a warp a run, a lane an entry).
inline constexpr int tree_tie_run_limit = 32;
/// Longest run of equal keys that a block of tree_order_long_runs puts in order; a longer run with more
/// than one vector is left as it is and flags the tree (tree_order_ties).
inline constexpr int tree_tie_block_limit = 1024;
/// Threads per block of tree_order_long_runs.
inline constexpr int tree_tie_block_threads = 128;

/// Where tree_order_ties leaves each run of equal keys that tree_order_long_runs orders (longer than
/// tree_tie_run_limit, at most tree_tie_block_limit): its first sorted position, *count of them.
struct tie_run_list {
  std::uint32_t* count;
  std::uint32_t* starts;
};

/// Whether the run of equal keys that holds sorted position i, not its first, is longer than
/// tree_tie_block_limit. Keys are sorted, so the run's first position is a lower bound of its key.
__device__ inline bool in_unordered_run(tree_key const* sorted_keys, std::size_t count, std::size_t i)
{
  tree_key const key = sorted_keys[i];
  constexpr std::size_t limit = tree_tie_block_limit;
  std::size_t low = i >= limit ? i - limit : 0;  // the run starts after `low` or at 0
  if (same_key(sorted_keys[low], key)) {
    if (low > 0) { return true; }  // it holds [low, i]: limit + 1 entries
  } else {
    std::size_t high = i;  // first position of the run in (low, high]
    while (high - low > 1) {
      std::size_t const middle = low + (high - low) / 2;
      if (same_key(sorted_keys[middle], key)) {
        high = middle;
      } else {
        low = middle;
      }
    }
    low = high;
  }
  return low + limit < count && same_key(sorted_keys[low + limit], key);
}

/// What tree_order_ties does at sorted position i: a position inside a run too long to order flags the tree
/// when its vector differs from the one before it; the start of a run of tree_tie_run_limit + 1 to
/// tree_tie_block_limit entries joins `long_runs`. Returns the length of the run that starts at i when it
/// has 2 to tree_tie_run_limit entries (the warp orders it), else 0.
__device__ inline int classify_tie_run(lat_lon const* coordinates, tree_key const* sorted_keys, std::uint32_t const* sorted_ids,
                                       std::size_t count, std::size_t i, std::uint32_t* unordered, tie_run_list const& long_runs)
{
  tree_key const key = sorted_keys[i];
  if (key.high == ~std::uint64_t{0}) { return 0; }  // invalid references, last
  if (i > 0 && same_key(sorted_keys[i - 1], key)) {
    // Within a run: only a run too long to order is this position's to check (the others' ids are their
    // start's warp's or block's to rewrite).
    std::size_t start = i - 1;
    while (start > 0 && i - start < tree_tie_run_limit && same_key(sorted_keys[start - 1], key)) { --start; }
    bool const found = start == 0 || !same_key(sorted_keys[start - 1], key);
    bool const too_long = found ? start + tree_tie_block_limit < count && same_key(sorted_keys[start + tree_tie_block_limit], key)
                                : in_unordered_run(sorted_keys, count, i);
    if (too_long) {
      lat_lon const a = coordinates[sorted_ids[i]], b = coordinates[sorted_ids[i - 1]];
      bool const same = (a.lat == b.lat && a.lon == b.lon) ||
                        same_vector(sorted_vector(coordinates, sorted_ids, i), sorted_vector(coordinates, sorted_ids, i - 1));
      if (!same) { atomicOr(unordered, 1u); }
    }
    return 0;
  }
  int length = 1;
  while (length <= tree_tie_run_limit && i + length < count && same_key(sorted_keys[i + length], key)) { ++length; }
  if (length > tree_tie_run_limit) {
    bool const too_long = i + tree_tie_block_limit < count && same_key(sorted_keys[i + tree_tie_block_limit], key);
    if (!too_long) { long_runs.starts[atomicAdd(long_runs.count, 1u)] = static_cast<std::uint32_t>(i); }
    return 0;
  }
  return length > 1 ? length : 0;
}

/// Puts the identical vectors of each run of equal keys next to each other, their indices ascending, so
/// that each forms one group (tree_mark_groups). Equal keys can interleave distinct vectors (within
/// 4.5e-13 of each other: a tiny circle round a pole holds a few a key cell, up to ~40 at 2^24
/// references), and the stable sort leaves a run in index order, which would split a group into entries
/// of their own. A walk that ranks every entry within its worst one ranks all parts alike, but one that
/// allows near-ties (tree_near_tie) may skip the box of one part and take the other: a row would hold a
/// larger index of identical references without the smaller. A warp takes 32 sorted positions at a time
/// (blocks of whole warps) and orders each run of up to tree_tie_run_limit entries that starts among them,
/// a lane an entry: its float64 vector, and its place its rank among the run's (vector, index) pairs,
/// which the lanes exchange by shuffles (a run of one point, identical coordinates, is already in index
/// order). A run of up to tree_tie_block_limit entries joins `long_runs` for tree_order_long_runs; a
/// longer run with more than one vector sets `unordered`, and no walk on the tree then allows near-ties.
static __global__ void tree_order_ties(lat_lon const* coordinates, tree_key const* sorted_keys, std::uint32_t* sorted_ids, std::size_t count,
                                       std::uint32_t* unordered, tie_run_list long_runs)
{
  constexpr unsigned all = 0xffffffffu;
  unsigned const lane = threadIdx.x % 32;
  std::size_t const stride = std::size_t{gridDim.x} * blockDim.x;
  for (std::size_t base = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x - lane; base < count; base += stride) {
    std::size_t const i = base + lane;
    int const length = i < count ? classify_tie_run(coordinates, sorted_keys, sorted_ids, count, i, unordered, long_runs) : 0;
    for (unsigned starts = __ballot_sync(all, length > 0); starts != 0; starts &= starts - 1) {
      int const leader = __ffs(static_cast<int>(starts)) - 1;
      std::size_t const first = base + static_cast<std::size_t>(leader);
      int const entries = __shfl_sync(all, length, leader);
      bool const mine = static_cast<int>(lane) < entries;
      std::uint32_t const id = mine ? sorted_ids[first + lane] : 0u;
      lat_lon const c = mine ? coordinates[id] : lat_lon{0.0, 0.0};
      double const lat0 = __shfl_sync(all, c.lat, 0), lon0 = __shfl_sync(all, c.lon, 0);
      if (__all_sync(all, !mine || (c.lat == lat0 && c.lon == lon0))) { continue; }
      vec4<double> const v = unit_vector<double>(c.lat, c.lon, mine);
      unsigned rank = 0;
      for (int f = 0; f < entries; ++f) {
        vec4<double> const w{__shfl_sync(all, v.x, f), __shfl_sync(all, v.y, f), __shfl_sync(all, v.z, f), 0.0};
        std::uint32_t const other = __shfl_sync(all, id, f);
        rank += vector_before(w, v) || (same_vector(w, v) && other < id) ? 1u : 0u;
      }
      __syncwarp();  // every lane has read its entry before any is rewritten
      if (mine) { sorted_ids[first + rank] = id; }
      __syncwarp();
    }
  }
}

/// Orders each run of `long_runs` by (vector, index), a block a run: the run's vectors and ids in
/// shared memory, each entry's place its rank among them (every pair compared; such runs are rare and
/// short). A run of one vector (identical coordinates, or one vector under several) is already in index
/// order and is left as it is.
static __global__ void __launch_bounds__(tree_tie_block_threads)
  tree_order_long_runs(lat_lon const* coordinates, tree_key const* sorted_keys, std::uint32_t* sorted_ids, std::size_t count,
                       tie_run_list long_runs)
{
  __shared__ vec4<double> vectors[tree_tie_block_limit];
  __shared__ std::uint32_t ids[tree_tie_block_limit];
  __shared__ unsigned length;
  std::uint32_t const runs = *long_runs.count;
  for (std::uint32_t run = blockIdx.x; run < runs; run += gridDim.x) {
    std::size_t const first = long_runs.starts[run];
    tree_key const key = sorted_keys[first];
    if (threadIdx.x == 0) { length = tree_tie_block_limit; }
    __syncthreads();
    for (unsigned e = threadIdx.x; e < tree_tie_block_limit; e += blockDim.x) {
      if (first + e >= count || !same_key(sorted_keys[first + e], key)) { atomicMin(&length, e); }
    }
    __syncthreads();
    unsigned const entries = length;
    // A run of identical coordinates (a pile of one point) is one vector: no float64 vector is needed.
    bool mixed = false;
    for (unsigned e = threadIdx.x; e < entries; e += blockDim.x) {
      ids[e] = sorted_ids[first + e];
      lat_lon const a = coordinates[ids[e]];
      lat_lon const b = coordinates[sorted_ids[first + (e > 0 ? e - 1 : 0)]];
      mixed = mixed || a.lat != b.lat || a.lon != b.lon;
    }
    if (!__syncthreads_or(mixed)) { continue; }
    for (unsigned e = threadIdx.x; e < entries; e += blockDim.x) { vectors[e] = sorted_vector(coordinates, sorted_ids, first + e); }
    mixed = false;
    __syncthreads();
    for (unsigned e = threadIdx.x + 1; e < entries; e += blockDim.x) { mixed = mixed || !same_vector(vectors[e], vectors[e - 1]); }
    if (__syncthreads_or(mixed)) {
      for (unsigned e = threadIdx.x; e < entries; e += blockDim.x) {
        unsigned rank = 0;
        for (unsigned f = 0; f < entries; ++f) {
          bool const before = vector_before(vectors[f], vectors[e]) || (same_vector(vectors[f], vectors[e]) && ids[f] < ids[e]);
          rank += before ? 1u : 0u;
        }
        sorted_ids[first + rank] = ids[e];
      }
    }
    __syncthreads();  // before the next run overwrites the shared arrays
  }
}

/// Marks the sorted positions that start a group: a valid reference whose float64 unit vector differs
/// from the one before it. Identical vectors have identical keys, so a group is a run in the sorted
/// order, its indices ascending (the sort is stable, and tree_order_ties orders runs of equal keys); a
/// vector that a longer run interleaves with another forms more than one group, which costs time, never
/// exactness.
static __global__ void tree_mark_groups(lat_lon const* coordinates, tree_key const* sorted_keys, std::uint32_t const* sorted_ids,
                                        std::size_t count, std::uint32_t* starts)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    vec4<double> const p = sorted_vector(coordinates, sorted_ids, i);
    bool start = !isnan(p.x);
    if (start && i > 0 && same_key(sorted_keys[i], sorted_keys[i - 1])) {
      start = !same_vector(p, sorted_vector(coordinates, sorted_ids, i - 1));
    }
    starts[i] = start ? 1u : 0u;
  }
}

/// Writes each group's entry at its place `group[i]` (the exclusive sum of the marks): its float64
/// vector with w = its smallest index, its primary key, and where its run starts; the last valid
/// position also writes the end of the last run and the number of groups.
static __global__ void tree_write_groups(lat_lon const* coordinates, tree_key const* sorted_keys, std::uint32_t const* sorted_ids,
                                         std::size_t count, std::uint32_t const* starts, std::uint32_t const* group,
                                         vec4<double>* precise_points, std::uint64_t* group_keys, std::uint32_t* run_starts,
                                         std::uint32_t* group_count)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    if (starts[i] != 0) {
      vec4<double> p = sorted_vector(coordinates, sorted_ids, i);
      p.w = static_cast<double>(sorted_ids[i]);
      precise_points[group[i]] = p;
      group_keys[group[i]] = sorted_keys[i].high;
      run_starts[group[i]] = static_cast<std::uint32_t>(i);
    }
    bool const valid = sorted_keys[i].high != ~std::uint64_t{0};
    bool const last_valid = valid && (i + 1 == count || sorted_keys[i + 1].high == ~std::uint64_t{0});
    if (last_valid) {
      std::uint32_t const groups = group[i] + starts[i];
      run_starts[groups] = static_cast<std::uint32_t>(i + 1);
      *group_count = groups;
    }
  }
}

/// The smallest (op = min) or largest value of `v` over the tree_leaf_size lanes of a leaf; `lanes`:
/// the warp's lanes that take part.
template <class V, class Op>
__device__ __forceinline__ V leaf_reduce(unsigned lanes, V v, Op op)
{
  for (int offset = tree_leaf_size / 2; offset > 0; offset /= 2) { v = op(v, __shfl_xor_sync(lanes, v, offset)); }
  return v;
}

/// The vector `v` of the first lane of this lane's leaf whose `value` equals `target` (which one of
/// them holds).
__device__ __forceinline__ vec4<double> leaf_pick(unsigned lanes, vec4<double> const& v, double value, double target)
{
  unsigned const lane = threadIdx.x % 32, base = lane & ~unsigned(tree_leaf_size - 1);
  unsigned const matches = (__ballot_sync(lanes, value == target) >> base) & ((1u << tree_leaf_size) - 1);
  int const source = matches != 0u ? static_cast<int>(base) + __ffs(static_cast<int>(matches)) - 1 : static_cast<int>(lane);
  return {__shfl_sync(lanes, v.x, source), __shfl_sync(lanes, v.y, source), __shfl_sync(lanes, v.z, source), 0.0};
}

/// The axis (0, 1, 2) along which a box is longest.
__device__ __forceinline__ int longest_axis(vec4<double> const& low, vec4<double> const& high)
{
  double const ex = high.x - low.x, ey = high.y - low.y, ez = high.z - low.z;
  return ex >= ey && ex >= ez ? 0 : (ey >= ez ? 1 : 2);
}
__device__ __forceinline__ double coordinate(vec4<double> const& v, int axis) { return axis == 0 ? v.x : (axis == 1 ? v.y : v.z); }

/// An entry as anchored_filter reads it: its float offset o from its leaf's first entry `anchor` (o's
/// coordinates are within 2^-23.9 |o| of q − a's), and w = |o|² in float.
__device__ inline float4 anchored_offset(vec4<double> const& point, vec4<double> const& anchor)
{
  float const x = static_cast<float>(point.x - anchor.x), y = static_cast<float>(point.y - anchor.y);
  float const z = static_cast<float>(point.z - anchor.z);
  return {x, y, z, __fmaf_rn(x, x, __fmaf_rn(y, y, __fmul_rn(z, z)))};
}
/// The largest coordinate of an offset (its part of its leaf's reach).
__device__ inline float offset_reach(float4 const& offset) { return fmaxf(fabsf(offset.x), fmaxf(fabsf(offset.y), fabsf(offset.z))); }
/// A leaf's reach (tree_node::high.w) from its entries' largest offset coordinate: at least every
/// coordinate of q − a (the float offsets are off by 2^-23.9 of themselves).
__device__ inline float leaf_reach(float largest) { return largest * (1.f + 0x1.0p-22f); }

/// A group of tree_leaf_size lanes per leaf: writes the leaf's entries (groups, in sorted order) as
/// float unit vectors (the search's filter; w holds the group's size) and the leaf's boxes (its nodes
/// in the heap), reading the float64 vectors tree_write_groups left. Slots past the last group are NaN
/// points (never chosen) up to a whole leaf; leaves past those get empty boxes.
static __global__ void tree_build_leaves(std::uint32_t const* group_count, std::uint32_t const* run_starts, std::size_t slots,
                                         std::size_t leaves, float4* points, vec4<double>* precise_points, float4* offsets,
                                         tree_node* nodes, tree_precise_node* precise_nodes, tree_capsule* capsules)
{
  std::size_t const position = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  std::size_t const leaf = position / tree_leaf_size;
  if (leaf >= leaves) { return; }  // whole leaves (leaves × 16 threads, a multiple of 16): the shuffles stay within a leaf
  double const infinity = cuda::std::numeric_limits<double>::infinity();
  double const nan = cuda::std::numeric_limits<double>::quiet_NaN();
  vec4<double> low{infinity, infinity, infinity, 0.0}, high{-infinity, -infinity, -infinity, 0.0};
  std::size_t const groups = *group_count;
  if (position < slots) {
    bool const real = position < groups;
    vec4<double> const p = real ? precise_points[position] : vec4<double>{nan, nan, nan, nan};
    if (!real) { precise_points[position] = p; }
    std::uint32_t const size = real ? run_starts[position + 1] - run_starts[position] : 0u;
    points[position] = {static_cast<float>(p.x), static_cast<float>(p.y), static_cast<float>(p.z), __uint_as_float(size)};
    if (real) {
      low = p;
      high = p;
    }
  }
  unsigned const lanes = leaves == 1 ? (1u << tree_leaf_size) - 1 : 0xffffffffu;  // a lone leaf's warp has 16 lanes
  vec4<double> const point = low;  // the lane's entry (+inf when it has none)
  bool const has_point = point.x <= high.x;
  auto const min_op = [](double x, double y) { return fmin(x, y); };
  auto const max_op = [](auto x, auto y) { return fmax(x, y); };  // float64 boxes, float reach
  low = {leaf_reduce(lanes, low.x, min_op), leaf_reduce(lanes, low.y, min_op), leaf_reduce(lanes, low.z, min_op), 0.0};
  high = {leaf_reduce(lanes, high.x, max_op), leaf_reduce(lanes, high.y, max_op), leaf_reduce(lanes, high.z, max_op), 0.0};
  // The capsule: from the entry lowest to the entry highest along the box's longest axis (the ends of
  // a curve's piece), as wide as the farthest entry from that segment.
  int const axis = longest_axis(low, high);
  double const along = has_point ? coordinate(point, axis) : nan;
  vec4<double> const a = leaf_pick(lanes, point, along, coordinate(low, axis));
  vec4<double> const b = leaf_pick(lanes, point, along, coordinate(high, axis));
  double const radius = leaf_reduce(lanes, has_point ? segment_distance_above(point, a, b) : 0.0, max_op);
  // The entry as anchored_filter reads it: an offset from the leaf's first entry; the leaf's reach.
  int const first_lane = static_cast<int>(threadIdx.x % 32) & ~(tree_leaf_size - 1);
  vec4<double> const anchor{__shfl_sync(lanes, point.x, first_lane), __shfl_sync(lanes, point.y, first_lane),
                            __shfl_sync(lanes, point.z, first_lane), 0.0};
  float4 const offset = has_point ? anchored_offset(point, anchor) : float4{float(nan), float(nan), float(nan), float(nan)};
  if (position < slots) { offsets[position] = offset; }
  float const reach = leaf_reach(leaf_reduce(lanes, has_point ? offset_reach(offset) : 0.f, max_op));
  if (position % tree_leaf_size == 0) {
    capsules[leaves + leaf] = make_capsule(a, b, radius);
    nodes[leaves + leaf] = {
      {__double2float_rd(low.x), __double2float_rd(low.y), __double2float_rd(low.z), thin_node_flag(low, high, radius)},
      {__double2float_ru(high.x), __double2float_ru(high.y), __double2float_ru(high.z), reach}};
    precise_nodes[leaves + leaf] = {low, high};
  }
}

/// Reads v past the L1 cache (another block may have written it since this SM last cached it).
__device__ __forceinline__ vec4<double> load_uncached(vec4<double> const& v)
{
  double2 const a = __ldcg(reinterpret_cast<double2 const*>(&v.x));
  double2 const b = __ldcg(reinterpret_cast<double2 const*>(&v.z));
  return {a.x, a.y, b.x, b.y};
}

/// The capsule of a node from its children's (`left_used`, `right_used`: whether each holds an entry),
/// whose box is low … high: between the two of the children's ends lowest and highest along its
/// longest axis, wide enough for both children's capsules (the distance to a segment is convex, so a
/// child's segment lies within the larger of its ends' distances).
__device__ inline tree_capsule merge_capsules(tree_capsule const& left, bool left_used, tree_capsule const& right, bool right_used,
                                              vec4<double> const& low, vec4<double> const& high)
{
  int const axis = longest_axis(low, high);
  // The used children's ends in order, the first lowest or highest kept on ties (selects: an array
  // indexed at run time would live in local memory, on the inner build's chain of levels).
  vec4<double> a = left_used ? left.a : right.a, b = a;
  auto const consider = [&](vec4<double> const& end) {
    double const along = coordinate(end, axis);
    if (along < coordinate(a, axis)) { a = end; }
    if (along > coordinate(b, axis)) { b = end; }
  };
  if (left_used) { consider(left.b); }
  if (left_used && right_used) { consider(right.a); }
  if (right_used) { consider(right.b); }
  double radius = 0.0;
  if (left_used) { radius = fmax(segment_distance_above(left.a, a, b), segment_distance_above(left.b, a, b)) + left.a.w; }
  if (right_used) {
    radius = fmax(radius, fmax(segment_distance_above(right.a, a, b), segment_distance_above(right.b, a, b)) + right.a.w);
  }
  return make_capsule(a, b, radius * (1.0 + 0x1.0p-52));
}

/// Writes inner node `node` from its two children: the box around theirs, the capsule around theirs
/// (merge_capsules) and the float box. `Uncached`: the children were written by another block.
template <bool Uncached>
__device__ __forceinline__ void merge_children(tree_node* nodes, tree_precise_node* precise_nodes, tree_capsule* capsules, std::size_t node)
{
  auto const load = [](vec4<double> const& v) { return Uncached ? load_uncached(v) : v; };
  vec4<double> const low_a = load(precise_nodes[2 * node].low), high_a = load(precise_nodes[2 * node].high);
  vec4<double> const low_b = load(precise_nodes[2 * node + 1].low), high_b = load(precise_nodes[2 * node + 1].high);
  vec4<double> const low{fmin(low_a.x, low_b.x), fmin(low_a.y, low_b.y), fmin(low_a.z, low_b.z), 0.0};
  vec4<double> const high{fmax(high_a.x, high_b.x), fmax(high_a.y, high_b.y), fmax(high_a.z, high_b.z), 0.0};
  precise_nodes[node] = {low, high};
  tree_capsule const left{load(capsules[2 * node].a), load(capsules[2 * node].b)};
  tree_capsule const right{load(capsules[2 * node + 1].a), load(capsules[2 * node + 1].b)};
  tree_capsule const capsule = merge_capsules(left, low_a.x <= high_a.x, right, low_b.x <= high_b.x, low, high);
  capsules[node] = capsule;
  nodes[node] = {{__double2float_rd(low.x), __double2float_rd(low.y), __double2float_rd(low.z), thin_node_flag(low, high, capsule.a.w)},
                 {__double2float_ru(high.x), __double2float_ru(high.y), __double2float_ru(high.z), 0.f}};
}

/// Threads of a block of tree_build_inner: each block fills a subtree of 2 × this many leaves.
inline constexpr int tree_inner_threads = 256;
/// Blocks of tree_build_inner for `leaves` (a power of two, at least 2).
[[nodiscard]] inline unsigned tree_inner_blocks(std::size_t leaves)
{
  std::size_t const subtrees = leaves / (2 * tree_inner_threads);
  return static_cast<unsigned>(subtrees > 0 ? subtrees : 1);
}

/// Fills the inner nodes bottom-up, a level at a time: each block the subtree over its 2 ×
/// tree_inner_threads leaves (a thread a node of the level, __syncthreads between levels), then the
/// last block to finish (counted in `finished_blocks`, zeroed before) the levels above the blocks'
/// subtrees. Each level waits on the one below, so the kernel is latency-bound either way; a thread
/// that climbed alone (the second of two siblings to arrive going on) also waited for a device-wide
/// fence and an atomic at every level: 48 µs for 16,384 leaves on an H200, 32 µs this way (ncu).
static __global__ void __launch_bounds__(tree_inner_threads)
  tree_build_inner(tree_node* nodes, tree_precise_node* precise_nodes, tree_capsule* capsules, unsigned* finished_blocks, std::size_t leaves)
{
  std::size_t const pairs = min_of(leaves / 2, std::size_t{tree_inner_threads});  // this block's parents of leaves
  for (std::size_t width = pairs, level_first = leaves / 2; width > 0; width /= 2, level_first /= 2) {
    if (threadIdx.x < width) { merge_children<false>(nodes, precise_nodes, capsules, level_first + blockIdx.x * width + threadIdx.x); }
    __syncthreads();  // the level is written before the next reads it
  }
  if (gridDim.x == 1) { return; }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __threadfence();  // this block's subtree is visible before it counts as finished
    last = atomicAdd(finished_blocks, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) { return; }
  __threadfence();
  for (std::size_t width = gridDim.x / 2; width > 0; width /= 2) {
    for (std::size_t t = threadIdx.x; t < width; t += blockDim.x) { merge_children<true>(nodes, precise_nodes, capsules, width + t); }
    __syncthreads();
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
/// At most the squared chord from p's float64 vector to any float64 unit vector in a box, by the sphere: for
/// unit vectors c² = 2 − 2 p·r, and p·r is at most the largest value of the linear p·x over the box, at a
/// corner. A box around a patch of the sphere reaches towards p by about its own width where p sees the patch
/// edge-on, from the other side of the sphere, which box_distance2 counts and this does not: there it lets
/// in about half the boxes (`benchmarks/tree_walk_sim.py --classes grid_region --m 16384 --sample 400 --keys
/// morton --by-distance`, with and without `--sphere-bound`: bench_hostile's 0.01-degree grid, 400 uniform
/// observations; box_distance2 alone scans 2.1–2.5 times the leaves for those 90° to 180° from the grid, 1.4
/// times at 60° to 90°, 1.05 times at 30° to 60°; none for the pole circle, a 3 m cell or uniform
/// references, 1.2 times on one meridian). It is no use near p, where its absolute error
/// (below) is all of the distance. Error: p is off its float64 vector v by at
/// most u = 2^-24 of each component (v·r ≤ p·r + u), the corner's products and their sum by 3√3 u (the
/// coordinates within [−1, 1] but for the outward rounding), 2 − 2m by 4u, and |v|², |r|² ≥ 1 − 2^-49: the
/// squared chord is at least the computed value less 17u, and 2^-19 (32u) is taken off, rounded down.
__device__ __forceinline__ float sphere_box_distance2(float3 const& p, tree_node const& box)
{
  float const m = fmaxf(p.x * box.low.x, p.x * box.high.x) + fmaxf(p.y * box.low.y, p.y * box.high.y) +
                  fmaxf(p.z * box.low.z, p.z * box.high.z);
  return __fsub_rd(__fmaf_rn(-2.f, m, 2.f), 0x1.0p-19f);
}
/// Worst-entry filters (search_bounds::upper, squared chord) above which box_room<Call, true> also tests
/// sphere_box_distance2: an observation whose nearest lie more than ~41° away (the count above).
inline constexpr float tree_far_chord2 = 0.5f;
/// The same in float64, to the float64 box (within 6 roundings of the true distance, see box_room).
__device__ __forceinline__ double box_distance2(vec4<double> const& p, tree_precise_node const& box)
{
  double const dx = fmax(fmax(box.low.x - p.x, p.x - box.high.x), 0.0);
  double const dy = fmax(fmax(box.low.y - p.y, p.y - box.high.y), 0.0);
  double const dz = fmax(fmax(box.low.z - p.z, p.z - box.high.z), 0.0);
  return fma(dx, dx, fma(dy, dy, dz * dz));
}

/// The float bounds a search compares box and point distances with, from its list's worst entry
/// (float64 squared chord): above `upper` (float_chord2_filter) a box or point cannot enter; below
/// `lower` a box surely holds room for one (its float64 distance is below the worst entry), so only
/// boxes between the two need the float64 test. Between them lie the boxes whose points the float
/// filter cannot tell apart: piles within metres of each other, or points nearly equidistant from the
/// observation (a great circle seen from its pole), which would otherwise all be ranked in float64.
struct search_bounds {
  float upper;
  float lower;
  /// At least the distance (chord) of any point whose float64 chord2 is at most the worst entry W: chord2
  /// rounds the differences once and their squares' sum three times, so such a point lies within
  /// √W (1 − u)^-2.5 < √W (1 + 4u) (u = 2^-53), at most the rounded root times (1 + 6u), rounded upward
  /// (a root rounded upward, __dsqrt_ru, is a slow call: it cost k = 2 to 32 3–6 %, as the bounds follow the
  /// list). capsule_room bounds its own rounding. TreeBounds.* checks the tests on random piles of points.
  double reach;
  __device__ explicit search_bounds(double worst) : upper(float_chord2_filter(worst))
  {
    constexpr double u = 0x1.0p-24;
    double const root = sqrt(worst);
    double const chord = root * (1.0 - 2.0 * u) - 3.5 * u;  // the mirror of float_chord2_filter()'s margins
    lower = chord > 0.0 ? __double2float_rd(chord * chord * (1.0 - 4.0 * u)) : 0.f;
    reach = __dmul_ru(root, 1.0 + 0x3.0p-52);
  }
};

/// How far within reach a capsule lies, in squared distance: (reach + radius)² − |p − segment|², below 0
/// when no reference in it can enter the list (a point within `radius` of the segment S lies at least
/// D − radius away from p, D = dist(p, S)). Its error is relative to D, not absolute, so it tells apart
/// the nodes of a curve seen from afar down to the chord's own rounding (u = 2^-53; e: p − a as rounded,
/// |e| ≤ u |p − a| ≤ u (|y| + |b − a|), y = p − a − t (b − a) for the computed t): the offset r = fl(w − t u)
/// is within u of itself, so |y| ≥ |r| (1 − 2u) − u |b − a|, and its square is rounded down; t is off
/// the foot t* by δ ≤ 9u |p − a| along the segment, which lengthens y by at most δ² 3 / D ≤ 2^-75 when
/// D ≥ 2^-20, else by at most δ ≤ 2^-69 + 9u |b − a|. So D ≥ √(r²) (1 − 2u) − 10u |b − a| − 2^-69:
/// make_capsule's radius holds the 10u |b − a|, 2^-68 the rest, and (1 + 6u) on the square, rounded
/// upward like the sums, the (1 − 2u). Until the thirty-third session the margins were 2^-50 absolute and
/// 2^-50 relative on both the reach and the square; this form took the circle round a pole at 2^22 × 2^22
/// 10 % shorter for k = 1 and 2 (40.60 → 36.59 ms, 54.89 → 49.49; uniform inputs within 1 %; H200).
__device__ __forceinline__ double capsule_room(vec4<double> const& p, tree_capsule const& capsule, search_bounds const& bounds)
{
  double const limit = __dadd_ru(__dadd_ru(bounds.reach, capsule.a.w), 0x1.0p-68);
  return __dmul_ru(__dmul_ru(limit, limit), 1.0 + 0x3.0p-52) - offset_to_segment<true>(p, capsule.a, capsule.b, capsule.b.w).squared;
}

/// The float64 part of box_room for a box the float test let through: the capsule's room (capsule_room),
/// and unless `capsule_only` the smaller of it and the float64 box's; below 0 when no reference in them
/// can enter. box_room tests the capsule alone where the float test showed the box within reach, and at
/// a thin node, whose capsule (at most 1/8 of the box's longest side wide) the box undercuts only near its
/// ends: the circle's walks tested both at every node, and the float64 box almost never pruned what the
/// capsule kept (16 % of their instructions; twenty-fifth session). The float64 distance to the exact box
/// is within 5 roundings (2^-53 each) of the true one, as is every float64 chord2 to a reference in the
/// box, so a box whose distance exceeds `worst` by 2^-49 relative (16 roundings) holds none at most `worst`.
__device__ __forceinline__ double precise_room(vec4<double> const& precise_p, tree_precise_node const& precise_box,
                                               tree_capsule const& capsule, search_bounds const& bounds, double worst, bool capsule_only)
{
  double const along = capsule_room(precise_p, capsule, bounds);
  if (capsule_only || !(along >= 0.0)) { return along; }
  return fmin(worst - box_distance2(precise_p, precise_box) * (1.0 - 0x1.0p-49), along);
}
/// precise_room as a call, for the lists of K >= 32 entries (tree_search_one): their walk holds the list
/// in registers and the ~8 inlined copies of the float64 tests left it fewer; out of line, k = 32 searched
/// 7–19 % faster (H100, sixteenth session, 2^20 × 2^20: uniform 12.20 → 11.22 ms, the 0.01-degree grid
/// 16.86 → 13.61, the pole circle 69.1 → 63.4), while for k = 1 and 16 the call cost up to 16 %.
__device__ __noinline__ inline double precise_room_call(vec4<double> precise_p, tree_precise_node const& precise_box,
                                                        tree_capsule const& capsule, search_bounds bounds, double worst, bool capsule_only)
{
  return precise_room(precise_p, precise_box, capsule, bounds, worst, capsule_only);
}

/// How much room a box leaves below a list whose worst entry is `worst` (float64 squared chord), for a
/// point p (float, and float64 `precise_p`), as the bits of a float plus one; 0 when no reference in
/// it can enter. The float test (box_distance2 against bounds.upper) decides most boxes (a thin node's
/// capsule too, thin_node_flag); a box between bounds.lower and bounds.upper gets the float64 tests, of
/// its box and of its capsule (precise_room; a call when `Call`), and its room is measured in float64,
/// so that the walk still goes to the nearer of boxes the float distance cannot tell apart (a pile of
/// points within a metre, a great circle seen from its pole) instead of sweeping them in key order.
/// `Far`: a list whose worst entry lies farther than tree_far_chord2 also tests sphere_box_distance2.
template <bool Call = false, bool Far = false>
__device__ __forceinline__ unsigned box_room(float3 const& p, vec4<double> const& precise_p, tree_node const& box,
                                             tree_precise_node const& precise_box, tree_capsule const& capsule,
                                             search_bounds const& bounds, double worst)
{
  float bound = box_distance2(p, box);
  if (!(bound <= bounds.upper)) { return 0u; }
  if (Far && bounds.upper > tree_far_chord2) {
    bound = fmaxf(bound, sphere_box_distance2(p, box));
    if (!(bound <= bounds.upper)) { return 0u; }
  }
  bool const sure = bound < bounds.lower;
  bool const thin = box.low.w != 0.f;
  if (sure && !thin) { return __float_as_uint(bounds.upper - bound) + 1u; }
  // One float64 test site for thin nodes and undecided boxes alike: box_room is inlined at each of the
  // walk's room tests, and a second copy of the capsule test there took the 0.01-degree grid at 2^24 ×
  // 2^14, k = 1, from 14.95 to 21.33 ms; one copy, 16.84 (H100, sixteenth session; no node flagged thin: 20.52).
  double const room = Call ? precise_room_call(precise_p, precise_box, capsule, bounds, worst, sure || thin)
                           : precise_room(precise_p, precise_box, capsule, bounds, worst, sure || thin);
  if (!(room >= 0.0)) { return 0u; }
  return __float_as_uint(sure ? fminf(bounds.upper - bound, __double2float_rd(room)) : __double2float_rd(room)) + 1u;
}

/// 30-bit Morton keys of the observations (the largest key for an invalid one), so that a warp
/// searches neighbouring observations and walks the same nodes.
template <class T>
__global__ void tree_observation_keys(points_ref<T> observations, std::size_t count, std::uint32_t* keys, std::uint32_t* ids)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    bool const valid = load_point(observations, i, lat, lon);
    // In float: the order is a heuristic, and float64 sines took most of this kernel's time.
    float sin_lat, cos_lat, sin_lon, cos_lon;
    sincosf(static_cast<float>(lat), &sin_lat, &cos_lat);
    sincosf(static_cast<float>(lon), &sin_lon, &cos_lon);
    vec4<double> const v{cos_lat * cos_lon, cos_lat * sin_lon, sin_lat, 0.0};
    keys[i] = valid ? static_cast<std::uint32_t>(morton_code<10>(v)) : ~std::uint32_t{0};
    ids[i] = static_cast<std::uint32_t>(i);
  }
}

/// What a search needs of a built tree.
struct tree_view {
  float4 const* points;                    // groups in sorted order, whole leaves (NaN padding); w: the group's size
  vec4<double> const* precise_points;      // the same in float64; w: the group's smallest reference index
  float4 const* offsets;                   // the same as float offsets from their leaf's first entry; w: their squared length
  tree_node const* nodes;                  // heap, 2 × leaves
  tree_precise_node const* precise_nodes;  // the same boxes in float64
  tree_capsule const* capsules;            // the nodes' capsules, heap order
  lat_lon const* coordinates;              // by reference index
  std::uint64_t const* keys;               // the groups' primary Morton keys, sorted
  std::uint32_t const* run_starts;         // group g's indices: member_ids[run_starts[g] … run_starts[g + 1])
  std::uint32_t const* member_ids;         // reference indices in sorted order
  std::uint32_t const* group_count;        // groups (on the device)
  std::uint32_t const* ties_unordered;     // nonzero (on the device): no walk allows near-ties (tree_order_ties)
  std::size_t leaves;                      // a power of two
};

/// The node above the two leaves around the place the point with Morton key `key` takes in the
/// sorted groups (of which there are `groups` > 0): their 32 entries are near it, and scanning them
/// first gives every thread a tight bound before the warp walks the tree (a walk led by the warp's
/// other threads would otherwise enter boxes only this thread's loose bound reaches).
__device__ inline std::size_t seed_node(tree_view const& tree, std::uint64_t key, std::size_t groups)
{
  std::size_t low = 0, high = groups;
  while (low < high) {
    std::size_t const middle = (low + high) / 2;
    if (tree.keys[middle] < key) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  std::size_t const leaf = min_of(low, groups - 1) / tree_leaf_size;
  return tree.leaves == 1 ? 1 : (tree.leaves + leaf) / 2;
}

/// The largest `value` over the (full) warp.
__device__ __forceinline__ unsigned warp_max(unsigned value)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_max_sync(0xffffffffu, value);
#else
  for (int offset = 16; offset > 0; offset /= 2) { value = max(value, __shfl_xor_sync(0xffffffffu, value, offset)); }
  return value;
#endif
}

/// Ranks the entry at sorted position `at` (one that passed the float32 filter) in float64 and offers
/// it to `list`; returns whether the list took it. A group of identical references is ranked once and
/// offered with its smallest indices, in ascending order, until one is refused (the rest, at the same
/// distance and larger indices, would be too), so a pile of identical points costs no more than k of
/// them. The caller brings its search_bounds up to date once a batch whose filter it has decided is
/// ranked (recomputing them after every entry taken was 8 % of a k = 16 search's instructions).
template <int K>
__device__ __forceinline__ bool rank_entry(tree_view const& tree, std::size_t at, vec4<double> const& precise_p, knn_list<K>& list)
{
  vec4<double> const precise_q = tree.precise_points[at];
  double const c = chord2(precise_p.x, precise_p.y, precise_p.z, precise_q);
  // One call site of offer() (inlined, the list stays in registers): the group's members in turn.
  std::uint32_t const members = K == 1 ? 1u : min_of(__float_as_uint(tree.points[at].w), static_cast<std::uint32_t>(K));
  std::uint32_t id = static_cast<std::uint32_t>(precise_q.w);
  std::uint32_t member = 0;
  while (list.offer(c, id) && ++member < members) { id = tree.member_ids[tree.run_starts[at] + member]; }
  return member > 0;
}

/// How much nearer than a full list's worst entry W a box must come for a long walk to enter it: once a
/// walk for k ≤ 16 has taken tree_near_tie_steps steps, a box whose float64 tests put every reference in
/// it above (1 − tree_near_tie) W is skipped. Each reference such a walk skips then has a float64 squared chord
/// above (1 − tree_near_tie) times the final worst entry, so slot j of its row is within a relative
/// tree_near_tie (16 float64 ulps; the chord within 2^-49, 1.8e-15) of the float64 brute force's slot j,
/// and the two differ only among such near-ties (distinct references at the same float64 distance
/// among them: the tie may go to the larger index). Seen from afar, the points of a tiny circle round a
/// pole near its nearest one lie within rounding of each other, and their number grows with the
/// density; with W itself as the threshold, the tests' margins let in all of them (a CPU count of one
/// thread at 2^22 references, benchmarks/tree_walk_sim.py: 38.5 leaves, 16.7 with 2^-48). Only a full
/// list skips so: below it stands the caller's max_distance.
inline constexpr double tree_near_tie = 0x1.0p-48;
/// Steps after which a walk for k ≤ 16 allows near-ties (tree_near_tie): shorter walks, every walk for
/// k = 32, and every walk on a tree whose build could not order a run of equal keys (tree_order_ties) answer
/// exactly as the brute force, ties to the smallest index. No walk of a tree of up to 128 leaves (2,048
/// entries) is that long, and few warps' walks over uniform references are (the CPU model at 2^20, k = 1:
/// 78 steps on average, 117 at the 90th percentile); the circle's take 600–1,800. At 2^22 × 2^22 they take
/// the circle's walks 17–19 % shorter for k = 2 to 16 at +0.5–1.6 % on uniform references (H100 and H200,
/// twenty-second and twenty-third sessions); k = 32 (its lists spill) stays within 9.0× without them, and
/// allowing them at every k cost uniform k = 16 and 32 3–4 % in an earlier version. 128 steps took the
/// circle's walks at 2^22 × 2^22 9–13 % shorter again for k = 1 to 8 (H200, twenty-fifth session), but walks
/// over ordinary clustered float-degree references (KNearest.ClusteredFloatDegreesEveryEngineEveryK, 2,500
/// of them) then reached near-ties and gave an exact tie between distinct references to the larger index.
inline constexpr int tree_near_tie_steps = 256;

/// What a walk returns: the k nearest references (up to near-ties, tree_near_tie), or k references whose
/// worst is within a relative tree_kth_bound_slack of the k-th nearest's squared chord, an upper bound on it:
/// the cell lists need no more of their centres (cell_reach), and, seen from afar, a curve of references
/// (one meridian, a tiny circle) has many within rounding of each other that an exact walk must tell apart
/// in float64, node by node (at 2^21 × 2^17, k = 2, one meridian's centres took 3.6 ms, uniform references'
/// 0.31; ncu, H200, twenty-eighth session).
enum class walk_goal { nearest, kth_bound };
/// A kth_bound walk skips from its first step every box and entry its float64 tests put above (1 − this)
/// times the full list's worst entry (as tree_near_tie does in long walks), so its k-th squared chord is at
/// most 1 / (1 − this) times the k-th nearest's: a cell's reach grows by a 2^-11 of that chord.
inline constexpr double tree_kth_bound_slack = 0x1.0p-10;

/// The threshold the walk's box tests measure rooms against: the list's worst entry, less tree_near_tie
/// of it once `near_ties` (a long walk) and the list is full, or less tree_kth_bound_slack for a kth_bound walk.
template <walk_goal Goal, int K>
__device__ __forceinline__ double walk_threshold(knn_list<K> const& list, bool near_ties)
{
  constexpr double slack = Goal == walk_goal::kth_bound ? tree_kth_bound_slack : tree_near_tie;
  return near_ties && list.id[K - 1] != no_reference ? list.worst() * (1.0 - slack) : list.worst();
}

/// Entries per load batch of a leaf scan: their loads are issued together.
inline constexpr int tree_scan_batch = 8;

/// The float32 filter of one leaf for one observation p, from float offsets o of its entries to its first
/// entry a (tree_view::offsets): chord² = |p − a|² − 2 (p − a)·o + |o|², whose first term is the same for
/// every entry and computed once in float64, the rest in float. Its error is relative to |p − a| |o|, not
/// to 1, so it tells apart points that float32 unit vectors make one (a small circle seen from afar,
/// whose entries a float chord would all let through, to be ranked in float64). Bound: o is off q − a
/// by 2^-23.9 |o| a coordinate, −2 (p − a) by 2^-23.9 |p − a|, and the three fused roundings and |o|²'s
/// add at most 3u of |−2 (p − a)·o| + |o|²: within 2^-20 (2 |p − a|₁ R + 3 R²), R the largest offset
/// coordinate of the leaf. |p − a|² in float64 and the ranking's chord² are each within 5 roundings (2^-53) of
/// theirs, and the threshold's sum adds 3 of at most worst + base + error: 2^-49 of worst + base covers the 13.
struct anchored_filter {
  float dx, dy, dz;  // −2 (p − a), in float
  double base;       // |p − a|², in float64
  double error;      // the float part's error bound, plus the float64 parts'
  float threshold;   // the largest float value of −2 (p − a)·o + |o|² an entry may have to enter
  __device__ anchored_filter(tree_view const& tree, std::size_t leaf, vec4<double> const& precise_p, double worst)
  {
    vec4<double> const a = tree.precise_points[leaf * tree_leaf_size];
    double const x = precise_p.x - a.x, y = precise_p.y - a.y, z = precise_p.z - a.z;
    double const reach = tree.nodes[tree.leaves + leaf].high.w;
    dx = static_cast<float>(-2.0 * x);
    dy = static_cast<float>(-2.0 * y);
    dz = static_cast<float>(-2.0 * z);
    base = fma(x, x, fma(y, y, z * z));
    error = 0x1.0p-20 * (2.0 * (fabs(x) + fabs(y) + fabs(z)) * reach + 3.0 * reach * reach);
    update(worst);
  }
  __device__ void update(double worst) { threshold = __double2float_ru((worst - base) + 0x1.0p-49 * (worst + base) + error); }
};

/// The entries first … first + tree_scan_batch − 1 that pass the float chord filter (bounds.upper), as bits
/// from bit `shift` on: the filter of lists of 8 to 32 entries, and of 2 and 4 in leaves the float box test
/// decides (scan_leaf), where their worst entry moves too often for anchored_filter's float64 set-up to pay
/// (in every leaf, it cost uniform k = 16 2 %, seventeenth session).
__device__ __forceinline__ unsigned filter_batch(tree_view const& tree, std::size_t first, float3 const& p, search_bounds const& bounds,
                                                 int shift)
{
  float4 q[tree_scan_batch];
#pragma unroll
  for (int s = 0; s < tree_scan_batch; ++s) { q[s] = tree.points[first + s]; }
  unsigned passed = 0;
#pragma unroll
  for (int s = 0; s < tree_scan_batch; ++s) {
    passed |= chord2(p.x, p.y, p.z, vec4<float>{q[s].x, q[s].y, q[s].z, 0.f}) <= bounds.upper ? 1u << (shift + s) : 0u;
  }
  return passed;
}
/// The same with `filter` (scan_leaf's anchored path).
__device__ __forceinline__ unsigned filter_batch(tree_view const& tree, std::size_t first, anchored_filter const& filter, int shift)
{
  float4 o[tree_scan_batch];
#pragma unroll
  for (int s = 0; s < tree_scan_batch; ++s) { o[s] = tree.offsets[first + s]; }
  unsigned passed = 0;
#pragma unroll
  for (int s = 0; s < tree_scan_batch; ++s) {
    float const v = __fmaf_rn(filter.dx, o[s].x, __fmaf_rn(filter.dy, o[s].y, __fmaf_rn(filter.dz, o[s].z, o[s].w)));
    passed |= v <= filter.threshold ? 1u << (shift + s) : 0u;
  }
  return passed;
}

/// Ranks the entries at first + each bit of `passed` (rank_entry); returns whether the list took one.
template <int K>
__device__ __forceinline__ bool rank_passed(tree_view const& tree, std::size_t first, unsigned passed, vec4<double> const& precise_p,
                                            knn_list<K>& list)
{
  bool taken = false;
  while (passed != 0u) {
    int const s = __ffs(static_cast<int>(passed)) - 1;
    passed &= passed - 1;
    taken |= rank_entry(tree, first + s, precise_p, list);
  }
  return taken;
}

/// Offers the entries of leaf `leaf` to `list`: a float32 filter over batches of loads issued
/// together, then float64 ranking (rank_entry) of the entries that pass. The filter is anchored_filter
/// for k = 1, and for lists of 2 to 8 entries where the float test of the leaf's box cannot decide it (its
/// distance at least bounds.lower): there the float chord filter cannot tell the leaf's points apart
/// either (a small circle seen from afar) and would pass them all to be ranked in float64. Measured on an
/// H200 (twenty-fourth session, tree_index exact): the circle at 2^21 × 2^17 and 2^22 × 2^16 9–22 % faster
/// for k = 2 and 4 (k = 4 at 2^21 × 2^17: 17.73 → 13.75 ms), uniform inputs there within 1.1 %; at 2^20 ×
/// 2^20 and 2^22 × 2^22, k = 4 4–6 % faster on both, k = 2 1.8–4.1 % slower on the circle and 2.4–2.6 % on
/// uniform inputs. For K = 8 (twenty-fifth session, with the filter's 2^-49 margin; 2^-48 had cost the
/// circle at 2^20 × 2^20 6.7 %): the circle at 2^22 × 2^22 7.3 % faster, at 2^21 × 2^17 9.8 %, cell_3m_distinct
/// at 2^20 × 2^20 21 %, uniform inputs 1.3–2.6 % and antimeridian 6.3 % slower. Lists of 16 and 32 keep the
/// float chord filter: with the second path they spilled more (nvcc 13.0, sm_90: 246 B of spill stores
/// instead of 122, 96 instead of 24).
template <walk_goal Goal, int K>
__device__ __forceinline__ void scan_leaf(tree_view const& tree, std::size_t leaf, float3 const& p, vec4<double> const& precise_p,
                                          knn_list<K>& list, search_bounds& bounds, bool near_ties)
{
  std::size_t const first = leaf * tree_leaf_size;
  if (K == 1 || (K <= 8 && !(box_distance2(p, tree.nodes[tree.leaves + leaf]) < bounds.lower))) {
    anchored_filter filter(tree, leaf, precise_p, walk_threshold<Goal>(list, near_ties));
    for (int b = 0; b < tree_leaf_size; b += tree_scan_batch) {
      unsigned const passed = filter_batch(tree, first + b, filter, 0);
      if (rank_passed(tree, first + b, passed, precise_p, list)) {
        double const threshold = walk_threshold<Goal>(list, near_ties);
        bounds = search_bounds(threshold);
        filter.update(threshold);
      }
    }
  } else {
    for (int b = 0; b < tree_leaf_size; b += tree_scan_batch) {
      if (rank_passed(tree, first + b, filter_batch(tree, first + b, p, bounds, 0), precise_p, list)) { bounds = search_bounds(walk_threshold<Goal>(list, near_ties)); }
    }
  }
}

/// The warp ranks a leaf's entries together (scan_leaf_together) when this many times the rounds that
/// takes is below the most entries one thread would rank alone. Measured on an H100 (2^20 × 2^20, k = 1,
/// seventeenth session), factors 2, 3 and 6 alike: the pole circle 14.49 → 13.04 ms, refs_one_meridian
/// 9.18 → 8.48, cell_3m_distinct 4.46 → 4.22, uniform and every other class within 1.5 %. For lists of
/// 2 (H200, twenty-seventh session), factors 2, 3 and 6 alike within 1.3 %; ranking together took the
/// hostile k = 2 cases measured 1–6 % shorter (the circle at 2^22 × 2^22 57.35 → 54.61 ms, one meridian
/// at 2^21 × 2^17 13.41 → 12.92) but antimeridian at 2^20 × 2^20 (2 % longer), uniform inputs within 1 %.
inline constexpr int tree_rank_together_factor = 3;

/// The `Slots` nearest candidates of a leaf's entries in scan_leaf_together, of one lane's or, after
/// merging, of several lanes', by (squared chord, index), nearest first; empty slots hold +inf and
/// no_reference.
template <int Slots>
struct leaf_candidates {
  double chord2[Slots];
  std::uint32_t id[Slots];

  /// The lane's share of an entry at squared chord c: its group's smallest indices (a group of
  /// identical references holds ascending indices, rank_entry), up to Slots of them.
  __device__ static leaf_candidates of_entry(tree_view const& tree, std::size_t at, double c, std::uint32_t smallest)
  {
    leaf_candidates r;
    r.chord2[0] = c;
    r.id[0] = smallest;
    if constexpr (Slots == 2) {
      bool const pair = smallest != no_reference && __float_as_uint(tree.points[at].w) >= 2u;
      r.chord2[1] = pair ? c : cuda::std::numeric_limits<double>::infinity();
      r.id[1] = pair ? tree.member_ids[tree.run_starts[at] + 1] : no_reference;
    }
    return r;
  }
  /// The Slots nearest of this lane's and those of the lane `offset` away (xor), the same in both lanes.
  __device__ void merge_xor(unsigned lanes, int offset)
  {
    double other_c[Slots];
    std::uint32_t other_id[Slots];
#pragma unroll
    for (int s = 0; s < Slots; ++s) {
      other_c[s] = __shfl_xor_sync(lanes, chord2[s], offset);
      other_id[s] = __shfl_xor_sync(lanes, id[s], offset);
    }
    bool const other_first = knn_list<1>::before(other_c[0], other_id[0], chord2[0], id[0]);
    if constexpr (Slots == 2) {
      // The second is the better of the loser's first and the winner's second.
      double const loser_c = other_first ? chord2[0] : other_c[0], winner_c = other_first ? other_c[1] : chord2[1];
      std::uint32_t const loser_id = other_first ? id[0] : other_id[0], winner_id = other_first ? other_id[1] : id[1];
      bool const loser_second = knn_list<1>::before(loser_c, loser_id, winner_c, winner_id);
      chord2[1] = loser_second ? loser_c : winner_c;
      id[1] = loser_second ? loser_id : winner_id;
    }
    if (other_first) {
      chord2[0] = other_c[0];
      id[0] = other_id[0];
    }
  }
};

/// The leaf a warp's shared walk stands at, for lists of K ≤ 2 entries and the threads that `want` it
/// (the walk is the same in every lane). Each thread filters the leaf's entries in float, with
/// scan_leaf's filter; when few threads pass many (a curve seen from afar, whose points a float filter
/// cannot tell apart, while the warp's threads want different parts of it), the warp ranks them
/// together, two threads a round, one entry a lane, and offers each thread the K nearest of its half
/// (ties to the smallest index, as the list orders them: the K nearest of a set change a list of K as
/// the whole set would); otherwise each thread ranks its own, as scan_leaf does, against the bounds it
/// entered the leaf with.
template <walk_goal Goal, int K>
__device__ __forceinline__ void scan_leaf_together(tree_view const& tree, std::size_t leaf, bool want, float3 const& p,
                                                   vec4<double> const& precise_p, knn_list<K>& list, search_bounds& bounds,
                                                   bool near_ties)
{
  static_assert(K <= 2, "the warp merges at most two candidates a lane");
  constexpr unsigned all = 0xffffffffu;
  std::size_t const first = leaf * tree_leaf_size;
  unsigned passed = 0;
  if (want) {
    if (K == 1 || !(box_distance2(p, tree.nodes[tree.leaves + leaf]) < bounds.lower)) {
      anchored_filter const filter(tree, leaf, precise_p, walk_threshold<Goal>(list, near_ties));
      for (int b = 0; b < tree_leaf_size; b += tree_scan_batch) { passed |= filter_batch(tree, first + b, filter, b); }
    } else {
      for (int b = 0; b < tree_leaf_size; b += tree_scan_batch) { passed |= filter_batch(tree, first + b, p, bounds, b); }
    }
  }
  unsigned rest = __ballot_sync(all, passed != 0u);  // the threads with entries to rank
  if (rest == 0u) { return; }
  bool taken = false;
  int const rounds = (__popc(rest) + 1) / 2;
  if (tree_rank_together_factor * rounds >= static_cast<int>(warp_max(static_cast<unsigned>(__popc(passed))))) {
    taken = rank_passed(tree, first, passed, precise_p, list);
  } else {
    int const lane = static_cast<int>(threadIdx.x % 32), slot = lane % tree_leaf_size;
    while (rest != 0u) {
      int const low_owner = __ffs(static_cast<int>(rest)) - 1;
      rest &= rest - 1;
      int const high_owner = rest != 0u ? __ffs(static_cast<int>(rest)) - 1 : low_owner;
      rest &= rest - 1;
      int const owner = lane < tree_leaf_size ? low_owner : high_owner;
      unsigned const owner_passed = __shfl_sync(all, passed, owner);
      double const x = __shfl_sync(all, precise_p.x, owner), y = __shfl_sync(all, precise_p.y, owner);
      double const z = __shfl_sync(all, precise_p.z, owner);
      double c = cuda::std::numeric_limits<double>::infinity();
      std::uint32_t id = no_reference;
      if ((owner_passed >> slot & 1u) != 0u) {
        vec4<double> const q = tree.precise_points[first + slot];
        c = chord2(x, y, z, q);
        id = static_cast<std::uint32_t>(q.w);
      }
      auto nearest = leaf_candidates<K>::of_entry(tree, first + slot, c, id);
      for (int offset = tree_leaf_size / 2; offset > 0; offset /= 2) { nearest.merge_xor(all, offset); }
      int const source = lane == high_owner && high_owner != low_owner ? tree_leaf_size : 0;
#pragma unroll
      for (int s = 0; s < K; ++s) {
        double const c_s = __shfl_sync(all, nearest.chord2[s], source);
        std::uint32_t const id_s = __shfl_sync(all, nearest.id[s], source);
        if (lane == low_owner || lane == high_owner) { taken |= list.offer(c_s, id_s); }
      }
    }
  }
  if (taken) { bounds = search_bounds(walk_threshold<Goal>(list, near_ties)); }
}

/// Leaves a warp's region (tree_search_one) holds at most; a warp whose region meets more walks. A build
/// may define STREAMKIT_TREE_REGION_LEAVES (0: every warp walks). A CPU count over 1,000 random warps
/// (benchmarks/warp_region_sim.py; docs/performance.md, thirty-first session): mean 24 leaves (GPS-like
/// 1M × 144,563; 5.2 % of the warps above 64), 18 (clustered 2^22 × 2^20; 0.9 %), 4 (uniform 2^24 × 2^14; none).
#ifndef STREAMKIT_TREE_REGION_LEAVES
#define STREAMKIT_TREE_REGION_LEAVES 64
#endif
inline constexpr int tree_region_leaf_cap = STREAMKIT_TREE_REGION_LEAVES;
/// Nodes of one level of a region's descent a warp holds at most (more: it walks instead).
inline constexpr int tree_region_front = 64;
/// Whether a search for lists of K entries tries its warps' regions first: the nearest reference only.
/// Measured on an H200 (thirty-second session, 2^20 × 2^20, bench_hostile tree_index exact) with regions for
/// lists of up to 16 entries (and, from 4 on, a seed of the leaves the warp's seeds span): k = 1 and 2 6–14 %
/// faster on uniform inputs and up to 9 % slower on the hostile classes whose warps walk (the pole circle
/// 1 %), so the circle's ratio to uniform grows with the gain (for k = 2 at 2^22 × 2^22, 9.7× before);
/// k = 8 and 16 8 % and 30 % slower on uniform inputs (the regions' registers: 278 B of spill stores for
/// K = 16 instead of 142). For k = 1 alone at 2^22 × 2^22 (thirty-third session, H200): uniform 4.92 → 4.07 ms, the
/// pole circle 36.59 → 37.26 (capsule_room's margins in both), so its ratio 9.2×.
template <int K, walk_goal Goal>
inline constexpr bool tree_tries_regions = tree_region_leaf_cap > 0 && K == 1 && Goal == walk_goal::nearest;
/// Words of shared memory a warp of tree_search holds: its walk's stack, and with regions its region's two
/// levels and leaves.
template <int K, walk_goal Goal>
inline constexpr int tree_search_warp_words =
  tree_tries_regions<K, Goal> ? 2 * tree_region_front + tree_region_leaf_cap : tree_stack_depth;
static_assert(2 * tree_region_front >= tree_stack_depth, "a region's buffer holds the walk's stack");

/// The squared float distance between a node's box and the box low … high (0 where they overlap).
__device__ __forceinline__ float box_box_distance2(tree_node const& box, float3 const& low, float3 const& high)
{
  float const dx = fmaxf(fmaxf(box.low.x - high.x, low.x - box.high.x), 0.f);
  float const dy = fmaxf(fmaxf(box.low.y - high.y, low.y - box.high.y), 0.f);
  float const dz = fmaxf(fmaxf(box.low.z - high.z, low.z - box.high.z), 0.f);
  return __fmaf_rn(dx, dx, __fmaf_rn(dy, dy, __fmul_rn(dz, dz)));
}

/// The leaves a warp's region meets, found level by level, a lane a node, into buffer + 2 ×
/// tree_region_front (the levels alternate between the buffer's two halves before it): the box around
/// the valid threads' p, grown by the largest of their reaches (the chord of `upper`, bounds.upper).
/// Returns their number, the same in every thread, or −1 when they are more than tree_region_leaf_cap,
/// a level holds more than tree_region_front nodes, or a valid thread's list is not yet full (its reach
/// is everything). A float test of a box against a point inside the region is no smaller than that
/// box's against the region, so every leaf a thread's walk could scan is among them.
__device__ inline int warp_region_leaves(tree_view const& tree, bool valid, float3 const& p, float upper, std::uint32_t* buffer)
{
  constexpr unsigned all = 0xffffffffu;
  constexpr float big = cuda::std::numeric_limits<float>::infinity();
  unsigned const below = (1u << (threadIdx.x % 32)) - 1u;
  float3 low{valid ? p.x : big, valid ? p.y : big, valid ? p.z : big};
  float3 high{valid ? p.x : -big, valid ? p.y : -big, valid ? p.z : -big};
  float reach2 = valid ? upper : 0.f;
  for (int offset = 16; offset > 0; offset /= 2) {
    low.x = fminf(low.x, __shfl_xor_sync(all, low.x, offset));
    low.y = fminf(low.y, __shfl_xor_sync(all, low.y, offset));
    low.z = fminf(low.z, __shfl_xor_sync(all, low.z, offset));
    high.x = fmaxf(high.x, __shfl_xor_sync(all, high.x, offset));
    high.y = fmaxf(high.y, __shfl_xor_sync(all, high.y, offset));
    high.z = fmaxf(high.z, __shfl_xor_sync(all, high.z, offset));
    reach2 = fmaxf(reach2, __shfl_xor_sync(all, reach2, offset));
  }
  if (!(reach2 < big)) { return -1; }
  if (__ballot_sync(all, valid) == 0u || tree.leaves == 1) { return 0; }  // nothing to add to the seed
  // The reach rounded up, plus 2^-22 for good measure (the float boxes hold the float64 vectors).
  float const reach = __fadd_ru(__fmul_ru(__fsqrt_ru(reach2), 1.f + 0x1.0p-20f), 0x1.0p-22f);
  float const limit2 = __fmul_ru(reach, reach);
  std::uint32_t* const fronts[2] = {buffer, buffer + tree_region_front};
  if (threadIdx.x % 32 == 0) { fronts[0][0] = 1u; }
  __syncwarp();
  int count = 1, side = 0;
  bool fits = true;
  // Each level: the children of its `count` nodes, 32 at a time; the last level's are leaves.
  for (std::size_t level = 1; level < tree.leaves && fits && count > 0; level *= 2) {
    bool const children_are_leaves = 2 * level == tree.leaves;
    int const cap = children_are_leaves ? tree_region_leaf_cap : tree_region_front;
    std::uint32_t* const into = children_are_leaves ? buffer + 2 * tree_region_front : fronts[1 - side];
    int next = 0;
    for (int first = 0; first < 2 * count && fits; first += 32) {
      int const c = first + static_cast<int>(threadIdx.x % 32);
      std::uint32_t child = 0;
      bool meets = false;
      if (c < 2 * count) {
        child = 2 * fronts[side][c / 2] + static_cast<std::uint32_t>(c % 2);
        meets = box_box_distance2(tree.nodes[child], low, high) <= limit2;
      }
      unsigned const hits = __ballot_sync(all, meets);
      fits = next + __popc(hits) <= cap;
      if (fits && meets) { into[next + __popc(hits & below)] = children_are_leaves ? child - static_cast<std::uint32_t>(tree.leaves) : child; }
      next += __popc(hits);
    }
    __syncwarp();  // the level is written before any lane reads it
    count = next;
    side = 1 - side;
  }
  return fits ? count : -1;
}

/// When a warp's threads go on alone (tree_search_one): once the walk they share has taken at least
/// tree_shared_walk_min_steps steps, of which the thread with the most use for them had room in fewer
/// than 1 in tree_shared_walk_share (2: the circle below took 17.7 ms, 4: 23.7 ms; uniform inputs
/// unchanged). A warp whose threads want different parts of the tree walks the
/// union of their searches, which can be many times any one of them: seen from afar, the nearest points
/// of a tiny circle round a pole lie in a different leaf for each thread (measured on an H200, a circle
/// of 1.3e-7 rad, 2^20 × 2^20, k = 1: 343,000 instructions a warp, 35 ms). Alone, a thread walks only
/// its own path; together, neighbours share their loads and the warp's control flow, which is faster
/// while their paths mostly agree (after 64 shared steps whatever their use, uniform k = 16 took 6.6
/// ms instead of 4.6).
inline constexpr int tree_shared_walk_min_steps = 32;
inline constexpr int tree_shared_walk_share = 2;
/// A build may define STREAMKIT_TREE_WALK_ALONE to 1: every thread then walks alone from the root (the
/// tests build a binary so, to test that walk on every input).
#ifndef STREAMKIT_TREE_WALK_ALONE
#define STREAMKIT_TREE_WALK_ALONE 0
#endif
inline constexpr bool tree_walk_alone = STREAMKIT_TREE_WALK_ALONE != 0;

/// Whether leaf node `leaf_node` is one of the seed's (seed_node() `seed`), which tree_search_one scans first.
__device__ __forceinline__ bool is_seed_leaf(tree_view const& tree, std::size_t seed, std::size_t leaf_node)
{
  return (tree.leaves == 1 ? leaf_node : leaf_node / 2) == seed;
}

/// The walk of tree_search_one from the root, after its seed (`seed`): the threads of a warp (neighbouring
/// observations, once sorted) walk the tree together: depth first, a box is entered when any thread may
/// still find a point in it (box_room), first the child that leaves some thread the most room below its
/// worst entry; a thread scans each leaf entered in which it had room, with its own filter (for lists of 1
/// and 2 entries, the warp may rank the entries that pass together: scan_leaf_together). Control flow and
/// the node and leaf loads are the same across the warp (broadcasts). When few of the shared steps are of
/// use to any thread (tree_shared_walk_share), each goes on alone from where the warp stands, with a stack
/// of its own. `stack`: the warp's, in shared memory. `Far`: box_room's.
template <int K, walk_goal Goal, bool Far>
__device__ __forceinline__ void walk_tree(tree_view const& tree, float3 const& p, vec4<double> const& precise_p, knn_list<K>& list,
                                          search_bounds& bounds, bool near_ties, std::size_t seed, std::uint32_t* stack)
{
  constexpr unsigned all = 0xffffffffu;
  // A walk for k ≤ 16 past tree_near_tie_steps (its search_bounds follow at the list's next change; until then
  // they stand for the larger worst entry, which only tests more); a kth_bound walk from the start.
  bool const may_allow_near_ties = K < 32 && *tree.ties_unordered == 0;
  auto const room = [&](std::size_t node) {
    return box_room<(K >= 32), Far>(p, precise_p, tree.nodes[node], tree.precise_nodes[node], tree.capsules[node], bounds, walk_threshold<Goal>(list, near_ties));
  };
  auto const is_seed = [&](std::size_t leaf_node) { return is_seed_leaf(tree, seed, leaf_node); };
  int depth = 0;  // the same in every thread of the warp, as is `node`
  // This thread's room in `node`, as last measured: a leaf where it had none (against a worst entry
  // no smaller than now) is not scanned by it, so that a warp whose threads want different parts of
  // the tree walks the union of their searches but ranks only its own.
  unsigned mine = room(1);
  std::size_t node = __any_sync(all, mine != 0u) ? 1 : 0;
  int useful = 0;  // steps of the shared walk at a box in which this thread had room
  int step = 0;
  for (; node != 0 && !tree_walk_alone; ++step) {
    near_ties = near_ties || (may_allow_near_ties && step == tree_near_tie_steps);
    if (step >= tree_shared_walk_min_steps && step % 16 == 0 && step > tree_shared_walk_share * static_cast<int>(warp_max(useful))) {
      break;
    }
    useful += mine != 0u ? 1 : 0;
    if (node < tree.leaves) {
      // The most room any thread of the warp has in each child (0: no thread wants it).
      unsigned const mine_left = room(2 * node), mine_right = room(2 * node + 1);
      unsigned const left = warp_max(mine_left);
      unsigned const right = warp_max(mine_right);
      if (left != 0u || right != 0u) {
        bool const left_first = left >= right;
        if (left != 0u && right != 0u) {
          if (threadIdx.x % 32 == 0) { stack[depth] = static_cast<std::uint32_t>(left_first ? 2 * node + 1 : 2 * node); }
          __syncwarp();
          ++depth;
        }
        node = left_first ? 2 * node : 2 * node + 1;
        mine = left_first ? mine_left : mine_right;
        continue;
      }
    } else if constexpr (K <= 2) {
      scan_leaf_together<Goal>(tree, node - tree.leaves, mine != 0u && !is_seed(node), p, precise_p, list, bounds, near_ties);
    } else if (mine != 0u && !is_seed(node)) {
      scan_leaf<Goal>(tree, node - tree.leaves, p, precise_p, list, bounds, near_ties);
    }
    node = 0;  // back up to the nearest pending box some thread may still want
    while (depth > 0) {
      --depth;
      std::size_t const pending = stack[depth];
      mine = room(pending);
      if (__any_sync(all, mine != 0u)) {
        node = pending;
        break;
      }
    }
    __syncwarp();  // every lane has read the entry before lane 0 may overwrite it
  }
  if (node != 0) {
    // Alone: the warp's pending boxes and the box it stood at, those in which this thread has room, on
    // its own stack in the order of that room, the largest (the nearest) on top: it goes first where
    // its own answer lies, not where the warp was heading (a circle of 1.3e-7 rad round a pole, 2^20 ×
    // 2^20, k = 1, on an H200: 15.6 → 14.5–14.8 ms). Then the same walk with this thread's rooms only. At most
    // 32 boxes are sorted (one a level, and the current one); a later descent pushes at most one box
    // a level below the one it left, so 64 entries hold them all.
    std::uint32_t own[2 * tree_stack_depth];
    unsigned own_room[tree_stack_depth + 1] = {};  // (zeroed: the compiler cannot see that the sort reads only kept slots)
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
    for (int d = 0; d < depth; ++d) { keep(stack[d], room(stack[d])); }
    __syncwarp();  // every lane has read the stack before lane 0 may write it for its next observation
    keep(static_cast<std::uint32_t>(node), mine);
    depth = kept;
    std::size_t at = 0;
    for (;; ++step) {
      near_ties = near_ties || (may_allow_near_ties && step == tree_near_tie_steps);
      while (at == 0 && depth > 0) {
        std::size_t const pending = own[--depth];
        if (room(pending) != 0u) { at = pending; }
      }
      if (at == 0) { break; }
      if (at < tree.leaves) {
        unsigned const left = room(2 * at), right = room(2 * at + 1);
        bool const left_first = left >= right;
        if (left != 0u && right != 0u) { own[depth++] = static_cast<std::uint32_t>(left_first ? 2 * at + 1 : 2 * at); }
        at = left == 0u && right == 0u ? 0 : (left_first ? 2 * at : 2 * at + 1);
        continue;
      }
      if (!is_seed(at)) { scan_leaf<Goal>(tree, at - tree.leaves, p, precise_p, list, bounds, near_ties); }
      at = 0;
    }
  }
}

/// The k nearest references of observation order[t] (t when order is null) within `limit` (squared
/// chord), for t < searched (a thread past it walks with its warp and writes nothing); `stack`: the
/// warp's, in shared memory. Each thread scans its seed's leaves first, then its warp scans its region's
/// leaves (warp_region_leaves, lists of 1 entry) or walks the tree (walk_tree). A walk_goal::kth_bound
/// search returns k references no farther than the k-th nearest by tree_kth_bound_slack instead.
/// `Deferred`: the observations are those a cell-list query leaves to the walk (tree_search).
template <int K, walk_goal Goal, bool Deferred, class Index, class T>
__device__ __forceinline__ void tree_search_one(points_ref<T> const& observations, std::size_t t, std::size_t searched,
                                                std::uint32_t const* order, tree_view const& tree, neighbors_ref<Index, T> const& result,
                                                int k, double limit, double scale, std::uint32_t* stack)
{
  bool const active = t < searched;
  std::size_t const i = !active ? 0 : (order != nullptr ? order[t] : t);
  double lat = 0.0, lon = 0.0;
  bool const valid = active && load_point(observations, i, lat, lon);
  knn_list<K> list(k, limit);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, true);
  float3 const p{static_cast<float>(precise_p.x), static_cast<float>(precise_p.y), static_cast<float>(precise_p.z)};
  // A thread with nothing to find (past n, or invalid) never wants a box but walks with its warp.
  search_bounds bounds(list.worst());
  if (!valid) { bounds.upper = -cuda::std::numeric_limits<float>::infinity(); }
  bool const near_ties = Goal == walk_goal::kth_bound;  // walk_tree allows them later for k ≤ 16
  // The seed: the leaves under seed_node(), scanned first and skipped by the walk.
  std::size_t const groups = *tree.group_count;
  std::size_t seed = 0;
  if (valid && groups > 0) {
    seed = seed_node(tree, morton_code<21>(precise_p), groups);
    std::size_t const first_leaf = tree.leaves == 1 ? 0 : 2 * seed - tree.leaves;
    for (std::size_t leaf = first_leaf; leaf < min_of(first_leaf + 2, tree.leaves); ++leaf) {
      if (leaf * tree_leaf_size < groups) { scan_leaf<Goal>(tree, leaf, p, precise_p, list, bounds, near_ties); }
    }
  }
  // The warp's region (warp_region_leaves): when it fits, each thread scans the leaves of it its own float box
  // test lets in, a box test costing each lane 1/32 of one where the walk's every lane tests every box it
  // visits (the clustered 2^22 × 2^20 query 30 % shorter, GPS-like 14 %; H200, thirty-second session). The
  // answer is the walk's, exact (no near-ties; ties to the smallest index). A warp whose region is too large
  // (a thread with a loose bound, a curve of references seen from afar) walks on from its seeds.
  bool walks = true;
  if constexpr (tree_tries_regions<K, Goal> && !Deferred) {
    int const found = warp_region_leaves(tree, valid, p, bounds.upper, stack);
    if (found >= 0) {
      std::uint32_t const* const leaves = stack + 2 * tree_region_front;
      for (int j = 0; j < found; ++j) {
        std::size_t const leaf = leaves[j];
        if (valid && !is_seed_leaf(tree, seed, tree.leaves + leaf) && leaf * tree_leaf_size < groups &&
            box_distance2(p, tree.nodes[tree.leaves + leaf]) <= bounds.upper) {
          scan_leaf<Goal>(tree, leaf, p, precise_p, list, bounds, false);
        }
      }
      __syncwarp();  // every lane has read the leaves before the warp's next observations overwrite them
      walks = false;
    }
  }
  if (walks) { walk_tree<K, Goal, Deferred>(tree, p, precise_p, list, bounds, near_ties, seed, stack); }
  if (!active) { return; }
  list.write(result, i, k, lat, lon, tree.coordinates, scale);
  if (!valid && result.invalid_count != nullptr) { atomicAdd(result.invalid_count, 1ull); }
}

/// The k nearest references of each observation (tree_search_one), thread t of the grid's stride
/// loop taking position t of `order`. With `order_count` set, only the first *order_count (≤ n)
/// entries of `order` are searched: a count another kernel left on the device, so the grid is sized
/// for n and its stride loop ends early. Writes row order[t] of `result` and adds the invalid
/// observations to result.invalid_count when it is set. `Goal`: tree_search_one's. `Deferred`: the
/// observations are those a cell-list query leaves to the walk, those of cells whose lists would be
/// long: mostly far from references that lie near each other, seen edge-on from afar. Their warps try
/// no regions, which rarely fit and, where they do, scan leaves a walk nearest first would skip, and
/// their walks also test sphere_box_distance2 (box_room's `Far`), which lets in about half the boxes
/// of such walks (its comment) and costs the others' some 6 %. Measured on an H200 (thirty-fifth
/// session, 2^24 × 2^14, k = 1, bench_hostile tree_index exact; ms against main, which had neither,
/// and against regions alone off): grid_0.01deg_region 19.08 → 16.03 (16.93), refs_one_meridian
/// 11.93 → 10.33 (10.59), the pole circle 15.63 → 16.00 (15.09), cell_3m 13.55 → 13.76 (12.96), one
/// meridian 7.17 → 8.19 (8.11), uniform 1.677 → 1.678 (no observation walks). The grid took 16.10 before
/// the regions (07c98c9) and 20.17 with them. The same test in every walk cost uniform inputs at
/// 2^20 × 2^20 up to 3 % (k = 16) and the pole circle 6 % (k = 1), hence a kernel of its own.
template <int K, class Index, class T, walk_goal Goal = walk_goal::nearest, bool Deferred = false>
__global__ void __launch_bounds__(tree_search_threads, tree_search_min_blocks(K))
  tree_search(points_ref<T> observations, std::size_t n, std::uint32_t const* order, tree_view tree,
              neighbors_ref<Index, T> result, int k, double limit, double scale, std::uint32_t const* order_count = nullptr)
{
  __shared__ std::uint32_t stacks[tree_search_threads / 32][tree_search_warp_words<K, Goal>];
  std::size_t const searched = order_count != nullptr ? *order_count : n;
  // A whole block takes each position range, so that every warp walks with all its lanes.
  for (std::size_t base = blockIdx.x * std::size_t{blockDim.x}; base < searched; base += std::size_t{gridDim.x} * blockDim.x) {
    tree_search_one<K, Goal, Deferred>(observations, base + threadIdx.x, searched, order, tree, result, k, limit, scale,
                                       stacks[threadIdx.x / 32]);
  }
}

}  // namespace streamkit::detail
