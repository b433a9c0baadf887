#pragma once
// The per-thread list of the k nearest candidates shared by every k-nearest kernel: K slots in
// registers (K a compile-time power of two ≥ k), ordered by (squared chord, reference index), so that
// ties go to the smallest index and the order does not depend on the order candidates arrive in.

#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace streamkit::detail {

/// Reference ids in a list are 32-bit (half the registers of 64-bit ones at K = 32); this value marks
/// an empty slot, so k-nearest searches take at most 2^32 − 1 references.
inline constexpr std::uint32_t no_reference = 0xffffffffu;

/// The largest float32 squared chord that a pair whose float64 squared chord is at most `worst` can
/// have. With u = 2^-24: the float components of p − q are off by at most 2u + u|p_i − q_i| each, so the
/// float chord by at most 2√3u + u·c; three roundings in the sum of squares add a relative 3u; the
/// float64 value's own error (~1e-16) is below the margins taken here. A pair above this bound is
/// farther in float64 too, so a kernel may skip its float64 evaluation.
__device__ inline float float_chord2_filter(double worst)
{
  constexpr double u = 0x1.0p-24;
  double const chord = sqrt(worst) * (1.0 + 2.0 * u) + 3.5 * u;
  return __double2float_ru(chord * chord * (1.0 + 4.0 * u));
}

/// k nearest candidates, nearest first. Slots [0, K − k) hold sentinels that compare below every
/// candidate, so that only static register indices are used whatever the run-time k: the list's
/// worst entry is always slot K − 1 and its answers are slots K − k … K − 1.
template <int K>
struct knn_list {
  double chord2[K];
  std::uint32_t id[K];

  /// An empty list of k slots that accepts only candidates whose squared chord is at most `limit`.
  __device__ knn_list(int k, double limit)
  {
#pragma unroll
    for (int s = 0; s < K; ++s) {
      chord2[s] = s < K - k ? -cuda::std::numeric_limits<double>::infinity() : limit;
      id[s] = no_reference;
    }
  }

  /// The squared chord a candidate must not exceed to enter (NaN never enters).
  [[nodiscard]] __device__ double worst() const { return chord2[K - 1]; }

  [[nodiscard]] static __device__ bool before(double c, std::uint32_t j, double other_c, std::uint32_t other_j)
  {
    return c < other_c || (c == other_c && j < other_j);
  }

  /// Inserts candidate j at squared chord c when it is nearer than the worst entry; returns whether it did.
  __device__ bool offer(double c, std::uint32_t j)
  {
    if (!before(c, j, chord2[K - 1], id[K - 1])) { return false; }
    // One comparison per slot against the old list: the candidate goes to the first slot it precedes,
    // and every slot from there on takes its predecessor.
    bool precedes[K];
#pragma unroll
    for (int s = 0; s < K; ++s) { precedes[s] = before(c, j, chord2[s], id[s]); }
#pragma unroll
    for (int s = K - 1; s > 0; --s) {
      if (precedes[s - 1]) {
        chord2[s] = chord2[s - 1];
        id[s] = id[s - 1];
      } else if (precedes[s]) {
        chord2[s] = c;
        id[s] = j;
      }
    }
    if (precedes[0]) {
      chord2[0] = c;
      id[0] = j;
    }
    return true;
  }

  /// Writes the k answers into row `i` of `result` (index −1 and NaN where fewer than k were found),
  /// with the float64 haversine distance of each pair times `scale`.
  template <class Index, class T>
  __device__ void write(neighbors_ref<Index, T> const& result, std::size_t i, int k, double lat, double lon,
                        lat_lon const* coordinates, double scale) const
  {
#pragma unroll
    for (int s = 0; s < K; ++s) {
      if (s < K - k) { continue; }
      std::size_t const at = i * result.stride + static_cast<std::size_t>(s - (K - k));
      bool const found = id[s] != no_reference;
      Index const index = found ? static_cast<Index>(id[s]) : Index(-1);
      result.index[at] = index;
      if (result.distance != nullptr) {
        double distance = cuda::std::numeric_limits<double>::quiet_NaN();
        if (found) {
          lat_lon const ref = coordinates[id[s]];
          distance = haversine(lat, lon, ref.lat, ref.lon) * scale;
        }
        result.distance[at] = static_cast<T>(distance);
      }
    }
  }
};

/// Calls `body(std::integral_constant<int, K>{})` with the smallest list size K ≥ k (1 ≤ k ≤ 32, max_neighbors).
template <class Body>
void with_list_size(std::size_t k, Body&& body)
{
  if (k <= 1) {
    body(std::integral_constant<int, 1>{});
  } else if (k <= 2) {
    body(std::integral_constant<int, 2>{});
  } else if (k <= 4) {
    body(std::integral_constant<int, 4>{});
  } else if (k <= 8) {
    body(std::integral_constant<int, 8>{});
  } else if (k <= 16) {
    body(std::integral_constant<int, 16>{});
  } else {
    body(std::integral_constant<int, 32>{});
  }
}

}  // namespace streamkit::detail
