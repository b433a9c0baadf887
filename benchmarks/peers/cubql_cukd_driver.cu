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

#include <cuda_runtime.h>

#if defined(STREAMKIT_WITH_CUBQL)
#define CUBQL_GPU_BUILDER_IMPLEMENTATION 1
#include <cuBQL/bvh.h>
#include <cuBQL/builder/cuda.h>
#include <cuBQL/builder/cuda/radix.h>
#include <cuBQL/queries/pointData/findClosest.h>
#include <cuBQL/queries/pointData/knn.h>
#endif
#if defined(STREAMKIT_WITH_CUKD)
#include <cukd/builder.h>
#include <cukd/fcp.h>
#include <cukd/knn.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
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
    else { throw std::invalid_argument("unknown option " + key); }
  }
  if (a.method.empty() || a.observations.empty() || a.references.empty()) {
    throw std::invalid_argument("--method, --observations and --references are required (or --list)");
  }
  if (a.k < 1 || a.k > static_cast<std::size_t>(most_k)) { throw std::invalid_argument("--k: 1 to 32"); }
  if (a.repeat < 1 || a.warmups < 0) { throw std::invalid_argument("--repeat at least 1, --warmups at least 0"); }
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
    std::printf("{\"methods\": %s, \"compiled_k\": [1, 2, 4, 8, 16, 32], \"cuda_runtime\": %d}\n",
                json_list(compiled_methods()).c_str(), CUDART_VERSION);
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
