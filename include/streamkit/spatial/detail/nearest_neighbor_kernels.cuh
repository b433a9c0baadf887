#pragma once
// Kernels and launch planning of the haversine nearest-neighbour search (see nearest_neighbor.cuh).

#include <streamkit/spatial/detail/nearest_neighbor_plan.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/points.hpp>

#include <cuda/std/limits>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace streamkit::detail {

template <class A>
STREAMKIT_HOST_DEVICE constexpr A min_of(A a, A b) noexcept
{
  return b < a ? b : a;
}
template <class A>
STREAMKIT_HOST_DEVICE constexpr A max_of(A a, A b) noexcept
{
  return a < b ? b : a;
}

/// A unit vector padded to 16 (float) or 32 (double) bytes for wide loads.
template <class V>
struct alignas(4 * sizeof(V)) vec4 {
  V x, y, z, w;
};

/// Latitude and longitude in radians, double precision, for the winner's exact distance.
struct alignas(16) lat_lon {
  double lat, lon;
};

/// Bound on |float chord² − double chord²| for unit vectors rounded from the same double vectors.
/// With u = 2^-24: each float component is off by at most u, each float difference by at most
/// 2u + u|d| ≤ 4u, so the sum of squares by at most 2·4u·Σ|d_k| ≤ 8u·2√3 ≈ 28u, and the three float
/// roundings of the sum add at most 3u·4 = 12u: 40u ≈ 2.4e-6 in all (the double value's own error is
/// ~1e-15). 4e-6 leaves a margin.
inline constexpr double float_chord2_error = 4e-6;

/// Reads point `i` in radians (double). Returns false for a non-finite coordinate or a latitude
/// outside ±90° (in radians, up to π/2 rounded up to T, so a float pole is accepted).
template <class T>
__device__ inline bool load_point(points_ref<T> const& source, std::size_t i, double& lat, double& lon)
{
  lat = static_cast<double>(source.latitude[i * source.stride]);
  lon = static_cast<double>(source.longitude[i * source.stride]);
  bool const degrees = source.unit == angle_unit::degrees;
  double const limit = degrees ? 90.0 : max_of(static_cast<double>(static_cast<T>(pi / 2)), pi / 2);
  bool const valid = isfinite(lat) && isfinite(lon) && fabs(lat) <= limit;
  if (degrees) {
    lat = radians_from_degrees(lat);
    lon = radians_from_degrees(lon);
  }
  lat = fmin(fmax(lat, -pi / 2), pi / 2);
  return valid;
}

/// Unit vector of a point in V, computed in double; NaN for an invalid point (never wins a minimum).
/// A pole (latitude ±π/2 after load_point's clamp) is (0, 0, ±1) whatever its longitude: cos(π/2 in
/// double) is 6e-17, not 0, which would make every longitude a different point 1e-16 from the others
/// and defeat the grouping of identical references (tree_index).
template <class V>
__device__ inline vec4<V> unit_vector(double lat, double lon, bool valid)
{
  if (!valid) {
    V const nan = cuda::std::numeric_limits<V>::quiet_NaN();
    return {nan, nan, nan, nan};
  }
  double sin_lat, cos_lat, sin_lon, cos_lon;
  sincos(lat, &sin_lat, &cos_lat);
  sincos(lon, &sin_lon, &cos_lon);
  if (fabs(lat) == pi / 2) { cos_lat = 0.0; }
  return {static_cast<V>(cos_lat * cos_lon), static_cast<V>(cos_lat * sin_lon), static_cast<V>(sin_lat), V(0)};
}

/// Squared chord length, with every rounding pinned by intrinsics so that the value computed in the
/// main loop and when resolving the winner's index is bit-for-bit the same.
__device__ __forceinline__ float chord2(float px, float py, float pz, vec4<float> const& q)
{
  float const dx = __fsub_rn(px, q.x);
  float const dy = __fsub_rn(py, q.y);
  float const dz = __fsub_rn(pz, q.z);
  return __fmaf_rn(dx, dx, __fmaf_rn(dy, dy, __fmul_rn(dz, dz)));
}
__device__ __forceinline__ double chord2(double px, double py, double pz, vec4<double> const& q)
{
  double const dx = __dsub_rn(px, q.x);
  double const dy = __dsub_rn(py, q.y);
  double const dz = __dsub_rn(pz, q.z);
  return __fma_rn(dx, dx, __fma_rn(dy, dy, __dmul_rn(dz, dz)));
}
__device__ __forceinline__ float min_ignoring_nan(float a, float b) { return fminf(a, b); }

/// Counts the invalid points among `count`.
template <class T>
__global__ void count_invalid_points(points_ref<T> source, std::size_t count, unsigned long long* invalid)
{
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    local += load_point(source, i, lat, lon) ? 0 : 1;
  }
  if (local > 0) { atomicAdd(invalid, local); }
}

/// Prepares references: float and double unit vectors and double coordinates (NaN for an invalid
/// point, so that the coordinates alone say which points are valid); counts invalid ones.
template <class T>
__global__ void prepare_references(points_ref<T> source, std::size_t count, vec4<float>* vectors,
                                   vec4<double>* precise, lat_lon* coordinates, unsigned long long* invalid)
{
  unsigned long long local = 0;
  for (std::size_t j = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; j < count; j += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    bool const valid = load_point(source, j, lat, lon);
    local += valid ? 0 : 1;
    vectors[j] = unit_vector<float>(lat, lon, valid);
    precise[j] = unit_vector<double>(lat, lon, valid);
    double const nan = cuda::std::numeric_limits<double>::quiet_NaN();
    coordinates[j] = valid ? lat_lon{lat, lon} : lat_lon{nan, nan};
  }
  if (local > 0) { atomicAdd(invalid, local); }
}

/// Pass 1: the nearest reference of each observation within one slice of the references.
/// Block (x, y) takes observations [x * THREADS * R, ...) and slice y. Each thread keeps R
/// observations in registers; references stream through shared memory tile by tile, and every
/// reference is a broadcast load shared by the R observations. The loop computes float squared chords
/// and keeps one minimum per group of G references (one min instruction per pair).
/// - fast (V = float): the group that holds the winner is remembered and its exact index resolved once
///   at the end, by recomputing the same bit-exact values.
/// - exact (V = double): a group is rescanned in double, in index order, only when its float minimum
///   is within float_chord2_error of the best double chord so far; a group that is not rescanned has
///   every double chord above that best, so the answer is that of a double loop over every pair.
template <class V, class Index, class T>
__global__ void __launch_bounds__(pass1_shape<V>::threads)
  nearest_pass1(points_ref<T> observations, std::size_t n, vec4<float> const* references,
                vec4<double> const* precise_references, std::size_t m, std::size_t slice_length, V* partial_value,
                Index* partial_index)
{
  constexpr bool exact = std::is_same_v<V, double>;
  constexpr int threads = pass1_shape<V>::threads;
  constexpr int per_thread = pass1_shape<V>::obs_per_thread;
  constexpr int group = pass1_shape<V>::group;
  constexpr int tile = pass1_shape<V>::tile;
  __shared__ vec4<float> tile_points[tile];
  __shared__ vec4<double> precise_tile[exact ? tile : 1];

  float const infinity = cuda::std::numeric_limits<float>::infinity();
  std::size_t const first_obs = blockIdx.x * static_cast<std::size_t>(threads) * per_thread + threadIdx.x;
  std::size_t const slice = blockIdx.y;
  std::size_t const begin = slice * slice_length;
  std::size_t const end = min_of(m, begin + slice_length);

  float px[per_thread], py[per_thread], pz[per_thread], best[per_thread];
  std::int64_t best_at[per_thread];  // fast: first index of the winning group; exact: the winner
  [[maybe_unused]] vec4<double> precise_obs[exact ? per_thread : 1];
  [[maybe_unused]] double best_precise[exact ? per_thread : 1];
#pragma unroll
  for (int r = 0; r < per_thread; ++r) {
    std::size_t const i = first_obs + static_cast<std::size_t>(r) * threads;
    double lat = 0.0, lon = 0.0;
    bool const valid = i < n && load_point(observations, i, lat, lon);
    vec4<float> const p = unit_vector<float>(lat, lon, valid);
    px[r] = p.x;
    py[r] = p.y;
    pz[r] = p.z;
    best_at[r] = -1;
    if constexpr (exact) {
      precise_obs[r] = unit_vector<double>(lat, lon, valid);
      best_precise[r] = cuda::std::numeric_limits<double>::infinity();
      best[r] = valid ? infinity : -infinity;  // the rescan threshold: an invalid observation never rescans
    } else {
      best[r] = infinity;
    }
  }

  for (std::size_t tile_begin = begin; tile_begin < end; tile_begin += tile) {
    __syncthreads();
    for (int k = threadIdx.x; k < tile; k += threads) {
      std::size_t const j = tile_begin + k;
      float const nan = cuda::std::numeric_limits<float>::quiet_NaN();
      tile_points[k] = j < end ? references[j] : vec4<float>{nan, nan, nan, nan};
      if constexpr (exact) {
        double const precise_nan = cuda::std::numeric_limits<double>::quiet_NaN();
        precise_tile[k] = j < end ? precise_references[j] : vec4<double>{precise_nan, precise_nan, precise_nan, precise_nan};
      }
    }
    __syncthreads();
    for (int g = 0; g < tile; g += group) {
      float group_min[per_thread];
#pragma unroll
      for (int r = 0; r < per_thread; ++r) { group_min[r] = infinity; }
#pragma unroll 8
      for (int k = 0; k < group; ++k) {
        vec4<float> const q = tile_points[g + k];
#pragma unroll
        for (int r = 0; r < per_thread; ++r) { group_min[r] = min_ignoring_nan(group_min[r], chord2(px[r], py[r], pz[r], q)); }
      }
#pragma unroll
      for (int r = 0; r < per_thread; ++r) {
        if constexpr (exact) {
          if (group_min[r] <= best[r]) {
            for (int k = 0; k < group; ++k) {
              double const c = chord2(precise_obs[r].x, precise_obs[r].y, precise_obs[r].z, precise_tile[g + k]);
              if (c < best_precise[r]) {
                best_precise[r] = c;
                best_at[r] = static_cast<std::int64_t>(tile_begin + g + k);
              }
            }
            best[r] = __double2float_ru(best_precise[r] + float_chord2_error);
          }
        } else if (group_min[r] < best[r]) {
          best[r] = group_min[r];
          best_at[r] = static_cast<std::int64_t>(tile_begin + g);
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < per_thread; ++r) {
    std::size_t const i = first_obs + static_cast<std::size_t>(r) * threads;
    if (i >= n) { continue; }
    Index index = -1;
    if constexpr (exact) {
      index = static_cast<Index>(best_at[r]);
      partial_value[slice * n + i] = best_precise[r];
    } else {
      if (best_at[r] >= 0) {
        std::size_t const group_end = min_of(end, static_cast<std::size_t>(best_at[r]) + group);
        for (std::size_t j = static_cast<std::size_t>(best_at[r]); j < group_end; ++j) {
          if (chord2(px[r], py[r], pz[r], references[j]) == best[r]) {
            index = static_cast<Index>(j);
            break;
          }
        }
      }
      partial_value[slice * n + i] = best[r];
    }
    partial_index[slice * n + i] = index;
  }
}

/// Pass 2: merges the slices of each observation (lowest slice wins ties, so the lowest index wins)
/// and writes the winner's index and its double-precision haversine distance times `scale` into row i
/// of `result` (−1 and NaN beyond `max_angle` radians); adds the number of invalid observations to
/// result.invalid_count when it is set.
template <class V, class Index, class T>
__global__ void nearest_pass2(points_ref<T> observations, std::size_t n, lat_lon const* reference_coordinates,
                              std::size_t slices, V const* partial_value, Index const* partial_index,
                              neighbors_ref<Index, T> result, double max_angle, double scale)
{
  unsigned long long invalid = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    V best = cuda::std::numeric_limits<V>::infinity();
    Index index = -1;
    for (std::size_t s = 0; s < slices; ++s) {
      V const value = partial_value[s * n + i];
      Index const candidate = partial_index[s * n + i];
      if (candidate >= 0 && value < best) {
        best = value;
        index = candidate;
      }
    }
    double lat, lon;
    bool const valid = load_point(observations, i, lat, lon);
    invalid += valid ? 0 : 1;
    double distance = cuda::std::numeric_limits<double>::quiet_NaN();
    if (valid && index >= 0) {
      lat_lon const ref = reference_coordinates[index];
      distance = haversine(lat, lon, ref.lat, ref.lon);
    }
    if (distance <= max_angle) {
      distance *= scale;
    } else {  // invalid, no valid reference, or beyond the maximum distance
      index = -1;
      distance = cuda::std::numeric_limits<double>::quiet_NaN();
    }
    result.index[i * result.stride] = index;
    if (result.distance != nullptr) { result.distance[i * result.stride] = static_cast<T>(distance); }
  }
  if (result.invalid_count != nullptr && invalid > 0) { atomicAdd(result.invalid_count, invalid); }
}

}  // namespace streamkit::detail
