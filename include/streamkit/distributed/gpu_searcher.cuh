#pragma once
/// @file gpu_searcher.cuh
/// The GPU Searcher of distributed_nearest: each rank searches its references on its own GPU(s)
/// with multi_gpu_nearest_neighbor (host-resident points streamed through in chunks, copies
/// overlapping the search, the reference set prepared once per update()). The search is exact
/// (float64 ranking) and reports great-circle angles in radians, as distributed_nearest merges them.
///
/// `distributed_gpu_nearest` puts the two together and also takes views (points_ref,
/// neighbors_ref) in host or device memory: observations and results in the device memory of the
/// rank's GPU stay there in the replicated layout and on one rank (no host copy at all). The sharded
/// layout does its work per reference and per observation on the GPU (keys, owners, the partition
/// into send buffers, the reach test, placing the answers: detail/device_rows.cuh); host arrays are
/// copied to the GPU first (and a query's answers back), and only the parts that go to other ranks
/// cross PCIe to and from MPI's page-locked buffers (MPI exchanges host memory: device pointers never
/// go to MPI here, also with a CUDA-aware MPI). The update's shard is assembled on the GPU (its own
/// part copied there, the parts other ranks send copied up from MPI's buffers) and the searcher
/// prepares from it there. Elsewhere device views are staged through page-locked host buffers.
/// make_distributed_gpu_nearest() picks each rank's GPU from its rank on the node (default_device()).

#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/detail/device_rows.cuh>
#include <streamkit/distributed/nearest_neighbor.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
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
  /// Streams (and host threads staging pageable memory) per device unless told otherwise.
  static constexpr int default_streams_per_device = 8;

  /// @param devices this rank's GPUs (repeats allowed); empty: every visible device.
  /// @param streams_per_device the dispatcher's streams (and host threads) per device (0: the
  ///        dispatcher's default, the copy engines). Each stream's thread copies its chunks of
  ///        pageable host memory through page-locked buffers: with the dispatcher's default the
  ///        copies of pageable arrays, not the GPU, set the pace (H200, 2^26 x 2^16 replicated at one
  ///        rank: 186.8 ms with the default, 105.3 ms with 8).
  explicit gpu_searcher(std::vector<int> devices, int streams_per_device = default_streams_per_device)
      : workers_(std::make_unique<dispatcher>(dispatcher_options{std::move(devices), streams_per_device})),
        device_stream_(std::make_unique<stream>(workers_->devices().front()))
  {
  }

  /// Replaces the references (radians, float64, packed arrays in host memory or in the device memory
  /// of the searcher's GPUs, copied on the device then; `count` may be 0) on every GPU of the rank,
  /// reusing their memory when the set is no larger; waits.
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

  /// As search(), for observations and a result (any row stride) in the device memory of the
  /// searcher's first GPU (device(), as distributed_gpu_nearest checks); waits.
  void search_on_device(points_ref<double> observations, neighbors_ref<std::int64_t, double> result)
  {
    device_guard const guard(device());
    stream_ref const s = device_stream_->ref();
    if (count_ == 0) {  // all bits set: index −1, distance NaN
      if (observations.count > 0) {
        STREAMKIT_CUDA_TRY(cudaMemset2DAsync(result.index, result.stride * sizeof(std::int64_t), 0xff, result.k * sizeof(std::int64_t),
                                             observations.count, s.value()));
        if (result.distance != nullptr) {
          STREAMKIT_CUDA_TRY(cudaMemset2DAsync(result.distance, result.stride * sizeof(double), 0xff, result.k * sizeof(double),
                                               observations.count, s.value()));
        }
      }
    } else {
      index_->query_on_device_async(0, observations, result, s, scratch_);
    }
    s.sync();
  }

  /// The GPU of search_on_device(): the first of the searcher's devices.
  [[nodiscard]] int device() const noexcept { return workers_->devices().front(); }

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
  // search_on_device()'s stream (stable across moves); before the index, whose workspace a search on
  // the device ties to it: destroyed after that workspace is freed (H200: cudaFreeAsync on the
  // destroyed stream crashed at exit).
  std::unique_ptr<stream> device_stream_;
  std::unique_ptr<multi_gpu_nearest_neighbor<double>> index_;
  nearest_scratch scratch_;
  std::size_t count_ = 0;
};

/// Distributed exact k nearest neighbours searched on each rank's GPU: distributed_nearest's host
/// arrays, and views in host or device memory (see the file's description). An update or query of
/// host arrays takes the path of the views below, also through a reference to
/// distributed_nearest<gpu_searcher> (its update() and query() call the hooks this class overrides).
/// Movable, not thread-safe.
class distributed_gpu_nearest : public distributed_nearest<gpu_searcher> {
 public:
  using distributed_nearest<gpu_searcher>::distributed_nearest;
  using distributed_nearest<gpu_searcher>::update;
  using distributed_nearest<gpu_searcher>::query;

  /// Replaces the references with this rank's part: a view (radians; any stride) in host memory or
  /// in the device memory of the rank's GPU; ranks may mix them. Sharded: the work per reference
  /// (keys, ranks, the send order) runs on the GPU, a device view read where it is, a host view
  /// copied there first (through page-locked memory, on the host threads); only the references that
  /// go to other ranks come to the host (for MPI), and the shard the searcher prepares from is
  /// assembled on the GPU. Replicated: a device view is copied to a page-locked host buffer first.
  /// Collective.
  void update(points_ref<double> references)
  {
    if (layout() == reference_layout::sharded) {
      repartition_on(row_engine(), device_rows_, references.count,
                     [&] { return rows_on_device(references, "references", staged_references_, references_there_); });
      return;
    }
    std::size_t const n = references.count;
    bool staged = false;
    double const start = MPI_Wtime();
    run_everywhere(communicator(), "distributed_gpu_nearest::update", [&] {  // the same collectives on every rank, whatever its views
      expect_radians(references.unit, "references");
      staged = !packed_on_host(references);
      if (staged) { stage_in(references, staged_references_); }
    });
    double const enqueued = MPI_Wtime() - start;
    update_in_parts(staged ? staged_references_.data() : references.latitude, staged ? staged_references_.data() + n : references.longitude,
                    n, staged_rows{this, staged, nullptr});
    stats().staging_seconds += enqueued;
  }

  /// The k = result.k nearest references (global ids, angles in radians) of this rank's observations
  /// (radians), in their order. Views in host memory or in the device memory of the rank's GPU, any
  /// stride; ranks may mix them. Both views on the GPU, replicated or on one rank: searched there,
  /// nothing crosses PCIe; otherwise, there, device views are staged through page-locked host
  /// buffers. Sharded at several ranks: the work per observation runs on the GPU, host views are
  /// copied there first (through page-locked memory, on the host threads) and the answers back, and
  /// only the rows that go to other ranks cross PCIe. Collective.
  void query(points_ref<double> observations, neighbors_ref<std::int64_t, double> result)
  {
    if (routes_rows()) {
      query_rows_on_device(observations, result);
      return;
    }
    std::size_t const n = observations.count, k = result.k;
    bool direct = false, host_in = true, host_out = true;
    double const start = MPI_Wtime();
    run_everywhere(communicator(), "distributed_gpu_nearest::query", [&] {  // the same collectives on every rank, whatever its views
      expect_radians(observations.unit, "observations");
      bool const on_device = on_my_device(observations.latitude) && on_my_device(observations.longitude) && on_my_device(result.index) &&
                             (result.distance == nullptr || on_my_device(result.distance));
      // One rank's shard holds every reference in global-id order, so its local ids are the global ones.
      direct = on_device && (layout() == reference_layout::replicated || ranks() == 1);
      host_in = direct || packed_on_host(observations);
      host_out = direct || (result.stride == k && result.distance != nullptr && host_memory(result.index) && host_memory(result.distance));
      if (!host_in) { stage_in(observations, staged_observations_); }
      if (!host_out) { prepare_stage_out(result, n); }
    });
    double const enqueued = MPI_Wtime() - start;
    if (direct) {
      begin_query(k);
      replicated_query(n, [&] { searcher().search_on_device(observations, result); });
    } else {
      query_in_parts(host_in ? observations.latitude : staged_observations_.data(),
                     host_in ? observations.longitude : staged_observations_.data() + n, n, k,
                     host_out ? result.index : staged_index_.data(), host_out ? result.distance : staged_angle_.data(),
                     staged_rows{this, !host_in, host_out ? nullptr : &result});
    }
    double const returned = MPI_Wtime();
    run_everywhere(communicator(), "distributed_gpu_nearest::query", [&] {  // the copies back
      if (!host_out) { row_engine().wait(); }
    });
    stats().staging_seconds += enqueued + (MPI_Wtime() - returned);
  }

 protected:
  /// distributed_nearest's update() of packed host arrays: through the view path above (so that ranks
  /// passing arrays and ranks passing views make the same collective calls).
  void replace_references(double const* latitude, double const* longitude, std::size_t count) final
  {
    update(points_ref<double>::separate(latitude, longitude, count));
  }
  /// distributed_nearest's query() of packed host arrays: through the view path above.
  void search_observations(double const* latitude, double const* longitude, std::size_t count, std::size_t k, std::int64_t* index,
                           double* angle) final
  {
    query(points_ref<double>::separate(latitude, longitude, count), neighbors_ref<std::int64_t, double>::dense(index, angle, count, k));
  }

 private:
  /// The sharded query at several ranks on the GPU's row engine (the file's description): device
  /// views of the rank's GPU are read and written there; host views are packed into the GPU's memory
  /// through page-locked memory, and the answers copied back, on the host threads.
  void query_rows_on_device(points_ref<double> const& observations, neighbors_ref<std::int64_t, double> const& result)
  {
    std::size_t const n = observations.count, k = result.k;
    begin_query(k);
    double const start = MPI_Wtime();
    detail::point_rows points{};
    detail::neighbor_rows rows{};
    bool result_there = false;
    run_everywhere(communicator(), "distributed_gpu_nearest::query", [&] {
      detail::device_row_engine& engine = row_engine();
      points = rows_on_device(observations, "observations", staged_observations_, observations_there_);
      result_there = n > 0 && on_my_device(result.index) && (result.distance == nullptr || on_my_device(result.distance));
      if (result_there) {
        rows = {result.index, result.distance, result.stride};
      } else {
        rows = {engine.reserve(index_there_, n * k), result.distance == nullptr ? nullptr : engine.reserve(angle_there_, n * k), k};
      }
      engine.wait();
    });
    stats().staging_seconds += MPI_Wtime() - start;
    sharded_query_on(row_engine(), device_rows_, points, n, k, rows,
                     [&](double const* latitude, double const* longitude, std::size_t count, std::int64_t* index, double* angle) {
                       if (count == 0) { return; }
                       searcher().search_on_device(points_ref<double>::separate(latitude, longitude, count, angle_unit::radians),
                                                   neighbors_ref<std::int64_t, double>::dense(index, angle, count, k));
                     });
    double const placed = MPI_Wtime();
    run_everywhere(communicator(), "distributed_gpu_nearest::query", [&] {
      if (result_there) { return; }
      rows_from_device(index_there_.data(), n, k, result.index, result.stride, staged_index_);
      if (result.distance != nullptr) { rows_from_device(angle_there_.data(), n, k, result.distance, result.stride, staged_angle_); }
    });
    stats().staging_seconds += MPI_Wtime() - placed;
  }

  /// The GPU's row engine (made at the first use).
  detail::device_row_engine& row_engine()
  {
    if (!row_engine_) { row_engine_ = std::make_unique<detail::device_row_engine>(searcher().device()); }
    return *row_engine_;
  }

  /// `points` (radians; `what` names them) as rows in the memory of the rank's GPU: a device view
  /// where it is; a host view packed into `there` (latitudes, then longitudes) through the page-locked
  /// `staged`, on the row engine's stream (returns without waiting).
  detail::point_rows rows_on_device(points_ref<double> const& points, char const* what, pinned_buffer<double>& staged,
                                    device_buffer<double>& there)
  {
    expect_radians(points.unit, what);
    std::size_t const n = points.count;
    if (n > 0 && on_my_device(points.latitude) && on_my_device(points.longitude)) {
      return {points.latitude, points.longitude, points.stride};
    }
    double* const packed = row_engine().reserve(there, 2 * n);
    grow(staged, 2 * n);
    rows_to_device(points.latitude, points.stride, n, staged.data(), packed);
    rows_to_device(points.longitude, points.stride, n, staged.data() + n, packed + n);
    return {packed, packed + n, 1};
  }

  /// `count` values, one every `stride` from `from` (host, or the rank's GPU), packed into `to` on
  /// the GPU, on the row engine's stream (returns without waiting): host values through the
  /// page-locked `packed` (each host thread packs its part and enqueues its copy); device values by
  /// a kernel.
  void rows_to_device(double const* from, std::size_t stride, std::size_t count, double* packed, double* to)
  {
    detail::device_row_engine& engine = row_engine();
    if (count == 0) { return; }
    device_guard const guard(engine.device());
    if (!host_memory(from)) {
      detail::launch_copy_strided_rows(from, stride, to, 1, count, 1, engine.work_stream());
      return;
    }
    team().parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t) {
      for (std::size_t i = begin; i < end; ++i) { packed[i] = from[i * stride]; }
      engine.from_host(packed + begin, end - begin, to + begin);
    });
  }

  /// `count` rows of k values, dense on the GPU at `from`, to `to` (rows `stride` apart; host, or the
  /// rank's GPU); waits. Host rows through the page-locked `staged`: each host thread's part is
  /// copied down as one, and the thread places its rows as soon as they land.
  template <class T>
  void rows_from_device(T const* from, std::size_t count, std::size_t k, T* to, std::size_t stride, pinned_buffer<T>& staged)
  {
    detail::device_row_engine& engine = row_engine();
    if (count == 0) { return; }
    device_guard const guard(engine.device());
    if (!host_memory(to)) {
      detail::launch_copy_strided_rows(from, k, to, stride, count, k, engine.work_stream());
      engine.wait();
      return;
    }
    grow(staged, count * k);
    std::size_t const parts = detail::part_count(count, team().threads());
    while (arrivals_.size() < parts) { arrivals_.emplace_back(engine.device()); }
    for (std::size_t part = 0; part < parts; ++part) {
      std::size_t const begin = detail::part_begin(count, parts, part), end = detail::part_begin(count, parts, part + 1);
      engine.to_host(from + begin * k, (end - begin) * k, staged.data() + begin * k);
      arrivals_[part].record(engine.work_stream());
    }
    team().parallel_ranges(count, [&](std::size_t begin, std::size_t end, std::size_t part) {
      arrivals_[part].sync();
      if (stride == k) {
        std::copy_n(staged.data() + begin * k, (end - begin) * k, to + begin * k);
        return;
      }
      for (std::size_t i = begin; i < end; ++i) { std::copy_n(staged.data() + i * k, k, to + i * stride); }
    });
  }

  /// distributed_nearest's staging hooks (update_in_parts, query_in_parts) over stage_in() and
  /// stage_out(): arrive() waits for the staged rows (unless `copying` is false: the rows are host
  /// arrays already); leave() enqueues the copy of result rows back (with `result` null: none, the
  /// results are the host arrays).
  struct staged_rows {
    distributed_gpu_nearest* owner;
    bool copying;
    neighbors_ref<std::int64_t, double> const* result;

    void arrive(std::size_t begin, std::size_t end) const
    {
      if (copying && end > begin) { owner->staged_in_->sync(); }
    }
    void leave(std::size_t begin, std::size_t end) const
    {
      if (result != nullptr && end > begin) { owner->stage_out(*result, begin, end); }
    }
  };

  static void expect_radians(angle_unit unit, char const* what)
  {
    STREAMKIT_EXPECTS(unit == angle_unit::radians, std::invalid_argument, std::string(what) + ": the distributed search takes radians");
  }
  static bool host_memory(void const* pointer) { return pointer == nullptr || streamkit::detail::memory_type(pointer) != cudaMemoryTypeDevice; }
  static bool packed_on_host(points_ref<double> const& points)
  {
    return points.count == 0 || (points.stride == 1 && host_memory(points.latitude) && host_memory(points.longitude));
  }
  /// Whether `pointer` is device memory of the rank's GPU (any other device memory is refused).
  bool on_my_device(void const* pointer)
  {
    if (pointer == nullptr) { return false; }
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
      static_cast<void>(cudaGetLastError());
      return false;
    }
    if (attributes.type != cudaMemoryTypeDevice) { return false; }
    STREAMKIT_EXPECTS(attributes.device == searcher().device(), std::invalid_argument,
                      "distributed_gpu_nearest: device memory of GPU " + std::to_string(attributes.device) + ", not the rank's GPU " +
                          std::to_string(searcher().device()));
    return true;
  }
  /// Enqueues the copies of the points into `to` (latitudes, then longitudes) on the row engine's
  /// stream, and records staged_in_ after them; a strided device view is packed on the GPU first.
  /// Returns without waiting.
  void stage_in(points_ref<double> const& points, pinned_buffer<double>& to)
  {
    std::size_t const n = points.count;
    grow(to, 2 * n);
    if (n == 0) { return; }
    detail::device_row_engine& engine = row_engine();
    device_guard const guard(engine.device());
    stream_ref const s = engine.work_stream();
    for (auto [from, at] : {std::pair{points.latitude, std::size_t{0}}, std::pair{points.longitude, n}}) {
      if (points.stride == 1) {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to.data() + at, from, n * sizeof(double), cudaMemcpyDefault, s.value()));
      } else if (host_memory(from)) {
        STREAMKIT_CUDA_TRY(
          cudaMemcpy2DAsync(to.data() + at, sizeof(double), from, points.stride * sizeof(double), sizeof(double), n, cudaMemcpyDefault, s.value()));
      } else {
        double* const packed = engine.reserve(packed_, 2 * n);
        detail::launch_copy_strided_rows(from, points.stride, packed + at, 1, n, 1, s);
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to.data() + at, packed + at, n * sizeof(double), cudaMemcpyDeviceToHost, s.value()));
      }
    }
    if (!staged_in_) { staged_in_.emplace(engine.device()); }
    staged_in_->record(s);
  }
  /// Page-locked results and, for a strided device view, the device rows they go through.
  void prepare_stage_out(neighbors_ref<std::int64_t, double> const& result, std::size_t n)
  {
    std::size_t const k = result.k;
    detail::device_row_engine& engine = row_engine();  // made here, before stage_out() runs on several threads
    grow(staged_index_, n * k), grow(staged_angle_, n * k);
    if (result.stride != k && !host_memory(result.index)) {
      engine.reserve(unpacked_index_, n * k);
      if (result.distance != nullptr) { engine.reserve(unpacked_angle_, n * k); }
    }
  }
  /// Enqueues the copy of result rows [begin, end) to `result` (any thread; returns without waiting).
  void stage_out(neighbors_ref<std::int64_t, double> const& result, std::size_t begin, std::size_t end)
  {
    detail::device_row_engine& engine = row_engine();
    device_guard const guard(engine.device());
    stream_ref const s = engine.work_stream();
    copy_rows_out(result.index, result.stride, staged_index_.data(), unpacked_index_.data(), begin, end, result.k, s);
    if (result.distance != nullptr) {
      copy_rows_out(result.distance, result.stride, staged_angle_.data(), unpacked_angle_.data(), begin, end, result.k, s);
    }
  }
  /// Rows [begin, end) of k values from page-locked `from` (dense) to `to` (rows `stride` apart): one
  /// copy when dense or in host memory, else through the dense device rows `through` and a kernel.
  template <class T>
  static void copy_rows_out(T* to, std::size_t stride, T const* from, T* through, std::size_t begin, std::size_t end, std::size_t k,
                            stream_ref s)
  {
    std::size_t const rows = end - begin;
    T const* const source = from + begin * k;
    if (stride == k) {
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to + begin * k, source, rows * k * sizeof(T), cudaMemcpyDefault, s.value()));
      return;
    }
    if (host_memory(to)) {
      STREAMKIT_CUDA_TRY(cudaMemcpy2DAsync(to + begin * stride, stride * sizeof(T), source, k * sizeof(T), k * sizeof(T), rows,
                                           cudaMemcpyDefault, s.value()));
      return;
    }
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(through + begin * k, source, rows * k * sizeof(T), cudaMemcpyDefault, s.value()));
    detail::launch_copy_strided_rows(through + begin * k, k, to + begin * stride, stride, rows, k, s);
  }
  template <class T>
  static void grow(pinned_buffer<T>& buffer, std::size_t count)
  {
    if (buffer.size() < count) { buffer = pinned_buffer<T>(count); }
  }

  pinned_buffer<double> staged_references_, staged_observations_;  // host views on their way to the GPU (or from it)
  pinned_buffer<std::int64_t> staged_index_;
  pinned_buffer<double> staged_angle_;
  std::optional<event> staged_in_;  // stage_in()'s copies are done (made at the first)
  std::vector<event> arrivals_;     // rows_from_device(): [part] its rows are in the page-locked buffer
  // The row engine (its stream runs the sharded rows' steps and the staging copies) before every
  // device buffer: they free on its stream, which must outlive them.
  std::unique_ptr<detail::device_row_engine> row_engine_;
  detail::sharded_rows<detail::device_row_engine> device_rows_;
  device_buffer<double> packed_;  // a strided device view, packed
  device_buffer<std::int64_t> unpacked_index_;
  device_buffer<double> unpacked_angle_;
  device_buffer<double> references_there_, observations_there_;  // host views, packed (latitudes, then longitudes)
  device_buffer<std::int64_t> index_there_;                      // the answers for host results, dense
  device_buffer<double> angle_there_;
};

/// A distributed_gpu_nearest over `comm` whose ranks each use one GPU: `device`, or by default
/// default_device() (the rank on its node modulo the visible GPUs), with `streams_per_device`
/// (gpu_searcher). Collective.
/// @throws std::invalid_argument when a rank sees no GPU, or the ranks disagree on `layout`.
inline distributed_gpu_nearest make_distributed_gpu_nearest(MPI_Comm comm, reference_layout layout, std::optional<int> device = std::nullopt,
                                                            int streams_per_device = gpu_searcher::default_streams_per_device)
{
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    visible = 0;
  }
  rank_info const info = describe(comm);
  int chosen = 0;
  run_everywhere(comm, "make_distributed_gpu_nearest", [&] { chosen = device ? *device : default_device(info, visible); });
  return distributed_gpu_nearest(comm, layout, gpu_searcher({chosen}, streams_per_device));
}

}  // namespace streamkit::distributed
