#pragma once
/// @file minmax_scaler.cuh
/// Min-max scaling of a matrix whose rows are spread over MPI ranks: fit() and partial_fit() reduce
/// the per-column minima and maxima across the ranks, so that every rank then transforms its own
/// rows with the global statistics, on its own GPU, without further communication.
///
/// Exactness: each rank folds its rows with the single-GPU minmax_scaler; the extrema are reduced with
/// MPI_MIN and MPI_MAX (exact); the global scaler is then fitted to the two rows [minima; maxima],
/// which gives the minima, maxima and scales a single fit over the concatenation of all ranks' rows
/// gives, bit for bit, with the same NaN rules (NaN ignored; a column with no other value anywhere
/// gets NaN). A rank may hold no rows.
///
/// Transport: the extrema (2 × columns values) stay in device memory. With a CUDA-aware MPI library
/// (transport::device_pointers, or automatic when cuda_aware_mpi()) MPI reduces the device buffer;
/// otherwise they are staged through a pinned host buffer. Either way the stream is waited for
/// before MPI is called (MPI knows no streams), so fit() and partial_fit() block; the transforms are
/// local and have `_async` forms.
///
/// Every fit is collective over the communicator. Ranks that disagree on the column count, the
/// element type or the options all throw the same std::invalid_argument; an exception on one rank
/// (a bad view, a CUDA error) reaches every rank (communicator.hpp).

#include <streamkit/distributed/column_extrema.hpp>
#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/detail/extrema_kernels.cuh>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/preprocessing/minmax.cuh>

#include <cstdint>
#include <cstring>
#include <vector>

namespace streamkit::distributed {

/// A min-max scaler fitted over the rows of every rank of a communicator (see the file's
/// description). Move-only; not thread-safe. The communicator must outlive it.
template <class T>
class distributed_minmax_scaler {
 public:
  /// @param comm the caller's communicator.
  /// @param options the interval and clipping, the same on every rank (checked at each fit).
  /// @param how how the extrema travel between ranks.
  /// @param resource device memory of the scaler (outlives it).
  /// @throws std::invalid_argument unless options.lo < options.hi, both finite.
  explicit distributed_minmax_scaler(MPI_Comm comm, minmax_options<T> const& options = {}, transport how = transport::automatic,
                                     device_resource_ref resource = default_device_resource())
      : comm_(comm),
        options_(options),
        device_pointers_(passes_device_pointers(how)),
        resource_(resource),
        local_(options, resource),
        global_(options, resource)
  {
  }

  /// Fits to the rows of every rank (`x`: this rank's rows, device memory, any layout; may have no
  /// rows), discarding any earlier fit. Collective; waits for `stream` and for the other ranks.
  void fit(matrix_ref<T const> x, stream_ref stream) { accumulate(x, stream, true); }
  /// Folds the rows of every rank into the running extrema (a first fit when unfitted). Collective;
  /// waits. The column count must be the fitted one on every rank.
  void partial_fit(matrix_ref<T const> x, stream_ref stream) { accumulate(x, stream, false); }

  /// Scales this rank's `x` into `out` with the global statistics, on `stream`; never waits (local).
  void transform_async(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const { global_.transform_async(x, out, stream); }
  /// transform_async(), then a wait for `stream`.
  void transform(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const { global_.transform(x, out, stream); }
  /// Maps scaled values back to the data's range (local), on `stream`; never waits.
  void inverse_transform_async(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const
  {
    global_.inverse_transform_async(x, out, stream);
  }
  /// inverse_transform_async(), then a wait for `stream`.
  void inverse_transform(matrix_ref<T const> x, matrix_ref<T> out, stream_ref stream) const { global_.inverse_transform(x, out, stream); }

  /// The scaler holding the global statistics (device arrays data_min(), data_max(), scale(), host
  /// copies, n_features()), as a single-GPU fit over every rank's rows would hold them.
  [[nodiscard]] minmax_scaler<T> const& global() const noexcept { return global_; }
  /// Rows folded in by the fits since the last fit(), over every rank.
  [[nodiscard]] std::uint64_t samples_seen() const noexcept { return samples_seen_; }
  /// Whether the extrema travel as device pointers (else through pinned host memory).
  [[nodiscard]] bool uses_device_pointers() const noexcept { return device_pointers_; }

 private:
  void accumulate(matrix_ref<T const> x, stream_ref stream, bool reset)
  {
    char const* const what = reset ? "distributed_minmax_scaler::fit" : "distributed_minmax_scaler::partial_fit";
    std::uint64_t lo_bits = 0, hi_bits = 0;
    std::memcpy(&lo_bits, &options_.lo, sizeof options_.lo);
    std::memcpy(&hi_bits, &options_.hi, sizeof options_.hi);
    expect_agreement(comm_, what,
                     {{"the element size", sizeof(T)}, {"the column count", x.cols}, {"feature_range's low end", lo_bits},
                      {"feature_range's high end", hi_bits}, {"clip", options_.clip ? 1U : 0U}});
    detail::expect_column_count(comm_, what, x.cols);
    std::size_t const columns = x.cols;
    run_everywhere(comm_, what, [&] {
      STREAMKIT_EXPECTS(columns > 0, std::invalid_argument, std::string(what) + ": x has no columns");
      if (x.rows > 0) { local_.fit_async(x, stream); }  // checks the view
      if (extrema_.size() != 2 * columns || extrema_.device() != stream.device()) {
        extrema_ = device_buffer<T>(2 * columns, stream, resource_);
        if (!device_pointers_) { staging_ = pinned_buffer<T>(2 * columns); }
      }
      extrema_.set_stream(stream);
      detail::launch_gather_extrema(x.rows > 0 ? local_.data_min() : nullptr, x.rows > 0 ? local_.data_max() : nullptr,
                                    extrema_.data(), columns, stream);
      if (!device_pointers_) {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(staging_.data(), extrema_.data(), 2 * columns * sizeof(T), cudaMemcpyDeviceToHost, stream));
      }
      stream.sync();
    });
    T* const reduced = device_pointers_ ? extrema_.data() : staging_.data();
    detail::allreduce_min_max(comm_, reduced, reduced + columns, columns);
    std::uint64_t rows = x.rows;
    mpi_check(MPI_Allreduce(MPI_IN_PLACE, &rows, 1, MPI_UINT64_T, MPI_SUM, comm_), "MPI_Allreduce");
    run_everywhere(comm_, what, [&] {
      if (!device_pointers_) {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(extrema_.data(), staging_.data(), 2 * columns * sizeof(T), cudaMemcpyHostToDevice, stream));
      }
      detail::launch_restore_extrema(extrema_.data(), columns, stream);
      auto const both = matrix_ref<T const>::dense(extrema_.data(), 2, columns);
      if (reset) {
        global_.fit_async(both, stream);
      } else {
        global_.partial_fit_async(both, stream);
      }
      stream.sync();  // the staging buffer is reused by the next fit
    });
    samples_seen_ = reset ? rows : samples_seen_ + rows;
  }

  MPI_Comm comm_;
  minmax_options<T> options_;
  bool device_pointers_;
  device_resource_ref resource_;
  minmax_scaler<T> local_;       // this rank's rows
  minmax_scaler<T> global_;      // fitted to [minima; maxima] over every rank
  device_buffer<T> extrema_;     // row 0 the minima, row 1 the maxima
  pinned_buffer<T> staging_;     // host staging of extrema_
  std::uint64_t samples_seen_ = 0;
};

}  // namespace streamkit::distributed
