#pragma once
/// @file nearest_neighbor_dispatch.cuh
/// Nearest-neighbour search of host-resident points over a dispatcher's GPUs. A
/// multi_gpu_nearest_neighbor keeps the reference set prepared on every GPU, with each stream's
/// scratch, between queries; update() replaces it each time step. A query streams the observations
/// through in chunks (host → device, search, device → host, each element written once), the copies
/// of a device's chunks queued one after another in each direction so that both directions and the
/// search overlap. Host memory that is page-locked goes straight to DMA; pageable memory is staged
/// through each stream's pinned buffers. After the first query of a size nothing is allocated.
///
/// Radius queries (every reference within a distance of each observation) come back as compressed
/// rows in host memory (host_radius_result): multi_gpu_nearest_neighbor::radius_query() and the
/// one-shot dispatch_radius_neighbors(), with the rules of the single-GPU blocking radius_query()
/// (radius_queries.cuh).

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/detail/staging.hpp>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/radius.hpp>
#include <streamkit/memory/pinned_buffer.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace streamkit {

namespace detail {

/// A host point set as lines for the staging pipeline: one region of (lat, lon) pairs when the
/// longitude follows its latitude (interleaved, or any wider record), else one region per coordinate.
/// `device_points` is where the packed copy lands: `2 × count` elements.
template <class T>
struct staged_points {
  staged_points(points_ref<T> const& host, bool pinned) noexcept
      : pairs(host.stride >= 2 && host.longitude == host.latitude + 1),
        latitude{host.latitude, host.count, pairs ? std::size_t{2} : std::size_t{1}, host.stride, pinned},
        longitude{host.longitude, host.count, std::size_t{1}, host.stride, pinned},
        count(host.count),
        unit(host.unit)
  {
  }
  /// Enqueues the copies into `device` (2 × count elements) in the chunk's copy order, through
  /// staging slots `slot`, `slot` + 1.
  void copy_to_device(chunk_context& chunk, T* device, std::size_t slot) const
  {
    detail::copy_to_device(chunk, latitude, device, slot);
    if (!pairs) { detail::copy_to_device(chunk, longitude, device + count, slot + 1); }
  }
  /// Enqueues the copies into `device` (2 × count elements) on `stream`, straight from where the
  /// points are: host memory (pageable memory is then copied by the runtime before the call returns)
  /// or device memory (copied on the device, or between devices).
  void copy_to_device(T* device, stream_ref stream) const
  {
    copy_lines_async(device, latitude.length, latitude.data, latitude.ld, count, latitude.length, cudaMemcpyDefault, stream);
    if (!pairs) { copy_lines_async(device + count, 1, longitude.data, longitude.ld, count, 1, cudaMemcpyDefault, stream); }
  }
  /// The view of the packed copy at `device`.
  [[nodiscard]] points_ref<T> on_device(T const* device) const noexcept
  {
    return pairs ? points_ref<T>::interleaved(device, count, unit) : points_ref<T>::separate(device, device + count, count, unit);
  }

  bool pairs;
  host_lines<T const> latitude;   // the pairs when `pairs`
  host_lines<T const> longitude;  // unused when `pairs`
  std::size_t count;
  angle_unit unit;
};

/// Observations [begin, end) of a host point set.
template <class T>
points_ref<T> points_in(points_ref<T> const& points, item_range items) noexcept
{
  return {points.latitude + items.begin * points.stride, points.longitude + items.begin * points.stride, items.size(),
          points.stride, points.unit};
}

// ---- multi-GPU radius queries: the host-side plan (no CUDA call but the pointer check) -------------

/// The rows of one chunk of a multi-GPU radius query, from its count pass.
struct radius_chunk_rows {
  std::uint64_t total = 0;    ///< references in all the chunk's rows
  std::uint64_t largest = 0;  ///< references in its largest row
};

/// The chunk size of a multi-GPU radius query of `n` observations over `workers` workers: `requested`,
/// or about four chunks per worker (at least 4096 observations); at most 2^31 (a radius query on one
/// GPU takes at most 2^32 − 1 observations).
[[nodiscard]] inline std::size_t radius_chunk_items(std::size_t n, std::size_t workers, std::size_t requested) noexcept
{
  std::size_t const most = std::size_t{1} << 31;
  if (requested != 0) { return std::min(requested, most); }
  std::size_t const quarter = (n + 4 * std::max<std::size_t>(workers, 1) - 1) / (4 * std::max<std::size_t>(workers, 1));
  return std::min(std::max<std::size_t>(4096, quarter), most);
}

/// A chunk's rows from its row ends (row i of the chunk ends at row_ends[i] within the chunk).
[[nodiscard]] inline radius_chunk_rows radius_rows_of(std::int64_t const* row_ends, std::size_t count) noexcept
{
  radius_chunk_rows rows;
  std::int64_t previous = 0;
  for (std::size_t i = 0; i < count; ++i) {
    rows.largest = std::max(rows.largest, static_cast<std::uint64_t>(row_ends[i] - previous));
    previous = row_ends[i];
  }
  rows.total = count > 0 ? static_cast<std::uint64_t>(row_ends[count - 1]) : 0;
  return rows;
}

/// After the count pass of every chunk: checks radius.max_per_row and radius.max_total over all
/// `rows` rows of every chunk (std::length_error, the message of the single-GPU radius_query(), with
/// the counts of every chunk together), writes each chunk's first element in the host result into
/// `bases` (the totals of the chunks before it) and returns the total.
inline std::uint64_t radius_chunk_bases(std::vector<radius_chunk_rows> const& chunks, radius_options const& radius, std::size_t rows,
                                        std::vector<std::uint64_t>& bases)
{
  std::uint64_t total = 0;
  std::uint64_t largest = 0;
  for (radius_chunk_rows const& chunk : chunks) {
    total += chunk.total;
    largest = std::max(largest, chunk.largest);
  }
  expect_radius_bounds(radius, largest, total, rows);
  bases.resize(chunks.size());
  std::uint64_t base = 0;
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    bases[c] = base;
    base += chunks[c].total;
  }
  return total;
}

/// The host result's offsets of the chunk `items`: offsets[i + 1] = base + row_ends[i] for i in items
/// (row_ends indexed by observation, each row's end within its chunk; base: the chunks before).
inline void radius_global_offsets(std::int64_t* offsets, std::int64_t const* row_ends, item_range items, std::uint64_t base) noexcept
{
  auto const shift = static_cast<std::int64_t>(base);
  for (std::size_t i = items.begin; i < items.end; ++i) { offsets[i + 1] = shift + row_ends[i]; }
}

/// The checks of a multi-GPU radius query before anything else (std::invalid_argument naming the
/// argument): the observations' view, the radius, and per-observation radii in host memory.
template <class T>
void expect_host_radius_query(points_ref<T> const& observations, radius_options const& radius)
{
  expect_points(observations, "observations");
  expect_radius_options(radius);
  STREAMKIT_EXPECTS(radius.radii == nullptr || memory_type(radius.radii) != cudaMemoryTypeDevice, std::invalid_argument,
                    "radius.radii: device memory; a multi-GPU radius query takes one radius per observation in host memory");
}

}  // namespace detail

/// The result of a multi-GPU radius query, in host memory, as compressed rows: row i holds
/// index[offsets[i] … offsets[i + 1]) and, when asked for, distance[…] at the same positions (the
/// float64 haversine distance times the unit's scale, rounded to T, as in radius_result). A result
/// passed back to radius_query() keeps its vectors' memory (no allocation when it is large enough).
template <class Index, class T>
struct host_radius_result {
  std::vector<std::int64_t> offsets;  ///< rows + 1 row offsets; offsets[rows] = total()
  std::vector<Index> index;           ///< reference indices, row after row
  std::vector<T> distance;            ///< distances in the index's unit (empty when not asked for)

  /// The number of observations (rows).
  [[nodiscard]] std::size_t rows() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
  /// The number of (observation, reference) pairs within the radius.
  [[nodiscard]] std::size_t total() const noexcept { return index.size(); }
};

/// Exact (or fast) nearest neighbours of host-resident observations among host-resident references,
/// over every GPU of a dispatcher. The references are prepared once per GPU and kept, with each
/// stream's scratch memory, until update() replaces them; memory comes from the dispatcher's device
/// resources. The dispatcher must outlive the object. Not thread-safe (one call at a time, as the
/// dispatcher runs one batch at a time).
template <class T>
class multi_gpu_nearest_neighbor {
 public:
  /// Uploads and prepares `references` (host memory, any stride) on every device of `workers`, and
  /// waits. @throws std::invalid_argument for M = 0, null coordinates, bad options, or (with
  /// invalid_points::reject) invalid references.
  multi_gpu_nearest_neighbor(dispatcher& workers, points_ref<T> references, nearest_options const& options)
      : workers_(workers), options_(options), scratch_(workers.worker_count())
  {
    for (std::size_t lane = 0; lane < workers.devices().size(); ++lane) {
      lanes_.push_back(std::make_unique<lane_state>(workers.devices()[lane], workers.resource(lane)));
    }
    update(references);
  }
  multi_gpu_nearest_neighbor(multi_gpu_nearest_neighbor const&) = delete;
  multi_gpu_nearest_neighbor& operator=(multi_gpu_nearest_neighbor const&) = delete;

  /// Replaces the reference set (host memory, or device memory: copied to every device without a trip
  /// through the host) on every device, reusing memory when the new set is no larger, and waits. @throws std::invalid_argument for M = 0, null coordinates, or (with
  /// invalid_points::reject) invalid references.
  void update(points_ref<T> references)
  {
    STREAMKIT_EXPECTS(references.count > 0, std::invalid_argument, "references: the reference set is empty (M = 0)");
    detail::expect_points(references, "references");
    std::size_t const m = references.count;
    detail::staged_points<T> const host(references, false);  // blocking anyway: pageable sources need no staging of ours
    for (auto& lane : lanes_) {
      device_guard guard(lane->device);
      stream_ref const s = lane->stream.ref();
      if (lane->coordinates.size() < 2 * m) { lane->coordinates = device_buffer<T>(2 * m, s, lane->resource); }
      host.copy_to_device(lane->coordinates.data(), s);
      points_ref<T> const prepared = host.on_device(lane->coordinates.data());
      if (lane->index) {
        lane->index->update(prepared, s);
      } else {
        lane->index.emplace(prepared, options_, s, lane->resource);
      }
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(lane->invalid.data(), lane->index->invalid_references(), sizeof(unsigned long long),
                                         cudaMemcpyDeviceToHost, s.value()));
    }
    for (auto& lane : lanes_) { lane->stream.sync(); }
    count_ = m;
    detail::expect_valid_points(options_, lanes_.front()->invalid[0], "references");
  }

  /// Finds the k = result.k nearest references of every observation and writes `result` (host memory,
  /// any row stride), and waits. Each GPU searches with the engine the front end picks for a chunk
  /// (nearest_index), building its tree, when it picks one, once per update(). `chunk_items` = 0
  /// picks about four chunks per worker (at least 4096 observations). With invalid_points::reject, a chunk with invalid observations fails with
  /// dispatch_error naming the count and writes nothing of its own; the GPUs never wait for a check.
  /// @throws std::invalid_argument for bad views (before anything is written); dispatch_error.
  template <class Index>
  void query(points_ref<T> observations, neighbors_ref<Index, T> result, std::size_t chunk_items = 0)
  {
    detail::expect_points(observations, "observations");
    detail::expect_neighbors(result, observations.count);
    detail::expect_index_capacity<Index>(count_);
    std::size_t const n = observations.count;
    if (n == 0) { return; }
    std::size_t const k = result.k;
    std::size_t const workers = workers_.worker_count();
    if (chunk_items == 0) { chunk_items = std::max<std::size_t>(4096, (n + 4 * workers - 1) / (4 * workers)); }
    // Every chunk size's engine ready before the workers' streams query concurrently.
    for (auto& lane : lanes_) {
      device_guard guard(lane->device);
      lane->index->prepare(std::min(chunk_items, n), k, lane->stream.ref());
      if (n % chunk_items != 0) { lane->index->prepare(n % chunk_items, k, lane->stream.ref()); }
    }
    for (auto& lane : lanes_) { lane->stream.sync(); }
    bool const observations_pinned = is_pinned(observations.latitude) && is_pinned(observations.longitude);
    bool const index_pinned = is_pinned(result.index);
    bool const distance_pinned = result.distance == nullptr || is_pinned(result.distance);
    // Invalid observations are counted only to be rejected; with mark they are marked and that is all.
    bool const reject = options_.on_invalid == invalid_points::reject;
    // With reject, results must not reach pinned outputs (written by DMA) before the count is checked.
    bool const check_before_copy_out = reject && (index_pinned || (result.distance != nullptr && distance_pinned));

    workers_.run(n, chunk_items, [&](chunk_context& chunk) {
      std::size_t const count = chunk.items.size();
      stream_ref const s = chunk.stream;
      auto& space = chunk.workspace;
      T* const device_points = space.device<T>(2 * chunk_items, 0);
      auto* const device_index = space.device<Index>(chunk_items * k, 1);
      T* const device_distance = result.distance != nullptr ? space.device<T>(chunk_items * k, 2) : nullptr;
      auto* const device_invalid = reject ? space.device<unsigned long long>(1, 3) : nullptr;
      auto* const invalid = reject ? space.pinned<unsigned long long>(1, 0) : nullptr;

      detail::staged_points<T> const in(detail::points_in(observations, chunk.items), observations_pinned);
      in.copy_to_device(chunk, device_points, 1);
      if (reject) { STREAMKIT_CUDA_TRY(cudaMemsetAsync(device_invalid, 0, sizeof *device_invalid, s.value())); }
      lanes_[chunk.lane]->index->query_async(in.on_device(device_points),
                                             neighbors_ref<Index, T>::dense(device_index, device_distance, count, k, device_invalid),
                                             s, scratch_[chunk.worker]);
      if (reject) { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(invalid, device_invalid, sizeof *invalid, cudaMemcpyDeviceToHost, s.value())); }
      if (check_before_copy_out) {
        s.sync();
        detail::expect_valid_points(options_, *invalid, "observations");
      }
      std::size_t const row = chunk.items.begin * result.stride;
      detail::copy_to_host<Index> const index_back(chunk, device_index, {result.index + row, count, k, result.stride, index_pinned}, 3);
      std::optional<detail::copy_to_host<T>> distance_back;
      if (result.distance != nullptr) {
        distance_back.emplace(chunk, device_distance, detail::host_lines<T>{result.distance + row, count, k, result.stride, distance_pinned}, 4);
      }
      s.sync();
      if (reject) { detail::expect_valid_points(options_, *invalid, "observations"); }  // before this chunk writes anything of its own
      index_back.finish();
      if (distance_back) { distance_back->finish(); }
    });
  }

  /// Every reference within a radius of each observation (host memory, any stride), as compressed
  /// rows written into `result` (host memory; its vectors are resized, and keep their memory from one
  /// call to the next), and waits. The rules are those of the single-GPU blocking radius_query()
  /// (radius_queries.cuh): float64 haversine distance at most the radius, rows sorted by (distance,
  /// index) or unsorted with radius.sorted = false, invalid points never returned, an invalid
  /// observation's row empty (invalid_points::mark). Distances come back when `distances` is true.
  ///
  /// `radius.radii`, when set, is in host memory (pageable or page-locked): one radius per
  /// observation, observations.count values (device memory throws std::invalid_argument); each
  /// chunk's slice is copied to its GPU with the chunk's observations.
  ///
  /// Two runs of the dispatcher over the same contiguous chunks of `chunk_items` observations (0:
  /// about four chunks per worker, at least 4096; chunks go to whichever worker is free, so a chunk
  /// may be counted on one GPU and filled on another). First each chunk's observations (and radii)
  /// go to its GPU, which counts the chunk's rows (radius_offsets_async() on the worker's stream with
  /// the worker's scratch) and, with invalid_points::reject, its invalid observations; the row ends
  /// come back into a page-locked array of the object. Then, on the host, nothing written yet: with
  /// invalid_points::reject and invalid observations, std::invalid_argument; the bounds
  /// radius.max_per_row and radius.max_total over every chunk of every GPU together, std::length_error
  /// saying how many would have come back (the message of the single-GPU radius_query()). Then each
  /// chunk's observations and row ends go to a GPU again, which fills the chunk's rows
  /// (radius_fill_async()) and copies them back into their place in `result` (offsets shifted by the
  /// totals of the chunks before), through the stream's pinned staging buffers. Every copy and search
  /// runs on the dispatcher's worker streams, the copies in each device's copy order; the object's
  /// per-device streams only ready the engines (nearest_index::prepare_radius(), which builds a tree
  /// once per update() when the front end picks one). Memory: each stream's workspace (device: the
  /// chunk's points, radii, offsets and rows; pinned: staging for pageable observations and radii, and
  /// for the rows on their way into `result`) and scratch (a sorted fill takes 32 bytes per element of
  /// the chunk's rows, radius_queries.cuh), which only grow; the rows' device and staging memory is
  /// sized by the query's largest chunk whichever chunk a stream fills, the scratch by the chunk it
  /// fills, so repeated queries of the same data allocate nothing once every stream has filled the
  /// largest chunk (with one stream on one GPU: after the first query); and the object's page-locked
  /// row ends (8 bytes per observation, kept for the next query).
  /// @throws std::invalid_argument for bad views or radius options (before any CUDA work) and for
  /// invalid observations under invalid_points::reject; std::length_error for an exceeded bound (in
  /// both cases `result` is left as it was); dispatch_error for a failed chunk.
  template <class Index>
  void radius_query(points_ref<T> observations, radius_options const& radius, host_radius_result<Index, T>& result, bool distances,
                    std::size_t chunk_items = 0)
  {
    detail::expect_host_radius_query(observations, radius);
    detail::expect_index_capacity<Index>(count_);
    std::size_t const n = observations.count;
    if (n == 0) {
      result.offsets.assign(1, 0);
      result.index.clear();
      result.distance.clear();
      return;
    }
    chunk_items = detail::radius_chunk_items(n, workers_.worker_count(), chunk_items);
    std::size_t const chunks = detail::chunk_count(n, chunk_items);
    // Every chunk size's engine ready before the workers' streams query concurrently.
    for (auto& lane : lanes_) {
      device_guard guard(lane->device);
      lane->index->prepare_radius(std::min(chunk_items, n), lane->stream.ref());
      if (n % chunk_items != 0) { lane->index->prepare_radius(n % chunk_items, lane->stream.ref()); }
    }
    for (auto& lane : lanes_) { lane->stream.sync(); }
    if (row_ends_.size() < n) { row_ends_ = pinned_buffer<std::int64_t>(n); }
    chunk_rows_.assign(chunks, detail::radius_chunk_rows{});
    radius_upload const upload{observations, is_pinned(observations.latitude) && is_pinned(observations.longitude), radius,
                               radius.radii == nullptr || is_pinned(radius.radii), chunk_items};
    bool const reject = options_.on_invalid == invalid_points::reject;

    // The count pass: each chunk's row ends (within the chunk) into row_ends_, its invalid observations.
    std::atomic<unsigned long long> invalid{0};
    workers_.run(n, chunk_items, [&](chunk_context& chunk) {
      std::size_t const count = chunk.items.size();
      stream_ref const s = chunk.stream;
      auto const [points, chunk_radius] = upload(chunk);
      auto* const device_offsets = chunk.workspace.device<std::int64_t>(chunk_items + 1, 2);
      unsigned long long* const device_invalid = reject ? chunk.workspace.device<unsigned long long>(1, 3) : nullptr;
      unsigned long long* const host_invalid = reject ? chunk.workspace.pinned<unsigned long long>(1, 0) : nullptr;
      if (reject) {
        STREAMKIT_CUDA_TRY(cudaMemsetAsync(device_invalid, 0, sizeof *device_invalid, s.value()));
        detail::count_invalid_points<T><<<detail::grid_size("count_invalid_points", count, 256, detail::grid_stride_blocks), 256, 0,
                                          s.value()>>>(points, count, device_invalid);
        STREAMKIT_CHECK_LAUNCH();
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host_invalid, device_invalid, sizeof *host_invalid, cudaMemcpyDeviceToHost, s.value()));
      }
      lanes_[chunk.lane]->index->radius_offsets_async(points, chunk_radius, device_offsets, s, scratch_[chunk.worker]);
      std::int64_t* const ends = row_ends_.data() + chunk.items.begin;
      chunk.copy_out([&] {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(ends, device_offsets + 1, count * sizeof(std::int64_t), cudaMemcpyDeviceToHost, s.value()));
      });
      s.sync();
      chunk_rows_[chunk.items.begin / chunk_items] = detail::radius_rows_of(ends, count);
      if (reject) { invalid += *host_invalid; }
    });
    // Nothing is written into `result` before these checks, over every chunk of every GPU.
    detail::expect_valid_points(options_, invalid.load(), "observations");
    std::uint64_t const total = detail::radius_chunk_bases(chunk_rows_, radius, n, chunk_bases_);
    // Each stream's memory for a chunk's rows is sized by the largest chunk, whichever it gets.
    std::size_t largest_chunk = 0;
    for (auto const& rows : chunk_rows_) { largest_chunk = std::max(largest_chunk, static_cast<std::size_t>(rows.total)); }

    // The fill pass: each chunk's rows into their place in `result`.
    result.offsets.resize(n + 1);
    result.offsets[0] = 0;
    result.index.resize(static_cast<std::size_t>(total));
    result.distance.resize(distances ? static_cast<std::size_t>(total) : 0);
    workers_.run(n, chunk_items, [&](chunk_context& chunk) {
      std::size_t const count = chunk.items.size();
      std::size_t const c = chunk.items.begin / chunk_items;
      detail::radius_global_offsets(result.offsets.data(), row_ends_.data(), chunk.items, chunk_bases_[c]);
      detail::radius_chunk_rows const rows = chunk_rows_[c];
      if (rows.total == 0) { return; }  // only empty rows: nothing to search for
      stream_ref const s = chunk.stream;
      auto const [points, chunk_radius] = upload(chunk);
      auto* const device_offsets = chunk.workspace.device<std::int64_t>(chunk_items + 1, 2);
      std::size_t const elements = static_cast<std::size_t>(rows.total);
      auto* const device_index = chunk.workspace.device<Index>(largest_chunk, 4);
      T* const device_distance = distances ? chunk.workspace.device<T>(largest_chunk, 5) : nullptr;
      static_cast<void>(chunk.workspace.pinned<Index>(largest_chunk, 4));  // the staging slots below, at their largest
      if (distances) { static_cast<void>(chunk.workspace.pinned<T>(largest_chunk, 5)); }
      STREAMKIT_CUDA_TRY(cudaMemsetAsync(device_offsets, 0, sizeof(std::int64_t), s.value()));
      std::int64_t const* const ends = row_ends_.data() + chunk.items.begin;
      chunk.copy_in([&] {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(device_offsets + 1, ends, count * sizeof(std::int64_t), cudaMemcpyHostToDevice, s.value()));
      });
      lanes_[chunk.lane]->index->radius_fill_async(
        points, chunk_radius,
        radius_neighbors_ref<Index, T>{device_offsets, device_index, device_distance, count, elements, nullptr,
                                       static_cast<std::size_t>(rows.largest)},
        s, scratch_[chunk.worker]);
      std::size_t const first = static_cast<std::size_t>(chunk_bases_[c]);
      detail::copy_to_host<Index> const index_back(chunk, device_index, {result.index.data() + first, 1, elements, elements, false}, 4);
      std::optional<detail::copy_to_host<T>> distance_back;
      if (distances) {
        distance_back.emplace(chunk, device_distance, detail::host_lines<T>{result.distance.data() + first, 1, elements, elements, false}, 5);
      }
      s.sync();
      index_back.finish();
      if (distance_back) { distance_back->finish(); }
    });
  }

  /// As radius_query() above, into a new host_radius_result.
  template <class Index = std::int64_t>
  host_radius_result<Index, T> radius_query(points_ref<T> observations, radius_options const& radius, bool distances,
                                            std::size_t chunk_items = 0)
  {
    host_radius_result<Index, T> result;
    radius_query(observations, radius, result, distances, chunk_items);
    return result;
  }

  /// Enqueues the search of observations that already lie in the memory of the device of lane
  /// `lane` (an index into the dispatcher's devices) into `result` there, on `stream` (of that
  /// device), with that lane's prepared references and the caller's `scratch`; never waits. For data
  /// a GPU already holds (no host staging). @throws std::invalid_argument for bad views or lane.
  template <class Index>
  void query_on_device_async(std::size_t lane, points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                             nearest_scratch& scratch)
  {
    STREAMKIT_EXPECTS(lane < lanes_.size(), std::invalid_argument, "lane: beyond the dispatcher's devices");
    detail::expect_index_capacity<Index>(count_);
    nearest_index<T>& index = *lanes_[lane]->index;
    device_guard guard(lanes_[lane]->device);
    index.prepare(observations.count, result.k, stream);
    std::as_const(index).query_async(observations, result, stream, scratch);
  }

  /// The number of references M.
  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  /// The options given at construction.
  [[nodiscard]] nearest_options const& options() const noexcept { return options_; }

 private:
  struct lane_state {
    lane_state(int id, device_resource_ref memory) : device(id), resource(memory), stream(id), invalid(1) {}
    int device;
    device_resource_ref resource;
    streamkit::stream stream;                     // uploads and preparation
    device_buffer<T> coordinates;                 // the references' packed coordinates
    std::optional<nearest_index<T>> index;        // prepared from `coordinates`
    pinned_buffer<unsigned long long> invalid;    // invalid references of the last update
  };

  /// Enqueues a chunk's observations (and per-observation radii) onto its device through the
  /// staging pipeline; the chunk's points and radius options there.
  struct radius_upload {
    points_ref<T> observations;
    bool observations_pinned;
    radius_options radius;
    bool radii_pinned;
    std::size_t chunk_items;

    std::pair<points_ref<T>, radius_options> operator()(chunk_context& chunk) const
    {
      std::size_t const count = chunk.items.size();
      T* const device_points = chunk.workspace.device<T>(2 * chunk_items, 0);
      detail::staged_points<T> const in(detail::points_in(observations, chunk.items), observations_pinned);
      in.copy_to_device(chunk, device_points, 1);
      radius_options local = radius;
      if (radius.radii != nullptr) {
        double* const device_radii = chunk.workspace.device<double>(chunk_items, 1);
        detail::copy_to_device(chunk, detail::host_lines<double const>{radius.radii + chunk.items.begin, 1, count, count, radii_pinned},
                               device_radii, 3);
        local.radii = device_radii;
      }
      return {in.on_device(device_points), local};
    }
  };

  dispatcher& workers_;
  nearest_options options_;
  std::size_t count_ = 0;
  std::vector<std::unique_ptr<lane_state>> lanes_;
  std::vector<nearest_scratch> scratch_;  // one per worker
  // Radius queries: each row's end within its chunk (the count pass), each chunk's rows and first
  // element in the result; kept between calls.
  pinned_buffer<std::int64_t> row_ends_;
  std::vector<detail::radius_chunk_rows> chunk_rows_;
  std::vector<std::uint64_t> chunk_bases_;
};

/// One-shot: a multi_gpu_nearest_neighbor over `references`, queried once (the references are
/// prepared on every GPU per call: for time steps keep the object and call update()).
template <class T, class Index>
void dispatch_nearest_neighbor(dispatcher& workers, points_ref<T> observations, points_ref<T> references,
                               neighbors_ref<Index, T> result, nearest_options const& options, std::size_t chunk_items = 0)
{
  detail::expect_points(observations, "observations");
  detail::expect_neighbors(result, observations.count);
  detail::expect_index_capacity<Index>(references.count);
  multi_gpu_nearest_neighbor<T>(workers, references, options).query(observations, result, chunk_items);
}

/// One-shot radius query of host points over a dispatcher's GPUs: a multi_gpu_nearest_neighbor over
/// `references`, then radius_query() (its rules, streams, memory and exceptions) into a new host
/// result. The references are prepared on every GPU per call: for time steps keep the object.
/// @throws std::invalid_argument for bad views, options or radius (before any CUDA work), as the
/// object's constructor and radius_query().
template <class Index = std::int64_t, class T>
host_radius_result<Index, T> dispatch_radius_neighbors(dispatcher& workers, points_ref<T> observations, points_ref<T> references,
                                                       radius_options const& radius, nearest_options const& options, bool distances,
                                                       std::size_t chunk_items = 0)
{
  detail::expect_host_radius_query(observations, radius);
  detail::expect_index_capacity<Index>(references.count);
  return multi_gpu_nearest_neighbor<T>(workers, references, options).template radius_query<Index>(observations, radius, distances,
                                                                                                  chunk_items);
}

}  // namespace streamkit
