#pragma once
/// @file nearest_neighbor_dispatch.cuh
/// Nearest-neighbour search of host-resident observations spread over a dispatcher's GPUs: the
/// reference set is uploaded and prepared once per device (lane) and shared by its streams,
/// observations stream through in chunks (host → pinned staging → device), and indices and
/// distances stream back into the caller's arrays, each element written exactly once.

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace streamkit {

/// Points in host memory (separate latitude and longitude arrays).
template <class T>
struct host_points {
  T const* latitude = nullptr;
  T const* longitude = nullptr;
  std::size_t count = 0;
  angle_unit unit = angle_unit::radians;
};

/// Blocking. `chunk_items` = 0 picks about four chunks per worker (at least 4096 observations). With
/// invalid_points::reject, a chunk with invalid observations (or invalid references) fails with
/// dispatch_error naming the count, and writes nothing of its own; the GPUs never wait for a check.
template <class T, class Index>
void dispatch_nearest_neighbor(dispatcher& workers, host_points<T> observations, host_points<T> references, Index* index,
                               T* distance, nearest_options const& options, std::size_t chunk_items = 0)
{
  STREAMKIT_EXPECTS(references.count > 0, std::invalid_argument, "references: the reference set is empty (M = 0)");
  STREAMKIT_EXPECTS(references.latitude != nullptr && references.longitude != nullptr, std::invalid_argument,
                    "references: null coordinates with a count of " + std::to_string(references.count));
  STREAMKIT_EXPECTS((observations.latitude != nullptr && observations.longitude != nullptr && index != nullptr) ||
                      observations.count == 0,
                    std::invalid_argument, "observations, index: null with " + std::to_string(observations.count) + " observations");
  detail::expect_index_capacity<Index>(references.count);
  std::size_t const n = observations.count;
  if (n == 0) { return; }
  if (chunk_items == 0) { chunk_items = std::max<std::size_t>(4096, (n + 4 * workers.worker_count() - 1) / (4 * workers.worker_count())); }
  std::size_t const m = references.count;
  struct lane_references {
    std::mutex mutex;
    std::unique_ptr<brute_force_index<T>> index;
  };
  std::vector<lane_references> lanes(workers.devices().size());
  std::vector<nearest_scratch> scratch(workers.worker_count());

  workers.run(n, chunk_items, [&](chunk_context& chunk) {
    stream_workspace& space = chunk.workspace;
    stream_ref const s = chunk.stream;
    lane_references& lane = lanes[chunk.lane];
    {
      // The first chunk of a device uploads and prepares the references; its other streams wait
      // here until they are ready, then only read them.
      std::lock_guard<std::mutex> lock(lane.mutex);
      if (!lane.index) {
        device_buffer<T> ref_lat(m, s), ref_lon(m, s);
        ref_lat.copy_from_host_async(cuda::std::span<T const>(references.latitude, m), s);
        ref_lon.copy_from_host_async(cuda::std::span<T const>(references.longitude, m), s);
        auto prepared = std::make_unique<brute_force_index<T>>(points_ref<T>::separate(ref_lat.data(), ref_lon.data(), m, references.unit), options, s);
        unsigned long long invalid_references = 0;
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(&invalid_references, prepared->invalid_references(), sizeof invalid_references,
                                           cudaMemcpyDeviceToHost, s.value()));
        s.sync();  // the lane's other streams use the references once this chunk releases the lock
        detail::expect_valid_points(options, invalid_references, "references");
        lane.index = std::move(prepared);
      }
    }
    std::size_t const count = chunk.items.size();
    std::size_t const capacity = chunk_items;
    T* staged_lat = space.pinned<T>(capacity, 0);
    T* staged_lon = space.pinned<T>(capacity, 1);
    Index* staged_index = space.pinned<Index>(capacity, 2);
    T* staged_distance = space.pinned<T>(capacity, 3);
    T* obs_lat = space.device<T>(capacity, 2);
    T* obs_lon = space.device<T>(capacity, 3);
    Index* out_index = space.device<Index>(capacity, 4);
    T* out_distance = space.device<T>(capacity, 5);
    auto* invalid = space.device<unsigned long long>(1, 6);
    auto* staged_invalid = space.pinned<unsigned long long>(1, 4);
    std::memcpy(staged_lat, observations.latitude + chunk.items.begin, count * sizeof(T));
    std::memcpy(staged_lon, observations.longitude + chunk.items.begin, count * sizeof(T));
    chunk.copy_in([&] {
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(obs_lat, staged_lat, count * sizeof(T), cudaMemcpyHostToDevice, s.value()));
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(obs_lon, staged_lon, count * sizeof(T), cudaMemcpyHostToDevice, s.value()));
    });
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(invalid, 0, sizeof *invalid, s.value()));
    lane.index->query_async(points_ref<T>::separate(obs_lat, obs_lon, count, observations.unit),
                            nearest_result_ref<Index, T>{out_index, distance != nullptr ? out_distance : nullptr, invalid}, s,
                            scratch[chunk.worker]);
    chunk.copy_out([&] {
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(staged_invalid, invalid, sizeof *invalid, cudaMemcpyDeviceToHost, s.value()));
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(staged_index, out_index, count * sizeof(Index), cudaMemcpyDeviceToHost, s.value()));
      if (distance != nullptr) {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(staged_distance, out_distance, count * sizeof(T), cudaMemcpyDeviceToHost, s.value()));
      }
    });
    s.sync();
    detail::expect_valid_points(options, *staged_invalid, "observations");  // before this chunk writes anything
    std::memcpy(index + chunk.items.begin, staged_index, count * sizeof(Index));
    if (distance != nullptr) { std::memcpy(distance + chunk.items.begin, staged_distance, count * sizeof(T)); }
  });
}

}  // namespace streamkit
