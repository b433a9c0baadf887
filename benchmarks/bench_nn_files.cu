// One nearest-neighbour search on points read from files, timed with CUDA events: the streamkit side
// of benchmarks/peers_nearest.py, which runs the peers on the same files in the same device call.
//
//   bench_nn_files --observations OBS.bin --references REFS.bin --k K
//                  [--engine auto|brute_force|tree] [--precision fast|exact] [--repeat R] [--indices OUT.bin]
//   bench_nn_files --uniform N M --k K ...   (uniform random points instead of files)
//   bench_nn_files --sweep                    (both engines over a grid of uniform shapes, one JSON line each:
//                                              the measurements behind the front end's cost model)
//
// Files: raw little-endian float32 (lat, lon) pairs in degrees. Each timed step is build (update of
// the references) then query, all on one stream; after two warm-up steps, R steps are timed and the
// medians of build, query and the whole step are printed as one JSON object. The last step's indices
// (int32, n rows × k) go to OUT.bin.
#include "timed_step.hpp"

#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

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

double median(std::vector<double> values)
{
  std::sort(values.begin(), values.end());
  std::size_t const half = values.size() / 2;
  return values.size() % 2 == 1 ? values[half] : 0.5 * (values[half - 1] + values[half]);
}

/// `count` uniform random points on the sphere as float32 (lat, lon) degrees, fixed seed.
std::vector<float> uniform_pairs(std::size_t count, std::uint64_t seed)
{
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> values(2 * count);
  for (std::size_t i = 0; i < count; ++i) {
    values[2 * i] = static_cast<float>(std::asin(2.0 * u(rng) - 1.0) * 180.0 / streamkit::pi);
    values[2 * i + 1] = static_cast<float>(360.0 * u(rng) - 180.0);
  }
  return values;
}

struct arguments {
  std::string observations, references, engine = "auto", precision = "fast", indices;
  std::size_t k = 1, uniform_n = 0, uniform_m = 0;
  int repeat = 10;
};

arguments parse(int argc, char** argv)
{
  arguments a;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string const key = argv[i];
    std::string const value = argv[i + 1];
    if (key == "--uniform" && i + 2 < argc) {
      a.uniform_n = std::stoul(value);
      a.uniform_m = std::stoul(argv[i + 2]);
      ++i;
    }
    else if (key == "--observations") { a.observations = value; }
    else if (key == "--references") { a.references = value; }
    else if (key == "--k") { a.k = std::stoul(value); }
    else if (key == "--engine") { a.engine = value; }
    else if (key == "--precision") { a.precision = value; }
    else if (key == "--repeat") { a.repeat = std::stoi(value); }
    else if (key == "--indices") { a.indices = value; }
    else { throw std::invalid_argument("unknown option " + key); }
  }
  if ((a.observations.empty() || a.references.empty()) && a.uniform_m == 0) {
    throw std::invalid_argument("--observations and --references, or --uniform N M, are required");
  }
  if (a.engine != "auto" && a.engine != "brute_force" && a.engine != "tree") { throw std::invalid_argument("--engine: auto, brute_force or tree"); }
  if (a.repeat < 1) { throw std::invalid_argument("--repeat: at least 1"); }
  return a;
}

/// Times `steps` build + query steps of `engine` (update(references, s), query_async(...)).
template <class Engine>
void time_steps(Engine& engine, streamkit::points_ref<float> observations, streamkit::points_ref<float> references,
                streamkit::neighbors_ref<std::int32_t, float> result, streamkit::stream const& s, int repeat,
                std::vector<double>& build_ms, std::vector<double>& query_ms, std::vector<double>& total_ms)
{
  streamkit::timed_event start(s.ref()), built(s.ref()), done(s.ref());
  for (int step = 0; step < repeat + 2; ++step) {
    streamkit_bench::step_ms const ms = streamkit_bench::timed_step(engine, observations, references, result, s, start, built, done);
    if (step < 2) { continue; }  // warm-up
    build_ms.push_back(ms.build);
    query_ms.push_back(ms.query);
    total_ms.push_back(ms.total);
  }
}

/// Median build + query time of `repeat` steps of `Engine` on the first n observations and m references.
template <class Engine>
double step_ms(streamkit::points_ref<float> observations, streamkit::points_ref<float> references,
               streamkit::neighbors_ref<std::int32_t, float> result, streamkit::nearest_options const& options,
               streamkit::stream const& s, int repeat)
{
  Engine engine(references, options, s);
  std::vector<double> build_ms, query_ms, total_ms;
  time_steps(engine, observations, references, result, s, repeat, build_ms, query_ms, total_ms);
  return median(total_ms);
}

/// Both engines over a grid of uniform shapes (prefixes of one set of 2^22 + 2^22 points), k = 1, 4,
/// 16; the brute force only where a step takes well under a second.
int sweep()
{
  constexpr std::size_t most = std::size_t{1} << 22;
  std::vector<float> const obs = uniform_pairs(most, 1), refs = uniform_pairs(most, 2);
  streamkit::stream const s(0);
  streamkit::device_buffer<float> d_obs(obs.size(), s), d_refs(refs.size(), s);
  d_obs.copy_from_host_async(cuda::std::span<float const>(obs.data(), obs.size()), s);
  d_refs.copy_from_host_async(cuda::std::span<float const>(refs.data(), refs.size()), s);
  streamkit::device_buffer<std::int32_t> d_index(most * 16, s);
  streamkit::nearest_options options;
  options.on_invalid = streamkit::invalid_points::mark;
  std::string const gpu = streamkit::device(0).name();
  for (std::size_t k : {1, 4, 16}) {
    for (std::size_t n = 1024; n <= most; n *= 2) {
      for (std::size_t m = 256; m <= most; m *= 2) {
        auto const observations = streamkit::points_ref<float>::interleaved(d_obs.data(), n, streamkit::angle_unit::degrees);
        auto const references = streamkit::points_ref<float>::interleaved(d_refs.data(), m, streamkit::angle_unit::degrees);
        auto const result = streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), nullptr, n, k);
        double const pairs = static_cast<double>(n) * static_cast<double>(m);
        double const brute = pairs <= (k == 1 ? 0x1p40 : 0x1p36)
                               ? step_ms<streamkit::brute_force_index<float>>(observations, references, result, options, s, 3)
                               : -1.0;
        double const tree = step_ms<streamkit::tree_index<float>>(observations, references, result, options, s, 3);
        bool const picks_tree = streamkit::detail::choose_engine(n, m, k, options.precision) == streamkit::search_engine::tree;
        std::printf("{\"n\": %zu, \"m\": %zu, \"k\": %zu, \"brute_force_ms\": %.5f, \"tree_ms\": %.5f, \"picks\": \"%s\", "
                    "\"gpu\": \"%s\"}\n",
                    n, m, k, brute, tree, picks_tree ? "tree" : "brute_force", gpu.c_str());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int run(int argc, char** argv)
{
  if (argc == 2 && std::string(argv[1]) == "--sweep") { return sweep(); }
  arguments const a = parse(argc, argv);
  std::vector<float> const obs = a.uniform_m > 0 ? uniform_pairs(a.uniform_n, 1) : read_pairs(a.observations);
  std::vector<float> const refs = a.uniform_m > 0 ? uniform_pairs(a.uniform_m, 2) : read_pairs(a.references);
  std::size_t const n = obs.size() / 2, m = refs.size() / 2;
  streamkit::stream const s(0);
  streamkit::device_buffer<float> d_obs(obs.size(), s), d_refs(refs.size(), s);
  d_obs.copy_from_host_async(cuda::std::span<float const>(obs.data(), obs.size()), s);
  d_refs.copy_from_host_async(cuda::std::span<float const>(refs.data(), refs.size()), s);
  streamkit::device_buffer<std::int32_t> d_index(n * a.k, s);
  streamkit::device_buffer<float> d_distance(n * a.k, s);
  auto const observations = streamkit::points_ref<float>::interleaved(d_obs.data(), n, streamkit::angle_unit::degrees);
  auto const references = streamkit::points_ref<float>::interleaved(d_refs.data(), m, streamkit::angle_unit::degrees);
  auto const result = streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), d_distance.data(), n, a.k);
  streamkit::nearest_options options;
  options.precision = a.precision == "exact" ? streamkit::nn_precision::exact : streamkit::nn_precision::fast;
  options.on_invalid = streamkit::invalid_points::mark;  // no validation wait inside the timed step

  std::vector<double> build_ms, query_ms, total_ms;
  std::string engine_used = a.engine;
  double bytes_per_reference = 0.0;
  double const brute_bytes = static_cast<double>(streamkit::detail::reference_layout(m).bytes) / static_cast<double>(m);
  if (a.engine == "tree") {
    streamkit::tree_index<float> engine(references, options, s);
    time_steps(engine, observations, references, result, s, a.repeat, build_ms, query_ms, total_ms);
    bytes_per_reference = static_cast<double>(engine.memory_bytes()) / static_cast<double>(m);
  } else if (a.engine == "brute_force") {
    streamkit::brute_force_index<float> engine(references, options, s);
    time_steps(engine, observations, references, result, s, a.repeat, build_ms, query_ms, total_ms);
    bytes_per_reference = brute_bytes;
  } else {
    streamkit::nearest_index<float> engine(references, options, s);
    bool const tree = engine.engine_for(n, a.k) == streamkit::search_engine::tree;
    engine_used = tree ? "tree" : "brute_force";
    // The front end builds its tree inside the query: its "build" is the brute-force preparation.
    time_steps(engine, observations, references, result, s, a.repeat, build_ms, query_ms, total_ms);
    bytes_per_reference = brute_bytes;
    if (tree) {
      streamkit::tree_index<float> const probe(references, options, s);
      bytes_per_reference += static_cast<double>(probe.memory_bytes()) / static_cast<double>(m);
    }
  }
  if (!a.indices.empty()) {
    std::vector<std::int32_t> host(n * a.k);
    d_index.copy_to_host_async(cuda::std::span<std::int32_t>(host.data(), host.size()), s);
    s.sync();
    std::ofstream out(a.indices, std::ios::binary);
    out.write(reinterpret_cast<char const*>(host.data()), static_cast<std::streamsize>(host.size() * sizeof(std::int32_t)));
  }
  std::printf("{\"engine\": \"%s\", \"n\": %zu, \"m\": %zu, \"k\": %zu, \"build_ms\": %.5f, \"query_ms\": %.5f, "
              "\"total_ms\": %.5f, \"bytes_per_reference\": %.2f, \"repeat\": %d, \"gpu\": \"%s\"}\n",
              engine_used.c_str(), n, m, a.k, median(build_ms), median(query_ms), median(total_ms), bytes_per_reference,
              a.repeat, streamkit::device(0).name().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv)
{
  try {
    return run(argc, argv);
  } catch (std::exception const& e) {
    std::fprintf(stderr, "bench_nn_files: %s\n", e.what());
    return 1;
  }
}
