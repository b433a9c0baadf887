#pragma once
/// @file column_extrema.hpp
/// Per-column minima and maxima reduced across MPI ranks, with the NaN rules of streamkit's min-max
/// scaling: NaN is ignored, and a column in which no rank saw a value other than NaN gets NaN.

#include <streamkit/distributed/communicator.hpp>

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
template <class T>
void allreduce_column_extrema(MPI_Comm comm, T* min, T* max, std::size_t columns)
{
  expect_agreement(comm, "allreduce_column_extrema", {{"the column count", columns}});
  if (columns > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument("allreduce_column_extrema: " + std::to_string(columns) + " columns; MPI counts stop at 2^31 - 1");
  }
  // NaN does not order under MPI_MIN / MPI_MAX: reduce ±inf in its place and, apart, whether any rank
  // saw a value (so that a column of real +inf minima stays +inf).
  std::vector<T> low(min, min + columns), high(max, max + columns);
  std::vector<unsigned char> seen(columns);
  for (std::size_t j = 0; j < columns; ++j) {
    seen[j] = std::isnan(low[j]) ? 0 : 1;
    if (!seen[j]) {
      low[j] = std::numeric_limits<T>::infinity();
      high[j] = -std::numeric_limits<T>::infinity();
    }
  }
  int const count = static_cast<int>(columns);
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, low.data(), count, mpi_type<T>(), MPI_MIN, comm), "MPI_Allreduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, high.data(), count, mpi_type<T>(), MPI_MAX, comm), "MPI_Allreduce");
  mpi_check(MPI_Allreduce(MPI_IN_PLACE, seen.data(), count, MPI_UNSIGNED_CHAR, MPI_MAX, comm), "MPI_Allreduce");
  for (std::size_t j = 0; j < columns; ++j) {
    min[j] = seen[j] ? low[j] : std::numeric_limits<T>::quiet_NaN();
    max[j] = seen[j] ? high[j] : std::numeric_limits<T>::quiet_NaN();
  }
}

}  // namespace streamkit::distributed
