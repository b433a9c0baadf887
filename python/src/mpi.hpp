#pragma once
// The bridge between the MPI binding code (mpi_bindings.cpp, host compiler) and its CUDA code
// (mpi.cu, nvcc): streamkit::distributed's GPU search and min-max scaler behind plain C++
// declarations, nothing of nanobind or of the .cuh headers.

#include <streamkit/core/matrix.hpp>
#include <streamkit/distributed/nearest_neighbor.hpp>
#include <streamkit/spatial/points.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>
#include <mpi.h>

namespace streamkit_python {

/// streamkit::distributed::distributed_gpu_nearest (make_distributed_gpu_nearest: each rank on one
/// GPU, `device` or by default its rank on the node modulo the visible GPUs), with the host-pointer
/// API of distributed_nearest: radians, float64, packed. Collective calls.
class gpu_nearest {
 public:
  gpu_nearest(MPI_Comm comm, streamkit::distributed::reference_layout layout, int device);
  ~gpu_nearest();
  gpu_nearest(gpu_nearest const&) = delete;
  gpu_nearest& operator=(gpu_nearest const&) = delete;

  void update(double const* latitude, double const* longitude, std::size_t count);
  void query(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
             double* angle);
  /// The same with views (radians, any stride) in the device memory of the rank's GPU, once
  /// `stream` (where the caller's framework wrote them; null: host views) has finished;
  /// distributed_gpu_nearest's views, no host copy in the replicated layout. Ranks may mix host and
  /// device arrays. Collective; waits.
  void update(streamkit::points_ref<double> references, cudaStream_t stream);
  void query(streamkit::points_ref<double> observations, streamkit::neighbors_ref<std::int64_t, double> result, cudaStream_t stream);
  /// The rank's GPU.
  [[nodiscard]] int device() const noexcept;
  [[nodiscard]] std::uint64_t size() const noexcept;
  [[nodiscard]] streamkit::distributed::exchange_stats const& last_exchange() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// streamkit::distributed::distributed_minmax_scaler<T> over `comm` (collective fits). CUDA arrays
/// are used where they are, on `stream`; host arrays (dense row-major) are copied through the rank's
/// GPU (its rank on the node modulo the visible GPUs) on a stream of the scaler's, and the call waits.
/// Instantiated for float and double in mpi.cu.
template <class T>
class mpi_scaler {
 public:
  /// @throws std::invalid_argument unless lo < hi, both finite.
  mpi_scaler(MPI_Comm comm, T lo, T hi, bool clip);
  ~mpi_scaler();
  mpi_scaler(mpi_scaler const&) = delete;
  mpi_scaler& operator=(mpi_scaler const&) = delete;

  /// fit (`reset`) or partial_fit of this rank's rows. Collective; waits.
  void fit(streamkit::matrix_ref<T const> x, bool on_cuda, bool reset, cudaStream_t stream);
  /// transform (or, with `inverse`, inverse_transform) of this rank's rows into `out` (the place
  /// of x); CUDA arrays: enqueued on `stream`, never waits; host arrays: waits. Local.
  void transform(streamkit::matrix_ref<T const> x, streamkit::matrix_ref<T> out, bool on_cuda, bool inverse,
                 cudaStream_t stream);
  /// The global per-column minima, maxima and scales (host vectors; waits for the last fit).
  void fitted(std::vector<T>& min, std::vector<T>& max, std::vector<T>& scale) const;
  [[nodiscard]] std::uint64_t samples_seen() const noexcept;
  [[nodiscard]] bool uses_device_pointers() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace streamkit_python
