// The CUDA side of streamkit.nearest and streamkit.NearestIndex, compiled by nvcc.

#include "nearest.hpp"
#include "callback_resource.hpp"
#include "device_memory.hpp"
#include "shared_dispatcher.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <algorithm>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace streamkit_python {

using streamkit::neighbors_ref;
using streamkit::points_ref;

template <class T>
void nearest_async(int device, points_ref<T> observations, points_ref<T> references, neighbors_ref<std::int64_t, T> result,
                   streamkit::nearest_options const& options, cudaStream_t stream, allocation_callbacks const* temporaries)
{
  streamkit::device_guard const guard(device);
  prepare_device(device);
  if (temporaries == nullptr) {
    streamkit::nearest_neighbor_async(observations, references, result, options, streamkit::stream_ref(stream));
    return;
  }
  callback_resource framework(*temporaries);
  streamkit::nearest_neighbor_async(observations, references, result, options, streamkit::stream_ref(stream),
                                    streamkit::device_resource_ref(framework));
}

template <class T>
void nearest_host(points_ref<T> observations, points_ref<T> references, neighbors_ref<std::int64_t, T> result,
                  streamkit::nearest_options const& options)
{
  auto shared = lock_shared_dispatcher();
  streamkit::dispatch_nearest_neighbor(shared.workers, observations, references, result, options);
}

template <class T>
struct device_index<T>::state {
  state(int id, points_ref<T> references, streamkit::nearest_options const& options, cudaStream_t stream)
      : device(id), last_use(id), index(references, options, streamkit::stream_ref(stream))
  {
    last_use.record(streamkit::stream_ref(stream));
  }

  int device;
  streamkit::event last_use;
  streamkit::nearest_index<T> index;
};

template <class T>
device_index<T>::device_index(int device, points_ref<T> references, streamkit::nearest_options const& options, cudaStream_t stream)
{
  streamkit::device_guard const guard(device);
  prepare_device(device);
  state_ = std::make_unique<state>(device, references, options, stream);
}

template <class T>
device_index<T>::~device_index()
{
  streamkit::device_guard const guard(state_->device);
  state_.reset();
}

template <class T>
void device_index<T>::update(points_ref<T> references, cudaStream_t stream)
{
  streamkit::device_guard const guard(state_->device);
  streamkit::stream_ref(stream).wait(state_->last_use);
  state_->index.update(references, streamkit::stream_ref(stream));
  state_->last_use.record(streamkit::stream_ref(stream));
}

template <class T>
void device_index<T>::query(points_ref<T> observations, neighbors_ref<std::int64_t, T> result, cudaStream_t stream)
{
  streamkit::device_guard const guard(state_->device);
  streamkit::stream_ref(stream).wait(state_->last_use);
  state_->index.query_async(observations, result, streamkit::stream_ref(stream));
  state_->last_use.record(streamkit::stream_ref(stream));
}

template <class T>
std::size_t device_index<T>::size() const noexcept
{
  return state_->index.size();
}

template <class T>
int device_index<T>::device() const noexcept
{
  return state_->device;
}

template <class T>
struct host_index<T>::state {
  state(points_ref<T> references, streamkit::nearest_options const& options)
      : index(lock_shared_dispatcher().workers, references, options)
  {
  }
  streamkit::multi_gpu_nearest_neighbor<T> index;
};

template <class T>
host_index<T>::host_index(points_ref<T> references, streamkit::nearest_options const& options)
    : state_(std::make_unique<state>(references, options))
{
}

template <class T>
host_index<T>::~host_index() = default;

template <class T>
void host_index<T>::update(points_ref<T> references)
{
  auto const shared = lock_shared_dispatcher();
  state_->index.update(references);
}

template <class T>
void host_index<T>::query(points_ref<T> observations, neighbors_ref<std::int64_t, T> result)
{
  auto const shared = lock_shared_dispatcher();
  state_->index.query(observations, result);
}

template <class T>
std::size_t host_index<T>::size() const noexcept
{
  return state_->index.size();
}

namespace {

template <class T>
void radius_on_device(points_ref<T> observations, points_ref<T> references, radius_request const& request,
                      streamkit::nearest_options const& options, streamkit::stream_ref stream, std::int64_t* offsets,
                      radius_storage const& storage, std::vector<std::int64_t>& host_offsets)
{
  std::size_t const n = observations.count;
  streamkit::nearest_index<T> index(references, options, stream);
  streamkit::radius_options r;
  r.radius = request.radius;
  r.radii = request.radii;
  r.sorted = request.sorted;
  index.radius_offsets_async(observations, r, offsets, stream);
  host_offsets.resize(n + 1);
  STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host_offsets.data(), offsets, (n + 1) * sizeof(std::int64_t), cudaMemcpyDeviceToHost, stream.value()));
  stream.sync();
  unsigned long long largest = 0;
  for (std::size_t i = 0; i < n; ++i) {
    largest = std::max(largest, static_cast<unsigned long long>(host_offsets[i + 1] - host_offsets[i]));
  }
  auto const total = static_cast<std::size_t>(host_offsets[n]);
  r.max_per_row = request.max_per_row;
  r.max_total = request.max_total;
  streamkit::detail::expect_radius_bounds(r, largest, total, n);
  auto const [index_out, distance_out] = storage(total);
  index.radius_fill_async(observations, r,
                          streamkit::radius_neighbors_ref<std::int64_t, T>{offsets, index_out, static_cast<T*>(distance_out), n, total, nullptr,
                                                                          static_cast<std::size_t>(largest)},
                          stream);
}

}  // namespace

template <class T>
void radius_query(bool on_cuda, int device, points_ref<T> observations, points_ref<T> references, radius_request const& request,
                  streamkit::nearest_options const& options, cudaStream_t stream, std::int64_t* offsets, radius_storage const& storage)
{
  std::vector<std::int64_t> host_offsets;
  if (on_cuda) {
    streamkit::device_guard const guard(device);
    prepare_device(device);
    radius_on_device<T>(observations, references, request, options, streamkit::stream_ref(stream), offsets, storage, host_offsets);
    return;
  }
  // Host arrays: contiguous (n, 2) rows copied to this device, the results copied back; waits.
  if (streamkit::device_count() == 0) { throw std::runtime_error("radius_neighbors: no CUDA device is visible"); }
  streamkit::device_guard const guard(device);
  prepare_device(device);
  streamkit::stream const s(device);
  std::size_t const n = observations.count, m = references.count;
  auto const upload = [&](points_ref<T> p, std::size_t count) {
    streamkit::device_buffer<T> d(2 * count, s);
    if (count > 0) { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(d.data(), p.latitude, 2 * count * sizeof(T), cudaMemcpyHostToDevice, s.value())); }
    return d;
  };
  auto const d_obs = upload(observations, n);
  auto const d_refs = upload(references, m);
  streamkit::device_buffer<double> d_radii(request.radii != nullptr ? n : 0, s);
  if (request.radii != nullptr && n > 0) {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(d_radii.data(), request.radii, n * sizeof(double), cudaMemcpyHostToDevice, s.value()));
  }
  radius_request on_device = request;
  on_device.radii = request.radii != nullptr ? d_radii.data() : nullptr;
  streamkit::device_buffer<std::int64_t> d_offsets(n + 1, s);
  streamkit::device_buffer<std::int64_t> d_index;
  streamkit::device_buffer<T> d_distance;
  std::int64_t* host_index = nullptr;
  void* host_distance = nullptr;
  radius_storage const staged = [&](std::size_t total) {
    std::tie(host_index, host_distance) = storage(total);
    d_index = streamkit::device_buffer<std::int64_t>(total, s);
    if (host_distance != nullptr) { d_distance = streamkit::device_buffer<T>(total, s); }
    return std::pair<std::int64_t*, void*>(d_index.data(), host_distance != nullptr ? d_distance.data() : nullptr);
  };
  radius_on_device<T>(streamkit::points_ref<T>::interleaved(d_obs.data(), n, observations.unit),
                      streamkit::points_ref<T>::interleaved(d_refs.data(), m, references.unit), on_device, options, s, d_offsets.data(), staged,
                      host_offsets);
  std::size_t const total = static_cast<std::size_t>(host_offsets[n]);
  std::copy(host_offsets.begin(), host_offsets.end(), offsets);
  if (total > 0) {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host_index, d_index.data(), total * sizeof(std::int64_t), cudaMemcpyDeviceToHost, s.value()));
    if (host_distance != nullptr) {
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host_distance, d_distance.data(), total * sizeof(T), cudaMemcpyDeviceToHost, s.value()));
    }
  }
  s.sync();
}

#define STREAMKIT_PYTHON_INSTANTIATE(T)                                                                                       \
  template void nearest_async<T>(int, points_ref<T>, points_ref<T>, neighbors_ref<std::int64_t, T>,                          \
                                 streamkit::nearest_options const&, cudaStream_t, allocation_callbacks const*);               \
  template void nearest_host<T>(points_ref<T>, points_ref<T>, neighbors_ref<std::int64_t, T>, streamkit::nearest_options const&); \
  template class device_index<T>;                                                                                             \
  template void radius_query<T>(bool, int, points_ref<T>, points_ref<T>, radius_request const&, streamkit::nearest_options const&, \
                                cudaStream_t, std::int64_t*, radius_storage const&);                                          \
  template class host_index<T>;

STREAMKIT_PYTHON_INSTANTIATE(float)
STREAMKIT_PYTHON_INSTANTIATE(double)

}  // namespace streamkit_python
