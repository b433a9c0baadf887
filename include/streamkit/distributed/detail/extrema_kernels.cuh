#pragma once
// The device side of the distributed scaler's reduction: per-column extrema packed as [minima; maxima]
// with unseen columns hidden as ±inf before MPI reduces them, and restored to NaN after.

#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/distributed/column_extrema.hpp>

#include <cstddef>
#include <cuda/std/limits>

namespace streamkit::distributed::detail {

template <class T>
__global__ void gather_extrema(T const* local_min, T const* local_max, T* extrema, std::size_t columns)
{
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < columns; j += std::size_t{gridDim.x} * blockDim.x) {
    T min = local_min ? local_min[j] : cuda::std::numeric_limits<T>::quiet_NaN();  // no local rows: nothing seen
    T max = local_max ? local_max[j] : cuda::std::numeric_limits<T>::quiet_NaN();
    hide_unseen(min, max);
    extrema[j] = min;
    extrema[columns + j] = max;
  }
}

template <class T>
__global__ void restore_extrema(T* extrema, std::size_t columns)
{
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < columns; j += std::size_t{gridDim.x} * blockDim.x) {
    restore_unseen(extrema[j], extrema[columns + j]);
  }
}

inline unsigned extrema_blocks(std::size_t columns) noexcept
{
  std::size_t const blocks = (columns + 255) / 256;
  return static_cast<unsigned>(blocks < 1024 ? blocks : 1024);
}

/// [minima; maxima] of this rank into `extrema` (2 × columns), unseen columns as +inf / −inf; null
/// local arrays mean a rank without rows.
template <class T>
void launch_gather_extrema(T const* local_min, T const* local_max, T* extrema, std::size_t columns, stream_ref stream)
{
  gather_extrema<<<extrema_blocks(columns), 256, 0, stream.value()>>>(local_min, local_max, extrema, columns);
  STREAMKIT_CHECK_LAUNCH();
}

/// NaN back where no rank saw a value (after the reduction).
template <class T>
void launch_restore_extrema(T* extrema, std::size_t columns, stream_ref stream)
{
  restore_extrema<<<extrema_blocks(columns), 256, 0, stream.value()>>>(extrema, columns);
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace streamkit::distributed::detail
