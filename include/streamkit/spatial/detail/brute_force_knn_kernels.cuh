#pragma once
// The brute-force engine's k-nearest kernels (k > 1): pass 1 keeps each observation's k nearest
// within one slice of the references, pass 2 merges the slices. Every pair is filtered in float32 and
// ranked in float64, so the answer is the float64 one in both precision modes.

#include <streamkit/spatial/detail/knn_list.cuh>
#include <streamkit/spatial/detail/nearest_neighbor_kernels.cuh>

#include <cuda/std/limits>

#include <cstddef>
#include <cstdint>

namespace streamkit::detail {

/// Shape of the k-nearest pass 1: one observation per thread (the list takes the registers).
struct knn_pass1_shape {
  static constexpr int threads = 128;
  static constexpr int tile = 256;  // references per shared-memory tile (4 KiB float + 8 KiB double vectors)
};

/// Loads references [tile_begin, tile_begin + tile) into a block's shared tiles (float and float64
/// vectors; NaN past `end`, never chosen), between two barriers, with `threads` threads.
template <int tile, int threads>
__device__ __forceinline__ void load_reference_tile(vec4<float>* tile_points, vec4<double>* precise_tile, vec4<float> const* references,
                                                    vec4<double> const* precise_references, std::size_t tile_begin, std::size_t end)
{
  __syncthreads();
  for (int t = threadIdx.x; t < tile; t += threads) {
    std::size_t const j = tile_begin + t;
    float const nan = cuda::std::numeric_limits<float>::quiet_NaN();
    double const precise_nan = cuda::std::numeric_limits<double>::quiet_NaN();
    tile_points[t] = j < end ? references[j] : vec4<float>{nan, nan, nan, nan};
    precise_tile[t] = j < end ? precise_references[j] : vec4<double>{precise_nan, precise_nan, precise_nan, precise_nan};
  }
  __syncthreads();
}

/// Pass 1: block (x, y) takes observations [x · threads, …) and references of slice y, and writes each
/// observation's k nearest of the slice (squared chord, index; sentinel index no_reference where the
/// slice has fewer) to partial[(y · n + i) · k + j]. A pair is ranked in float64 only when its float32
/// squared chord passes float_chord2_filter() of the list's worst entry, which no nearer pair fails.
template <int K, class T>
__global__ void __launch_bounds__(knn_pass1_shape::threads)
  knn_pass1(points_ref<T> observations, std::size_t n, vec4<float> const* references, vec4<double> const* precise_references,
            std::size_t m, std::size_t slice_length, int k, double limit, double* partial_chord2, std::uint32_t* partial_id)
{
  constexpr int tile = knn_pass1_shape::tile;
  __shared__ vec4<float> tile_points[tile];
  __shared__ vec4<double> precise_tile[tile];
  std::size_t const i = blockIdx.x * std::size_t{knn_pass1_shape::threads} + threadIdx.x;
  std::size_t const slice = blockIdx.y;
  std::size_t const begin = slice * slice_length;
  std::size_t const end = min_of(m, begin + slice_length);

  double lat = 0.0, lon = 0.0;
  bool const valid = i < n && load_point(observations, i, lat, lon);
  vec4<float> const p = unit_vector<float>(lat, lon, valid);
  vec4<double> const precise_p = unit_vector<double>(lat, lon, valid);
  knn_list<K> list(k, limit);
  float filter = float_chord2_filter(list.worst());

  for (std::size_t tile_begin = begin; tile_begin < end; tile_begin += tile) {
    load_reference_tile<tile, knn_pass1_shape::threads>(tile_points, precise_tile, references, precise_references, tile_begin, end);
#pragma unroll 8
    for (int t = 0; t < tile; ++t) {
      if (chord2(p.x, p.y, p.z, tile_points[t]) <= filter &&
          list.offer(chord2(precise_p.x, precise_p.y, precise_p.z, precise_tile[t]), static_cast<std::uint32_t>(tile_begin + t))) {
        filter = float_chord2_filter(list.worst());
      }
    }
  }
  if (i >= n) { return; }
#pragma unroll
  for (int s = 0; s < K; ++s) {
    if (s < K - k) { continue; }
    std::size_t const at = (slice * n + i) * static_cast<std::size_t>(k) + static_cast<std::size_t>(s - (K - k));
    partial_chord2[at] = list.chord2[s];
    partial_id[at] = list.id[s];
  }
}

/// Pass 2: merges the slices' lists of each observation and writes row i of `result` (float64
/// haversine distances times `scale`); adds the invalid observations to result.invalid_count when set.
template <int K, class Index, class T>
__global__ void knn_pass2(points_ref<T> observations, std::size_t n, lat_lon const* reference_coordinates, std::size_t slices,
                          int k, double const* partial_chord2, std::uint32_t const* partial_id, neighbors_ref<Index, T> result,
                          double limit, double scale)
{
  unsigned long long invalid = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    double lat, lon;
    bool const valid = load_point(observations, i, lat, lon);
    invalid += valid ? 0 : 1;
    knn_list<K> list(k, limit);
    for (std::size_t s = 0; valid && s < slices; ++s) {
      for (int j = 0; j < k; ++j) {
        std::size_t const at = (s * n + i) * static_cast<std::size_t>(k) + static_cast<std::size_t>(j);
        if (partial_id[at] != no_reference) { list.offer(partial_chord2[at], partial_id[at]); }
      }
    }
    list.write(result, i, k, lat, lon, reference_coordinates, scale);
  }
  if (result.invalid_count != nullptr && invalid > 0) { atomicAdd(result.invalid_count, invalid); }
}

}  // namespace streamkit::detail
