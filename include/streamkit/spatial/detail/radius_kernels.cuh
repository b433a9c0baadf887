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

/// The arguments of one radius pass, the same for both engines.
template <class Index, class T>
struct radius_pass {
  radius_mode mode = radius_mode::count;
  double radius = 0.0;              // in the distance unit
  double const* radii = nullptr;    // one per observation, or null
  double scale = 1.0;               // radians to the distance unit
  std::int64_t* counts = nullptr;   // count: per row
  std::int64_t const* offsets = nullptr;     // fill: n + 1 row starts, clamped to the storage
  unsigned long long* cursors = nullptr;     // brute-force fill: the next position of each row (starts at offsets)
  Index* index = nullptr;           // fill_unsorted
  T* distance = nullptr;            // fill_unsorted, optional
  tree_key* keys = nullptr;         // fill_sorted: radius_sort_key()s
  unsigned long long* invalid_count = nullptr;  // fill: invalid observations are added here when set
};

/// The tests of one observation's radius.
struct radius_bounds {
  double radius;      // in the distance unit
  double filter;      // float64 squared chord above which no pair can be within (−inf: nothing is)
  float float_filter; // the same for float32 squared chords (float_chord2_filter)
  bool all;           // every valid reference is within

  __device__ radius_bounds(double r, double scale, bool valid) : radius(r), all(false)
  {
    double const infinity = cuda::std::numeric_limits<double>::infinity();
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
  }

  /// Whether a reference whose float64 squared chord `c` passed `filter` is within: `d` gets its
  /// haversine distance in radians when it was computed (always unless `all`).
  __device__ bool within(double lat, double lon, lat_lon const& ref, double scale, double& d) const
  {
    if (all) {
      d = -1.0;
      return true;
    }
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

/// Where one observation's found pairs go: counted, or written at its row's positions.
template <class Index, class T>
struct radius_sink {
  radius_pass<Index, T> const& pass;
  std::size_t row;
  double lat, lon;
  std::int64_t found = 0;
  std::int64_t row_end = 0;

  __device__ radius_sink(radius_pass<Index, T> const& p, std::size_t i, double la, double lo, bool active)
      : pass(p), row(i), lat(la), lon(lo)
  {
    if (active && pass.mode != radius_mode::count) { row_end = pass.offsets[i + 1]; }
  }

  /// Records reference `id` at squared chord `c` and haversine `d` (negative: not computed).
  __device__ void add(std::uint32_t id, double c, double d, lat_lon const& ref)
  {
    if (pass.mode == radius_mode::count) {
      ++found;
      return;
    }
    std::int64_t const at = pass.cursors != nullptr ? static_cast<std::int64_t>(atomicAdd(pass.cursors + row, 1ull))
                                                    : pass.offsets[row] + found;
    ++found;
    if (at >= row_end) { return; }  // storage sized for other offsets: never written past
    if (pass.mode == radius_mode::fill_sorted) {
      pass.keys[at] = radius_sort_key(row, c, id);
    } else {
      pass.index[at] = static_cast<Index>(id);
      if (pass.distance != nullptr) {
        if (d < 0.0) { d = haversine(lat, lon, ref.lat, ref.lon); }
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
  std::size_t const i = blockIdx.x * std::size_t{radius_brute_force_shape::threads} + threadIdx.x;
  std::size_t const begin = blockIdx.y * slice_length;
  std::size_t const end = min_of(m, begin + slice_length);
  bool const active = i < n;

  double lat = 0.0, lon = 0.0;
  bool const valid = active && load_point(observations, i, lat, lon);
  radius_bounds const bounds(active ? row_radius(pass, i) : 0.0, pass.scale, valid);
  vec4<float> const p = unit_vector<float>(lat, lon, valid);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, valid);
  radius_sink<Index, T> sink(pass, i, lat, lon, active);

  for (std::size_t tile_begin = begin; tile_begin < end; tile_begin += tile) {
    load_reference_tile<tile, radius_brute_force_shape::threads>(tile_points, precise_tile, references, precise_references, tile_begin,
                                                                 end);
    for (int t = 0; t < tile; ++t) {
      if (!(chord2(p.x, p.y, p.z, tile_points[t]) <= bounds.float_filter)) { continue; }
      double const c = chord2(precise_p.x, precise_p.y, precise_p.z, precise_tile[t]);
      if (!(c <= bounds.filter)) { continue; }
      std::size_t const j = tile_begin + static_cast<std::size_t>(t);
      lat_lon const ref = coordinates[j];
      double d;
      if (bounds.within(lat, lon, ref, pass.scale, d)) { sink.add(static_cast<std::uint32_t>(j), c, d, ref); }
    }
  }
  if (!active) { return; }
  if (pass.mode == radius_mode::count) {
    if (sink.found > 0) { atomicAdd(reinterpret_cast<unsigned long long*>(pass.counts + i), static_cast<unsigned long long>(sink.found)); }
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
  tree_precise_node const box = tree.precise_nodes[node];
  double const dx = fmax(fmax(box.low.x - precise_p.x, precise_p.x - box.high.x), 0.0);
  double const dy = fmax(fmax(box.low.y - precise_p.y, precise_p.y - box.high.y), 0.0);
  double const dz = fmax(fmax(box.low.z - precise_p.z, precise_p.z - box.high.z), 0.0);
  double const box_below = fma(dx, dx, fma(dy, dy, dz * dz)) * (1.0 - 0x1.0p-48);
  return box_below <= filter && capsule_room(precise_p, tree.capsules[node], float_bounds) >= 0.0;
}

/// The tree: thread t takes observation order[t] (t when order is null); the threads of a warp walk the
/// tree together, depth first, entering a box when any of them may have a reference within its radius
/// there, and each scans the leaves it wants: an entry (a group of identical float64 vectors) that
/// passes the filters is expanded to every member of its group, each tested by its own haversine.
template <class Index, class T>
__global__ void __launch_bounds__(tree_search_threads)
  radius_tree(points_ref<T> observations, std::size_t n, std::uint32_t const* order, tree_view tree, radius_pass<Index, T> pass)
{
  constexpr unsigned all_lanes = 0xffffffffu;
  __shared__ std::uint32_t stacks[tree_search_threads / 32][radius_stack_depth];
  std::uint32_t* const stack = stacks[threadIdx.x / 32];
  unsigned const lane = threadIdx.x % 32;
  std::size_t const t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  bool const active = t < n;
  std::size_t const i = !active ? 0 : (order != nullptr ? order[t] : t);
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
  radius_sink<Index, T> sink(pass, i, lat, lon, active);
  std::size_t const groups = *tree.group_count;

  int depth = 0;  // the same in every thread of the warp
  if (groups > 0) {
    if (lane == 0) { stack[0] = 1u; }
    depth = 1;
  }
  __syncwarp();
  while (depth > 0) {
    --depth;
    std::size_t const node = stack[depth];
    __syncwarp();  // every lane has read the entry before lane 0 may overwrite it
    bool const want = radius_wants(tree, node, p, precise_p, float_bounds, bounds.filter);
    if (!__any_sync(all_lanes, want)) { continue; }
    if (node < tree.leaves) {
      if (lane == 0) {
        stack[depth] = static_cast<std::uint32_t>(2 * node + 1);
        stack[depth + 1] = static_cast<std::uint32_t>(2 * node);
      }
      depth += 2;
      __syncwarp();
      continue;
    }
    std::size_t const first = (node - tree.leaves) * tree_leaf_size;
    if (!want || first >= groups) { continue; }
    for (int s = 0; s < tree_leaf_size; ++s) {
      std::size_t const at = first + static_cast<std::size_t>(s);
      float4 const q = tree.points[at];
      if (!(chord2(p.x, p.y, p.z, vec4<float>{q.x, q.y, q.z, 0.f}) <= bounds.float_filter)) { continue; }
      double const c = chord2(precise_p.x, precise_p.y, precise_p.z, tree.precise_points[at]);
      if (!(c <= bounds.filter)) { continue; }
      std::uint32_t const members = __float_as_uint(q.w);
      std::uint32_t const run = tree.run_starts[at];
      for (std::uint32_t member = 0; member < members; ++member) {
        std::uint32_t const id = tree.member_ids[run + member];
        lat_lon const ref = tree.coordinates[id];
        double d;
        if (bounds.within(lat, lon, ref, pass.scale, d)) { sink.add(id, c, d, ref); }
      }
    }
  }
  if (!active) { return; }
  if (pass.mode == radius_mode::count) {
    pass.counts[i] += sink.found;
  } else if (!valid && pass.invalid_count != nullptr) {
    atomicAdd(pass.invalid_count, 1ull);
  }
}

/// clamped[i] = min(offsets[i], capacity) for i ≤ n, and the brute force's cursors (when set) start there.
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

/// Sorts `count` keys in place by (high, low), one thread.
__device__ inline void insertion_sort(tree_key* keys, std::size_t count)
{
  auto const before = [](tree_key const& a, tree_key const& b) { return a.high < b.high || (a.high == b.high && a.low < b.low); };
  for (std::size_t e = 1; e < count; ++e) {
    tree_key const key = keys[e];
    std::size_t at = e;
    while (at > 0 && before(key, keys[at - 1])) {
      keys[at] = keys[at - 1];
      --at;
    }
    keys[at] = key;
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

/// Shared memory of one warp of radius_sort_rows for rows of up to `room` entries: room chords (the
/// float64 squared chord's bits) and room ids.
inline constexpr std::size_t radius_sort_bytes_per_entry = sizeof(std::uint64_t) + sizeof(std::uint32_t);

/// A sorted fill whose rows are all at most `room` long (a power of two from 32, radius_small_row at
/// most): warp w of the grid sorts rows w, w + warps, …, a bitonic sort of the row's (squared chord,
/// id) keys padded to a power of two with the largest key (a row's keys share their row bits): in
/// registers up to 32 entries, else in shared memory; then writes its indices and, when asked for, the
/// float64 haversine of each pair × scale, lanes on consecutive entries.
template <class Index, class T>
__global__ void __launch_bounds__(128)
  radius_sort_rows(points_ref<T> observations, std::size_t n, std::int64_t const* offsets, tree_key* keys,
                   lat_lon const* coordinates, std::size_t m, Index* index, T* distance, double scale, unsigned room)
{
  extern __shared__ std::uint64_t sort_memory[];
  unsigned const warps_per_block = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::uint64_t* const chords = sort_memory + std::size_t{warp} * room * radius_sort_bytes_per_entry / sizeof(std::uint64_t);
  auto* const ids = reinterpret_cast<std::uint32_t*>(chords + room);
  std::size_t const warps = std::size_t{gridDim.x} * warps_per_block;
  // 32 rows at a time: a lane writes its own row when it holds at most one entry (nothing to sort),
  // then the warp sorts the longer ones one after the other.
  for (std::size_t base = (blockIdx.x * std::size_t{warps_per_block} + warp) * 32; base < n; base += warps * 32) {
    std::size_t const own = base + lane;
    std::int64_t const own_length = own < n ? offsets[own + 1] - offsets[own] : 0;
    if (own_length == 1) {
      double lat = 0.0, lon = 0.0;
      if (distance != nullptr) { load_point(observations, own, lat, lon); }
      auto const at = static_cast<std::size_t>(offsets[own]);
      write_sorted_entry(at, static_cast<std::uint32_t>(keys[at].low), lat, lon, coordinates, m, index, distance, scale);
    }
    for (unsigned longer = __ballot_sync(0xffffffffu, own_length > 1); longer != 0; longer &= longer - 1) {
      std::size_t const i = base + static_cast<unsigned>(__ffs(static_cast<int>(longer)) - 1);
      auto const first = static_cast<std::size_t>(offsets[i]);
      auto const length = static_cast<std::size_t>(offsets[i + 1] - offsets[i]);
      if (length > room) {  // longer than the caller's largest_row said: sorted in place by one lane, slowly
        if (lane == 0) { insertion_sort(keys + first, length); }
        __syncwarp();
      }
      unsigned const sorted = length > room ? 0u : static_cast<unsigned>(length);
      if (sorted > 0 && sorted <= 32) {  // one entry a lane: a bitonic sort in registers
        tree_key const key = lane < sorted ? keys[first + lane] : tree_key{~0ull, ~0ull};
        std::uint64_t chord = key.high << 32 | key.low >> 32;
        auto id = static_cast<std::uint32_t>(key.low);
        for (unsigned k = 2; k <= 32; k *= 2) {
          for (unsigned j = k / 2; j > 0; j /= 2) {
            std::uint64_t const other_chord = __shfl_xor_sync(0xffffffffu, chord, j);
            std::uint32_t const other_id = __shfl_xor_sync(0xffffffffu, id, j);
            bool const other_first = other_chord < chord || (other_chord == chord && other_id < id);
            bool const keep_smaller = ((lane & j) == 0) == ((lane & k) == 0);  // the lower lane of an ascending pair
            if (other_first == keep_smaller) {
              chord = other_chord;
              id = other_id;
            }
          }
        }
        ids[lane] = id;
        __syncwarp();
      } else if (sorted > 32) {
        unsigned size = 64;
        while (size < sorted) { size *= 2; }
        for (unsigned e = lane; e < size; e += 32) {
          tree_key const key = e < sorted ? keys[first + e] : tree_key{~0ull, ~0ull};
          chords[e] = key.high << 32 | key.low >> 32;
          ids[e] = static_cast<std::uint32_t>(key.low);
        }
        __syncwarp();
        for (unsigned k = 2; k <= size; k *= 2) {
          for (unsigned j = k / 2; j > 0; j /= 2) {
            for (unsigned t = lane; t < size / 2; t += 32) {
              unsigned const a = t / j * 2 * j + t % j, b = a + j;
              std::uint64_t const chord_a = chords[a], chord_b = chords[b];
              std::uint32_t const id_a = ids[a], id_b = ids[b];
              bool const a_after_b = chord_a > chord_b || (chord_a == chord_b && id_a > id_b);
              if (a_after_b == ((a & k) == 0)) {  // ascending where bit k of a is clear
                chords[a] = chord_b;
                chords[b] = chord_a;
                ids[a] = id_b;
                ids[b] = id_a;
              }
            }
            __syncwarp();
          }
        }
      }
      double lat = 0.0, lon = 0.0;
      if (distance != nullptr && length > 0) { load_point(observations, i, lat, lon); }
      for (std::size_t e = lane; e < length; e += 32) {
        std::uint32_t const id = sorted > 0 ? ids[e] : static_cast<std::uint32_t>(keys[first + e].low);
        write_sorted_entry(first + e, id, lat, lon, coordinates, m, index, distance, scale);
      }
      __syncwarp();  // every lane has read the row before the next one is loaded
    }
  }
}

}  // namespace streamkit::detail
