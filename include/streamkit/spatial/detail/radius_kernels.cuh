#pragma once
// Kernels of the radius queries (radius_queries.cuh): every reference within a distance of each
// observation, on the brute-force engine (every pair) and on the tree (reading tree_index's data, whose
// k-nearest kernels in tree_kernels.cuh they leave alone), in two passes: count, then fill; and the
// kernels around them (offsets clamped to the caller's storage, the distances of a sorted result).
//
// The rule, the same on both engines: a valid reference j is within radius r of a valid observation
// when haversine(observation, j) × scale ≤ r, by the float64 haversine every search reports. A float32
// filter and a float64 squared-chord filter, both wider than any rounding, decide which pairs get the
// haversine; from r ≥ π × scale on every valid reference is within, without it.

#include <streamkit/spatial/detail/brute_force_knn_kernels.cuh>
#include <streamkit/spatial/detail/knn_list.cuh>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>
#include <streamkit/spatial/detail/tree_kernels.cuh>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

namespace streamkit::detail {

/// What one pass of a radius query does.
enum class radius_mode : int {
  count,          ///< adds each row's count to counts[i] (zeroed by the caller)
  fill_unsorted,  ///< writes index (and distance) at the row's positions, in no particular order
  fill_sorted,    ///< writes sort keys (row, squared chord, reference id) to scratch, sorted and finished later
};

/// What an offsets pass searched row i for: the observation's coordinates as loaded (radians) and its radius.
struct radius_row_tag {
  double lat, lon, radius;
};

/// The rows an offsets pass keeps for the fill that follows (radius_impl.cuh), in one allocation
/// (radius_kept_layout): of each row i its first `slots` entries (chords[i · slots + s]: the float64
/// squared chord's bits, ids[…]: the reference), its count and what it was searched for (tags[i]);
/// order[t]: the row that thread t searched. A fill copies a row from here when it is the same row (the
/// same coordinates and radius, searched on the same references: the same entries) and every entry
/// of it was kept; it searches the others again.
struct radius_kept {
  unsigned slots = 0;  // 0: nothing is kept
  std::uint64_t* chords = nullptr;
  std::uint32_t* ids = nullptr;
  std::uint32_t* found = nullptr;  // the row's count (zeroed first: several threads of a row count into it)
  radius_row_tag* tags = nullptr;
  std::uint32_t* order = nullptr;
};

/// The arguments of one radius pass, the same for both engines.
template <class Index, class T>
struct radius_pass {
  radius_mode mode = radius_mode::count;
  double radius = 0.0;              // in the distance unit
  double const* radii = nullptr;    // one per observation, or null
  double scale = 1.0;               // radians to the distance unit
  std::int64_t* counts = nullptr;   // count: per row
  std::int64_t const* offsets = nullptr;     // fill: n + 1 row starts, clamped to the storage
  unsigned long long* cursors = nullptr;     // fill: each row's next position (starts at offsets; a row's end once searched)
  Index* index = nullptr;           // fill_unsorted
  T* distance = nullptr;            // fill_unsorted, optional
  tree_key* keys = nullptr;         // fill_sorted: radius_sort_key()s
  unsigned long long* invalid_count = nullptr;  // fill: invalid observations are added here when set
  radius_kept kept;                              // count: where the offsets pass keeps its rows (slots 0: nowhere)
  std::uint32_t const* rows = nullptr;           // fill: only rows[0 … *row_count) are searched (in this order)
  std::uint32_t const* row_count = nullptr;
};

/// The tests of one observation's radius.
struct radius_bounds {
  double radius;      // in the distance unit
  double filter;      // float64 squared chord above which no pair can be within (−inf: nothing is)
  double inner;       // float64 squared chord at or below which every pair is within (−inf: none surely is)
  float float_filter; // the same as `filter` for float32 squared chords (float_chord2_filter)
  bool all;           // every valid reference is within

  __device__ radius_bounds(double r, double scale, bool valid) : radius(r), all(false)
  {
    double const infinity = cuda::std::numeric_limits<double>::infinity();
    inner = -infinity;
    if (!valid || !(r >= 0.0)) {  // invalid observation, NaN or negative radius: an empty row
      filter = -infinity;
      float_filter = -cuda::std::numeric_limits<float>::infinity();
      return;
    }
    // haversine() ≤ π, and rounding is monotone: d × scale ≤ π × scale ≤ r.
    all = r >= pi * scale;
    // A pair whose computed haversine × scale is at most r lies less than `angle` apart (1e-9 covers
    // the division and the haversine's rounding below 3.1 rad); its computed float64 chord lies
    // within 1e-15 of the true one. Near antipodes the haversine's rounding grows: no filter there.
    double const angle = r / scale * (1.0 + 1e-9) + 1e-9;
    if (all || angle >= 3.1) {
      filter = infinity;
      float_filter = cuda::std::numeric_limits<float>::infinity();
    } else {
      double const chord = 2.0 * sin(0.5 * angle) + 1e-14;
      filter = chord * chord;
      float_filter = float_chord2_filter(filter);
    }
    // The mirror: a pair whose computed chord is at most that of `inside` lies less than `inside`
    // apart, and its computed haversine × scale is then at most r; such pairs need no haversine.
    double const inside = r / scale * (1.0 - 1e-9) - 1e-9;
    if (!all && inside > 0.0 && inside < 3.1) {
      double const chord = 2.0 * sin(0.5 * inside) - 1e-14;
      if (chord > 0.0) { inner = chord * chord; }
    }
  }

  /// Whether reference `id` (of coordinates[id]), whose float64 squared chord `c` passed `filter`, is
  /// within: `d` gets its haversine distance in radians when it was computed (negative when not: the
  /// chord alone decided).
  __device__ bool within(double c, double lat, double lon, lat_lon const* coordinates, std::uint32_t id, double scale, double& d) const
  {
    if (all || c <= inner) {
      d = -1.0;
      return true;
    }
    lat_lon const ref = coordinates[id];
    d = haversine(lat, lon, ref.lat, ref.lon);
    return d * scale <= radius;
  }
};

/// The key a sorted fill orders its entries by: row, then squared chord (a non-negative double,
/// whose bits order as its values do), then reference id, in 128 bits (tree_key, sorted by CUB with
/// tree_key_bits, most significant first).
__device__ __forceinline__ tree_key radius_sort_key(std::size_t row, double chord2, std::uint32_t id)
{
  auto const bits = static_cast<std::uint64_t>(__double_as_longlong(chord2));
  return {static_cast<std::uint64_t>(row) << 32 | bits >> 32, bits << 32 | id};
}

/// Where one observation's found pairs go: counted (and kept), or written at its row's positions.
/// When several threads find the entries of a row (`shared_row`), each takes its kept slot and its
/// fill position with an atomic (kept.found, pass.cursors); a thread alone on its row counts them itself.
template <class Index, class T>
struct radius_sink {
  radius_pass<Index, T> const& pass;
  lat_lon const* coordinates;  // of the references, by index
  std::size_t row;
  double lat, lon;
  bool shared_row;
  std::int64_t found = 0;
  std::int64_t row_end = 0;

  __device__ radius_sink(radius_pass<Index, T> const& p, lat_lon const* references, std::size_t i, double la, double lo, bool active,
                         bool shared)
      : pass(p), coordinates(references), row(i), lat(la), lon(lo), shared_row(shared)
  {
    if (active && pass.mode != radius_mode::count) { row_end = pass.offsets[i + 1]; }
  }

  /// Records reference `id` at squared chord `c` and haversine `d` (negative: not computed).
  __device__ void add(std::uint32_t id, double c, double d)
  {
    if (pass.mode == radius_mode::count) {
      radius_kept const& kept = pass.kept;
      if (kept.slots > 0) {
        std::uint64_t const slot = shared_row ? atomicAdd(kept.found + row, 1u) : static_cast<std::uint64_t>(found);
        if (slot < kept.slots) {
          std::size_t const at = row * kept.slots + static_cast<std::size_t>(slot);
          kept.chords[at] = static_cast<std::uint64_t>(__double_as_longlong(c));
          kept.ids[at] = id;
        }
      }
      ++found;
      return;
    }
    std::int64_t const at = shared_row ? static_cast<std::int64_t>(atomicAdd(pass.cursors + row, 1ull)) : pass.offsets[row] + found;
    ++found;
    if (at >= row_end) { return; }  // storage sized for other offsets: never written past
    if (pass.mode == radius_mode::fill_sorted) {
      pass.keys[at] = radius_sort_key(row, c, id);
    } else {
      pass.index[at] = static_cast<Index>(id);
      if (pass.distance != nullptr) {
        if (d < 0.0) {
          lat_lon const ref = coordinates[id];
          d = haversine(lat, lon, ref.lat, ref.lon);
        }
        pass.distance[at] = static_cast<T>(d * pass.scale);
      }
    }
  }
};

/// The radius of observation i.
template <class Index, class T>
__device__ inline double row_radius(radius_pass<Index, T> const& pass, std::size_t i)
{
  return pass.radii != nullptr ? pass.radii[i] : pass.radius;
}

/// Shape of the brute-force radius pass: one observation per thread, references through shared memory.
struct radius_brute_force_shape {
  static constexpr int threads = 128;
  static constexpr int tile = 256;
};

/// Brute force: block (x, y) takes observations [x · threads, …) and the references of slice y
/// ([y · slice_length, …)); every pair is filtered in float32, then in float64, then tested by its haversine.
template <class Index, class T>
__global__ void __launch_bounds__(radius_brute_force_shape::threads)
  radius_brute_force(points_ref<T> observations, std::size_t n, vec4<float> const* references, vec4<double> const* precise_references,
                     lat_lon const* coordinates, std::size_t m, std::size_t slice_length, radius_pass<Index, T> pass)
{
  constexpr int tile = radius_brute_force_shape::tile;
  __shared__ vec4<float> tile_points[tile];
  __shared__ vec4<double> precise_tile[tile];
  std::size_t const t = blockIdx.x * std::size_t{radius_brute_force_shape::threads} + threadIdx.x;
  std::size_t const searched = pass.row_count != nullptr ? *pass.row_count : n;
  if (blockIdx.x * std::size_t{radius_brute_force_shape::threads} >= searched) { return; }  // the whole block
  bool const active = t < searched;
  std::size_t const i = !active ? 0 : (pass.rows != nullptr ? pass.rows[t] : t);
  std::size_t const begin = blockIdx.y * slice_length;
  std::size_t const end = min_of(m, begin + slice_length);

  double lat = 0.0, lon = 0.0;
  bool const valid = active && load_point(observations, i, lat, lon);
  radius_bounds const bounds(active ? row_radius(pass, i) : 0.0, pass.scale, valid);
  vec4<float> const p = unit_vector<float>(lat, lon, valid);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, valid);
  radius_sink<Index, T> sink(pass, coordinates, i, lat, lon, active, true);  // the blocks of every slice find entries of a row

  for (std::size_t tile_begin = begin; tile_begin < end; tile_begin += tile) {
    load_reference_tile<tile, radius_brute_force_shape::threads>(tile_points, precise_tile, references, precise_references, tile_begin,
                                                                 end);
    // The float32 filter over 32 references at a time (a mask), then the rare pairs that pass it.
    for (int first = 0; first < tile; first += 32) {
      unsigned passed = 0;
#pragma unroll
      for (int s = 0; s < 32; ++s) { passed |= chord2(p.x, p.y, p.z, tile_points[first + s]) <= bounds.float_filter ? 1u << s : 0u; }
      while (passed != 0) {
        int const t = first + __ffs(static_cast<int>(passed)) - 1;
        passed &= passed - 1;
        double const c = chord2(precise_p.x, precise_p.y, precise_p.z, precise_tile[t]);
        if (!(c <= bounds.filter)) { continue; }
        auto const j = static_cast<std::uint32_t>(tile_begin + static_cast<std::size_t>(t));
        double d;
        if (bounds.within(c, lat, lon, coordinates, j, pass.scale, d)) { sink.add(j, c, d); }
      }
    }
  }
  if (!active) { return; }
  if (pass.mode == radius_mode::count) {
    if (sink.found > 0) { atomicAdd(reinterpret_cast<unsigned long long*>(pass.counts + i), static_cast<unsigned long long>(sink.found)); }
    if (pass.kept.slots > 0 && blockIdx.y == 0) {
      pass.kept.tags[i] = {lat, lon, bounds.radius};
      pass.kept.order[t] = static_cast<std::uint32_t>(i);
    }
  } else if (!valid && blockIdx.y == 0 && pass.invalid_count != nullptr) {
    atomicAdd(pass.invalid_count, 1ull);
  }
}

/// Entries of the stack of a warp's walk: one pending sibling per level of a tree of up to 2^31 leaves, and two more.
inline constexpr int radius_stack_depth = 34;

/// Whether a reference in `node` may be within the bounds of a point p (float, and float64 `precise_p`):
/// the float box test (box_distance2, whose bound covers float rounding as the k-nearest search's
/// does), then, for a box the float test cannot decide, the float64 box and capsule (as box_room).
__device__ __forceinline__ bool radius_wants(tree_view const& tree, std::size_t node, float3 const& p, vec4<double> const& precise_p,
                                             search_bounds const& float_bounds, double filter)
{
  float const bound = box_distance2(p, tree.nodes[node]);
  if (!(bound <= float_bounds.upper) || !(bound <= 8.f)) { return false; }  // 8: an empty box (infinite distance) holds nothing
  if (bound < float_bounds.lower) { return true; }
  double const box_below = box_distance2(precise_p, tree.precise_nodes[node]) * (1.0 - 0x1.0p-48);
  return box_below <= filter && capsule_room(precise_p, tree.capsules[node], float_bounds) >= 0.0;
}

/// Scans the entries of `leaf` that lane `part` of `Lanes` takes (entries part, part + Lanes, …) for
/// one observation: a float32 filter over loads issued together, then the float64 filter; an entry (a
/// group of identical float64 vectors) that passes both is expanded to every member of its group,
/// each within when its chord says so (radius_bounds::inner) or its own haversine does.
template <int Lanes, class Index, class T>
__device__ __forceinline__ void radius_scan_leaf(tree_view const& tree, std::size_t leaf, unsigned part, float3 const& p,
                                                 vec4<double> const& precise_p, radius_bounds const& bounds, double scale,
                                                 radius_sink<Index, T>& sink)
{
  constexpr int entries = tree_leaf_size / Lanes;
  constexpr int batch = entries < 8 ? entries : 8;
  std::size_t const first = leaf * tree_leaf_size + part;
  for (int b = 0; b < entries; b += batch) {
    float4 q[batch];
#pragma unroll
    for (int s = 0; s < batch; ++s) { q[s] = tree.points[first + static_cast<std::size_t>((b + s) * Lanes)]; }
    unsigned passed = 0, single = 0;  // single: groups of one reference (the most common), whose index is precise_q.w
#pragma unroll
    for (int s = 0; s < batch; ++s) {
      passed |= chord2(p.x, p.y, p.z, vec4<float>{q[s].x, q[s].y, q[s].z, 0.f}) <= bounds.float_filter ? 1u << s : 0u;
      single |= __float_as_uint(q[s].w) == 1u ? 1u << s : 0u;
    }
    while (passed != 0) {
      int const s = __ffs(static_cast<int>(passed)) - 1;
      passed &= passed - 1;
      std::size_t const at = first + static_cast<std::size_t>((b + s) * Lanes);
      vec4<double> const precise_q = tree.precise_points[at];
      double const c = chord2(precise_p.x, precise_p.y, precise_p.z, precise_q);
      if (!(c <= bounds.filter)) { continue; }
      std::uint32_t const members = (single >> s & 1u) != 0 ? 1u : __float_as_uint(tree.points[at].w);
      std::uint32_t const run = members > 1 ? tree.run_starts[at] : 0u;
      for (std::uint32_t member = 0; member < members; ++member) {
        std::uint32_t const id = members > 1 ? tree.member_ids[run + member] : static_cast<std::uint32_t>(precise_q.w);
        double d;
        if (bounds.within(c, sink.lat, sink.lon, tree.coordinates, id, scale, d)) { sink.add(id, c, d); }
      }
    }
  }
}

/// Threads of the tree's radius pass per observation: `Lanes` (a power of two up to tree_leaf_size)
/// share each leaf's entries, so that few observations still fill the device.
inline constexpr int radius_tree_lanes_few = 4;
/// Up to this many observations, radius_tree_lanes_few threads take each (2^16 × 4: about the
/// threads an H200 holds); one each above.
inline constexpr std::size_t radius_tree_few_rows = std::size_t{1} << 16;

/// The tree: row r (thread t / Lanes) is observation order[r] (r when order is null), for r below
/// *pass.row_count when set (else n; with the count, a launch of several lanes a row searches only up
/// to radius_tree_few_rows rows and a launch of one lane a row only more); the threads of a warp walk the tree together, depth first,
/// entering a box when any of them may have a reference within its radius there (both children
/// tested at once, the left one entered first and the right one kept on the warp's stack, with each
/// thread's own answer in a bit of `wanted`), and each scans its share of the leaves its row wants
/// (radius_scan_leaf). With several lanes a row, its entries take their places (kept slots, fill
/// positions) with atomics (radius_sink); with one, the thread writes the row's count (kept.found) or
/// where the row's fill ended (pass.cursors).
template <int Lanes, class Index, class T>
__global__ void __launch_bounds__(tree_search_threads)
  radius_tree(points_ref<T> observations, std::size_t n, std::uint32_t const* order, tree_view tree, radius_pass<Index, T> pass)
{
  constexpr unsigned all_lanes = 0xffffffffu;
  __shared__ std::uint32_t stacks[tree_search_threads / 32][radius_stack_depth];
  std::uint32_t* const stack = stacks[threadIdx.x / 32];
  unsigned const lane = threadIdx.x % 32;
  unsigned const part = threadIdx.x % Lanes;
  std::size_t const r = (blockIdx.x * std::size_t{blockDim.x} + threadIdx.x) / Lanes;
  std::size_t const searched = pass.row_count != nullptr ? *pass.row_count : n;
  if (blockIdx.x * std::size_t{blockDim.x} / Lanes >= searched) { return; }  // the whole block: no warp of it walks
  // A count on the device: the launch of several lanes a row takes up to radius_tree_few_rows, the other more.
  if (pass.row_count != nullptr && (Lanes > 1) != (searched <= radius_tree_few_rows)) { return; }
  bool const active = r < searched;
  std::size_t const i = !active ? 0 : (order != nullptr ? order[r] : r);
  double lat = 0.0, lon = 0.0;
  bool const valid = active && load_point(observations, i, lat, lon);
  radius_bounds const bounds(active ? row_radius(pass, i) : 0.0, pass.scale, valid);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, true);
  float3 const p{static_cast<float>(precise_p.x), static_cast<float>(precise_p.y), static_cast<float>(precise_p.z)};
  // The bounds of a list whose worst entry is the filter (its float64 band and capsule reach), with
  // the radius's own float filter.
  bool const empty_row = !(bounds.filter >= 0.0);
  search_bounds float_bounds(empty_row ? 0.0 : bounds.filter);
  float_bounds.upper = bounds.float_filter;
  if (bounds.filter == cuda::std::numeric_limits<double>::infinity()) {
    float_bounds.lower = cuda::std::numeric_limits<float>::infinity();  // every box with a point in it is wanted
  } else if (empty_row) {
    float_bounds.lower = 0.f;
    float_bounds.reach = -1.0;
  }
  radius_sink<Index, T> sink(pass, tree.coordinates, i, lat, lon, active, Lanes > 1);
  auto const wants = [&](std::size_t node) { return radius_wants(tree, node, p, precise_p, float_bounds, bounds.filter); };

  int depth = 0;             // the same in every thread of the warp, as is `node`
  std::uint64_t wanted = 0;  // bit d: whether this thread wants the box at stack[d]
  bool mine = *tree.group_count > 0 && wants(1);
  std::size_t node = __any_sync(all_lanes, mine) ? 1 : 0;
  while (node != 0) {
    if (node < tree.leaves) {
      bool const left = wants(2 * node), right = wants(2 * node + 1);
      bool const any_left = __any_sync(all_lanes, left), any_right = __any_sync(all_lanes, right);
      if (any_left || any_right) {
        if (any_left && any_right) {
          if (lane == 0) { stack[depth] = static_cast<std::uint32_t>(2 * node + 1); }
          wanted = right ? wanted | std::uint64_t{1} << depth : wanted & ~(std::uint64_t{1} << depth);
          ++depth;
        }
        node = any_left ? 2 * node : 2 * node + 1;
        mine = any_left ? left : right;
        continue;
      }
    } else if (mine) {
      radius_scan_leaf<Lanes>(tree, node - tree.leaves, part, p, precise_p, bounds, pass.scale, sink);
    }
    node = 0;  // back up to the last box left for later: some thread wanted it
    if (depth > 0) {
      --depth;
      __syncwarp();  // lane 0's write of the entry is seen by every lane
      node = stack[depth];
      mine = (wanted >> depth & 1u) != 0;
      __syncwarp();  // every lane has read the entry before lane 0 may overwrite it
    }
  }
  std::int64_t found = sink.found;
#pragma unroll
  for (int offset = 1; offset < Lanes; offset *= 2) { found += __shfl_xor_sync(all_lanes, found, offset); }
  if (!active || part != 0) { return; }
  if (pass.mode == radius_mode::count) {
    pass.counts[i] += found;
    if (pass.kept.slots > 0) {
      if (Lanes == 1) { pass.kept.found[i] = static_cast<std::uint32_t>(found); }  // at most the references, fewer than 2^32
      pass.kept.tags[i] = {lat, lon, bounds.radius};
      pass.kept.order[r] = static_cast<std::uint32_t>(i);
    }
    return;
  }
  if (Lanes == 1 && pass.cursors != nullptr) { pass.cursors[i] = static_cast<unsigned long long>(pass.offsets[i] + found); }
  if (!valid && pass.invalid_count != nullptr) { atomicAdd(pass.invalid_count, 1ull); }
}

/// clamped[i] = min(offsets[i], capacity) for i ≤ n, and the fill's cursors (when set) start there.
static __global__ void radius_clamp_offsets(std::int64_t const* offsets, std::size_t n, std::size_t capacity, std::int64_t* clamped,
                                            unsigned long long* cursors)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i <= n; i += std::size_t{gridDim.x} * blockDim.x) {
    std::int64_t const at = min_of(offsets[i], static_cast<std::int64_t>(capacity));
    clamped[i] = at;
    if (cursors != nullptr && i < n) { cursors[i] = static_cast<unsigned long long>(at); }
  }
}

/// The largest row of `offsets` (n + 1) into *largest (zeroed by the caller).
static __global__ void radius_largest_row(std::int64_t const* offsets, std::size_t n, unsigned long long* largest)
{
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    local = max_of(local, static_cast<unsigned long long>(offsets[i + 1] - offsets[i]));
  }
  if (local > 0) { atomicMax(largest, local); }
}

/// The end of a sorted fill: entry e of [0, offsets[n]) (offsets clamped) takes its row and index
/// from the sorted key and, when asked for, the float64 haversine of its pair × scale.
template <class Index, class T>
__global__ void radius_finish_sorted(points_ref<T> observations, std::size_t n, std::int64_t const* offsets, tree_key const* keys,
                                     lat_lon const* coordinates, std::size_t m, Index* index, T* distance, double scale)
{
  std::size_t const total = static_cast<std::size_t>(offsets[n]);
  for (std::size_t e = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; e < total; e += std::size_t{gridDim.x} * blockDim.x) {
    tree_key const key = keys[e];
    auto const id = static_cast<std::uint32_t>(key.low);
    if (id >= m) {  // a slot no fill wrote (offsets of another query): never read past the references
      index[e] = Index(-1);
      if (distance != nullptr) { distance[e] = cuda::std::numeric_limits<T>::quiet_NaN(); }
      continue;
    }
    index[e] = static_cast<Index>(id);
    if (distance == nullptr) { continue; }
    double lat, lon;
    load_point(observations, static_cast<std::size_t>(key.high >> 32), lat, lon);
    lat_lon const ref = coordinates[id];
    distance[e] = static_cast<T>(haversine(lat, lon, ref.lat, ref.lon) * scale);
  }
}

/// Whether the key (squared chord bits a, id a) sorts before (b, id b): the library's order, squared
/// chord (the bits of a non-negative double order as its values do), then reference index.
__device__ __forceinline__ bool key_before(std::uint64_t chord_a, std::uint32_t id_a, std::uint64_t chord_b, std::uint32_t id_b)
{
  return chord_a < chord_b || (chord_a == chord_b && id_a < id_b);
}

/// Sorts `count` keys in place by (high, low), one warp (every lane calls it): a bitonic network for
/// any count, each merge beginning with the mirrored places of its span (k − 1 − i against i), so
/// that every compare-exchange keeps the smaller key in the lower place and the places from count on
/// (virtual largest keys) are never touched. The lanes see each other's writes after each step.
__device__ inline void warp_sort_in_place(tree_key* keys, std::size_t count)
{
  auto const before = [](tree_key const& a, tree_key const& b) { return a.high < b.high || (a.high == b.high && a.low < b.low); };
  unsigned const lane = threadIdx.x % 32;
  for (std::size_t k = 2; k / 2 < count; k *= 2) {
    std::size_t const pairs = (count + k - 1) / k * (k / 2);  // of every span of k places that holds a key
    for (std::size_t j = k / 2; j > 0; j /= 2) {
      for (std::size_t t = lane; t < pairs; t += 32) {
        std::size_t const a = t / j * 2 * j + t % j;
        std::size_t const b = j == k / 2 ? a - t % j + k - 1 - t % j : a + j;  // the mirror, then the half-cleaners
        if (b >= count) { continue; }
        tree_key const key_a = keys[a], key_b = keys[b];
        if (before(key_b, key_a)) {
          keys[a] = key_b;
          keys[b] = key_a;
        }
      }
      __syncwarp();
    }
  }
}

/// Writes entry `at` of a sorted row, reference `id`: the index and, when asked for, the float64
/// haversine from (lat, lon) × scale (−1 and NaN for an id of a slot no fill wrote, past the `m`
/// references: offsets of another query).
template <class Index, class T>
__device__ inline void write_sorted_entry(std::size_t at, std::uint32_t id, double lat, double lon, lat_lon const* coordinates,
                                          std::size_t m, Index* index, T* distance, double scale)
{
  if (id >= m) {
    index[at] = Index(-1);
    if (distance != nullptr) { distance[at] = cuda::std::numeric_limits<T>::quiet_NaN(); }
    return;
  }
  index[at] = static_cast<Index>(id);
  if (distance == nullptr) { return; }
  lat_lon const ref = coordinates[id];
  distance[at] = static_cast<T>(haversine(lat, lon, ref.lat, ref.lon) * scale);
}

/// Sorts the (squared chord bits, id) keys of each group of `width` lanes (a power of two up to 32),
/// one a lane, ascending over the group's lanes: a bitonic network of shuffles. Every lane calls it.
__device__ __forceinline__ void warp_sort_keys(std::uint64_t& chord, std::uint32_t& id, unsigned width)
{
  unsigned const e = threadIdx.x % 32 % width;  // the key's place in its group
  for (unsigned k = 2; k <= width; k *= 2) {
    for (unsigned j = k / 2; j > 0; j /= 2) {
      std::uint64_t const other_chord = __shfl_xor_sync(0xffffffffu, chord, j);
      std::uint32_t const other_id = __shfl_xor_sync(0xffffffffu, id, j);
      bool const keep_smaller = ((e & j) == 0) == ((e & k) == 0);  // the lower place of an ascending pair
      if (key_before(other_chord, other_id, chord, id) == keep_smaller) {
        chord = other_chord;
        id = other_id;
      }
    }
  }
}

/// Swaps keys r and t of a lane's Keys.
template <int Keys>
__device__ __forceinline__ void swap_registers(std::uint64_t (&chord)[Keys], std::uint32_t (&id)[Keys], unsigned r, unsigned t)
{
  std::uint64_t const c = chord[r];
  std::uint32_t const i = id[r];
  chord[r] = chord[t];
  id[r] = id[t];
  chord[t] = c;
  id[t] = i;
}

/// Sorts the 32 · Keys keys of a warp, Keys a lane (a power of two from 2), ascending in the order
/// lane · Keys + r (r: the register): a bitonic network whose compare-exchanges are between lanes
/// (shuffles) for strides from Keys on and between a lane's own registers below. Only the loops over
/// registers are unrolled: the whole network unrolled is too long for the instruction cache. Every
/// lane calls it.
template <int Keys>
__device__ __forceinline__ void warp_sort_keys(std::uint64_t (&chord)[Keys], std::uint32_t (&id)[Keys])
{
  unsigned const lane = threadIdx.x % 32;
#pragma unroll 1
  for (unsigned k = 2; k <= 32u * Keys; k *= 2) {
#pragma unroll 1
    for (unsigned j = k / 2; j >= Keys; j /= 2) {  // with lane ^ (j / Keys), the same register
#pragma unroll
      for (unsigned r = 0; r < Keys; ++r) {
        std::uint64_t const other_chord = __shfl_xor_sync(0xffffffffu, chord[r], j / Keys);
        std::uint32_t const other_id = __shfl_xor_sync(0xffffffffu, id[r], j / Keys);
        bool const keep_smaller = (((lane * Keys + r) & j) == 0) == (((lane * Keys + r) & k) == 0);
        if (key_before(other_chord, other_id, chord[r], id[r]) == keep_smaller) {
          chord[r] = other_chord;
          id[r] = other_id;
        }
      }
    }
#pragma unroll
    for (unsigned j = Keys / 2; j > 0; j /= 2) {  // within the lane: the pairs (r, r + j)
      if (j >= k) { continue; }
#pragma unroll
      for (unsigned r = 0; r < Keys; ++r) {
        if ((r & j) != 0) { continue; }
        unsigned const t = r + j;
        if (key_before(chord[t], id[t], chord[r], id[r]) == (((lane * Keys + r) & k) == 0)) {  // ascending where bit k is clear
          swap_registers(chord, id, r, t);
        }
      }
    }
  }
}

/// The second half of a merge of sorted spans (the first: each key compared with the key of the
/// mirrored place of their span, the smaller kept in the lower place): sorts ascending the 32 · Keys
/// keys of a warp held as warp_sort_keys<Keys> leaves them, which are then a bitonic sequence, by
/// half-cleaners that all keep the smaller key in the lower place (shuffles for strides from Keys on,
/// a lane's own registers below). Every lane calls it.
template <int Keys>
__device__ __forceinline__ void warp_merge_keys(std::uint64_t (&chord)[Keys], std::uint32_t (&id)[Keys])
{
  unsigned const lane = threadIdx.x % 32;
#pragma unroll 1
  for (unsigned j = 16 * Keys; j >= Keys; j /= 2) {
    bool const keep_smaller = ((lane * Keys) & j) == 0;  // the lower place (r < Keys ≤ j: the same for every register)
#pragma unroll
    for (unsigned r = 0; r < Keys; ++r) {
      std::uint64_t const other_chord = __shfl_xor_sync(0xffffffffu, chord[r], j / Keys);
      std::uint32_t const other_id = __shfl_xor_sync(0xffffffffu, id[r], j / Keys);
      if (key_before(other_chord, other_id, chord[r], id[r]) == keep_smaller) {
        chord[r] = other_chord;
        id[r] = other_id;
      }
    }
  }
#pragma unroll
  for (unsigned j = Keys / 2; j > 0; j /= 2) {
#pragma unroll
    for (unsigned r = 0; r < Keys; ++r) {
      if ((r & j) != 0) { continue; }
      unsigned const t = r + j;
      if (key_before(chord[t], id[t], chord[r], id[r])) { swap_registers(chord, id, r, t); }
    }
  }
}

/// A row of at most 32 entries that a lane holds for write_short_rows: where its keys are (`stored`
/// of them from `keys_at`, read by the caller's loader), where it goes (`out_length` entries from
/// `out_at`; 0: the lane holds none) and its observation (radians).
struct radius_short_row {
  std::size_t keys_at = 0;
  std::size_t out_at = 0;
  unsigned stored = 0;
  unsigned out_length = 0;
  double lat = 0.0, lon = 0.0;
};

/// Writes the rows of up to 32 entries that the lanes of a warp hold, several at a time: the rows of
/// (width / 2, width] entries (width 1, 2, 4 … 32) by groups of `width` lanes, one entry a lane, the
/// keys load(keys_at + e, chord, id) sorted across the group when `sorted` (else in their stored
/// order; a place past `stored` holds the last key, which reads as no reference); entry e below
/// out_length goes to out_at + e (write_sorted_entry). Every lane of the warp calls it.
template <class Load, class Index, class T>
__device__ void write_short_rows(radius_short_row const& own, bool sorted, Load const& load, lat_lon const* coordinates, std::size_t m,
                                 Index* index, T* distance, double scale)
{
  constexpr unsigned all_lanes = 0xffffffffu;
  unsigned const lane = threadIdx.x % 32;
  unsigned const size = own.out_length == 0 ? 0u : max(own.stored, own.out_length);
  for (unsigned width = 1; width <= 32; width *= 2) {
    unsigned const groups = 32 / width, e = lane % width;
    for (unsigned pending = __ballot_sync(all_lanes, size > width / 2 && size <= width); pending != 0;) {
      unsigned const nth = __fns(pending, 0, static_cast<int>(lane / width + 1));  // this group's row: the lane holding it
      bool const taken = nth < 32;
      int const source = taken ? static_cast<int>(nth) : static_cast<int>(lane);
      // Every lane shuffles (a lane that skipped one would leave its readers undefined values).
      auto const keys_at = static_cast<std::size_t>(__shfl_sync(all_lanes, static_cast<unsigned long long>(own.keys_at), source));
      auto const out_at = static_cast<std::size_t>(__shfl_sync(all_lanes, static_cast<unsigned long long>(own.out_at), source));
      unsigned const counts = __shfl_sync(all_lanes, own.stored << 16 | own.out_length, source);  // both at most 32
      double const lat = __shfl_sync(all_lanes, own.lat, source), lon = __shfl_sync(all_lanes, own.lon, source);
      unsigned const stored = taken ? counts >> 16 : 0u, out_length = taken ? counts & 0xffffu : 0u;
      std::uint64_t chord = ~0ull;
      std::uint32_t id = ~0u;
      if (e < stored) { load(keys_at + e, chord, id); }
      if (sorted && width > 1) { warp_sort_keys(chord, id, width); }
      if (e < out_length) { write_sorted_entry(out_at + e, id, lat, lon, coordinates, m, index, distance, scale); }
      unsigned const next = __fns(pending, 0, static_cast<int>(groups + 1));  // the first row no group took
      pending = next < 32 ? pending & ~((1u << next) - 1u) : 0u;
    }
  }
}

/// The rows of a sorted fill and where they go, for the kernels that sort them (radius_sort_*):
/// rows[0 … *row_count) (every row when `rows` is null) of `offsets` (n + 1, clamped to the storage);
/// row i's keys (radius_sort_key) lie in keys[offsets[i] …), the first cursors[i] − offsets[i] of
/// them written by the search (the others belong to offsets of another query: they read as no
/// reference); each row is written sorted into index and, when asked for, distance (the float64
/// haversine × scale).
template <class Index, class T>
struct radius_sorted_rows {
  points_ref<T> observations;
  std::size_t n = 0;
  std::uint32_t const* rows = nullptr;
  std::uint32_t const* row_count = nullptr;
  std::int64_t const* offsets = nullptr;
  unsigned long long const* cursors = nullptr;
  tree_key* keys = nullptr;
  lat_lon const* coordinates = nullptr;
  std::size_t m = 0;
  Index* index = nullptr;
  T* distance = nullptr;
  double scale = 1.0;

  /// How many rows are listed.
  __device__ std::size_t count() const { return row_count != nullptr ? *row_count : n; }
  /// The row at position `at` of the list.
  __device__ std::size_t row(std::size_t at) const { return rows != nullptr ? rows[at] : at; }
  /// Calls f(i) in every lane of each warp of the grid, 32 consecutive rows of the list at a time:
  /// i, the row this lane takes, or n when none.
  template <class F>
  __device__ void for_each_32(F&& f) const
  {
    unsigned const warps_per_block = blockDim.x / 32, lane = threadIdx.x % 32;
    std::size_t const warps = std::size_t{gridDim.x} * warps_per_block;
    std::size_t const listed = count();
    for (std::size_t base = (blockIdx.x * std::size_t{warps_per_block} + threadIdx.x / 32) * 32; base < listed; base += warps * 32) {
      f(base + lane < listed ? row(base + lane) : n);
    }
  }
  /// The entries of row i (0 for i = n).
  __device__ std::int64_t length(std::size_t i) const { return i < n ? offsets[i + 1] - offsets[i] : 0; }
  /// The keys of row i that the search wrote (its length at most).
  __device__ std::size_t written(std::size_t i) const
  {
    auto const end = static_cast<std::int64_t>(min_of(cursors[i], static_cast<unsigned long long>(offsets[i + 1])));
    return static_cast<std::size_t>(max_of(end - offsets[i], std::int64_t{0}));
  }
  /// The observation of row i (radians), when distances are asked for.
  __device__ void observation(std::size_t i, double& lat, double& lon) const
  {
    lat = lon = 0.0;
    if (distance != nullptr) { load_point(observations, i, lat, lon); }
  }
  __device__ void write(std::size_t at, std::uint32_t id, double lat, double lon) const
  {
    write_sorted_entry(at, id, lat, lon, coordinates, m, index, distance, scale);
  }
  /// Row i longer than a kernel's room (the caller's largest_row understated it): its unwritten keys
  /// set to the last key, sorted in place in global memory by the warp (warp_sort_in_place: slower
  /// than the kernels' own sorts), and written by it.
  __device__ void sort_in_place(std::size_t i) const
  {
    unsigned const lane = threadIdx.x % 32;
    auto const first = static_cast<std::size_t>(offsets[i]);
    auto const count = static_cast<std::size_t>(length(i));
    for (std::size_t e = written(i) + lane; e < count; e += 32) { keys[first + e] = tree_key{~0ull, ~0ull}; }
    __syncwarp();
    warp_sort_in_place(keys + first, count);
    double lat, lon;
    observation(i, lat, lon);
    for (std::size_t e = lane; e < count; e += 32) { write(first + e, static_cast<std::uint32_t>(keys[first + e].low), lat, lon); }
    __syncwarp();  // every lane has read the row before the next one is sorted
  }
};

/// The (squared chord bits, id) of a radius_sort_key.
__device__ __forceinline__ void split_sort_key(tree_key const& key, std::uint64_t& chord, std::uint32_t& id)
{
  chord = key.high << 32 | key.low >> 32;
  id = static_cast<std::uint32_t>(key.low);
}

/// Calls sort(i) for each listed row i whose length is in (lower, upper] by a group of `Group`
/// threads (a warp, or the whole block of BlockThreads): block b of B takes list positions b, b + B,
/// b + 2B … (BlockThreads of them a step), so that rows next to each other in the list (neighbours on
/// the sphere, of similar lengths: a dense region's long rows sit together) go to different blocks and
/// no block sorts a run of long rows while the others wait; the groups of a block take the rows of
/// its class that a step found in turn. When `last`, the rows above upper are sorted in place (the
/// longest rows, longer than the caller said: slowly, by the group's first warp).
template <int BlockThreads, int Group, class Index, class T, class Sort>
__device__ void for_each_row_of_class(radius_sorted_rows<Index, T> const& s, std::int64_t lower, std::int64_t upper, bool last, Sort&& sort)
{
  static_assert(Group == 32 || Group == BlockThreads, "a warp or the whole block sorts each row");
  constexpr unsigned groups = BlockThreads / Group;
  __shared__ std::uint32_t members[BlockThreads];
  __shared__ unsigned member_count;
  std::size_t const listed = s.count(), blocks = gridDim.x;
  for (std::size_t step = 0; blockIdx.x + step * BlockThreads * blocks < listed; ++step) {
    if (threadIdx.x == 0) { member_count = 0; }
    __syncthreads();
    std::size_t const at = blockIdx.x + (step * BlockThreads + threadIdx.x) * blocks;
    std::int64_t const length = at < listed ? s.length(s.row(at)) : 0;
    if (length > lower && (length <= upper || last)) { members[atomicAdd(&member_count, 1u)] = static_cast<std::uint32_t>(s.row(at)); }
    __syncthreads();
    unsigned const found = member_count;
    for (unsigned k = threadIdx.x / Group; k < found; k += groups) {
      std::size_t const i = members[k];
      if (s.length(i) > upper) {
        if (threadIdx.x % Group < 32) { s.sort_in_place(i); }
      } else {
        sort(i);
      }
    }
    __syncthreads();  // every group has read the members before the next step overwrites them
  }
}

/// Rows of a sorted fill of up to 32 entries, several a warp (write_short_rows); when `last`, the
/// longer ones too (in place, slowly: the caller's largest_row said 32 at most).
template <class Index, class T>
__global__ void __launch_bounds__(128) radius_sort_short_rows(radius_sorted_rows<Index, T> s, bool last)
{
  s.for_each_32([&](std::size_t i) {
    std::int64_t const length = s.length(i);
    radius_short_row own;
    if (length <= 32) {
      own.keys_at = own.out_at = i < s.n ? static_cast<std::size_t>(s.offsets[i]) : 0;
      own.out_length = static_cast<unsigned>(length);
      own.stored = length > 0 ? static_cast<unsigned>(s.written(i)) : 0u;
      if (length > 0) { s.observation(i, own.lat, own.lon); }
    }
    auto const load = [&](std::size_t at, std::uint64_t& chord, std::uint32_t& id) { split_sort_key(s.keys[at], chord, id); };
    write_short_rows(own, true, load, s.coordinates, s.m, s.index, s.distance, s.scale);
    if (last) {
      for (unsigned longer = __ballot_sync(0xffffffffu, length > 32); longer != 0; longer &= longer - 1) {
        s.sort_in_place(static_cast<std::size_t>(__shfl_sync(0xffffffffu, static_cast<unsigned long long>(i), __ffs(static_cast<int>(longer)) - 1)));
      }
    }
  });
}

/// Keys a lane holds in radius_sort_rows_in_registers: rows of up to 32 × this by one warp, longer
/// ones by several warps of a block.
inline constexpr int radius_register_sort_keys = 16;

/// Threads of a block of radius_sort_rows_in_registers<Keys, Warps>: four warps each sorting rows of
/// its own (Warps = 1), or the Warps warps that sort each row together.
template <int Warps>
inline constexpr int radius_register_sort_threads = Warps == 1 ? 128 : 32 * Warps;

/// Dynamic shared memory of radius_sort_rows_in_registers<Keys, Warps>: each warp's sorted ids (Warps
/// = 1), or a row's keys (squared chords, then ids) exchanged between its warps and then its sorted ids.
template <int Keys, int Warps>
inline constexpr std::size_t radius_register_sort_bytes =
  Warps == 1 ? std::size_t{radius_register_sort_threads<1>} * Keys * sizeof(std::uint32_t)
             : std::size_t{32} * Keys * Warps * (sizeof(std::uint64_t) + sizeof(std::uint32_t));

/// Where place p of a row's sorted ids lies in shared memory, when a lane writes Keys consecutive
/// places and reads places 32 apart: p with its low bits flipped by its bits from 5 on, so that
/// neither the writes nor the reads of a warp meet in a bank.
template <int Keys>
__device__ __forceinline__ unsigned swizzled(unsigned p)
{
  return p ^ (p >> 5 & (Keys - 1u));
}

/// Rows of a sorted fill of (room / 2, room] entries, room = 32 · Keys · Warps (and, when `last`, the
/// longer ones, in place, slowly), each in registers, Keys a lane: by one warp (Warps = 1,
/// warp_sort_keys<Keys>), or by Warps warps of a block, each of which sorts its 32 · Keys (warp
/// w: the places from 32 · Keys · w), then merged as a bitonic sort does (for each span k from
/// 64 · Keys to room: each key against the mirrored place of its span, then half-cleaners of strides
/// k / 4 … 1; the strides across warps through shared memory, in places no two lanes of a warp share
/// a bank in, the others in registers (warp_merge_keys)). The sorted ids pass through shared memory
/// so that each row is written by lanes on consecutive entries.
template <int Keys, int Warps, class Index, class T>
__global__ void __launch_bounds__(radius_register_sort_threads<Warps>) radius_sort_rows_in_registers(radius_sorted_rows<Index, T> s, bool last)
{
  constexpr int threads = radius_register_sort_threads<Warps>, group = 32 * Warps;
  constexpr unsigned part_room = 32 * Keys, room = part_room * Warps;
  extern __shared__ std::uint64_t register_sort_memory[];
  unsigned const lane = threadIdx.x % 32;
  unsigned const part = Warps == 1 ? 0u : threadIdx.x / 32;  // this warp's part of the row
  std::uint64_t* const chords = register_sort_memory;         // Warps > 1: the keys exchanged
  std::uint32_t* const ids = Warps == 1 ? reinterpret_cast<std::uint32_t*>(register_sort_memory) + threadIdx.x / 32 * room
                                        : reinterpret_cast<std::uint32_t*>(register_sort_memory + room);
  for_each_row_of_class<threads, group>(s, room / 2, room, last, [&](std::size_t i) {
    auto const length = static_cast<std::size_t>(s.length(i));
    auto const first = static_cast<std::size_t>(s.offsets[i]);
    std::size_t const written = s.written(i);
    std::uint64_t chord[Keys];
    std::uint32_t id[Keys];
#pragma unroll
    for (unsigned r = 0; r < Keys; ++r) {  // the part's keys in any order: consecutive keys by consecutive lanes
      std::size_t const e = std::size_t{part} * part_room + r * 32 + lane;
      chord[r] = ~0ull;
      id[r] = ~0u;
      if (e < written) { split_sort_key(s.keys[first + e], chord[r], id[r]); }
    }
    warp_sort_keys<Keys>(chord, id);
    if constexpr (Warps > 1) {
      // Each key against the key of place g ^ flip (g = part · part_room + lane · Keys + r) in
      // another warp, the lower place keeping the smaller key; key r of a lane lies at (part · Keys + r)
      // · 32 + lane.
      auto const across_warps = [&](unsigned flip) {
        __syncthreads();  // every warp has read what the last exchange (or the last row's ids) left there
#pragma unroll
        for (unsigned r = 0; r < Keys; ++r) {
          unsigned const at = (part * Keys + r) * 32 + lane;
          chords[at] = chord[r];
          ids[at] = id[r];
        }
        __syncthreads();
#pragma unroll
        for (unsigned r = 0; r < Keys; ++r) {
          unsigned const g = part * part_room + lane * Keys + r, other = g ^ flip;
          unsigned const at = (other / part_room * Keys + other % Keys) * 32 + other % part_room / Keys;
          std::uint64_t const other_chord = chords[at];
          std::uint32_t const other_id = ids[at];
          if (key_before(other_chord, other_id, chord[r], id[r]) == (g < other)) {
            chord[r] = other_chord;
            id[r] = other_id;
          }
        }
      };
#pragma unroll 1
      for (unsigned k = 2 * part_room; k <= room; k *= 2) {
        across_warps(k - 1);  // the mirror of g in its span of k
#pragma unroll 1
        for (unsigned j = k / 4; j >= part_room; j /= 2) { across_warps(j); }
        warp_merge_keys<Keys>(chord, id);
      }
      __syncthreads();  // every warp has read the last exchange before the ids are written over it
    }
#pragma unroll
    for (unsigned r = 0; r < Keys; ++r) { ids[swizzled<Keys>(part * part_room + lane * Keys + r)] = id[r]; }
    if constexpr (Warps > 1) {
      __syncthreads();
    } else {
      __syncwarp();
    }
    double lat, lon;
    s.observation(i, lat, lon);
    for (std::size_t e = threadIdx.x % group; e < length; e += group) { s.write(first + e, ids[swizzled<Keys>(static_cast<unsigned>(e))], lat, lon); }
    if constexpr (Warps == 1) { __syncwarp(); }  // every lane has read the row before the next one is written (Warps > 1: the next exchange waits)
  });
}

/// Whether two doubles have the same bits (NaNs included).
__device__ __forceinline__ bool same_bits(double a, double b)
{
  return __double_as_longlong(a) == __double_as_longlong(b);
}

/// The fill of the rows an offsets pass kept (radius_kept): thread t of the grid takes the row kept.order[t]
/// (neighbours on the sphere, as the pass searched them), 32 rows a warp. A row that is the kept one
/// (the same coordinates, radius and count: `offsets`, as the caller gives them, say it holds
/// kept.found[i] ≤ kept.slots entries) is written from the kept entries, several rows at a time by
/// groups of lanes (write_short_rows): sorted by (squared chord, id) across its group when the pass's
/// mode is fill_sorted, in the pass's order otherwise; the index and, when asked for, the float64
/// haversine × scale, into its clamped positions (pass.offsets). Every other row is appended to rows
/// (*row_count of them, zeroed by the caller) to be searched again; invalid observations among the
/// rows written here are added to pass.invalid_count (the search adds the others).
template <class Index, class T>
__global__ void __launch_bounds__(128)
  radius_fill_kept(points_ref<T> observations, std::size_t n, std::int64_t const* offsets, radius_pass<Index, T> pass,
                   lat_lon const* coordinates, std::size_t m, std::uint32_t* rows, std::uint32_t* row_count)
{
  constexpr unsigned all_lanes = 0xffffffffu;
  radius_kept const& kept = pass.kept;
  unsigned const lane = threadIdx.x % 32;
  std::size_t const warps = std::size_t{gridDim.x} * (blockDim.x / 32);
  for (std::size_t base = (blockIdx.x * std::size_t{blockDim.x / 32} + threadIdx.x / 32) * 32; base < n; base += warps * 32) {
    std::size_t const t = base + lane;
    bool const active = t < n;
    std::size_t const i = active ? kept.order[t] : 0;
    radius_short_row own;
    bool const valid = active && load_point(observations, i, own.lat, own.lon);
    std::uint32_t found = 0;
    bool copied = false;
    if (active) {
      radius_row_tag const tag = kept.tags[i];
      found = kept.found[i];
      copied = same_bits(tag.lat, own.lat) && same_bits(tag.lon, own.lon) && same_bits(tag.radius, row_radius(pass, i)) &&
               found <= kept.slots && offsets[i + 1] - offsets[i] == static_cast<std::int64_t>(found);
    }
    if (copied) {  // the storage's length (clamped) is at most `found`
      own.keys_at = i * kept.slots;
      own.stored = found;
      own.out_at = static_cast<std::size_t>(pass.offsets[i]);
      own.out_length = static_cast<unsigned>(pass.offsets[i + 1] - pass.offsets[i]);
    }
    unsigned const again = __ballot_sync(all_lanes, active && !copied);
    if (again != 0) {
      std::uint32_t at = 0;
      if (lane == 0) { at = atomicAdd(row_count, static_cast<std::uint32_t>(__popc(again))); }
      at = __shfl_sync(all_lanes, at, 0);
      if (active && !copied) { rows[at + static_cast<std::uint32_t>(__popc(again & ((1u << lane) - 1u)))] = static_cast<std::uint32_t>(i); }
    }
    unsigned const invalid = __ballot_sync(all_lanes, copied && !valid);
    if (invalid != 0 && lane == 0 && pass.invalid_count != nullptr) { atomicAdd(pass.invalid_count, static_cast<unsigned long long>(__popc(invalid))); }
    auto const load = [&](std::size_t at, std::uint64_t& chord, std::uint32_t& id) {
      chord = kept.chords[at];
      id = kept.ids[at];
    };
    write_short_rows(own, pass.mode == radius_mode::fill_sorted, load, coordinates, m, pass.index, pass.distance, pass.scale);
  }
}

}  // namespace streamkit::detail
