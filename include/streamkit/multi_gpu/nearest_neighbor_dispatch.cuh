#pragma once
/// @file nearest_neighbor_dispatch.cuh
/// Nearest-neighbour search of host-resident points over a dispatcher's GPUs. A
/// multi_gpu_nearest_neighbor keeps the reference set prepared on every GPU, with each stream's
/// scratch, between queries; update() replaces it each time step. A query streams the observations
/// through in chunks (host → device, search, device → host, each element written once), the copies
/// of a device's chunks queued one after another in each direction so that both directions and the
/// search overlap. Host memory that is page-locked goes straight to DMA; pageable memory is staged
/// through each stream's pinned buffers. After the first query of a size nothing is allocated.

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/detail/staging.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/memory/pinned_buffer.hpp>

#include <algorithm>
#include <memory>
#include <optional>
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
  /// Enqueues the copies into `device` (2 × count elements) on `stream`, straight from the host
  /// memory (pageable memory is then copied by the runtime before the call returns).
  void copy_to_device(T* device, stream_ref stream) const
  {
    copy_lines_async(device, latitude.length, latitude.data, latitude.ld, count, latitude.length, cudaMemcpyHostToDevice, stream);
    if (!pairs) { copy_lines_async(device + count, 1, longitude.data, longitude.ld, count, 1, cudaMemcpyHostToDevice, stream); }
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

}  // namespace detail

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

  /// Replaces the reference set (host memory) on every device, reusing memory when the new set is no
  /// larger, and waits. @throws std::invalid_argument for M = 0, null coordinates, or (with
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

  dispatcher& workers_;
  nearest_options options_;
  std::size_t count_ = 0;
  std::vector<std::unique_ptr<lane_state>> lanes_;
  std::vector<nearest_scratch> scratch_;  // one per worker
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

}  // namespace streamkit
