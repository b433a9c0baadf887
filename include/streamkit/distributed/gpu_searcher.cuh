#pragma once
/// @file gpu_searcher.cuh
/// The GPU Searcher of distributed_nearest: each rank searches its references on its own GPU(s)
/// with multi_gpu_nearest_neighbor (host-resident points streamed through in chunks, copies
/// overlapping the search, the reference set prepared once per update()). The search is exact
/// (float64 ranking) and reports great-circle angles in radians, as distributed_nearest merges them.
///
/// `distributed_gpu_nearest` puts the two together; make_distributed_gpu_nearest() picks each
/// rank's GPU from its rank on the node (default_device()).

#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/nearest_neighbor.hpp>
#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

namespace streamkit::distributed {

/// Searches this rank's references on the GPUs of a dispatcher (see the file's description).
/// Move-only.
class gpu_searcher {
 public:
  /// @param devices this rank's GPUs (repeats allowed); empty: every visible device.
  explicit gpu_searcher(std::vector<int> devices)
      : workers_(std::make_unique<dispatcher>(dispatcher_options{std::move(devices), 0}))
  {
  }

  /// Replaces the references (radians, float64, packed host arrays; `count` may be 0) on every GPU of
  /// the rank, reusing their memory when the set is no larger; waits.
  void prepare(double const* latitude, double const* longitude, std::size_t count)
  {
    count_ = count;
    if (count == 0) { return; }  // an empty shard: searches answer "none"
    auto const references = points_ref<double>::separate(latitude, longitude, count, angle_unit::radians);
    if (index_) {
      index_->update(references);
    } else {
      index_ = std::make_unique<multi_gpu_nearest_neighbor<double>>(*workers_, references, options());
    }
  }

  /// The k nearest references (local indices, angles in radians) of `count` observations (radians,
  /// float64, packed host arrays) into index and angle, k per row, −1 and NaN beyond the set and for
  /// invalid observations; waits.
  void search(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    if (count_ == 0) {
      for (std::size_t i = 0; i < count * k; ++i) { index[i] = -1, angle[i] = std::numeric_limits<double>::quiet_NaN(); }
      return;
    }
    index_->query(points_ref<double>::separate(latitude, longitude, count, angle_unit::radians),
                  neighbors_ref<std::int64_t, double>::dense(index, angle, count, k));
  }

  /// The dispatcher running this rank's searches (its devices, its memory resources).
  [[nodiscard]] dispatcher& workers() noexcept { return *workers_; }

 private:
  static nearest_options options() noexcept
  {
    nearest_options exact;
    exact.precision = nn_precision::exact;
    exact.on_invalid = invalid_points::mark;
    exact.unit = distance_unit::radians;
    return exact;
  }

  std::unique_ptr<dispatcher> workers_;  // stable address: the index refers to it
  std::unique_ptr<multi_gpu_nearest_neighbor<double>> index_;
  std::size_t count_ = 0;
};

/// Distributed exact k nearest neighbours searched on each rank's GPUs.
using distributed_gpu_nearest = distributed_nearest<gpu_searcher>;

/// A distributed_gpu_nearest over `comm` whose ranks each use one GPU: `device`, or by default
/// default_device() (the rank on its node modulo the visible GPUs). Collective.
/// @throws std::invalid_argument when a rank sees no GPU, or the ranks disagree on `layout`.
inline distributed_gpu_nearest make_distributed_gpu_nearest(MPI_Comm comm, reference_layout layout, std::optional<int> device = std::nullopt)
{
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    visible = 0;
  }
  rank_info const info = describe(comm);
  int chosen = 0;
  run_everywhere(comm, "make_distributed_gpu_nearest", [&] { chosen = device ? *device : default_device(info, visible); });
  return distributed_gpu_nearest(comm, layout, gpu_searcher({chosen}));
}

}  // namespace streamkit::distributed
