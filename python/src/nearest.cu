// The CUDA side of streamkit.nearest and streamkit.NearestIndex, compiled by nvcc.

#include "nearest.hpp"
#include "callback_resource.hpp"
#include "device_memory.hpp"
#include "shared_dispatcher.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>

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

#define STREAMKIT_PYTHON_INSTANTIATE(T)                                                                                       \
  template void nearest_async<T>(int, points_ref<T>, points_ref<T>, neighbors_ref<std::int64_t, T>,                          \
                                 streamkit::nearest_options const&, cudaStream_t, allocation_callbacks const*);               \
  template void nearest_host<T>(points_ref<T>, points_ref<T>, neighbors_ref<std::int64_t, T>, streamkit::nearest_options const&); \
  template class device_index<T>;                                                                                             \
  template class host_index<T>;

STREAMKIT_PYTHON_INSTANTIATE(float)
STREAMKIT_PYTHON_INSTANTIATE(double)

}  // namespace streamkit_python
