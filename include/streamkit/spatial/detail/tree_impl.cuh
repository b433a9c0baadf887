#pragma once
// The tree engine's memory and passes (tree_index.cuh): validation, memory layout, the build and the
// query launches.

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/spatial/detail/index_core.cuh>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_launch.cuh>
#include <streamkit/spatial/detail/tree_cells.cuh>
#include <streamkit/spatial/detail/tree_kernels.cuh>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius_queries.cuh>

#include <cub/device/device_merge_sort.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace streamkit {
namespace detail {

/// Observations below this count (two warps) are searched in their own order; from it on they are
/// sorted, since a warp of scattered observations walks the union of their paths (1024 unsorted
/// observations took longer than 4096 sorted ones on an H100).
inline constexpr std::size_t tree_sort_threshold = 64;

/// Leaves of a tree over m references: ⌈m / tree_leaf_size⌉ rounded up to a power of two.
[[nodiscard]] inline std::size_t tree_leaf_count(std::size_t m) noexcept
{
  std::size_t const needed = (m + tree_leaf_size - 1) / tree_leaf_size;
  std::size_t leaves = 1;
  while (leaves < needed) { leaves *= 2; }
  return leaves;
}

/// Where a tree keeps its arrays in one allocation: the groups' points (float, then float64) padded to
/// whole leaves, the nodes (float, then float64, then their capsules), the coordinates by reference index, the groups'
/// keys and run starts, their count and order_tie_runs' two words (tree_order_ties' flag, the long runs' count).
struct tree_layout {
  tree_layout(std::size_t m, std::size_t leaves) noexcept
      : slots((m + tree_leaf_size - 1) / tree_leaf_size * tree_leaf_size),
        precise_offset(align_up(slots * sizeof(float4))),
        offsets_offset(precise_offset + align_up(slots * sizeof(vec4<double>))),
        nodes_offset(offsets_offset + align_up(slots * sizeof(float4))),
        precise_nodes_offset(nodes_offset + align_up(2 * leaves * sizeof(tree_node))),
        capsules_offset(precise_nodes_offset + align_up(2 * leaves * sizeof(tree_precise_node))),
        coordinates_offset(capsules_offset + align_up(2 * leaves * sizeof(tree_capsule))),
        keys_offset(coordinates_offset + align_up(m * sizeof(lat_lon))),
        run_starts_offset(keys_offset + align_up(m * sizeof(std::uint64_t))),
        group_count_offset(run_starts_offset + align_up((m + 1) * sizeof(std::uint32_t))),
        bytes(group_count_offset + 3 * sizeof(std::uint32_t))  // groups, ties_unordered, long tie runs
  {
  }
  template <class Byte>
  tree_view view(Byte* base, std::uint32_t const* member_ids, std::size_t leaves) const noexcept
  {
    return {reinterpret_cast<float4 const*>(base),
            reinterpret_cast<vec4<double> const*>(base + precise_offset),
            reinterpret_cast<float4 const*>(base + offsets_offset),
            reinterpret_cast<tree_node const*>(base + nodes_offset),
            reinterpret_cast<tree_precise_node const*>(base + precise_nodes_offset),
            reinterpret_cast<tree_capsule const*>(base + capsules_offset),
            reinterpret_cast<lat_lon const*>(base + coordinates_offset),
            reinterpret_cast<std::uint64_t const*>(base + keys_offset),
            reinterpret_cast<std::uint32_t const*>(base + run_starts_offset),
            member_ids,
            reinterpret_cast<std::uint32_t const*>(base + group_count_offset),
            reinterpret_cast<std::uint32_t const*>(base + group_count_offset) + 1,
            leaves};
  }
  std::size_t slots, precise_offset, offsets_offset, nodes_offset, precise_nodes_offset, capsules_offset, coordinates_offset, keys_offset, run_starts_offset,
    group_count_offset, bytes;
};

/// Bytes of a radix sort of `count` key-value pairs over bits [0, end_bit), asked of CUB (no launch);
/// `bits` (CUB's decomposer) tells the bits of a key that is no arithmetic type.
template <class Key, class... Bits>
std::size_t sort_temporary_bytes(std::size_t count, int end_bit, Bits... bits)
{
  std::size_t bytes = 0;
  cub::DoubleBuffer<Key> keys(nullptr, nullptr);
  cub::DoubleBuffer<std::uint32_t> ids(nullptr, nullptr);
  STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, ids, static_cast<std::int64_t>(count), bits..., 0, end_bit));
  return bytes;
}

/// Where a sort left its keys and ids.
template <class Key>
struct sorted_pairs {
  Key const* keys;
  std::uint32_t const* ids;
};

/// Sorts `count` pairs held in key and id double buffers that start at `keys` and `ids` (each 2 × count),
/// with `temporary` of sort_temporary_bytes().
template <class Key, class... Bits>
sorted_pairs<Key> sort_by_key(Key* keys, std::uint32_t* ids, std::size_t count, int end_bit, std::byte* temporary,
                              std::size_t temporary_bytes, stream_ref stream, Bits... bits)
{
  cub::DoubleBuffer<Key> key_buffers(keys, keys + count);
  cub::DoubleBuffer<std::uint32_t> id_buffers(ids, ids + count);
  STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortPairs(temporary, temporary_bytes, key_buffers, id_buffers,
                                                     static_cast<std::int64_t>(count), bits..., 0, end_bit, stream.value()));
  return {key_buffers.Current(), id_buffers.Current()};
}

/// Bytes of an exclusive sum of `count` 32-bit values, asked of CUB (no launch).
inline std::size_t scan_temporary_bytes(std::size_t count)
{
  std::size_t bytes = 0;
  STREAMKIT_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<std::uint32_t const*>(nullptr),
                                                   static_cast<std::uint32_t*>(nullptr), static_cast<std::int64_t>(count)));
  return bytes;
}

/// Bytes of sort_tree_keys() for `count` pairs, asked of CUB (no launch).
inline std::size_t tree_key_sort_bytes(std::size_t count)
{
  std::size_t bytes = 0;
  STREAMKIT_CUDA_TRY(cub::DeviceMergeSort::StableSortPairs(nullptr, bytes, static_cast<tree_key*>(nullptr),
                                                           static_cast<std::uint32_t*>(nullptr), static_cast<std::int64_t>(count),
                                                           tree_key_less{}));
  return bytes;
}

/// Sorts `count` (tree_key, id) pairs in place, stably (identical points keep their indices ascending),
/// with `temporary` of tree_key_sort_bytes(). A merge sort: the 16 passes of a radix sort of the 128-bit
/// keys took 2.5–3.7 times as long from 2^12 to 2^20 keys on an H200 (0.197 against 0.053 ms at 2^14,
/// 0.531 against 0.286 at 2^20) and 1.1 times at 2^24.
inline void sort_tree_keys(tree_key* keys, std::uint32_t* ids, std::size_t count, std::byte* temporary, std::size_t temporary_bytes,
                           stream_ref stream)
{
  STREAMKIT_CUDA_TRY(cub::DeviceMergeSort::StableSortPairs(temporary, temporary_bytes, keys, ids, static_cast<std::int64_t>(count),
                                                           tree_key_less{}, stream.value()));
}

/// Blocks of tree_order_long_runs at most, which loops over the runs it is given.
inline constexpr std::size_t tree_tie_block_launch = 4096;

/// Orders the runs of equal keys of `count` sorted (key, id) pairs on `stream` (tree_order_ties, then
/// tree_order_long_runs): `flags` (zeroed before) gets `unordered` in flags[0] and the long runs' count
/// in flags[1]; `long_starts` holds count / (tree_tie_run_limit + 1) entries.
inline void order_tie_runs(lat_lon const* coordinates, tree_key const* sorted_keys, std::uint32_t* sorted_ids, std::size_t count,
                           std::uint32_t* flags, std::uint32_t* long_starts, stream_ref stream)
{
  tie_run_list const long_runs{flags + 1, long_starts};
  unsigned const tie_blocks = grid_size("tree_order_ties", count, 256, grid_stride_blocks);
  tree_order_ties<<<tie_blocks, 256, 0, stream.value()>>>(coordinates, sorted_keys, sorted_ids, count, flags, long_runs);
  STREAMKIT_CHECK_LAUNCH();
  std::size_t const most = count / (tree_tie_run_limit + 1);
  if (most == 0) { return; }
  unsigned const blocks = static_cast<unsigned>(std::min<std::size_t>(most, tree_tie_block_launch));
  tree_order_long_runs<<<blocks, tree_tie_block_threads, 0, stream.value()>>>(coordinates, sorted_keys, sorted_ids, count, long_runs);
  STREAMKIT_CHECK_LAUNCH();
}

/// Bytes observation_order() needs for n observations (none below tree_sort_threshold).
inline std::size_t observation_order_bytes(std::size_t n)
{
  if (n < tree_sort_threshold) { return 0; }
  constexpr int key_bits = 32;  // 30 Morton bits, and the top bits that sort invalid observations last
  return 2 * align_up(2 * n * sizeof(std::uint32_t)) + sort_temporary_bytes<std::uint32_t>(n, key_bits);
}

/// The observations' indices in 30-bit Morton order, so that a warp searches neighbours, sorted on
/// `stream` in `memory` (observation_order_bytes(n)); null (their own order) below tree_sort_threshold.
template <class T>
std::uint32_t const* observation_order(points_ref<T> const& observations, std::byte* memory, stream_ref stream)
{
  std::size_t const n = observations.count;
  if (n < tree_sort_threshold) { return nullptr; }
  constexpr int key_bits = 32;
  std::size_t const sort_bytes = sort_temporary_bytes<std::uint32_t>(n, key_bits);
  std::size_t const pairs_bytes = align_up(2 * n * sizeof(std::uint32_t));
  auto* const keys = reinterpret_cast<std::uint32_t*>(memory);
  auto* const ids = reinterpret_cast<std::uint32_t*>(memory + pairs_bytes);
  tree_observation_keys<T><<<grid_size("tree_observation_keys", n, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    observations, n, keys, ids);
  STREAMKIT_CHECK_LAUNCH();
  return sort_by_key(keys, ids, n, key_bits, memory + 2 * pairs_bytes, sort_bytes, stream).ids;
}

/// Queries with at least this many observations per reference, and at least cell_lists_min_observations,
/// answer from cell lists (tree_cells.cuh): building the lists then costs a small part of the query,
/// and a scan of a short list costs less than a walk of the tree. Measured on an H200 (uniform, k = 1,
/// build + query against the walk): 2^24 x 2^14 4.35 -> 3.50 ms, 2^22 x 2^14 1.40 -> 1.13 ms, but
/// 2^20 x 2^16 0.73 -> 0.84 ms and 2^20 x 2^10 0.34 -> 0.38 ms (the lists' fixed cost).
inline constexpr std::size_t cell_lists_min_ratio = 16;
inline constexpr std::size_t cell_lists_min_observations = std::size_t{1} << 21;
/// Above this many references the cell lists are not used: their memory grows with the references
/// and k (at 2^18 references and k = 32, 393,216 cells of 1,184 bytes).
inline constexpr std::size_t cell_lists_max_references = std::size_t{1} << 18;
/// Resident grids' worth of blocks the walk of a cell-list query's deferred observations launches: its
/// stride loop takes the rest; several waves, so that blocks whose observations walk longer (a cell full
/// of references) do not leave the others idle.
inline constexpr std::size_t walk_waves = 8;

/// Whether a query of n observations against m references answers from cell lists.
[[nodiscard]] inline bool use_cell_lists(std::size_t n, std::size_t m) noexcept
{
  return m <= cell_lists_max_references && n >= cell_lists_min_observations && n / cell_lists_min_ratio >= m;
}

/// Uniform observations a cell of walk_grid_for()'s grid should hold: a warp's.
inline constexpr double walk_cell_observations = 32.0;
/// walk_grid_for() cuts a list cell into at most this many cells a side.
inline constexpr std::uint32_t walk_grid_refinement = 16;

/// The grid in whose cell order the observations of a k = 1 cell-list query that walk the tree take
/// their walk (cell_walk_queue): `grid` (the lists') cut by powers of two, at most walk_grid_refinement a
/// side, while its cells hold at least walk_cell_observations of n uniform observations each. Against the
/// lists' own cells, measured on an H200 (2^24 × 2^14, k = 1, nineteenth session): the pole circle 19.55 →
/// 16.46 ms, one meridian 12.68 → 10.66, the antimeridian 12.74 → 9.58, the 0.01-degree grid 16.49 → 15.74;
/// uniform inputs, which have no walkers and pay only the larger count and scan, 1.687 → 1.697.
[[nodiscard]] inline cube_grid walk_grid_for(cube_grid grid, std::size_t n) noexcept
{
  cube_grid walk = grid;
  while (walk.grid < grid.grid * walk_grid_refinement &&
         static_cast<double>(cube_grid{2 * walk.grid}.cells()) * walk_cell_observations <= static_cast<double>(n)) {
    walk.grid *= 2;
  }
  return walk;
}

/// The cube map and the memory of a cell-list query of n observations with k neighbours against m
/// references: cells of about cell_references references each (a power-of-two grid per face; smaller
/// cells, shorter lists), lists of at most `most` entries (cell_list_most); for k = 1, the walkers' grid
/// (walk_grid_for).
struct cell_plan {
  static constexpr double cell_references = 0.5;
  cell_plan(std::size_t n, std::size_t m, std::size_t k)
  {
    double const wanted = std::sqrt(static_cast<double>(m) / (6.0 * cell_references));
    grid = {1u};
    while (grid.grid < 1024u && 2.0 * grid.grid <= wanted * std::sqrt(2.0)) { grid.grid *= 2; }
    cells = grid.cells();
    walk_grid = walk_grid_for(grid, n);
    walk_cells = walk_grid.cells();
    buckets = 2 * cells + 1;
    most = cell_list_most(k);
    capacity = cells * most;
    bucket_bits = 1;
    while ((std::size_t{1} << bucket_bits) <= buckets) { ++bucket_bits; }
    // k > 1 sorts the observations: keys and ids, each twice (the sort's double buffers). k = 1 queues
    // those of cells without a list: the queue's cells (keys) and ids, and the ids in cell order.
    bool const sorted = k > 1;
    keys_offset = 0;
    ids_offset = align_up((sorted ? 2 : 1) * n * sizeof(std::uint32_t));
    order_offset = ids_offset + align_up((sorted ? 2 : 1) * n * sizeof(std::uint32_t));
    count_offset = order_offset + (sorted ? 0 : align_up(n * sizeof(std::uint32_t)));
    latitude_offset = count_offset + align_up(sizeof(std::uint32_t));
    longitude_offset = latitude_offset + align_up(cells * sizeof(double));
    index_offset = longitude_offset + align_up(cells * sizeof(double));
    angle_offset = index_offset + align_up(cells * k * sizeof(std::int64_t));
    ranges_offset = angle_offset + align_up(cells * k * sizeof(double));
    walkers_offset = ranges_offset + align_up(cells * sizeof(cell_range));
    starts_offset = walkers_offset + (sorted ? 0 : align_up(walk_cells * sizeof(std::uint32_t)));
    entries_offset = starts_offset + (sorted ? 0 : align_up(walk_cells * sizeof(std::uint32_t)));
    // k = 1 lists hold float32 points (tree_cell_nearest), longer ones sorted positions.
    temporary_offset = entries_offset + align_up(capacity * (sorted ? sizeof(std::uint32_t) : sizeof(float4)));
    temporary_bytes = sorted ? sort_temporary_bytes<std::uint32_t>(n, bucket_bits) : scan_temporary_bytes(walk_cells);
    bytes = temporary_offset + temporary_bytes;
  }
  cube_grid grid, walk_grid;
  std::size_t cells, walk_cells, buckets, capacity;  // buckets: the observations' sort keys (tree_cell_buckets); capacity: entries
  std::uint32_t most;
  int bucket_bits;
  std::size_t keys_offset, ids_offset, order_offset, count_offset, latitude_offset, longitude_offset, index_offset, angle_offset,
    ranges_offset, walkers_offset, starts_offset, entries_offset, temporary_offset, temporary_bytes, bytes;
};

/// The cell-list query (tree_cells.cuh) of `observations` into `result` on `stream`, in `memory`
/// (cell_plan::bytes): the cells' centres and their k nearest, the lists (one slot of `most` a cell), the
/// scan of each listed observation's list (k > 1: the observations sorted by cell first; k = 1: in
/// their own order), and the tree walk for the observations of cells without one.
template <int K, class Index, class T>
void cell_list_search(points_ref<T> const& observations, neighbors_ref<Index, T> const& result, tree_view const& tree,
                      cell_plan const& plan, double limit, double scale, std::byte* memory, stream_ref stream)
{
  std::size_t const n = observations.count, cells = plan.cells;
  int const k = static_cast<int>(result.k);
  auto* const ids = reinterpret_cast<std::uint32_t*>(memory + plan.ids_offset);
  auto* const deferred = reinterpret_cast<std::uint32_t*>(memory + plan.count_offset);
  auto* const latitude = reinterpret_cast<double*>(memory + plan.latitude_offset);
  auto* const longitude = reinterpret_cast<double*>(memory + plan.longitude_offset);
  auto* const centre_index = reinterpret_cast<std::int64_t*>(memory + plan.index_offset);
  auto* const centre_angle = reinterpret_cast<double*>(memory + plan.angle_offset);
  auto* const ranges = reinterpret_cast<cell_range*>(memory + plan.ranges_offset);
  std::byte* const entries = memory + plan.entries_offset;
  double const limit_chord = std::sqrt(limit);

  // The lists.
  unsigned const cell_blocks = grid_size("tree_cell_lists", cells, cell_threads);
  tree_cell_centres<<<cell_blocks, cell_threads, 0, stream.value()>>>(plan.grid, latitude, longitude);
  STREAMKIT_CHECK_LAUNCH();
  // Each centre's k-th distance need only bound the k nearest's from above (walk_goal::kth_bound).
  auto const centre_search = tree_search<K, std::int64_t, double, walk_goal::kth_bound>;
  centre_search<<<grid_size("tree_search", cells, tree_search_threads), tree_search_threads, 0, stream.value()>>>(
    points_ref<double>::separate(latitude, longitude, cells), cells, nullptr, tree,
    neighbors_ref<std::int64_t, double>::dense(centre_index, centre_angle, cells, result.k), k,
    std::numeric_limits<double>::infinity(), 1.0, nullptr);
  STREAMKIT_CHECK_LAUNCH();
  // k = 1 lists hold float32 points (tree_cell_nearest), longer ones sorted positions (tree_cell_search).
  using cell_entry = std::conditional_t<K == 1, float4, std::uint32_t>;
  auto* const list_entries = reinterpret_cast<cell_entry*>(entries);
  tree_cell_lists<<<cell_blocks, cell_threads, 0, stream.value()>>>(tree, plan.grid, latitude, longitude, centre_angle, k, limit_chord,
                                                                   plan.most, ranges, list_entries);
  STREAMKIT_CHECK_LAUNCH();
  unsigned const observation_blocks = grid_size("tree_cell_search", n, cell_threads);
  std::uint32_t const* walk_order = nullptr;  // the observations of cells without a list (*deferred of them) first, in cell order
  if constexpr (K == 1) {
    // Each observation in its own order; those of cells without a list queue for the walk, which takes
    // them in cell order.
    cell_walk_queue const walkers{ids, reinterpret_cast<std::uint32_t*>(memory + plan.keys_offset), deferred,
                                  reinterpret_cast<std::uint32_t*>(memory + plan.walkers_offset), plan.walk_grid};
    auto* const starts = reinterpret_cast<std::uint32_t*>(memory + plan.starts_offset);
    auto* const ordered = reinterpret_cast<std::uint32_t*>(memory + plan.order_offset);
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(deferred, 0, sizeof(std::uint32_t), stream.value()));
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(walkers.per_cell, 0, plan.walk_cells * sizeof(std::uint32_t), stream.value()));
    tree_cell_nearest<Index, T><<<observation_blocks, cell_threads, 0, stream.value()>>>(observations, n, tree, plan.grid, ranges,
                                                                                      list_entries, result, limit, scale, walkers);
    STREAMKIT_CHECK_LAUNCH();
    std::size_t scan_bytes = plan.temporary_bytes;
    STREAMKIT_CUDA_TRY(cub::DeviceScan::ExclusiveSum(memory + plan.temporary_offset, scan_bytes, walkers.per_cell, starts,
                                                     static_cast<std::int64_t>(plan.walk_cells), stream.value()));
    tree_cell_walk_order<<<cell_walk_order_blocks, cell_threads, 0, stream.value()>>>(walkers, starts, ordered);
    STREAMKIT_CHECK_LAUNCH();
    walk_order = ordered;
  } else {
    // The observations sorted by bucket: those of cells without a list first (*deferred of them).
    auto* const keys = reinterpret_cast<std::uint32_t*>(memory + plan.keys_offset);
    tree_cell_buckets<T><<<observation_blocks, cell_threads, 0, stream.value()>>>(observations, n, plan.grid, ranges, keys, ids);
    STREAMKIT_CHECK_LAUNCH();
    sorted_pairs<std::uint32_t> const sorted =
      sort_by_key(keys, ids, n, plan.bucket_bits, memory + plan.temporary_offset, plan.temporary_bytes, stream);
    tree_cell_deferred_count<<<1, 1, 0, stream.value()>>>(sorted.keys, n, static_cast<std::uint32_t>(cells), deferred);
    STREAMKIT_CHECK_LAUNCH();
    tree_cell_search<K, Index, T><<<observation_blocks, cell_threads, 0, stream.value()>>>(
      observations, n, sorted.ids, sorted.keys, deferred, tree, static_cast<std::uint32_t>(cells), ranges, list_entries, result, k, limit,
      scale);
    STREAMKIT_CHECK_LAUNCH();
    walk_order = sorted.ids;
  }
  // Usually few or none of the observations walk: a grid of a few waves whose stride loop takes them,
  // not one of n / tree_search_threads blocks that nearly all return at once (83 µs at 2^24 on an H200).
  // For k = 1, the walk of deferred observations (tree_search's `Deferred`); lists of more entries try no
  // regions anyway, and a second instance of their walks was not measured.
  auto const walk = tree_search<K, Index, T, walk_goal::nearest, K == 1>;
  std::size_t const walk_blocks = walk_waves * resident_blocks(walk, tree_search_threads, stream.device());
  walk<<<grid_size("tree_search", n, tree_search_threads, walk_blocks), tree_search_threads, 0, stream.value()>>>(
    observations, n, walk_order, tree, result, k, limit, scale, deferred);
  STREAMKIT_CHECK_LAUNCH();
}

/// The tree engine (tree_index) on engine_core: the tree, its build and the passes of its queries.
template <class T>
class tree_engine : public index_core<T> {
 protected:
  static constexpr char const* name = "tree_index";
  static constexpr std::size_t max_query_observations = (std::size_t{1} << 32) - 1;

  tree_engine(nearest_options const& options, device_resource_ref resource) : index_core<T>(options, resource) {}
  /// Builds the tree over `references` on `stream`; the front end builds it from the brute-force
  /// engine's float64 coordinates (U = double).
  template <class U>
  void prepare(points_ref<U> references, stream_ref stream);
  /// prepare(), and beside it, on a stream of the engine's joined to `stream` in its order, the order
  /// of `observations` that the search sorts them in first (observation_order), into the engine's own
  /// scratch: the front end builds its tree inside a query, and the two overlap. The next search of
  /// the same observations with that scratch uses it, until forget_order(). A first preparation on a
  /// device, or a query that sorts nothing, only prepares.
  template <class U>
  void prepare_ordering(points_ref<U> references, points_ref<T> const& observations, stream_ref stream);
  /// Drops the order prepare_ordering() left (the front end, once the query it was made for is enqueued).
  void forget_order() noexcept { ordered_ = {}; }

  // k-nearest queries (nearest_queries.cuh): the engine's search.
  template <class Index>
  void search_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream, nearest_scratch& scratch) const;
  template <int K, class Index>
  void search(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream, nearest_scratch& scratch) const;
  /// A query ran on `stream`: the index's memory is released after its last query (queries read the
  /// tree and the sorted indices in the build scratch).
  void used(stream_ref stream) noexcept
  {
    tree_.set_stream(stream);
    build_scratch_.set_stream(stream);
  }

  // Radius queries (radius_queries.cuh, detail/radius_impl.cuh): the engine's pass.
  [[nodiscard]] std::size_t radius_scratch_bytes(std::size_t n) const { return observation_order_bytes(n); }
  template <class Index>
  void radius_run(points_ref<T> const& observations, radius_pass<Index, T> pass, stream_ref stream, std::byte* memory) const;

  /// The tree as the query kernels read it.
  [[nodiscard]] tree_view view() const noexcept { return tree_layout(this->count_, leaves_).view(tree_.data(), member_ids_, leaves_); }

  std::size_t leaves_ = 0;                     // a power of two
  std::uint32_t const* member_ids_ = nullptr;  // reference indices in sorted order (groups' members), in build_scratch_
  device_buffer<std::byte> tree_;              // sorted points, nodes, coordinates
  device_buffer<std::byte> build_scratch_;     // keys, ids, the inner build's counter, sort temporaries
  /// The observations prepare_ordering() ordered, and where: their order in scratch_.
  struct observation_ordering {
    points_ref<T> observations;
    std::uint32_t const* order = nullptr;
    [[nodiscard]] bool of(points_ref<T> const& other) const noexcept
    {
      return order != nullptr && other.latitude == observations.latitude && other.longitude == observations.longitude &&
             other.count == observations.count && other.stride == observations.stride && other.unit == observations.unit;
    }
  };
  observation_ordering ordered_;
  /// prepare_ordering()'s second stream, and the events that fork it from the query's stream and join it back.
  struct ordering_stream {
    explicit ordering_stream(int device) : helper(device), fork(device), join(device) {}
    streamkit::stream helper;
    event fork, join;
  };
  std::optional<ordering_stream> ordering_;
};

template <class T>
template <class U>
void tree_engine<T>::prepare(points_ref<U> references, stream_ref stream)
{
  expect_points(references, "references");
  expect_reference_count(references.count);
  int const stream_device = stream.device();
  device_guard guard(stream_device);
  std::size_t const m = references.count;
  std::size_t const leaves = tree_leaf_count(m);
  tree_layout const layout(m, leaves);
  std::size_t const sort_bytes = tree_key_sort_bytes(m);
  std::size_t const scan_bytes = scan_temporary_bytes(m);
  std::size_t const keys_bytes = align_up(m * sizeof(tree_key));
  std::size_t const ids_bytes = align_up(m * sizeof(std::uint32_t));
  std::size_t const marks_bytes = align_up(2 * m * sizeof(std::uint32_t));  // group starts, then their places
  std::size_t const finished_bytes = align_up(sizeof(unsigned));
  std::size_t temporary_bytes = std::max(sort_bytes, scan_bytes);  // the sort's, then the scan's
  std::size_t const scratch_bytes = keys_bytes + ids_bytes + marks_bytes + finished_bytes + temporary_bytes;
  if (stream_device != this->device_) {
    tree_ = device_buffer<std::byte>();
    build_scratch_ = device_buffer<std::byte>();
  }
  if (tree_.size() < layout.bytes) { tree_ = device_buffer<std::byte>(layout.bytes, stream, this->resource_); }
  if (build_scratch_.size() < scratch_bytes) { build_scratch_ = device_buffer<std::byte>(scratch_bytes, stream, this->resource_); }
  this->begin_preparation(m, stream);
  leaves_ = leaves;
  tree_.set_stream(stream);
  build_scratch_.set_stream(stream);

  std::byte* const base = tree_.data();
  auto* const points = reinterpret_cast<float4*>(base);
  auto* const precise_points = reinterpret_cast<vec4<double>*>(base + layout.precise_offset);
  auto* const offsets = reinterpret_cast<float4*>(base + layout.offsets_offset);
  auto* const nodes = reinterpret_cast<tree_node*>(base + layout.nodes_offset);
  auto* const precise_nodes = reinterpret_cast<tree_precise_node*>(base + layout.precise_nodes_offset);
  auto* const capsules = reinterpret_cast<tree_capsule*>(base + layout.capsules_offset);
  auto* const coordinates = reinterpret_cast<lat_lon*>(base + layout.coordinates_offset);
  this->coordinates_ = coordinates;
  auto* const group_keys = reinterpret_cast<std::uint64_t*>(base + layout.keys_offset);
  auto* const run_starts = reinterpret_cast<std::uint32_t*>(base + layout.run_starts_offset);
  auto* const group_count = reinterpret_cast<std::uint32_t*>(base + layout.group_count_offset);
  std::byte* const scratch = build_scratch_.data();
  auto* const keys = reinterpret_cast<tree_key*>(scratch);
  auto* const ids = reinterpret_cast<std::uint32_t*>(scratch + keys_bytes);
  auto* const starts = reinterpret_cast<std::uint32_t*>(scratch + keys_bytes + ids_bytes);
  auto* const places = starts + m;
  auto* const finished_blocks = reinterpret_cast<unsigned*>(scratch + keys_bytes + ids_bytes + marks_bytes);
  std::byte* const temporary = scratch + keys_bytes + ids_bytes + marks_bytes + finished_bytes;

  STREAMKIT_CUDA_TRY(cudaMemsetAsync(finished_blocks, 0, sizeof(unsigned), stream.value()));
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(group_count, 0, 3 * sizeof(std::uint32_t), stream.value()));  // and order_tie_runs' flags
  tree_reference_keys<U><<<grid_size("tree_reference_keys", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    references, m, coordinates, keys, ids, this->invalid_counts_.data());
  STREAMKIT_CHECK_LAUNCH();
  sort_tree_keys(keys, ids, m, temporary, temporary_bytes, stream);
  order_tie_runs(coordinates, keys, ids, m, group_count + 1, places, stream);  // places: free until the groups' scan
  member_ids_ = ids;
  tree_mark_groups<<<grid_size("tree_mark_groups", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    coordinates, keys, ids, m, starts);
  STREAMKIT_CHECK_LAUNCH();
  STREAMKIT_CUDA_TRY(
    cub::DeviceScan::ExclusiveSum(temporary, temporary_bytes, starts, places, static_cast<std::int64_t>(m), stream.value()));
  tree_write_groups<<<grid_size("tree_write_groups", m, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    coordinates, keys, ids, m, starts, places, precise_points, group_keys, run_starts, group_count);
  STREAMKIT_CHECK_LAUNCH();
  tree_build_leaves<<<grid_size("tree_build_leaves", leaves * tree_leaf_size, 256), 256, 0, stream.value()>>>(
    group_count, run_starts, layout.slots, leaves, points, precise_points, offsets, nodes, precise_nodes, capsules);
  STREAMKIT_CHECK_LAUNCH();
  if (leaves > 1) {
    tree_build_inner<<<tree_inner_blocks(leaves), tree_inner_threads, 0, stream.value()>>>(nodes, precise_nodes, capsules,
                                                                                    finished_blocks, leaves);
    STREAMKIT_CHECK_LAUNCH();
  }
}

template <class T>
template <class U>
void tree_engine<T>::prepare_ordering(points_ref<U> references, points_ref<T> const& observations, stream_ref stream)
{
  ordered_ = {};
  int const device = stream.device();
  std::size_t const bytes = observation_order_bytes(observations.count);
  // A first preparation on the device drops the scratch (begin_preparation); cell lists order no observations.
  if (device != this->device_ || bytes == 0 || use_cell_lists(observations.count, references.count)) {
    prepare(references, stream);
    return;
  }
  device_guard guard(device);
  if (!ordering_ || ordering_->helper.device() != device) { ordering_.emplace(device); }
  std::byte* const memory = this->scratch_.reserve(bytes, device, stream, this->resource_);
  ordering_->fork.record(stream);
  ordering_->helper.wait(ordering_->fork);
  std::uint32_t const* const order = observation_order(observations, memory, ordering_->helper);
  ordering_->join.record(ordering_->helper);
  prepare(references, stream);
  stream.wait(ordering_->join);
  ordered_ = {observations, order};
}

template <class T>
template <class Index>
void tree_engine<T>::search_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                  nearest_scratch& scratch) const
{
  with_list_size(result.k, [&](auto list_size) { search<decltype(list_size)::value>(observations, result, stream, scratch); });
}

template <class T>
template <int K, class Index>
void tree_engine<T>::search(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                            nearest_scratch& scratch) const
{
  device_guard guard(this->device_);
  std::size_t const n = observations.count;
  tree_view const tree = view();
  if (use_cell_lists(n, this->count_)) {
    cell_plan const plan(n, this->count_, result.k);
    cell_list_search<K>(observations, result, tree, plan, max_chord2(this->options_), distance_scale(this->options_),
                        scratch.reserve(plan.bytes, this->device_, stream, this->resource_), stream);
    return;
  }
  std::size_t const bytes = observation_order_bytes(n);
  std::uint32_t const* const order =
    &scratch == &this->scratch_ && ordered_.of(observations)
      ? ordered_.order
      : observation_order(observations, bytes > 0 ? scratch.reserve(bytes, this->device_, stream, this->resource_) : nullptr, stream);
  tree_search<K, Index, T><<<grid_size("tree_search", n, tree_search_threads), tree_search_threads, 0, stream.value()>>>(
    observations, n, order, tree, result, static_cast<int>(result.k), max_chord2(this->options_), distance_scale(this->options_));
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace detail
}  // namespace streamkit
