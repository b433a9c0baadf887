#pragma once
// Host side of the radius queries (radius_queries.cuh): validation, the two passes, sorting, bounds,
// written once over the engines' data; each engine supplies its pass (radius_run), the reject step is
// index_core's, and the front end forwards to the engine it picks (radius_dispatch).

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/spatial/brute_force_index.cuh>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_launch.cuh>
#include <streamkit/spatial/detail/radius_kernels.cuh>
#include <streamkit/spatial/radius_queries.cuh>
#include <streamkit/spatial/tree_index.cuh>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace streamkit {
namespace detail {

/// Throws std::invalid_argument naming the field unless a radius query may run with `radius`.
inline void expect_radius_options(radius_options const& radius)
{
  STREAMKIT_EXPECTS(radius.radii != nullptr || radius.radius >= 0.0, std::invalid_argument,
                    "radius.radius: must be at least 0 (infinity for every reference), got " + std::to_string(radius.radius));
}

/// The checks of every radius query on an engine with `references` references on `device`.
template <class T>
void expect_radius_query(std::size_t references, int device, points_ref<T> const& observations, radius_options const& radius,
                         stream_ref stream)
{
  STREAMKIT_EXPECTS(references > 0, std::logic_error, "radius query of a moved-from index");
  expect_points(observations, "observations");
  expect_radius_options(radius);
  STREAMKIT_EXPECTS(observations.count < std::size_t{1} << 32, std::invalid_argument,
                    "observations: " + std::to_string(observations.count) + " points; a radius query takes at most 2^32 - 1");
  if (observations.count == 0) { return; }
  int const stream_device = stream.device();
  STREAMKIT_EXPECTS(stream_device == device, std::invalid_argument,
                    "stream: belongs to device " + std::to_string(stream_device) + " but the reference set to device " +
                      std::to_string(device));
}

/// The std::length_error of a blocking radius query whose result exceeds its bounds (nothing is written
/// when it throws); `largest` is the largest row, `total` the sum of all rows.
inline void expect_radius_bounds(radius_options const& radius, unsigned long long largest, unsigned long long total, std::size_t rows)
{
  STREAMKIT_EXPECTS(largest <= radius.max_per_row, std::length_error,
                    "radius query: a row would hold " + std::to_string(largest) + " references within the radius, above max_per_row = " +
                      std::to_string(radius.max_per_row) + " (" + std::to_string(total) + " in all over " + std::to_string(rows) +
                      " rows); nothing was returned");
  STREAMKIT_EXPECTS(total <= radius.max_total, std::length_error,
                    "radius query: " + std::to_string(total) + " references within the radius in all (" + std::to_string(rows) +
                      " rows, the largest " + std::to_string(largest) + "), above max_total = " + std::to_string(radius.max_total) +
                      "; nothing was returned");
}

/// Bytes of CUB's exclusive sum of `count` 64-bit values (no launch).
inline std::size_t radius_scan_bytes(std::size_t count)
{
  std::size_t bytes = 0;
  STREAMKIT_CUDA_TRY(cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<std::int64_t const*>(nullptr),
                                                   static_cast<std::int64_t*>(nullptr), static_cast<std::int64_t>(count)));
  return bytes;
}

/// Bytes of CUB's radix sort of `count` radius_sort_key()s on bits [0, end_bit) (no launch).
inline std::size_t radius_sort_bytes(std::size_t count, int end_bit)
{
  std::size_t bytes = 0;
  cub::DoubleBuffer<tree_key> keys(nullptr, nullptr);
  STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortKeys(nullptr, bytes, keys, static_cast<std::int64_t>(count), tree_key_bits{}, 0, end_bit));
  return bytes;
}

/// Sorts the `count` keys of the double buffer at `keys` (2 × count) on bits [0, end_bit), with
/// `temporary` of radius_sort_bytes(); where they ended up (ids: null).
inline sorted_pairs<tree_key> sort_keys(tree_key* keys, std::size_t count, int end_bit, std::byte* temporary, std::size_t temporary_bytes,
                                        stream_ref stream)
{
  cub::DoubleBuffer<tree_key> buffers(keys, keys + count);
  STREAMKIT_CUDA_TRY(cub::DeviceRadixSort::SortKeys(temporary, temporary_bytes, buffers, static_cast<std::int64_t>(count), tree_key_bits{}, 0,
                                                    end_bit, stream.value()));
  return {buffers.Current(), nullptr};
}

/// The bits a sorted fill of `rows` rows sorts its keys on (radius_sort_key: the row above bit 96).
inline int radius_sort_end_bit(std::size_t rows)
{
  int bits = 0;
  while (bits < 32 && (std::size_t{1} << bits) < rows) { ++bits; }
  return 96 + bits;
}

/// Sorts and writes the rows of a sorted fill (radius_sorted_rows) of at most `largest_row` entries
/// (radius_small_row at most; a longer row is still sorted, slowly), one launch per size class, so
/// that no launch's occupancy is set by rows longer than its own: up to 32 entries several rows a
/// warp, then (16 · Keys, 32 · Keys] in registers by a warp for Keys = 2, 4 … radius_register_sort_keys,
/// then (room / 2, room] in the registers of room / (32 · radius_register_sort_keys) warps for room
/// = 1024, 2048, 4096. Each launch reads every row's length and sorts those of its class.
template <class Index, class T>
void sort_rows(radius_sorted_rows<Index, T> const& rows, std::size_t largest_row, stream_ref stream)
{
  radius_sort_short_rows<Index, T><<<grid_size("radius_sort_short_rows", rows.n, 128, grid_stride_blocks), 128, 0, stream.value()>>>(
    rows, largest_row <= 32);
  STREAMKIT_CHECK_LAUNCH();
  auto const in_registers = [&](auto keys, auto warps) {
    constexpr int k = decltype(keys)::value, w = decltype(warps)::value;
    constexpr std::size_t room = std::size_t{32} * k * w;
    if (largest_row <= room / 2) { return; }
    auto const kernel = radius_sort_rows_in_registers<k, w, Index, T>;
    constexpr std::size_t bytes = radius_register_sort_bytes<k, w>;
    constexpr int threads = radius_register_sort_threads<w>;
    STREAMKIT_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
    kernel<<<grid_size("radius_sort_rows_in_registers", rows.n, threads, grid_stride_blocks), threads, bytes, stream.value()>>>(
      rows, largest_row <= room);
    STREAMKIT_CHECK_LAUNCH();
  };
  using one = std::integral_constant<int, 1>;
  using most = std::integral_constant<int, radius_register_sort_keys>;
  in_registers(std::integral_constant<int, 2>{}, one{});
  in_registers(std::integral_constant<int, 4>{}, one{});
  in_registers(std::integral_constant<int, 8>{}, one{});
  in_registers(most{}, one{});
  in_registers(most{}, std::integral_constant<int, 2>{});
  in_registers(most{}, std::integral_constant<int, 4>{});
  in_registers(most{}, std::integral_constant<int, 8>{});
  static_assert(radius_register_sort_keys == 16 && radius_small_row <= 32 * 16 * 8, "the classes above");
}

/// The rows of a fill of `observations` on an engine (its references' coordinates and count, m)
/// into `result`, for sort_rows: rows[0 … *row_count) (every row when null), with `pass`'s clamped
/// offsets, cursors, keys and scale.
template <class Index, class T>
radius_sorted_rows<Index, T> sorted_rows_of(points_ref<T> const& observations, radius_pass<Index, T> const& pass, std::uint32_t const* rows,
                                            std::uint32_t const* row_count, lat_lon const* coordinates, std::size_t m,
                                            radius_neighbors_ref<Index, T> const& result)
{
  radius_sorted_rows<Index, T> sorted;
  sorted.observations = observations;
  sorted.n = observations.count;
  sorted.rows = rows;
  sorted.row_count = row_count;
  sorted.offsets = pass.offsets;
  sorted.cursors = pass.cursors;
  sorted.keys = pass.keys;
  sorted.coordinates = coordinates;
  sorted.m = m;
  sorted.index = result.index;
  sorted.distance = result.distance;
  sorted.scale = pass.scale;
  return sorted;
}

/// Starts a fill of `result` (sorted, or not): its offsets clamped to the storage into `clamped` (n + 1)
/// and the brute force's cursors (n) on `stream`; returns the pass that fills it, with `keys` (capacity)
/// for a sorted fill.
template <class Index, class T>
radius_pass<Index, T> start_fill(radius_options const& radius, bool sorted, double scale, radius_neighbors_ref<Index, T> const& result,
                                 std::int64_t* clamped, unsigned long long* cursors, tree_key* keys, stream_ref stream)
{
  std::size_t const n = result.count;
  radius_clamp_offsets<<<grid_size("radius_clamp_offsets", n + 1, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    result.offsets, n, result.capacity, clamped, cursors);
  STREAMKIT_CHECK_LAUNCH();
  radius_pass<Index, T> pass;
  pass.mode = sorted ? radius_mode::fill_sorted : radius_mode::fill_unsorted;
  pass.radius = radius.radius;
  pass.radii = radius.radii;
  pass.scale = scale;
  pass.offsets = clamped;
  pass.cursors = cursors;
  pass.index = result.index;
  pass.distance = result.distance;
  pass.keys = keys;
  pass.invalid_count = result.invalid_count;
  return pass;
}

/// The most memory an offsets pass keeps rows in (radius_kept): 32 entries of each row up to about 2.6
/// million observations, fewer above, none above about 13 million.
inline constexpr std::size_t radius_kept_limit = std::size_t{1} << 30;
/// Bytes of radius_kept an observation takes besides its entries: count, tag and place in the order.
inline constexpr std::size_t radius_kept_row_bytes = sizeof(std::uint32_t) + sizeof(radius_row_tag) + sizeof(std::uint32_t);
/// Bytes of radius_kept an entry takes: its squared chord and its reference.
inline constexpr std::size_t radius_kept_entry_bytes = sizeof(std::uint64_t) + sizeof(std::uint32_t);

/// Entries an offsets pass of n observations keeps of each row: as many as radius_kept_limit holds, 32
/// at most (a warp sorts a row that the fill copies); 0 below 4 (too few to spare a row its search).
inline unsigned radius_kept_slots(std::size_t n) noexcept
{
  std::size_t const per_row = radius_kept_limit / std::max<std::size_t>(n, 1);
  std::size_t const slots = per_row > radius_kept_row_bytes ? (per_row - radius_kept_row_bytes) / radius_kept_entry_bytes : 0;
  return slots < 4 ? 0u : static_cast<unsigned>(std::min<std::size_t>(slots, 32));
}

/// Where the arrays of radius_kept for n rows of `slots` entries lie in one allocation of `bytes`.
struct radius_kept_layout {
  radius_kept_layout(std::size_t n, unsigned kept_slots) noexcept
      : slots(kept_slots),
        ids_offset(align_up(n * slots * sizeof(std::uint64_t))),
        found_offset(ids_offset + align_up(n * slots * sizeof(std::uint32_t))),
        tags_offset(found_offset + align_up(n * sizeof(std::uint32_t))),
        order_offset(tags_offset + align_up(n * sizeof(radius_row_tag))),
        bytes(order_offset + align_up(n * sizeof(std::uint32_t)))
  {
  }
  radius_kept at(std::byte* memory) const noexcept
  {
    radius_kept kept;
    kept.slots = slots;
    kept.chords = reinterpret_cast<std::uint64_t*>(memory);
    kept.ids = reinterpret_cast<std::uint32_t*>(memory + ids_offset);
    kept.found = reinterpret_cast<std::uint32_t*>(memory + found_offset);
    kept.tags = reinterpret_cast<radius_row_tag*>(memory + tags_offset);
    kept.order = reinterpret_cast<std::uint32_t*>(memory + order_offset);
    return kept;
  }
  unsigned slots;
  std::size_t ids_offset, found_offset, tags_offset, order_offset, bytes;
};

// ---- the engines' passes -------------------------------------------------------------------------

template <class T>
template <class Index>
void brute_force_engine<T>::radius_run(points_ref<T> const& observations, radius_pass<Index, T> pass, stream_ref stream,
                                       std::byte*) const
{
  using shape = radius_brute_force_shape;
  std::size_t const n = observations.count;
  nearest_plan const plan =
    plan_nearest(n, this->count_, shape::threads, shape::tile, resident_blocks(radius_brute_force<Index, T>, shape::threads, this->device_));
  reference_layout const layout(this->count_);
  std::byte const* const base = references_.data();
  dim3 const grid(plan.obs_blocks, plan.slices);
  radius_brute_force<Index, T><<<grid, shape::threads, 0, stream.value()>>>(observations, n, layout.vectors(base), layout.precise(base),
                                                                          layout.coordinates(base), this->count_, plan.slice_length, pass);
  STREAMKIT_CHECK_LAUNCH();
}

template <class T>
template <class Index>
void tree_engine<T>::radius_run(points_ref<T> const& observations, radius_pass<Index, T> pass, stream_ref stream,
                                std::byte* memory) const
{
  std::size_t const n = observations.count;
  // Listed rows in their order, else every row in the k-nearest search's.
  std::uint32_t const* const order = pass.rows != nullptr ? pass.rows : observation_order(observations, memory, stream);
  tree_view const tree = view();
  auto const launch = [&](auto kernel, std::size_t rows, int lanes) {
    kernel<<<grid_size("radius_tree", rows * static_cast<std::size_t>(lanes), tree_search_threads), tree_search_threads, 0,
             stream.value()>>>(observations, n, order, tree, pass);
    STREAMKIT_CHECK_LAUNCH();
  };
  constexpr int few = radius_tree_lanes_few;
  if (pass.row_count != nullptr) {  // a count on the device: each launch searches them when it is its share
    launch(radius_tree<few, Index, T>, std::min(n, radius_tree_few_rows), few);
    if (n > radius_tree_few_rows) { launch(radius_tree<1, Index, T>, n, 1); }
  } else if (n <= radius_tree_few_rows) {
    launch(radius_tree<few, Index, T>, n, few);
  } else {
    launch(radius_tree<1, Index, T>, n, 1);
  }
}

}  // namespace detail

// ---- the queries, once for every engine -----------------------------------------------------------

template <class Engine, class T>
template <class E>
void radius_queries<Engine, T>::count_on(E const& engine, points_ref<T> const& observations, radius_options const& radius,
                                         std::int64_t* out, bool offsets, stream_ref stream, nearest_scratch& scratch)
{
  using namespace detail;
  expect_radius_query(engine.count_, engine.device_, observations, radius, stream);
  std::size_t const n = observations.count;
  STREAMKIT_EXPECTS(out != nullptr || (n == 0 && !offsets), std::invalid_argument,
                    std::string(offsets ? "offsets" : "counts") + ": null with " + std::to_string(n) + " observations");
  if (n == 0 && !offsets) { return; }
  device_guard guard(engine.device_);
  if (n == 0) {
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(out, 0, sizeof(std::int64_t), stream.value()));
    return;
  }
  std::size_t const engine_bytes = align_up(engine.radius_scratch_bytes(n));
  std::size_t const counts_bytes = offsets ? align_up((n + 1) * sizeof(std::int64_t)) : 0;
  std::size_t const scan_bytes = offsets ? radius_scan_bytes(n + 1) : 0;
  std::byte* const memory = scratch.reserve(engine_bytes + counts_bytes + scan_bytes, engine.device_, stream, engine.resource_);
  std::int64_t* const counts = offsets ? reinterpret_cast<std::int64_t*>(memory + engine_bytes) : out;
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(counts, 0, (offsets ? n + 1 : n) * sizeof(std::int64_t), stream.value()));
  radius_pass<std::int64_t, T> pass;
  pass.mode = radius_mode::count;
  pass.radius = radius.radius;
  pass.radii = radius.radii;
  pass.scale = distance_scale(engine.options_);
  pass.counts = counts;
  // The offsets pass keeps the first entries of each row for the fill that follows on this scratch.
  unsigned const slots = offsets ? radius_kept_slots(n) : 0u;
  if (offsets) { scratch.kept_rows_ = {}; }
  if (slots > 0) {
    radius_kept_layout const layout(n, slots);
    pass.kept = layout.at(scratch.reserve_kept(layout.bytes, engine.device_, stream, engine.resource_));
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(pass.kept.found, 0, n * sizeof(std::uint32_t), stream.value()));
    scratch.kept_rows_ = {engine.preparation_, n, slots};
  }
  engine.radius_run(observations, pass, stream, memory);
  if (offsets) {
    std::size_t temporary_bytes = scan_bytes;
    STREAMKIT_CUDA_TRY(cub::DeviceScan::ExclusiveSum(memory + engine_bytes + counts_bytes, temporary_bytes, counts, out,
                                                     static_cast<std::int64_t>(n + 1), stream.value()));
  }
}

template <class Engine, class T>
template <class E, class Index>
void radius_queries<Engine, T>::fill_on(E const& engine, points_ref<T> const& observations, radius_options const& radius,
                                        radius_neighbors_ref<Index, T> const& result, stream_ref stream, nearest_scratch& scratch)
{
  using namespace detail;
  expect_radius_query(engine.count_, engine.device_, observations, radius, stream);
  std::size_t const n = observations.count;
  STREAMKIT_EXPECTS(result.count == n, std::invalid_argument,
                    "result.count: " + std::to_string(result.count) + " rows for " + std::to_string(n) + " observations");
  STREAMKIT_EXPECTS(result.offsets != nullptr || n == 0, std::invalid_argument,
                    "result.offsets: null with " + std::to_string(n) + " observations");
  STREAMKIT_EXPECTS(result.index != nullptr || result.capacity == 0, std::invalid_argument,
                    "result.index: null with a capacity of " + std::to_string(result.capacity));
  expect_index_capacity<Index>(engine.count_);
  if (n == 0) { return; }
  device_guard guard(engine.device_);
  std::size_t const capacity = result.capacity;
  bool const sorted = radius.sorted && capacity > 0;
  std::size_t const engine_bytes = align_up(engine.radius_scratch_bytes(n));
  std::size_t const clamped_bytes = align_up((n + 1) * sizeof(std::int64_t));
  std::size_t const cursors_bytes = align_up(n * sizeof(unsigned long long));
  // Short rows (the caller says so): each sorted by one warp; else one radix sort of everything.
  bool const short_rows = sorted && result.largest_row > 0 && result.largest_row <= radius_small_row;
  bool const radix = sorted && !short_rows;
  // The rows the offsets pass on this scratch kept, when it searched these references for n rows:
  // copied where they are the same rows, and only the others searched (not with the radix sort,
  // which sorts every row at once).
  auto const& kept_rows = scratch.kept_rows_;
  radius_kept_layout const kept_layout(n, kept_rows.slots);
  bool const from_kept = !radix && kept_rows.slots > 0 && kept_rows.preparation == engine.preparation_ && kept_rows.rows == n &&
                         scratch.kept_.size() >= kept_layout.bytes && scratch.kept_.device() == engine.device_;
  if (from_kept) {
    fill_from_kept(engine, observations, radius, result, stream, scratch, kept_layout.at(scratch.kept_.data()));
    return;
  }
  std::size_t const keys_bytes = sorted ? align_up((radix ? 2 : 1) * capacity * sizeof(tree_key)) : 0;
  int const end_bit = radius_sort_end_bit(n);
  std::size_t const sort_bytes = radix ? radius_sort_bytes(capacity, end_bit) : 0;
  std::byte* const memory = scratch.reserve(engine_bytes + clamped_bytes + cursors_bytes + keys_bytes + sort_bytes, engine.device_, stream,
                                            engine.resource_);
  auto* const clamped = reinterpret_cast<std::int64_t*>(memory + engine_bytes);
  auto* const cursors = reinterpret_cast<unsigned long long*>(memory + engine_bytes + clamped_bytes);
  auto* const keys = reinterpret_cast<tree_key*>(memory + engine_bytes + clamped_bytes + cursors_bytes);
  std::byte* const sort_temporary = memory + engine_bytes + clamped_bytes + cursors_bytes + keys_bytes;

  // The radix sort sorts the whole storage over (row, chord, id) (a segmented sort would wait for
  // the device): a slot the fill leaves alone (offsets of another query) holds the largest key, which
  // sorts last and reads as no reference. The row sorts read only the keys the search wrote.
  if (radix) { STREAMKIT_CUDA_TRY(cudaMemsetAsync(keys, 0xff, capacity * sizeof(tree_key), stream.value())); }
  radius_pass<Index, T> pass = start_fill(radius, sorted, distance_scale(engine.options_), result, clamped, cursors, keys, stream);
  engine.radius_run(observations, pass, stream, memory);
  if (!sorted) { return; }
  if (short_rows) {
    sort_rows(sorted_rows_of(observations, pass, nullptr, nullptr, engine.coordinates_, engine.count_, result), result.largest_row, stream);
    return;
  }
  sorted_pairs<tree_key> const order =
    sort_keys(keys, capacity, end_bit, sort_temporary, sort_bytes, stream);
  radius_finish_sorted<Index, T><<<grid_size("radius_finish_sorted", capacity, 256, grid_stride_blocks), 256, 0, stream.value()>>>(
    observations, n, clamped, order.keys, engine.coordinates_, engine.count_, result.index, result.distance, pass.scale);
  STREAMKIT_CHECK_LAUNCH();
}

template <class Engine, class T>
template <class E, class Index>
void radius_queries<Engine, T>::fill_from_kept(E const& engine, points_ref<T> const& observations, radius_options const& radius,
                                               radius_neighbors_ref<Index, T> const& result, stream_ref stream, nearest_scratch& scratch,
                                               detail::radius_kept const& kept)
{
  using namespace detail;
  std::size_t const n = observations.count;
  std::size_t const capacity = result.capacity;
  bool const sorted = radius.sorted && capacity > 0;
  std::size_t const engine_bytes = align_up(engine.radius_scratch_bytes(n));
  std::size_t const clamped_bytes = align_up((n + 1) * sizeof(std::int64_t));
  std::size_t const cursors_bytes = align_up(n * sizeof(unsigned long long));
  std::size_t const rows_bytes = align_up((n + 1) * sizeof(std::uint32_t));  // the rows searched again, then their count
  std::size_t const keys_bytes = sorted ? align_up(capacity * sizeof(tree_key)) : 0;
  std::byte* const memory =
    scratch.reserve(engine_bytes + clamped_bytes + cursors_bytes + rows_bytes + keys_bytes, engine.device_, stream, engine.resource_);
  auto* const clamped = reinterpret_cast<std::int64_t*>(memory + engine_bytes);
  auto* const cursors = reinterpret_cast<unsigned long long*>(memory + engine_bytes + clamped_bytes);
  auto* const rows = reinterpret_cast<std::uint32_t*>(memory + engine_bytes + clamped_bytes + cursors_bytes);
  std::uint32_t* const row_count = rows + n;
  auto* const keys = reinterpret_cast<tree_key*>(memory + engine_bytes + clamped_bytes + cursors_bytes + rows_bytes);

  STREAMKIT_CUDA_TRY(cudaMemsetAsync(row_count, 0, sizeof(std::uint32_t), stream.value()));
  radius_pass<Index, T> pass = start_fill(radius, sorted, distance_scale(engine.options_), result, clamped, cursors, keys, stream);
  pass.kept = kept;
  lat_lon const* const coordinates = engine.coordinates_;
  radius_fill_kept<Index, T><<<grid_size("radius_fill_kept", n, 128, grid_stride_blocks), 128, 0, stream.value()>>>(
    observations, n, result.offsets, pass, coordinates, engine.count_, rows, row_count);
  STREAMKIT_CHECK_LAUNCH();
  // The other rows: searched again, then sorted row by row.
  pass.kept = radius_kept{};
  pass.rows = rows;
  pass.row_count = row_count;
  engine.radius_run(observations, pass, stream, memory);
  if (sorted) {
    sort_rows(sorted_rows_of(observations, pass, rows, row_count, coordinates, engine.count_, result), result.largest_row, stream);
  }
}

template <class Engine, class T>
void radius_queries<Engine, T>::radius_count_async(points_ref<T> observations, radius_options const& radius, std::int64_t* counts,
                                                   stream_ref stream)
{
  self().radius_dispatch(observations.count, stream, [&](auto& engine) {
    count_on(engine, observations, radius, counts, false, stream, engine.scratch_);
    engine.used(stream);
  });
}

template <class Engine, class T>
void radius_queries<Engine, T>::radius_count_async(points_ref<T> observations, radius_options const& radius, std::int64_t* counts,
                                                   stream_ref stream, nearest_scratch& scratch) const
{
  self().radius_dispatch(observations.count, [&](auto const& engine) { count_on(engine, observations, radius, counts, false, stream, scratch); });
}

template <class Engine, class T>
void radius_queries<Engine, T>::radius_count(points_ref<T> observations, radius_options const& radius, std::int64_t* counts,
                                             stream_ref stream)
{
  self().radius_dispatch(observations.count, stream, [&](auto& engine) {
    detail::expect_radius_query(engine.count_, engine.device_, observations, radius, stream);
    engine.reject_invalid(observations, stream);
    count_on(engine, observations, radius, counts, false, stream, engine.scratch_);
    engine.used(stream);
  });
  stream.sync();
}

template <class Engine, class T>
void radius_queries<Engine, T>::radius_offsets_async(points_ref<T> observations, radius_options const& radius, std::int64_t* offsets,
                                                     stream_ref stream)
{
  self().radius_dispatch(observations.count, stream, [&](auto& engine) {
    count_on(engine, observations, radius, offsets, true, stream, engine.scratch_);
    engine.used(stream);
  });
}

template <class Engine, class T>
void radius_queries<Engine, T>::radius_offsets_async(points_ref<T> observations, radius_options const& radius, std::int64_t* offsets,
                                                     stream_ref stream, nearest_scratch& scratch) const
{
  self().radius_dispatch(observations.count, [&](auto const& engine) { count_on(engine, observations, radius, offsets, true, stream, scratch); });
}

template <class Engine, class T>
template <class Index>
void radius_queries<Engine, T>::radius_fill_async(points_ref<T> observations, radius_options const& radius,
                                                  radius_neighbors_ref<Index, T> result, stream_ref stream)
{
  self().radius_dispatch(observations.count, stream, [&](auto& engine) {
    fill_on(engine, observations, radius, result, stream, engine.scratch_);
    engine.used(stream);
  });
}

template <class Engine, class T>
template <class Index>
void radius_queries<Engine, T>::radius_fill_async(points_ref<T> observations, radius_options const& radius,
                                                  radius_neighbors_ref<Index, T> result, stream_ref stream, nearest_scratch& scratch) const
{
  self().radius_dispatch(observations.count, [&](auto const& engine) { fill_on(engine, observations, radius, result, stream, scratch); });
}

template <class Engine, class T>
template <class Index>
radius_result<Index, T> radius_queries<Engine, T>::radius_query(points_ref<T> observations, radius_options const& radius, bool distances,
                                                                stream_ref stream)
{
  radius_result<Index, T> out;
  self().radius_dispatch(observations.count, stream, [&](auto& engine) {
    using namespace detail;
    expect_radius_query(engine.count_, engine.device_, observations, radius, stream);
    expect_index_capacity<Index>(engine.count_);
    std::size_t const n = observations.count;
    device_guard guard(engine.device_);
    engine.reject_invalid(observations, stream);
    out.offsets = device_buffer<std::int64_t>(n + 1, stream, engine.resource_);
    count_on(engine, observations, radius, out.offsets.data(), true, stream, engine.scratch_);
    // The total and the largest row, read in one copy.
    device_buffer<unsigned long long> sizes(2, stream, engine.resource_);
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(sizes.data(), 0, 2 * sizeof(unsigned long long), stream.value()));
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(sizes.data(), out.offsets.data() + n, sizeof(std::int64_t), cudaMemcpyDeviceToDevice, stream.value()));
    if (n > 0) {
      radius_largest_row<<<grid_size("radius_largest_row", n, 256, grid_stride_blocks), 256, 0, stream.value()>>>(out.offsets.data(), n,
                                                                                                                sizes.data() + 1);
      STREAMKIT_CHECK_LAUNCH();
    }
    unsigned long long host[2] = {0, 0};
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host, sizes.data(), sizeof host, cudaMemcpyDeviceToHost, stream.value()));
    stream.sync();
    expect_radius_bounds(radius, host[1], host[0], n);
    std::size_t const total = static_cast<std::size_t>(host[0]);
    out.index = device_buffer<Index>(total, stream, engine.resource_);
    if (distances) { out.distance = device_buffer<T>(total, stream, engine.resource_); }
    radius_neighbors_ref<Index, T> storage = out.view();
    storage.largest_row = static_cast<std::size_t>(host[1]);
    fill_on(engine, observations, radius, storage, stream, engine.scratch_);
    engine.used(stream);
    stream.sync();
  });
  return out;
}

}  // namespace streamkit
