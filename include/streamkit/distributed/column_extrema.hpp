#pragma once
/// @file column_extrema.hpp
/// Per-column minima and maxima reduced across MPI ranks, with the NaN rules of streamkit's min-max
/// scaling: NaN is ignored, and a column in which no rank saw a value other than NaN gets NaN.

#include <streamkit/core/config.hpp>
#include <streamkit/distributed/communicator.hpp>

#include <cuda/std/limits>

#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace streamkit::distributed {

/// Replaces this rank's per-column `min` and `max` (host arrays of `columns` values; NaN where the
/// rank saw no value other than NaN, or no row at all) with the minima and maxima over every rank of
/// `comm`, in place (collective). Exact: min and max round nothing, so the result is what one pass
/// over the concatenation of all ranks' rows gives, whatever the rank count (±0 aside: which zero a
/// column with both gets is unspecified, as on one GPU).
/// @throws std::invalid_argument (on every rank) when the ranks disagree on `columns`, or it
/// exceeds 2^31 - 1.
namespace detail {

/// Where this rank saw no value (NaN), +inf as the minimum and −inf as the maximum: so MPI_MIN and
/// MPI_MAX, which do not order NaN, reduce the rest exactly. After the reduction min > max exactly
/// where no rank saw a value (a rank that saw v leaves min ≤ v ≤ max).
template <class T>
STREAMKIT_HOST_DEVICE void hide_unseen(T& min, T& max)
{
  if (min != min) {  // NaN; std::isnan is not a device function everywhere
    min = cuda::std::numeric_limits<T>::infinity();
    max = -cuda::std::numeric_limits<T>::infinity();
  }
}
/// The inverse of hide_unseen after the reduction: NaN where no rank saw a value.
template <class T>
STREAMKIT_HOST_DEVICE void restore_unseen(T& min, T& max)
{
  if (min > max) { min = max = cuda::std::numeric_limits<T>::quiet_NaN(); }
}

/// Allreduces `min` with MPI_MIN and `max` with MPI_MAX, in place; host or (CUDA-aware MPI) device
/// memory. The column count was agreed on and checked against MPI's int counts.
template <class T>
void allreduce_min_max(MPI_Comm comm, T* min, T* max, std::size_t columns)
{
  int const count = static_cast<int>(columns);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, min, count, mpi_type<T>(), MPI_MIN, comm), "MPI_Allreduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, max, count, mpi_type<T>(), MPI_MAX, comm), "MPI_Allreduce");
}

/// Every rank agrees on `columns` (else all throw std::invalid_argument), which MPI can count.
inline void expect_column_count(MPI_Comm comm, char const* what, std::size_t columns)
{
  expect_agreement(comm, what, {{"the column count", columns}});
  if (columns > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(columns) + " columns; MPI counts stop at 2^31 - 1");
  }
}

}  // namespace detail

/// Replaces this rank's per-column `min` and `max` (host arrays of `columns` values; NaN where the
/// rank saw no value other than NaN, or no row at all) with the minima and maxima over every rank of
/// `comm`, in place (collective). Exact: min and max round nothing, so the result is what one pass
/// over the concatenation of all ranks' rows gives, whatever the rank count (±0 aside: which zero a
/// column with both gets is unspecified, as on one GPU).
/// @throws std::invalid_argument (on every rank) when the ranks disagree on `columns`, or it
/// exceeds 2^31 - 1.
template <class T>
void allreduce_column_extrema(MPI_Comm comm, T* min, T* max, std::size_t columns)
{
  detail::expect_column_count(comm, "allreduce_column_extrema", columns);
  for (std::size_t j = 0; j < columns; ++j) { detail::hide_unseen(min[j], max[j]); }
  detail::allreduce_min_max(comm, min, max, columns);
  for (std::size_t j = 0; j < columns; ++j) { detail::restore_unseen(min[j], max[j]); }
}

}  // namespace streamkit::distributed
