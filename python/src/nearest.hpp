#pragma once
// The bridge between the nearest-neighbour binding code (nearest_bindings.cpp, host compiler) and
// its CUDA code (nearest.cu, nvcc): plain C++ declarations on streamkit's views, nothing of
// nanobind or of the .cuh headers.

#include "allocation_callbacks.hpp"

#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>

#include <cuda_runtime_api.h>

namespace streamkit_python {

/// streamkit::nearest_neighbor_async on `device` (made current for the call) and `stream`; never
/// waits for the device. Its temporaries come from `temporaries` (the framework's allocator) when
/// given, else from streamkit's default resource. Explicitly instantiated for float and double in
/// nearest.cu, as is all below.
template <class T>
void nearest_async(int device, streamkit::points_ref<T> observations, streamkit::points_ref<T> references,
                   streamkit::neighbors_ref<std::int64_t, T> result, streamkit::nearest_options const& options,
                   cudaStream_t stream, allocation_callbacks const* temporaries = nullptr);

/// The search of host arrays over every visible GPU (the process's shared dispatcher); waits.
template <class T>
void nearest_host(streamkit::points_ref<T> observations, streamkit::points_ref<T> references,
                  streamkit::neighbors_ref<std::int64_t, T> result, streamkit::nearest_options const& options);

/// A streamkit::nearest_index on one device, for NearestIndex on CUDA arrays. Every update and
/// query waits on the device (not the host) for the one before it, whatever their streams, so that
/// a query never reads a half-updated index and an update never overwrites what a query reads.
template <class T>
class device_index {
 public:
  /// Prepares `references` (device memory of `device`) on `stream`; never waits for the device.
  device_index(int device, streamkit::points_ref<T> references, streamkit::nearest_options const& options, cudaStream_t stream);
  ~device_index();
  device_index(device_index const&) = delete;
  device_index& operator=(device_index const&) = delete;
  /// Replaces the references on `stream`; never waits for the device.
  void update(streamkit::points_ref<T> references, cudaStream_t stream);
  /// Enqueues a search on `stream`; never waits for the device.
  void query(streamkit::points_ref<T> observations, streamkit::neighbors_ref<std::int64_t, T> result, cudaStream_t stream);
  [[nodiscard]] std::size_t size() const noexcept;
  [[nodiscard]] int device() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// A streamkit::multi_gpu_nearest_neighbor on the shared dispatcher, for NearestIndex on host
/// arrays: every GPU holds the references. Constructor, update and query wait.
template <class T>
class host_index {
 public:
  host_index(streamkit::points_ref<T> references, streamkit::nearest_options const& options);
  ~host_index();
  host_index(host_index const&) = delete;
  host_index& operator=(host_index const&) = delete;
  void update(streamkit::points_ref<T> references);
  void query(streamkit::points_ref<T> observations, streamkit::neighbors_ref<std::int64_t, T> result);
  [[nodiscard]] std::size_t size() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace streamkit_python
