#pragma once
// The cell-list query of tree_index (see tree_index.cuh), for many observations against few
// references: the sphere is cut into the cells of a cube map, each cell gets from the tree the list
// of entries that can be among the k nearest of any point in it, and each observation then scans its
// cell's list instead of walking the tree. For k > 1 the observations are first sorted by cell (a
// radix sort of keys of a few bits), so that the threads of a warp read the same list (broadcast
// loads) and rank the same entries together. For k = 1, where a list is ~10 entries of which one or
// two need ranking, that sort and the scattered reads and writes it brings cost more than the threads
// of a warp reading different lists: each thread takes its observation in the caller's order.
//
// Why a list is complete. For a cell with centre c (a unit vector) whose points all lie within chord
// ρ of c, let D be the chord from c to the farthest of any k references (with multiplicity): the
// centres' search returns k that are at most a relative 2^-11 farther than c's k nearest
// (walk_goal::kth_bound), which costs it no exact ranking of near-ties. Any point p of the cell has k
// references within ρ + D (those of c), so its k nearest lie within ρ + D of p, hence
// within D + 2ρ of c (triangle inequality of the chord, a Euclidean distance). With a distance limit L
// (chord), its answers also lie within L + ρ of c. The list holds every entry within
// min(D + 2ρ, L + ρ) + cell_list_slack of c; the slack covers every rounding of the float64 values
// involved (~1e-15) many times over. An observation's cell is found in float32 (cell_of_point), so
// it may lie just outside the cell it is given (by at most ~4e-6 in chord): ρ includes
// cell_observation_slack for that.

#include <streamkit/spatial/detail/tree_kernels.cuh>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

namespace streamkit::detail {

/// Threads per block of the cell kernels.
inline constexpr int cell_threads = 128;
/// Chord added to every cell's reach and radius: far above the float64 rounding of the chords,
/// corners and k-th distances it covers, far below any distance that matters to the list's length.
inline constexpr double cell_list_slack = 1e-12;
/// Chord added to every cell's radius for the observations placed in it from float32 values (a float32
/// unit vector is within ~1e-6 of the float64 one, its face coordinates within ~4e-6): 25 times over.
inline constexpr double cell_observation_slack = 1e-4;
/// The longest list a cell of a k-nearest query gets (about three times the length of a list over
/// uniform references); a cell past it is searched by the tree walk instead.
[[nodiscard]] __host__ __device__ constexpr std::uint32_t cell_list_most(std::size_t k)
{
  return static_cast<std::uint32_t>(32 + 4 * k);
}
/// A cell's range that says "no list": its observations are searched by the tree walk.
inline constexpr std::uint32_t cell_deferred = 0xffffffffu;

/// Where a cell's list lies in the entries: [begin, end), or begin = cell_deferred.
struct alignas(8) cell_range {
  std::uint32_t begin;
  std::uint32_t end;
};

/// The cube map: face f ∈ 0…5 (the axis f / 2, its sign f % 2), `grid` × `grid` cells per face, `grid`
/// a power of two; cell (f, i, j) has number f · grid² + the Morton interleave of (i, j), so that
/// neighbouring cells have neighbouring numbers.
struct cube_grid {
  std::uint32_t grid;

  [[nodiscard]] __host__ __device__ std::size_t cells() const { return std::size_t{6} * grid * grid; }

  /// The cell of a valid unit vector: the face of its largest component (the first of equal ones), the
  /// other two components over that one's magnitude as (u, v) ∈ [−1, 1]².
  [[nodiscard]] __device__ std::uint32_t cell_of(float3 const& p) const
  {
    float const ax = fabsf(p.x), ay = fabsf(p.y), az = fabsf(p.z);
    int const axis = ax >= ay && ax >= az ? 0 : (ay >= az ? 1 : 2);
    float const major = axis == 0 ? p.x : (axis == 1 ? p.y : p.z);
    float const u = (axis == 0 ? p.y : p.x) / fabsf(major);
    float const v = (axis == 2 ? p.y : p.z) / fabsf(major);
    std::uint32_t const face = 2u * static_cast<std::uint32_t>(axis) + (major < 0.0 ? 1u : 0u);
    return face * grid * grid + static_cast<std::uint32_t>(interleave_2d(along(u), along(v)));
  }

  /// The unit vector of the point (u, v) of face `face`.
  [[nodiscard]] __device__ static vec4<double> on_face(std::uint32_t face, double u, double v)
  {
    double const sign = face % 2 == 0 ? 1.0 : -1.0;
    std::uint32_t const axis = face / 2;
    double const x = axis == 0 ? sign : u, y = axis == 1 ? sign : (axis == 0 ? u : v), z = axis == 2 ? sign : v;
    double const norm = rsqrt(fma(x, x, fma(y, y, z * z)));
    return {x * norm, y * norm, z * norm, 0.0};
  }

  /// Cell `cell`'s face and its (u, v) corners: [u0, u1] × [v0, v1].
  __device__ void bounds(std::uint32_t cell, std::uint32_t& face, double& u0, double& u1, double& v0, double& v1) const
  {
    face = cell / (grid * grid);
    std::uint32_t const code = cell % (grid * grid);
    double const step = 2.0 / grid;
    double const i = static_cast<double>(compact_2d(code >> 1)), j = static_cast<double>(compact_2d(code));
    u0 = fma(i, step, -1.0), u1 = fma(i + 1.0, step, -1.0);
    v0 = fma(j, step, -1.0), v1 = fma(j + 1.0, step, -1.0);
  }

 private:
  [[nodiscard]] __device__ std::uint32_t along(float u) const
  {
    float const c = floorf((u + 1.f) * 0.5f * static_cast<float>(grid));
    return static_cast<std::uint32_t>(fminf(fmaxf(c, 0.f), static_cast<float>(grid - 1)));
  }
  /// Bits of i at the odd places, of j at the even ones.
  [[nodiscard]] __host__ __device__ static std::uint32_t interleave_2d(std::uint32_t i, std::uint32_t j)
  {
    return spread_2d(i) << 1 | spread_2d(j);
  }
  [[nodiscard]] __host__ __device__ static std::uint32_t spread_2d(std::uint32_t v)
  {
    v &= 0xffffu;
    v = (v | v << 8) & 0x00ff00ffu;
    v = (v | v << 4) & 0x0f0f0f0fu;
    v = (v | v << 2) & 0x33333333u;
    v = (v | v << 1) & 0x55555555u;
    return v;
  }
  [[nodiscard]] __host__ __device__ static std::uint32_t compact_2d(std::uint32_t v)
  {
    v &= 0x55555555u;
    v = (v | v >> 1) & 0x33333333u;
    v = (v | v >> 2) & 0x0f0f0f0fu;
    v = (v | v >> 4) & 0x00ff00ffu;
    v = (v | v >> 8) & 0x0000ffffu;
    return v;
  }
};

/// Each cell's centre as latitude and longitude (radians): the search of the centres gives every cell
/// its k-th distance, or a bound on it from above (walk_goal::kth_bound).
static __global__ void tree_cell_centres(cube_grid grid, double* latitude, double* longitude)
{
  std::size_t const cell = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (cell >= grid.cells()) { return; }
  std::uint32_t face;
  double u0, u1, v0, v1;
  grid.bounds(static_cast<std::uint32_t>(cell), face, u0, u1, v0, v1);
  vec4<double> const c = cube_grid::on_face(face, 0.5 * (u0 + u1), 0.5 * (v0 + v1));
  latitude[cell] = atan2(c.z, hypot(c.x, c.y));
  longitude[cell] = atan2(c.y, c.x);
}

/// How far from cell `cell`'s centre (as tree_search sees it: the float64 unit vector of its latitude
/// and longitude) its list reaches, as a chord; +inf for "everything".
__device__ inline double cell_reach(cube_grid const& grid, std::uint32_t cell, vec4<double> const& centre, double kth_angle,
                                    double limit_chord)
{
  std::uint32_t face;
  double u0, u1, v0, v1;
  grid.bounds(cell, face, u0, u1, v0, v1);
  // The cell's edges are great-circle arcs (planes through the origin), shorter than a quarter turn:
  // its farthest point from the centre is a corner.
  double radius = 0.0;
  for (int corner = 0; corner < 4; ++corner) {
    vec4<double> const q = cube_grid::on_face(face, corner % 2 == 0 ? u0 : u1, corner < 2 ? v0 : v1);
    radius = fmax(radius, sqrt(chord2(centre.x, centre.y, centre.z, q)));
  }
  radius += cell_list_slack + cell_observation_slack;
  double const kth = kth_angle >= 0.0 ? 2.0 * sin(0.5 * kth_angle) : cuda::std::numeric_limits<double>::infinity();  // NaN: fewer than k
  return fmin(kth + 2.0 * radius, limit_chord + radius) + cell_list_slack;
}

/// A list entry as the scans read it: the entry's sorted position (the sorted scan reads its point
/// from the tree: a list of k > 1 is long, and four bytes an entry keep its memory small), or its float32
/// point with the position in w (the k = 1 scan: one load an entry, no dependent one).
__device__ inline void set_cell_entry(tree_view const& /*tree*/, std::uint32_t at, std::uint32_t& entry) { entry = at; }
__device__ inline void set_cell_entry(tree_view const& tree, std::uint32_t at, float4& entry)
{
  float4 const q = tree.points[at];
  entry = {q.x, q.y, q.z, __uint_as_float(at)};
}

/// Each cell's list, in its own slot of `most` entries (cell · most on): the entries (sorted positions)
/// within cell_reach() of its centre, found by a walk of the float64 boxes (a thread per cell, its
/// stack in registers and local memory). A cell with more than `most` gets no list (cell_deferred).
template <class Entry>
__global__ void __launch_bounds__(cell_threads)
  tree_cell_lists(tree_view tree, cube_grid grid, double const* latitude, double const* longitude, double const* kth_angles, int k,
                  double limit_chord, std::uint32_t most, cell_range* ranges, Entry* entries)
{
  std::size_t const cell = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (cell >= grid.cells()) { return; }
  std::uint32_t const begin = static_cast<std::uint32_t>(cell) * most;
  vec4<double> const centre = unit_vector<double>(latitude[cell], longitude[cell], true);
  double const reach =
    cell_reach(grid, static_cast<std::uint32_t>(cell), centre, kth_angles[cell * static_cast<std::size_t>(k) + (k - 1)], limit_chord);
  double const reach2 = reach * reach;
  std::size_t const groups = *tree.group_count;
  std::uint32_t count = 0;
  std::uint32_t stack[tree_stack_depth];
  int depth = 0;
  std::size_t node = groups > 0 ? 1 : 0;
  while (node != 0 && count <= most) {
    if (box_distance2(centre, tree.precise_nodes[node]) <= reach2) {
      if (node < tree.leaves) {
        stack[depth++] = static_cast<std::uint32_t>(2 * node + 1);
        node = 2 * node;
        continue;
      }
      std::size_t const first = (node - tree.leaves) * tree_leaf_size;
      for (std::size_t at = first; at < min_of(first + tree_leaf_size, groups); ++at) {
        if (chord2(centre.x, centre.y, centre.z, tree.precise_points[at]) <= reach2) {
          if (count < most) { set_cell_entry(tree, static_cast<std::uint32_t>(at), entries[begin + count]); }
          ++count;
        }
      }
    }
    node = depth > 0 ? stack[--depth] : 0;
  }
  ranges[cell] = count <= most ? cell_range{begin, begin + count} : cell_range{cell_deferred, cell_deferred};
}

/// The float32 unit vector of a valid point (radians, as load_point gives it) from float32 sines and
/// cosines: the float64 ones would cost the k = 1 scan most of its time. Within float_vector_error of
/// the float64 vector: the latitude and the longitude (brought into [−π, π] in float64 first) are
/// rounded to float by at most 2^-23, the sines and cosines are off by at most 2^-21.4 more (2 ulp, or
/// -use_fast_math's intrinsics), the products by an ulp: 25 · 2^-24 in all. A longitude beyond ±3π
/// (which float32 would round by more) takes the float64 vector, rounded.
__device__ inline float3 float_unit_vector(double lat, double lon)
{
  constexpr double pi = 3.141592653589793238462643383279502884;
  if (!(fabs(lon) <= 3.0 * pi)) {
    vec4<double> const v = unit_vector<double>(lat, lon, true);
    return {static_cast<float>(v.x), static_cast<float>(v.y), static_cast<float>(v.z)};
  }
  double const within = lon > pi ? lon - 2.0 * pi : (lon < -pi ? lon + 2.0 * pi : lon);
  float sin_lat, cos_lat, sin_lon, cos_lon;
  sincosf(static_cast<float>(lat), &sin_lat, &cos_lat);
  sincosf(static_cast<float>(within), &sin_lon, &cos_lon);
  return {cos_lat * cos_lon, cos_lat * sin_lon, sin_lat};
}
/// How far float_unit_vector() may lie from the float64 unit vector, with a margin (25 · 2^-24 derived).
inline constexpr float float_vector_error = 0x1.0p-18f;

/// The cell of a valid point (radians) from its float_unit_vector(); cell_observation_slack covers the
/// difference from the float64 vector.
__device__ inline std::uint32_t cell_of_point(cube_grid const& grid, double lat, double lon)
{
  return grid.cell_of(float_unit_vector(lat, lon));
}

/// Each observation's bucket, the key of the sort that puts them in cell order: its cell's among those
/// without a list, [0, cells); among those with one, [cells, 2 cells); 2 cells for an invalid
/// observation. Cells without a list come first, so that their observations are a prefix of the
/// order, which the tree walk takes.
template <class T>
__global__ void tree_cell_buckets(points_ref<T> observations, std::size_t n, cube_grid grid, cell_range const* ranges,
                                  std::uint32_t* buckets, std::uint32_t* ids)
{
  std::size_t const i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i >= n) { return; }
  double lat, lon;
  std::uint32_t bucket = 2 * static_cast<std::uint32_t>(grid.cells());
  if (load_point(observations, i, lat, lon)) {
    std::uint32_t const cell = cell_of_point(grid, lat, lon);
    bucket = ranges[cell].begin == cell_deferred ? cell : static_cast<std::uint32_t>(grid.cells()) + cell;
  }
  buckets[i] = bucket;
  ids[i] = static_cast<std::uint32_t>(i);
}

/// How many of the n sorted buckets are below `cells` (the observations of cells without a list): a
/// binary search by one thread.
static __global__ void tree_cell_deferred_count(std::uint32_t const* sorted_buckets, std::size_t n, std::uint32_t cells,
                                                std::uint32_t* count)
{
  std::size_t low = 0, high = n;
  while (low < high) {
    std::size_t const middle = (low + high) / 2;
    if (sorted_buckets[middle] < cells) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  *count = static_cast<std::uint32_t>(low);
}

/// The k nearest references (k > 1) of the observations of cells with a list, and the rows of invalid
/// observations: thread t takes observation order[t], in the cell of bucket buckets[t], for t from
/// *listed_start on (the observations of cells without a list come before, for the tree walk). A warp
/// holds observations of one cell, or two, so its threads read the same list entries (broadcasts). The
/// float32 filter and float64 ranking are the tree walk's (rank_entry), so the answers are the walk's.
template <int K, class Index, class T>
__global__ void __launch_bounds__(cell_threads)
  tree_cell_search(points_ref<T> observations, std::size_t n, std::uint32_t const* order, std::uint32_t const* buckets,
                   std::uint32_t const* listed_start, tree_view tree, std::uint32_t cells, cell_range const* ranges,
                   std::uint32_t const* entries, neighbors_ref<Index, T> result, int k, double limit, double scale)
{
  std::size_t const t = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (t >= n || t < *listed_start) { return; }
  std::size_t const i = order[t];
  std::uint32_t const bucket = buckets[t];
  // Loaded before the observation arrives: invalid observations (bucket 2 cells) have an empty range.
  cell_range const range = bucket < 2 * cells ? ranges[bucket - cells] : cell_range{0u, 0u};
  double lat = 0.0, lon = 0.0;
  bool const valid = load_point(observations, i, lat, lon);
  knn_list<K> list(k, limit);
  if (valid) {
    vec4<double> const precise_p = unit_vector<double>(lat, lon, true);
    float3 const p{static_cast<float>(precise_p.x), static_cast<float>(precise_p.y), static_cast<float>(precise_p.z)};
    search_bounds bounds(list.worst());
    // Batches of loads issued together (the list's entries, then their points), then the filter.
    constexpr std::uint32_t batch = 8;
    for (std::uint32_t e = range.begin; e < range.end; e += batch) {
      std::uint32_t at[batch];
      float4 q[batch];
#pragma unroll
      for (std::uint32_t s = 0; s < batch; ++s) { at[s] = entries[min_of(e + s, range.end - 1)]; }
#pragma unroll
      for (std::uint32_t s = 0; s < batch; ++s) { q[s] = tree.points[at[s]]; }
      unsigned passed = 0;
#pragma unroll
      for (std::uint32_t s = 0; s < batch; ++s) {
        bool const in = e + s < range.end && chord2(p.x, p.y, p.z, vec4<float>{q[s].x, q[s].y, q[s].z, 0.f}) <= bounds.upper;
        passed |= in ? 1u << s : 0u;
      }
      bool taken = false;
      while (passed != 0) {
        int const s = __ffs(static_cast<int>(passed)) - 1;
        passed &= passed - 1;
        // The entry is read again, from L1: indexing at[] by s would put it in local memory.
        taken |= rank_entry(tree, entries[e + static_cast<std::uint32_t>(s)], precise_p, list);
      }
      if (taken) { bounds = search_bounds(list.worst()); }
    }
  }
  list.write(result, i, k, lat, lon, tree.coordinates, scale);
  if (!valid && result.invalid_count != nullptr) { atomicAdd(result.invalid_count, 1ull); }
}

/// Adds the calling lanes of `group` (lanes that share `counter`) to *counter with one atomic, and
/// gives each its slot: the old value plus its rank in the group.
__device__ inline std::uint32_t warp_group_add(std::uint32_t* counter, unsigned group)
{
  unsigned const lane = threadIdx.x % 32;
  int const leader = __ffs(static_cast<int>(group)) - 1;
  std::uint32_t base = 0;
  if (lane == static_cast<unsigned>(leader)) { base = atomicAdd(counter, static_cast<std::uint32_t>(__popc(group))); }
  return __shfl_sync(group, base, leader) + static_cast<std::uint32_t>(__popc(group & ((1u << lane) - 1u)));
}

/// The observations that walk the tree (of cells without a list): their ids and their cells of `grid`
/// in arrival order (`ids`, `cells`, *count of them), and how many each such cell has (`per_cell`), from
/// which tree_cell_walk_order puts them in that cell order. `grid` is finer than the lists' grid
/// (cell_plan::walk_grid), so that a warp of walkers holds neighbours, as the Morton order of a walk
/// without lists does: in one list cell's random arrival order, a warp's observations are spread over
/// the whole cell and want more of the tree.
struct cell_walk_queue {
  std::uint32_t* ids;
  std::uint32_t* cells;
  std::uint32_t* count;
  std::uint32_t* per_cell;
  cube_grid grid;
};

/// The largest float32 squared chord (float_vector_error apart from its float64 vector, as the k = 1
/// scan's point is) that an entry can have when its float64 chord is at most that of an entry whose
/// float32 squared chord is `nearest`. With d the chords between the float32 points and D the float64
/// ones, |d − D| ≤ E = float_vector_error + 2^-24 (the entry's rounding), so D ≤ D₁ needs d ≤ d₁ + 2E;
/// the float32 chord2 is within 5 · 2^-24 relative of d², sqrt and the margins rounded up.
__device__ __forceinline__ float nearest_candidate_bound(float nearest)
{
  constexpr float two_errors = 2.f * (float_vector_error + 0x1.0p-24f);
  float const chord = __fadd_ru(__fmul_ru(__fsqrt_ru(nearest), 1.f + 0x1.0p-22f), two_errors);
  return __fmul_ru(__fmul_ru(chord, chord), 1.f + 0x1.0p-21f);
}

/// The nearest reference (k = 1) of each observation, thread i taking observation i: reads and writes
/// in the caller's order, no sort. An observation of a cell without a list joins `walkers` instead.
/// One pass over the list in float32, from float_unit_vector() (the float64 sines and cosines are
/// left for the rare observation that needs them): the entry nearest in float32, and a mask of the
/// entries that may be as near in float64 (nearest_candidate_bound of the nearest so far, which only
/// shrinks, so the mask holds every entry the final bound would take). When the nearest is the only
/// one and surely within the limit, it is the answer; else the float64 vector ranks it first (a tight
/// filter from the start) and then the masked entries that pass the tree walk's filter (rank_entry),
/// so the answers are the walk's.
template <class Index, class T>
__global__ void __launch_bounds__(cell_threads)
  tree_cell_nearest(points_ref<T> observations, std::size_t n, tree_view tree, cube_grid grid, cell_range const* ranges,
                    float4 const* entries, neighbors_ref<Index, T> result, double limit, double scale, cell_walk_queue walkers)
{
  static_assert(cell_list_most(1) <= 64, "the candidates' mask has 64 bits");
  std::size_t const i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i >= n) { return; }
  double lat = 0.0, lon = 0.0;
  bool const valid = load_point(observations, i, lat, lon);
  float3 const p = valid ? float_unit_vector(lat, lon) : float3{0.f, 0.f, 0.f};
  std::uint32_t const cell = valid ? grid.cell_of(p) : 0u;
  cell_range const range = valid ? ranges[cell] : cell_range{0u, 0u};
  bool const walks = range.begin == cell_deferred;
  knn_list<1> list(1, limit);
  if (valid && !walks) {
    float nearest = cuda::std::numeric_limits<float>::infinity();
    float bound = nearest;
    std::uint32_t seed = range.end;
    std::uint64_t candidates = 0;
    for (std::uint32_t e = range.begin; e < range.end; ++e) {
      float4 const q = entries[e];
      float const c = chord2(p.x, p.y, p.z, vec4<float>{q.x, q.y, q.z, 0.f});
      if (c < nearest) {
        nearest = c;
        seed = e;
        bound = nearest_candidate_bound(c);
      }
      candidates |= c <= bound ? std::uint64_t{1} << (e - range.begin) : 0u;
    }
    if (seed != range.end) {
      std::uint32_t const seed_at = __float_as_uint(entries[seed].w);
      candidates &= ~(std::uint64_t{1} << (seed - range.begin));
      if (candidates == 0 && static_cast<double>(bound) <= limit) {
        // Every other entry is farther in float64, and this one within the limit (its squared chord is
        // at most `bound`): only its index is written.
        list.offer(static_cast<double>(bound), static_cast<std::uint32_t>(tree.precise_points[seed_at].w));
      } else {
        vec4<double> const precise_p = unit_vector<double>(lat, lon, true);
        float3 const rounded{static_cast<float>(precise_p.x), static_cast<float>(precise_p.y), static_cast<float>(precise_p.z)};
        search_bounds bounds(list.worst());
        if (rank_entry(tree, seed_at, precise_p, list)) { bounds = search_bounds(list.worst()); }
        while (candidates != 0) {
          std::uint32_t const e = range.begin + static_cast<std::uint32_t>(__ffsll(static_cast<long long>(candidates)) - 1);
          candidates &= candidates - 1;
          float4 const q = entries[e];
          if (chord2(rounded.x, rounded.y, rounded.z, vec4<float>{q.x, q.y, q.z, 0.f}) <= bounds.upper) {
            if (rank_entry(tree, __float_as_uint(q.w), precise_p, list)) { bounds = search_bounds(list.worst()); }
          }
        }
      }
    }
  }
  unsigned const walking = __ballot_sync(__activemask(), walks);
  if (walks) {
    std::uint32_t const slot = warp_group_add(walkers.count, walking);
    std::uint32_t const walk_cell = walkers.grid.cell_of(p);
    walkers.ids[slot] = static_cast<std::uint32_t>(i);
    walkers.cells[slot] = walk_cell;
    (void)warp_group_add(walkers.per_cell + walk_cell, __match_any_sync(walking, walk_cell));
    return;
  }
  list.write(result, i, 1, lat, lon, tree.coordinates, scale);
  if (!valid && result.invalid_count != nullptr) { atomicAdd(result.invalid_count, 1ull); }
}

/// Blocks of tree_cell_walk_order, which loops over the queue: it is usually empty.
inline constexpr unsigned cell_walk_order_blocks = 1024;

/// The walkers' ids in the order of their cells of walkers.grid, into `ordered`: `starts` holds each
/// cell's first place (the exclusive sum of walkers.per_cell) and is advanced past its walkers. Within a
/// cell the order is that of the atomics; the walk's answers do not depend on it.
static __global__ void __launch_bounds__(cell_threads)
  tree_cell_walk_order(cell_walk_queue walkers, std::uint32_t* starts, std::uint32_t* ordered)
{
  std::uint32_t const count = *walkers.count;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < count; j += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t const cell = walkers.cells[j];
    ordered[warp_group_add(starts + cell, __match_any_sync(__activemask(), cell))] = walkers.ids[j];
  }
}

}  // namespace streamkit::detail
