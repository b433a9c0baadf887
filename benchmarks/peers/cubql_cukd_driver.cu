// Exact k nearest neighbours with two GPU peers, NVIDIA's cuBQL (BVH over points) and Ingo Wald's
// cudaKDTree (left-balanced k-d tree), on the points benchmarks/peers_nearest.py writes for
// bench_nn_files: the peers' side of that script. Our own driver; the peers' sources are not in this
// repository: the script compiles this file once per run against a checkout the user names.
//
// Build (what peers_nearest.py runs; either library may be left out, its methods then are not compiled in):
//
//   nvcc -O3 -std=c++17 -arch=sm_90 --extended-lambda --expt-relaxed-constexpr -cudart static
//        -DSTREAMKIT_WITH_CUBQL -I CUBQL_SRC -DSTREAMKIT_WITH_CUKD -I CUDAKDTREE_SRC
//        benchmarks/peers/cubql_cukd_driver.cu -o cubql_cukd_driver
//
//   (CUBQL_SRC holds cuBQL/bvh.h, CUDAKDTREE_SRC holds cukd/builder.h.)
//
// Run:
//
//   cubql_cukd_driver --list                      methods compiled in, one JSON line; needs no GPU
//   cubql_cukd_driver --convert PAIRS.bin OUT.bin  the float32 unit vectors (x, y, z) the methods search, as raw
//                                                  float32 triples; needs no GPU (lets the caller check that they
//                                                  are the vectors its other peers get)
//   cubql_cukd_driver --method METHOD --observations OBS.bin --references REFS.bin --k K
//                     [--repeat R] [--warmups W] [--indices OUT.bin] [--distances OUT.bin] [--leaf-threshold T]
//
//   cubql_cukd_driver --method cubql|cubql_radix --radius-km R --observations OBS.bin --references REFS.bin
//                     [--sphere-radius-km 6371.0088] [--repeat R] [--warmups W] [--check-rows C] [--leaf-threshold T]
//                                                  radius query (below); benchmarks/peers_radius.py runs it
//
// Methods (each a build over the references, then one query per observation, a thread per observation,
// observations in file order):
//
//   cubql             cuBQL::gpuBuilder (adaptive spatial median, BuildConfig defaults unless --leaf-threshold)
//                     over one box per point; k = 1: cuBQL::points::findClosest, k > 1: cuBQL::points::findKNN
//   cubql_radix       cuBQL::cuda::radixBuilder (Morton codes), same queries
//   cudakdtree        cukd::buildTree (its default builder, builder_thrust) over (point, index) records, world
//                     bounds computed by the builder; k = 1: cukd::cct::fcp, k > 1: cukd::cct::knn with
//                     cukd::FixedCandidateList<K> (closest-corner tracking)
//   cudakdtree_stack  the same tree; cukd::stackBased::fcp / cukd::stackBased::knn with FixedCandidateList<K>
//
// Input: raw little-endian float32 (lat, lon) pairs in degrees (bench_nn_files' format). They are turned into
// float32 unit vectors on the host before anything is timed (float64 arithmetic, then rounded: what
// peers_nearest.py does for its other peers). Euclidean (chord) order between unit vectors is great-circle order.
//
// Timing (default stream, CUDA events): each step records an event, builds (cuBQL: the box kernel + the
// builder; cudaKDTree: the (point, index) record kernel + buildTree, which reorders the records in place),
// records an event, queries, records an event and waits. The previous step's BVH is freed before the first
// event (not timed); the boxes / records arrays are allocated once before the steps. --warmups steps (default
// 2), then --repeat timed steps (default 5): the medians of build, query and build + query go on stdout as one
// JSON object, with every run's figures. The builders allocate their own temporaries (cuBQL: its default
// cudaMallocAsync pool; cudaKDTree's builder_thrust: thrust vectors) inside the timed build, as a caller's would.
//
// Output: OUT.bin gets the last step's indices (int32, n rows x k, the references' positions in the input
// file, -1 where fewer than k were found); --distances the chord lengths between the float32 unit vectors
// (float32, n x k, NaN where no neighbour), computed after the timed steps. Kernels are compiled for
// K = 1, 2, 4, 8, 16, 32; another k <= 32 runs with the next larger K and writes the first k ("k_compiled" in
// the JSON says which). Exit status 77 when no GPU is visible, 2 for a method that is not compiled in.
//
// Radius query (--radius-km R; cuBQL methods only): every reference within R km (great circle on a sphere of
// --sphere-radius-km) of each observation, as a compressed-row result like streamkit's radius_offsets_async +
// radius_fill_async: int64 row offsets, then int64 reference indices and float32 distances in km. A pair is in
// when the float32 squared chord between the float32 unit vectors is at most (float32) (2 sin(R / 2 sphere))^2.
// Phases, each timed on its own (--warmups, then the median of --repeat CUDA-event timings):
//   build   the box kernel + cuBQL's builder, as in the k-nearest mode (the last build is kept for the queries)
//   count   a thread per observation: cuBQL::fixedRadiusQuery::forEachPrim over the BVH with the squared chord,
//           counting the references within; then cub::DeviceScan::ExclusiveSum of the n + 1 counts into the
//           offsets (cub's temporary storage allocated before the timings)
//   fill    the same traversal again, writing each row's indices and distances (km, 2 R asin(chord / 2) in
//           float32) at its offsets: each row in traversal order (unsorted)
//   sort    each row ordered by (distance, index), like streamkit's sorted rows: (distance bits << 32 |
//           index) keys packed, cub::DeviceSegmentedSort::SortKeys over the rows, unpacked into a second pair of
//           arrays; timed apart from the fill
// The result arrays are allocated after the first count (not timed), as bench_radius does. Check: a sample of
// --check-rows rows (evenly spaced, plus the largest row) against a float64 CPU haversine of the float32 inputs
// (a reference is within when haversine x sphere <= R, streamkit's rule), on the host's threads: per row the
// missing and extra references, split into those whose float64 distance lies within the float32 band of R
// (2.5e-7 rad + 4e-7 x the radius angle: the error of float32 unit vectors and squared chords) and those
// outside it (wrong), duplicates, indices out of range, and sorted rows that differ from the unsorted row's set
// or are out of (distance, index) order. One JSON object on stdout.

#include <cuda_runtime.h>

#if defined(STREAMKIT_WITH_CUBQL)
#define CUBQL_GPU_BUILDER_IMPLEMENTATION 1
#include <cuBQL/bvh.h>
#include <cuBQL/builder/cuda.h>
#include <cuBQL/builder/cuda/radix.h>
#include <cuBQL/queries/pointData/findClosest.h>
#include <cuBQL/queries/pointData/knn.h>
#include <cuBQL/traversal/fixedRadiusQuery.h>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#endif
#if defined(STREAMKIT_WITH_CUKD)
#include <cukd/builder.h>
#include <cukd/fcp.h>
#include <cukd/knn.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

constexpr int threads_per_block = 128;
constexpr int most_k = 32;

void check(cudaError_t status, char const* what)
{
  if (status != cudaSuccess) { throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status)); }
}

int blocks_for(std::size_t count) { return static_cast<int>((count + threads_per_block - 1) / threads_per_block); }

struct unit_vector {
  float x, y, z;
};
static_assert(sizeof(unit_vector) == 3 * sizeof(float), "unit vectors are float32 triples (the --convert format)");

/// float32 (lat, lon) degree pairs from a raw file.
std::vector<float> read_pairs(std::string const& path)
{
  std::ifstream file(path, std::ios::binary);
  if (!file) { throw std::runtime_error(path + ": cannot open"); }
  std::vector<char> const bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.size() % (2 * sizeof(float)) != 0) { throw std::runtime_error(path + ": not a whole number of float32 pairs"); }
  std::vector<float> values(bytes.size() / sizeof(float));
  std::copy(bytes.begin(), bytes.end(), reinterpret_cast<char*>(values.data()));
  return values;
}

/// Unit vectors of the pairs, computed in float64 and rounded to float32 (as numpy's
/// unit_vectors(lat, lon).astype(float32) in peers_nearest.py).
std::vector<unit_vector> to_unit_vectors(std::vector<float> const& pairs)
{
  double const to_radians = 3.141592653589793238462643383279502884 / 180.0;
  std::vector<unit_vector> out(pairs.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    double const lat = static_cast<double>(pairs[2 * i]) * to_radians;
    double const lon = static_cast<double>(pairs[2 * i + 1]) * to_radians;
    double const cos_lat = std::cos(lat);
    out[i] = {static_cast<float>(cos_lat * std::cos(lon)), static_cast<float>(cos_lat * std::sin(lon)),
              static_cast<float>(std::sin(lat))};
  }
  return out;
}

double median(std::vector<double> values)
{
  std::sort(values.begin(), values.end());
  std::size_t const half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

template <class T>
struct device_array {
  T* data = nullptr;
  std::size_t size = 0;
  explicit device_array(std::size_t count) : size(count)
  {
    check(cudaMalloc(reinterpret_cast<void**>(&data), std::max<std::size_t>(count, 1) * sizeof(T)), "cudaMalloc");
  }
  device_array(device_array const&) = delete;
  device_array& operator=(device_array const&) = delete;
  ~device_array() { cudaFree(data); }
};

/// Device buffers shared by every method: points, results.
struct problem {
  std::size_t n, m, k, k_compiled;
  device_array<unit_vector> observations, references;
  device_array<std::int32_t> indices;
  problem(std::vector<unit_vector> const& obs, std::vector<unit_vector> const& refs, std::size_t k_, std::size_t kk)
    : n(obs.size()), m(refs.size()), k(k_), k_compiled(kk), observations(obs.size()), references(refs.size()),
      indices(obs.size() * k_)
  {
    check(cudaMemcpy(observations.data, obs.data(), n * sizeof(unit_vector), cudaMemcpyHostToDevice), "copy observations");
    check(cudaMemcpy(references.data, refs.data(), m * sizeof(unit_vector), cudaMemcpyHostToDevice), "copy references");
  }
};

/// Chord lengths between each observation and its neighbours (after the timed steps; NaN for -1).
__global__ void chord_lengths(unit_vector const* observations, unit_vector const* references, std::int32_t const* indices,
                              std::size_t n, int k, float* out)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n * static_cast<std::size_t>(k)) { return; }
  std::int32_t const j = indices[i];
  if (j < 0) {
    out[i] = __int_as_float(0x7fc00000);
    return;
  }
  unit_vector const q = observations[i / k], r = references[j];
  float const dx = q.x - r.x, dy = q.y - r.y, dz = q.z - r.z;
  out[i] = sqrtf(dx * dx + dy * dy + dz * dz);
}

// ------------------------------------------------------------------------------------------------
// A method: prepare() allocates its buffers (before the steps, not timed); build() and query() enqueue on
// the default stream; release() frees what build() made.
// ------------------------------------------------------------------------------------------------

struct method {
  virtual ~method() = default;
  virtual void prepare(problem& p) = 0;
  virtual void build(problem& p) = 0;
  virtual void query(problem& p) = 0;
  virtual void release() {}
  virtual std::string description() const = 0;
};

/// Calls `launch(std::integral_constant<int, K>{})` with K the compiled size `k`.
template <class Launch>
void with_compiled_k(std::size_t k, Launch&& launch)
{
  switch (k) {
    case 1: launch(std::integral_constant<int, 1>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 16: launch(std::integral_constant<int, 16>{}); break;
    case 32: launch(std::integral_constant<int, 32>{}); break;
    default: throw std::logic_error("no kernel compiled for K = " + std::to_string(k));
  }
}

std::size_t compiled_k_for(std::size_t k)
{
  for (std::size_t compiled : {1, 2, 4, 8, 16, 32}) {
    if (k <= compiled) { return compiled; }
  }
  throw std::invalid_argument("--k: at most " + std::to_string(most_k));
}

#if defined(STREAMKIT_WITH_CUBQL)
// ------------------------------------------------------------------------------------------------
// cuBQL
// ------------------------------------------------------------------------------------------------

__global__ void cubql_boxes(unit_vector const* points, std::size_t m, cuBQL::box3f* boxes)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= m) { return; }
  unit_vector const p = points[i];
  boxes[i] = cuBQL::box3f().including(cuBQL::vec3f(p.x, p.y, p.z));
}

template <int K>
__global__ void cubql_query(cuBQL::bvh3f bvh, unit_vector const* references, unit_vector const* observations,
                            std::size_t n, int k, std::int32_t* out)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) { return; }
  unit_vector const o = observations[i];
  cuBQL::vec3f const q(o.x, o.y, o.z);
  auto const* points = reinterpret_cast<cuBQL::vec3f const*>(references);
  std::int32_t* row = out + i * k;
  if constexpr (K == 1) {
    row[0] = cuBQL::points::findClosest(bvh, points, q);
  } else {
    cuBQL::knn::Candidate candidates[K];
    cuBQL::knn::Result const found = cuBQL::points::findKNN(candidates, K, bvh, points, q);
    for (int j = 0; j < k; ++j) { row[j] = j < found.numFound ? candidates[j].primID : -1; }
  }
}

struct cubql_method final : method {
  bool radix;
  int leaf_threshold;
  cuBQL::bvh3f bvh;
  bool built = false;
  std::unique_ptr<device_array<cuBQL::box3f>> boxes;

  cubql_method(bool radix_, int leaf_threshold_) : radix(radix_), leaf_threshold(leaf_threshold_) {}
  ~cubql_method() override { release(); }

  void prepare(problem& p) override { boxes = std::make_unique<device_array<cuBQL::box3f>>(p.m); }

  void build(problem& p) override
  {
    cubql_boxes<<<blocks_for(p.m), threads_per_block>>>(p.references.data, p.m, boxes->data);
    cuBQL::BuildConfig config;
    config.makeLeafThreshold = leaf_threshold;
    if (radix) {
      cuBQL::cuda::radixBuilder(bvh, boxes->data, static_cast<std::uint32_t>(p.m), config, 0);
    } else {
      cuBQL::gpuBuilder(bvh, boxes->data, static_cast<std::uint32_t>(p.m), config, 0);
    }
    built = true;
  }

  void query(problem& p) override
  {
    with_compiled_k(p.k_compiled, [&](auto compiled) {
      constexpr int K = decltype(compiled)::value;
      cubql_query<K><<<blocks_for(p.n), threads_per_block>>>(bvh, p.references.data, p.observations.data, p.n,
                                                             static_cast<int>(p.k), p.indices.data);
    });
  }

  void release() override
  {
    if (built) { cuBQL::cuda::free(bvh, 0); }
    built = false;
  }

  std::string description() const override
  {
    return std::string(radix ? "cuBQL::cuda::radixBuilder" : "cuBQL::gpuBuilder (spatial median)") +
           ", makeLeafThreshold " + std::to_string(leaf_threshold) + (leaf_threshold == 0 ? " (builder default)" : "") +
           "; findClosest (k = 1) / findKNN (k > 1)";
  }
};

// ------------------------------------------------------------------------------------------------
// cuBQL radius query (--radius-km): count, scan, fill, per-row sort
// ------------------------------------------------------------------------------------------------

/// Squared chord between a reference and the query, rounded op by op (no contraction into FMAs), so that the
/// count and the fill kernels decide every pair alike.
__device__ __forceinline__ float radius_chord2(unit_vector const& r, cuBQL::vec3f const& q)
{
  float const dx = __fsub_rn(r.x, q.x), dy = __fsub_rn(r.y, q.y), dz = __fsub_rn(r.z, q.z);
  return __fadd_rn(__fadd_rn(__fmul_rn(dx, dx), __fmul_rn(dy, dy)), __fmul_rn(dz, dz));
}

/// counts[i] = references within (squared chord <= chord2) of observation i; counts[n] = 0 (for the scan).
__global__ void cubql_radius_count(cuBQL::bvh3f bvh, unit_vector const* references, unit_vector const* observations,
                                   std::size_t n, float chord2, std::int64_t* counts)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i > n) { return; }
  if (i == n) {
    counts[n] = 0;
    return;
  }
  unit_vector const o = observations[i];
  cuBQL::vec3f const q(o.x, o.y, o.z);
  std::int64_t found = 0;
  cuBQL::fixedRadiusQuery::forEachPrim(
    [&](std::uint32_t prim) -> int {
      if (radius_chord2(references[prim], q) <= chord2) { ++found; }
      return CUBQL_CONTINUE_TRAVERSAL;
    },
    bvh, q, chord2);
  counts[i] = found;
}

/// Writes row i at offsets[i] ... offsets[i + 1]: indices and distances (km), in traversal order; a row whose
/// traversal finds another count than the count pass did is counted in `mismatched` (never written past).
__global__ void cubql_radius_fill(cuBQL::bvh3f bvh, unit_vector const* references, unit_vector const* observations,
                                  std::size_t n, float chord2, float two_sphere_km, std::int64_t const* offsets,
                                  std::int64_t* index, float* distance, unsigned long long* mismatched)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) { return; }
  unit_vector const o = observations[i];
  cuBQL::vec3f const q(o.x, o.y, o.z);
  std::int64_t at = offsets[i];
  std::int64_t const end = offsets[i + 1];
  cuBQL::fixedRadiusQuery::forEachPrim(
    [&](std::uint32_t prim) -> int {
      float const c2 = radius_chord2(references[prim], q);
      if (c2 <= chord2) {
        if (at < end) {
          index[at] = prim;
          distance[at] = two_sphere_km * asinf(fminf(0.5f * sqrtf(c2), 1.0f));
        }
        ++at;
      }
      return CUBQL_CONTINUE_TRAVERSAL;
    },
    bvh, q, chord2);
  if (at != end) { atomicAdd(mismatched, 1ull); }
}

/// (distance bits << 32 | index): non-negative float32 bits order as their values, so the keys order by
/// (distance, index).
__global__ void radius_pack_keys(std::int64_t const* index, float const* distance, std::size_t total, std::uint64_t* keys)
{
  std::size_t const j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (j >= total) { return; }
  keys[j] = static_cast<std::uint64_t>(__float_as_uint(distance[j])) << 32 | static_cast<std::uint32_t>(index[j]);
}

__global__ void radius_unpack_keys(std::uint64_t const* keys, std::size_t total, std::int64_t* index, float* distance)
{
  std::size_t const j = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (j >= total) { return; }
  std::uint64_t const key = keys[j];
  index[j] = static_cast<std::int64_t>(key & 0xffffffffu);
  distance[j] = __uint_as_float(static_cast<unsigned>(key >> 32));
}

/// Every run of --repeat CUDA-event timings of `work` (on the default stream) after --warmups; `before()` runs
/// ahead of each step, untimed.
template <class Before, class Work>
std::vector<double> time_runs(int warmups, int repeat, Before&& before, Work&& work)
{
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> runs;
  for (int step = 0; step < warmups + repeat; ++step) {
    before();
    check(cudaDeviceSynchronize(), "before a step");
    check(cudaEventRecord(start, 0), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop, 0), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "a step");
    check(cudaGetLastError(), "a step's kernels");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (step >= warmups) { runs.push_back(ms); }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return runs;
}

/// Float64 great-circle distance in radians (streamkit's haversine(): clamped for antipodes).
double haversine_rad(double lat1, double lon1, double lat2, double lon2)
{
  double const sin_half_dlat = std::sin(0.5 * (lat2 - lat1));
  double const sin_half_dlon = std::sin(0.5 * (lon2 - lon1));
  double const h = sin_half_dlat * sin_half_dlat + std::cos(lat1) * std::cos(lat2) * sin_half_dlon * sin_half_dlon;
  return 2.0 * std::asin(std::sqrt(h < 1.0 ? h : 1.0));
}

struct radius_check {
  std::size_t rows = 0, rows_identical = 0, expected_pairs = 0, returned_pairs = 0;
  std::size_t missing_in_band = 0, missing_outside_band = 0, extra_in_band = 0, extra_outside_band = 0;
  std::size_t duplicates = 0, out_of_range = 0, sorted_rows_bad = 0;
  double largest_mismatch_km = 0.0;  ///< the largest |haversine - R| of a missing or extra pair (km)
  double band_km = 0.0, seconds = 0.0;
};

/// Checks `rows` of the result (row r's indices in found[r], sorted[r] the same row after the sort, empty
/// vectors when the sort was not run) against a float64 brute force over `refs` (float32 degree pairs).
radius_check check_radius_rows(std::vector<float> const& obs_pairs, std::vector<float> const& ref_pairs,
                               std::vector<std::size_t> const& rows, std::vector<std::vector<std::int64_t>> const& found,
                               std::vector<std::vector<std::pair<float, std::int64_t>>> const& sorted, double radius_km,
                               double sphere_km)
{
  auto const started = std::chrono::steady_clock::now();
  double const to_radians = 3.141592653589793238462643383279502884 / 180.0;
  std::size_t const m = ref_pairs.size() / 2;
  std::vector<double> ref_lat(m), ref_lon(m);
  for (std::size_t j = 0; j < m; ++j) {
    ref_lat[j] = static_cast<double>(ref_pairs[2 * j]) * to_radians;
    ref_lon[j] = static_cast<double>(ref_pairs[2 * j + 1]) * to_radians;
  }
  double const angle = radius_km / sphere_km;
  double const band_rad = 2.5e-7 + 4e-7 * angle;
  // haversine >= |dlat|: a reference further in latitude than this is not within (nor in the band).
  double const lat_filter = angle + band_rad + 1e-9;
  std::vector<radius_check> parts(std::max(1u, std::min(64u, std::thread::hardware_concurrency())));
  std::vector<std::thread> workers;
  for (std::size_t w = 0; w < parts.size(); ++w) {
    workers.emplace_back([&, w] {
      radius_check& c = parts[w];
      for (std::size_t r = w; r < rows.size(); r += parts.size()) {
        std::size_t const i = rows[r];
        double const lat = static_cast<double>(obs_pairs[2 * i]) * to_radians;
        double const lon = static_cast<double>(obs_pairs[2 * i + 1]) * to_radians;
        std::vector<std::int64_t> expected;
        for (std::size_t j = 0; j < m; ++j) {
          if (std::fabs(ref_lat[j] - lat) > lat_filter) { continue; }
          if (haversine_rad(lat, lon, ref_lat[j], ref_lon[j]) * sphere_km <= radius_km) {
            expected.push_back(static_cast<std::int64_t>(j));
          }
        }
        std::vector<std::int64_t> got = found[r];
        std::sort(got.begin(), got.end());
        std::size_t const before = got.size();
        got.erase(std::remove_if(got.begin(), got.end(), [&](std::int64_t j) { return j < 0 || j >= static_cast<std::int64_t>(m); }),
                  got.end());
        c.out_of_range += before - got.size();
        std::size_t const unique_before = got.size();
        got.erase(std::unique(got.begin(), got.end()), got.end());
        c.duplicates += unique_before - got.size();
        ++c.rows;
        c.expected_pairs += expected.size();
        c.returned_pairs += found[r].size();
        if (got == expected && before == got.size()) { ++c.rows_identical; }
        auto classify = [&](std::int64_t j, std::size_t& in_band, std::size_t& outside) {
          double const off = std::fabs(haversine_rad(lat, lon, ref_lat[j], ref_lon[j]) * sphere_km - radius_km);
          c.largest_mismatch_km = std::max(c.largest_mismatch_km, off);
          ++(off <= band_rad * sphere_km ? in_band : outside);
        };
        std::vector<std::int64_t> difference;
        std::set_difference(expected.begin(), expected.end(), got.begin(), got.end(), std::back_inserter(difference));
        for (std::int64_t j : difference) { classify(j, c.missing_in_band, c.missing_outside_band); }
        difference.clear();
        std::set_difference(got.begin(), got.end(), expected.begin(), expected.end(), std::back_inserter(difference));
        for (std::int64_t j : difference) { classify(j, c.extra_in_band, c.extra_outside_band); }
        if (!sorted.empty()) {
          std::vector<std::pair<float, std::int64_t>> const& row = sorted[r];
          std::vector<std::int64_t> ids;
          for (auto const& entry : row) { ids.push_back(entry.second); }
          std::vector<std::int64_t> unsorted_ids = found[r];
          std::sort(ids.begin(), ids.end());
          std::sort(unsorted_ids.begin(), unsorted_ids.end());
          if (ids != unsorted_ids || !std::is_sorted(row.begin(), row.end())) { ++c.sorted_rows_bad; }
        }
      }
    });
  }
  for (auto& t : workers) { t.join(); }
  radius_check total;
  for (auto const& c : parts) {
    total.rows += c.rows;
    total.rows_identical += c.rows_identical;
    total.expected_pairs += c.expected_pairs;
    total.returned_pairs += c.returned_pairs;
    total.missing_in_band += c.missing_in_band;
    total.missing_outside_band += c.missing_outside_band;
    total.extra_in_band += c.extra_in_band;
    total.extra_outside_band += c.extra_outside_band;
    total.duplicates += c.duplicates;
    total.out_of_range += c.out_of_range;
    total.sorted_rows_bad += c.sorted_rows_bad;
    total.largest_mismatch_km = std::max(total.largest_mismatch_km, c.largest_mismatch_km);
  }
  total.band_km = band_rad * sphere_km;
  total.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return total;
}
#endif

#if defined(STREAMKIT_WITH_CUKD)
// ------------------------------------------------------------------------------------------------
// cudaKDTree
// ------------------------------------------------------------------------------------------------

/// A reference point and its position in the input: the builder reorders the records.
struct cukd_record {
  float3 position;
  std::int32_t index;
};

struct cukd_record_traits : public cukd::default_data_traits<float3> {
  using point_t = float3;
  static inline __host__ __device__ float3 const& get_point(cukd_record const& r) { return r.position; }
  static inline __host__ __device__ float get_coord(cukd_record const& r, int dim) { return cukd::get_coord(r.position, dim); }
  enum { has_explicit_dim = false };
  static inline __host__ __device__ int get_dim(cukd_record const&) { return -1; }
};

__global__ void cukd_records(unit_vector const* points, std::size_t m, cukd_record* records)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= m) { return; }
  unit_vector const p = points[i];
  records[i] = {make_float3(p.x, p.y, p.z), static_cast<std::int32_t>(i)};
}

template <int K, bool CCT>
__global__ void cukd_query(cukd_record const* tree, int m, cukd::box_t<float3> const* bounds,
                           unit_vector const* observations, std::size_t n, int k, std::int32_t* out)
{
  std::size_t const i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) { return; }
  unit_vector const o = observations[i];
  float3 const q = make_float3(o.x, o.y, o.z);
  std::int32_t* row = out + i * k;
  if constexpr (K == 1) {
    int node;
    if constexpr (CCT) {
      node = cukd::cct::fcp<cukd_record, cukd_record_traits>(q, *bounds, tree, m);
    } else {
      node = cukd::stackBased::fcp<cukd_record, cukd_record_traits>(q, tree, m);
    }
    row[0] = node < 0 ? -1 : tree[node].index;
  } else {
    cukd::FixedCandidateList<K> candidates(INFINITY);
    if constexpr (CCT) {
      cukd::cct::knn<cukd::FixedCandidateList<K>, cukd_record, cukd_record_traits>(candidates, q, *bounds, tree, m);
    } else {
      cukd::stackBased::knn<cukd::FixedCandidateList<K>, cukd_record, cukd_record_traits>(candidates, q, tree, m);
    }
    for (int j = 0; j < k; ++j) {
      int const node = candidates.get_pointID(j);
      row[j] = node < 0 ? -1 : tree[node].index;
    }
  }
}

struct cukd_method final : method {
  bool cct;
  std::unique_ptr<device_array<cukd_record>> records;
  std::unique_ptr<device_array<cukd::box_t<float3>>> bounds;

  explicit cukd_method(bool cct_) : cct(cct_) {}

  void prepare(problem& p) override
  {
    records = std::make_unique<device_array<cukd_record>>(p.m);
    bounds = std::make_unique<device_array<cukd::box_t<float3>>>(1);
  }

  void build(problem& p) override
  {
    cukd_records<<<blocks_for(p.m), threads_per_block>>>(p.references.data, p.m, records->data);
    cukd::buildTree<cukd_record, cukd_record_traits>(records->data, static_cast<int>(p.m), bounds->data, 0);
  }

  void query(problem& p) override
  {
    with_compiled_k(p.k_compiled, [&](auto compiled) {
      constexpr int K = decltype(compiled)::value;
      if (cct) {
        cukd_query<K, true><<<blocks_for(p.n), threads_per_block>>>(records->data, static_cast<int>(p.m), bounds->data,
                                                                    p.observations.data, p.n, static_cast<int>(p.k),
                                                                    p.indices.data);
      } else {
        cukd_query<K, false><<<blocks_for(p.n), threads_per_block>>>(records->data, static_cast<int>(p.m), bounds->data,
                                                                     p.observations.data, p.n, static_cast<int>(p.k),
                                                                     p.indices.data);
      }
    });
  }

  std::string description() const override
  {
    return std::string("cukd::buildTree (builder_thrust) over (float3, index) records; ") +
           (cct ? "cukd::cct::fcp (k = 1) / cukd::cct::knn" : "cukd::stackBased::fcp (k = 1) / cukd::stackBased::knn") +
           " with FixedCandidateList<K> (k > 1)";
  }
};
#endif

std::vector<std::string> compiled_methods()
{
  std::vector<std::string> names;
#if defined(STREAMKIT_WITH_CUBQL)
  names.insert(names.end(), {"cubql", "cubql_radix"});
#endif
#if defined(STREAMKIT_WITH_CUKD)
  names.insert(names.end(), {"cudakdtree", "cudakdtree_stack"});
#endif
  return names;
}

std::unique_ptr<method> make_method(std::string const& name, int leaf_threshold)
{
#if defined(STREAMKIT_WITH_CUBQL)
  if (name == "cubql" || name == "cubql_radix") { return std::make_unique<cubql_method>(name == "cubql_radix", leaf_threshold); }
#endif
#if defined(STREAMKIT_WITH_CUKD)
  if (name == "cudakdtree" || name == "cudakdtree_stack") { return std::make_unique<cukd_method>(name == "cudakdtree"); }
#endif
  (void)leaf_threshold;
  return nullptr;
}

std::string json_list(std::vector<std::string> const& names)
{
  std::string out = "[";
  for (std::size_t i = 0; i < names.size(); ++i) { out += (i ? ", \"" : "\"") + names[i] + "\""; }
  return out + "]";
}

std::string json_list(std::vector<double> const& values)
{
  std::string out = "[";
  char buffer[32];
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buffer, sizeof buffer, "%s%.5f", i ? ", " : "", values[i]);
    out += buffer;
  }
  return out + "]";
}

struct arguments {
  std::string method, observations, references, indices, distances;
  std::size_t k = 1;
  int repeat = 5, warmups = 2, leaf_threshold = 0;
  double radius_km = -1.0;           ///< --radius-km: the radius query instead of k nearest (negative: not asked)
  double sphere_radius_km = 6371.0088;  ///< streamkit's earth_radius_km
  std::size_t check_rows = 2000;
};

arguments parse(int argc, char** argv)
{
  arguments a;
  for (int i = 1; i < argc; i += 2) {
    std::string const key = argv[i];
    if (i + 1 >= argc) { throw std::invalid_argument(key + " needs a value"); }
    std::string const value = argv[i + 1];
    if (key == "--method") { a.method = value; }
    else if (key == "--observations") { a.observations = value; }
    else if (key == "--references") { a.references = value; }
    else if (key == "--k") { a.k = std::stoul(value); }
    else if (key == "--repeat") { a.repeat = std::stoi(value); }
    else if (key == "--warmups") { a.warmups = std::stoi(value); }
    else if (key == "--indices") { a.indices = value; }
    else if (key == "--distances") { a.distances = value; }
    else if (key == "--leaf-threshold") { a.leaf_threshold = std::stoi(value); }
    else if (key == "--radius-km") { a.radius_km = std::stod(value); }
    else if (key == "--sphere-radius-km") { a.sphere_radius_km = std::stod(value); }
    else if (key == "--check-rows") { a.check_rows = std::stoul(value); }
    else { throw std::invalid_argument("unknown option " + key); }
  }
  if (a.method.empty() || a.observations.empty() || a.references.empty()) {
    throw std::invalid_argument("--method, --observations and --references are required (or --list)");
  }
  if (a.k < 1 || a.k > static_cast<std::size_t>(most_k)) { throw std::invalid_argument("--k: 1 to 32"); }
  if (a.repeat < 1 || a.warmups < 0) { throw std::invalid_argument("--repeat at least 1, --warmups at least 0"); }
  if (a.radius_km >= 0 && !(a.sphere_radius_km > 0 && std::isfinite(a.sphere_radius_km) && std::isfinite(a.radius_km))) {
    throw std::invalid_argument("--radius-km and --sphere-radius-km: finite, the sphere's radius positive");
  }
  return a;
}

template <class T>
void write_device(std::string const& path, T const* device, std::size_t count)
{
  std::vector<T> host(count);
  check(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost), "copy results");
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<char const*>(host.data()), static_cast<std::streamsize>(count * sizeof(T)));
  if (!out) { throw std::runtime_error(path + ": cannot write"); }
}

#if defined(STREAMKIT_WITH_CUBQL)
/// The radius query (see the top of the file); one JSON object on stdout.
int run_radius(arguments const& a, cudaDeviceProp const& properties)
{
  if (a.method != "cubql" && a.method != "cubql_radix") {
    throw std::invalid_argument("--radius-km: methods cubql and cubql_radix only");
  }
  std::vector<float> const obs_pairs = read_pairs(a.observations);
  std::vector<float> const ref_pairs = read_pairs(a.references);
  std::vector<unit_vector> const obs = to_unit_vectors(obs_pairs);
  std::vector<unit_vector> const refs = to_unit_vectors(ref_pairs);
  if (refs.empty() || refs.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("references: 1 to 2^31 - 1 points");
  }
  problem p(obs, refs, 1, 1);
  std::size_t const n = p.n;
  cubql_method search(a.method == "cubql_radix", a.leaf_threshold);
  search.prepare(p);
  auto const nothing = [] {};
  std::vector<double> const build_runs = time_runs(a.warmups, a.repeat, [&] { search.release(); }, [&] { search.build(p); });

  double const pi = 3.141592653589793238462643383279502884;
  double const angle = std::min(a.radius_km / a.sphere_radius_km, pi);
  double const chord = 2.0 * std::sin(0.5 * angle);
  float const chord2 = static_cast<float>(chord * chord);
  float const two_sphere_km = static_cast<float>(2.0 * a.sphere_radius_km);

  device_array<std::int64_t> counts(n + 1), offsets(n + 1);
  std::size_t scan_bytes = 0;
  check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, counts.data, offsets.data, static_cast<int>(n + 1)), "scan size");
  device_array<unsigned char> scan_temp(scan_bytes);
  auto const count_pass = [&] {
    cubql_radius_count<<<blocks_for(n + 1), threads_per_block>>>(search.bvh, p.references.data, p.observations.data, n,
                                                                 chord2, counts.data);
    check(cub::DeviceScan::ExclusiveSum(scan_temp.data, scan_bytes, counts.data, offsets.data, static_cast<int>(n + 1)),
          "scan");
  };
  count_pass();
  check(cudaDeviceSynchronize(), "the first count");
  check(cudaGetLastError(), "the first count's kernels");
  std::int64_t total = 0;
  check(cudaMemcpy(&total, offsets.data + n, sizeof total, cudaMemcpyDeviceToHost), "copy the total");
  std::size_t const pairs = static_cast<std::size_t>(total);
  device_array<std::int64_t> index(pairs), sorted_index(pairs);
  device_array<float> distance(pairs), sorted_distance(pairs);
  device_array<std::uint64_t> keys(pairs), sorted_keys(pairs);
  device_array<unsigned long long> mismatched(1);
  std::size_t sort_bytes = 0;
  if (pairs > 0) {
    check(cub::DeviceSegmentedSort::SortKeys(nullptr, sort_bytes, keys.data, sorted_keys.data, total, static_cast<std::int64_t>(n),
                                             offsets.data, offsets.data + 1),
          "sort size");
  }
  device_array<unsigned char> sort_temp(sort_bytes);

  std::vector<double> const count_runs = time_runs(a.warmups, a.repeat, nothing, count_pass);
  std::vector<double> const fill_runs = time_runs(
    a.warmups, a.repeat, [&] { check(cudaMemset(mismatched.data, 0, sizeof(unsigned long long)), "cudaMemset"); },
    [&] {
      if (n == 0) { return; }
      cubql_radius_fill<<<blocks_for(n), threads_per_block>>>(search.bvh, p.references.data, p.observations.data, n, chord2,
                                                              two_sphere_km, offsets.data, index.data, distance.data,
                                                              mismatched.data);
    });
  std::vector<double> const sort_runs = time_runs(a.warmups, a.repeat, nothing, [&] {
    if (pairs == 0) { return; }
    radius_pack_keys<<<blocks_for(pairs), threads_per_block>>>(index.data, distance.data, pairs, keys.data);
    check(cub::DeviceSegmentedSort::SortKeys(sort_temp.data, sort_bytes, keys.data, sorted_keys.data, total,
                                             static_cast<std::int64_t>(n), offsets.data, offsets.data + 1),
          "sort");
    radius_unpack_keys<<<blocks_for(pairs), threads_per_block>>>(sorted_keys.data, pairs, sorted_index.data, sorted_distance.data);
  });
  unsigned long long fill_mismatched = 0;
  check(cudaMemcpy(&fill_mismatched, mismatched.data, sizeof fill_mismatched, cudaMemcpyDeviceToHost), "copy the mismatches");

  // The check: evenly spaced rows and the largest one.
  std::vector<std::int64_t> host_offsets(n + 1);
  check(cudaMemcpy(host_offsets.data(), offsets.data, (n + 1) * sizeof(std::int64_t), cudaMemcpyDeviceToHost), "copy offsets");
  std::size_t largest_row = 0, largest_at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    auto const length = static_cast<std::size_t>(host_offsets[i + 1] - host_offsets[i]);
    if (length > largest_row) {
      largest_row = length;
      largest_at = i;
    }
  }
  std::vector<std::size_t> rows;
  std::size_t const wanted = std::min(a.check_rows, n);
  for (std::size_t r = 0; r < wanted; ++r) { rows.push_back(r * n / wanted); }
  if (n > 0 && std::find(rows.begin(), rows.end(), largest_at) == rows.end()) { rows.push_back(largest_at); }
  std::vector<std::vector<std::int64_t>> found(rows.size());
  std::vector<std::vector<std::pair<float, std::int64_t>>> sorted(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    std::size_t const begin = static_cast<std::size_t>(host_offsets[rows[r]]);
    std::size_t const length = static_cast<std::size_t>(host_offsets[rows[r] + 1]) - begin;
    found[r].resize(length);
    std::vector<std::int64_t> ids(length);
    std::vector<float> dist(length);
    if (length > 0) {
      check(cudaMemcpy(found[r].data(), index.data + begin, length * sizeof(std::int64_t), cudaMemcpyDeviceToHost), "copy a row");
      check(cudaMemcpy(ids.data(), sorted_index.data + begin, length * sizeof(std::int64_t), cudaMemcpyDeviceToHost), "copy a row");
      check(cudaMemcpy(dist.data(), sorted_distance.data + begin, length * sizeof(float), cudaMemcpyDeviceToHost), "copy a row");
    }
    for (std::size_t j = 0; j < length; ++j) { sorted[r].emplace_back(dist[j], ids[j]); }
  }
  radius_check const c = check_radius_rows(obs_pairs, ref_pairs, rows, found, sorted, a.radius_km, a.sphere_radius_km);

  double const build_ms = median(build_runs), count_ms = median(count_runs), fill_ms = median(fill_runs);
  double const sort_ms = median(sort_runs);
  std::printf(
    "{\"mode\": \"radius\", \"method\": \"%s\", \"n\": %zu, \"m\": %zu, \"radius_km\": %.17g, \"sphere_radius_km\": %.17g, "
    "\"chord2\": %.9g, \"total_pairs\": %zu, \"mean_row\": %.6f, \"largest_row\": %zu, \"build_ms\": %.5f, \"count_ms\": %.5f, "
    "\"fill_ms\": %.5f, \"sort_ms\": %.5f, \"unsorted_ms\": %.5f, \"sorted_ms\": %.5f, \"build_runs_ms\": %s, "
    "\"count_runs_ms\": %s, \"fill_runs_ms\": %s, \"sort_runs_ms\": %s, \"fill_mismatched_rows\": %llu, "
    "\"check\": {\"rows\": %zu, \"rows_identical\": %zu, \"expected_pairs\": %zu, \"returned_pairs\": %zu, "
    "\"missing_in_band\": %zu, \"missing_outside_band\": %zu, \"extra_in_band\": %zu, \"extra_outside_band\": %zu, "
    "\"duplicates\": %zu, \"out_of_range\": %zu, \"sorted_rows_bad\": %zu, \"band_km\": %.6g, \"largest_mismatch_km\": %.6g, "
    "\"seconds\": %.2f}, \"repeat\": %d, \"warmups\": %d, \"threads_per_block\": %d, \"leaf_threshold\": %d, "
    "\"description\": \"%s; cuBQL::fixedRadiusQuery::forEachPrim count + cub::DeviceScan::ExclusiveSum, forEachPrim fill "
    "(unsorted), cub::DeviceSegmentedSort::SortKeys of (distance, index) keys\", \"gpu\": \"%s\", \"cuda_runtime\": %d}\n",
    a.method.c_str(), n, p.m, a.radius_km, a.sphere_radius_km, static_cast<double>(chord2), pairs,
    n ? static_cast<double>(pairs) / static_cast<double>(n) : 0.0, largest_row, build_ms, count_ms, fill_ms, sort_ms,
    count_ms + fill_ms, count_ms + fill_ms + sort_ms, json_list(build_runs).c_str(), json_list(count_runs).c_str(),
    json_list(fill_runs).c_str(), json_list(sort_runs).c_str(), fill_mismatched, c.rows, c.rows_identical, c.expected_pairs,
    c.returned_pairs, c.missing_in_band, c.missing_outside_band, c.extra_in_band, c.extra_outside_band, c.duplicates,
    c.out_of_range, c.sorted_rows_bad, c.band_km, c.largest_mismatch_km, c.seconds, a.repeat, a.warmups, threads_per_block,
    a.leaf_threshold, search.description().c_str(), properties.name, CUDART_VERSION);
  search.release();
  return 0;
}
#endif

int run(int argc, char** argv)
{
  if (argc == 4 && std::string(argv[1]) == "--convert") {
    std::vector<unit_vector> const vectors = to_unit_vectors(read_pairs(argv[2]));
    std::ofstream out(argv[3], std::ios::binary);
    out.write(reinterpret_cast<char const*>(vectors.data()), static_cast<std::streamsize>(vectors.size() * sizeof(unit_vector)));
    if (!out) { throw std::runtime_error(std::string(argv[3]) + ": cannot write"); }
    std::printf("{\"converted\": %zu}\n", vectors.size());
    return 0;
  }
  if (argc == 2 && std::string(argv[1]) == "--list") {
    std::vector<std::string> radius;
    for (std::string const& name : compiled_methods()) {
      if (name.rfind("cubql", 0) == 0) { radius.push_back(name); }
    }
    std::printf("{\"methods\": %s, \"radius_methods\": %s, \"compiled_k\": [1, 2, 4, 8, 16, 32], \"cuda_runtime\": %d}\n",
                json_list(compiled_methods()).c_str(), json_list(radius).c_str(), CUDART_VERSION);
    return 0;
  }
  arguments const a = parse(argc, argv);
  std::vector<std::string> const known = compiled_methods();
  if (std::find(known.begin(), known.end(), a.method) == known.end()) {
    std::fprintf(stderr, "cubql_cukd_driver: method %s is not compiled in (compiled: %s)\n", a.method.c_str(),
                 json_list(known).c_str());
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cubql_cukd_driver: no CUDA device visible\n");
    return 77;
  }
  cudaDeviceProp properties{};
  check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
  if (a.radius_km >= 0) {
#if defined(STREAMKIT_WITH_CUBQL)
    return run_radius(a, properties);
#else
    std::fprintf(stderr, "cubql_cukd_driver: --radius-km needs the cuBQL methods (compiled without them)\n");
    return 2;
#endif
  }

  std::vector<unit_vector> const obs = to_unit_vectors(read_pairs(a.observations));
  std::vector<unit_vector> const refs = to_unit_vectors(read_pairs(a.references));
  if (refs.empty() || refs.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max())) {
    throw std::invalid_argument("references: 1 to 2^31 - 1 points");
  }
  problem p(obs, refs, a.k, compiled_k_for(a.k));
  std::unique_ptr<method> const search = make_method(a.method, a.leaf_threshold);
  search->prepare(p);

  cudaEvent_t start, built, done;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&built), "cudaEventCreate");
  check(cudaEventCreate(&done), "cudaEventCreate");
  std::vector<double> build_ms, query_ms, total_ms;
  for (int step = 0; step < a.warmups + a.repeat; ++step) {
    search->release();
    check(cudaDeviceSynchronize(), "before a step");
    check(cudaEventRecord(start, 0), "cudaEventRecord");
    search->build(p);
    check(cudaEventRecord(built, 0), "cudaEventRecord");
    search->query(p);
    check(cudaEventRecord(done, 0), "cudaEventRecord");
    check(cudaEventSynchronize(done), "a step");
    check(cudaGetLastError(), "a step's kernels");
    if (step < a.warmups) { continue; }
    float build = 0.0f, query = 0.0f, total = 0.0f;
    check(cudaEventElapsedTime(&build, start, built), "cudaEventElapsedTime");
    check(cudaEventElapsedTime(&query, built, done), "cudaEventElapsedTime");
    check(cudaEventElapsedTime(&total, start, done), "cudaEventElapsedTime");
    build_ms.push_back(build);
    query_ms.push_back(query);
    total_ms.push_back(total);
  }
  if (!a.indices.empty()) { write_device(a.indices, p.indices.data, p.n * p.k); }
  if (!a.distances.empty()) {
    device_array<float> chords(p.n * p.k);
    chord_lengths<<<blocks_for(p.n * p.k), threads_per_block>>>(p.observations.data, p.references.data, p.indices.data,
                                                                p.n, static_cast<int>(p.k), chords.data);
    check(cudaGetLastError(), "chord_lengths");
    write_device(a.distances, chords.data, p.n * p.k);
  }
  search->release();
  std::printf("{\"method\": \"%s\", \"n\": %zu, \"m\": %zu, \"k\": %zu, \"k_compiled\": %zu, \"build_ms\": %.5f, "
              "\"query_ms\": %.5f, \"total_ms\": %.5f, \"build_runs_ms\": %s, \"query_runs_ms\": %s, \"total_runs_ms\": %s, "
              "\"repeat\": %d, \"warmups\": %d, \"threads_per_block\": %d, \"leaf_threshold\": %d, "
              "\"description\": \"%s\", \"gpu\": \"%s\", \"cuda_runtime\": %d}\n",
              a.method.c_str(), p.n, p.m, p.k, p.k_compiled, median(build_ms), median(query_ms), median(total_ms),
              json_list(build_ms).c_str(), json_list(query_ms).c_str(), json_list(total_ms).c_str(), a.repeat, a.warmups,
              threads_per_block, a.leaf_threshold, search->description().c_str(), properties.name, CUDART_VERSION);
  cudaEventDestroy(start);
  cudaEventDestroy(built);
  cudaEventDestroy(done);
  return 0;
}

}  // namespace

int main(int argc, char** argv)
{
  try {
    return run(argc, argv);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "cubql_cukd_driver: %s\n", e.what());
    return 1;
  }
}
