#pragma once
// The bridge between the nearest-neighbour binding code (nearest_bindings.cpp, host compiler) and
// its CUDA code (nearest.cu, nvcc): plain C++ declarations on streamkit's views, nothing of
// nanobind or of the .cuh headers.

#include "allocation_callbacks.hpp"

#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

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

/// Where a radius query writes its indices and distances: called once the total is known, with it;
/// returns the two addresses (distances null when not asked for), where the observations are.
using radius_storage = std::function<std::pair<std::int64_t*, void*>(std::size_t total)>;

/// What a radius query asks (streamkit::radius_options, with the per-row radii where the observations are).
struct radius_request {
  double radius = 0.0;
  double const* radii = nullptr;
  bool sorted = true;
  bool distances = true;
  std::size_t max_per_row = static_cast<std::size_t>(-1);
  std::size_t max_total = static_cast<std::size_t>(-1);
};

/// A radius query of CUDA arrays on `device` and `stream`: both passes through a streamkit::nearest_index,
/// `offsets` (observations.count + 1, device memory) first, then the total read back (the one wait),
/// the bounds checked (std::length_error), `storage(total)` asked for the rest, which is enqueued.
/// Host arrays (`on_cuda` false; contiguous (n, 2) rows, radii and offsets in host memory): copied to
/// the current device and back, and waits.
template <class T>
void radius_query(bool on_cuda, int device, streamkit::points_ref<T> observations, streamkit::points_ref<T> references,
                  radius_request const& request, streamkit::nearest_options const& options, cudaStream_t stream,
                  std::int64_t* offsets, radius_storage const& storage);

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
