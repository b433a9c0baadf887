// Haversine nearest neighbour: GPU time per search (events), pairs/s; both engines and the front end with k.
//   bench_nearest_neighbor --benchmark_format=json > nn.json
#include "gpu_timing.hpp"

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

/// Uniform random points on the sphere, radians, fixed seed.
void random_points(std::size_t count, std::uint64_t seed, std::vector<float>& lat, std::vector<float>& lon)
{
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  lat.resize(count);
  lon.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    lat[i] = static_cast<float>(std::asin(2.0 * u(rng) - 1.0));
    lon[i] = static_cast<float>(streamkit::pi * (2.0 * u(rng) - 1.0));
  }
}

streamkit::device_buffer<float> upload(std::vector<float> const& host, streamkit::stream const& s)
{
  streamkit::device_buffer<float> buffer(host.size(), s);
  buffer.copy_from_host_async(cuda::std::span<float const>(host.data(), host.size()), s);
  return buffer;
}

/// n uniform observations and m uniform references on the device, and an n × k result table.
struct uniform_problem {
  uniform_problem(std::size_t n, std::size_t m, std::size_t k, streamkit::stream const& s)
  {
    std::vector<float> lat, lon;
    random_points(n, 1, lat, lon);
    obs_lat = upload(lat, s);
    obs_lon = upload(lon, s);
    random_points(m, 2, lat, lon);
    ref_lat = upload(lat, s);
    ref_lon = upload(lon, s);
    index = streamkit::device_buffer<std::int32_t>(n * k, s);
    distance = streamkit::device_buffer<float>(n * k, s);
    observations = streamkit::points_ref<float>::separate(obs_lat.data(), obs_lon.data(), n);
    references = streamkit::points_ref<float>::separate(ref_lat.data(), ref_lon.data(), m);
    result = streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), n, k);
  }
  streamkit::device_buffer<float> obs_lat, obs_lon, ref_lat, ref_lon;
  streamkit::device_buffer<std::int32_t> index;
  streamkit::device_buffer<float> distance;
  streamkit::points_ref<float> observations, references;
  streamkit::neighbors_ref<std::int32_t, float> result;
};

void nearest(benchmark::State& state, streamkit::nn_precision precision, bool include_prepare)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const m = static_cast<std::size_t>(state.range(1));
  streamkit::stream const s(0);
  uniform_problem const p(n, m, 1, s);
  streamkit::nearest_options options;
  options.precision = precision;
  options.on_invalid = streamkit::invalid_points::mark;  // no validation sync inside the timed region
  streamkit::brute_force_index<float> prepared(p.references, options, s);
  streamkit_bench::time_on_stream(state, s, [&](streamkit::stream_ref stream) {
    if (include_prepare) { prepared.update(p.references, stream); }
    prepared.query_async(p.observations, p.result, stream);
  });
  state.counters["pairs_per_s"] =
    benchmark::Counter(static_cast<double>(n) * static_cast<double>(m), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["N"] = static_cast<double>(n);
  state.counters["M"] = static_cast<double>(m);
}

/// The k nearest with an engine (build + query per step, as each time step of a moving set):
/// state.range(2) = k; uniform points.
template <class Engine>
void knn(benchmark::State& state)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  auto const n = static_cast<std::size_t>(state.range(0));
  auto const m = static_cast<std::size_t>(state.range(1));
  auto const k = static_cast<std::size_t>(state.range(2));
  streamkit::stream const s(0);
  uniform_problem const p(n, m, k, s);
  streamkit::nearest_options options;
  options.on_invalid = streamkit::invalid_points::mark;
  Engine engine(p.references, options, s);
  streamkit_bench::time_on_stream(state, s, [&](streamkit::stream_ref stream) {
    engine.update(p.references, stream);
    engine.query_async(p.observations, p.result, stream);
  });
  state.counters["N"] = static_cast<double>(n);
  state.counters["M"] = static_cast<double>(m);
  state.counters["k"] = static_cast<double>(k);
}

void knn_shapes(benchmark::internal::Benchmark* b)
{
  b->Args({1 << 16, 1 << 13, 1})->Args({1 << 24, 1 << 14, 1})->Args({1 << 20, 1 << 20, 16})->Args({1 << 20, 1 << 16, 4});
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
}

void fast(benchmark::State& state) { nearest(state, streamkit::nn_precision::fast, false); }
void fast_with_update(benchmark::State& state) { nearest(state, streamkit::nn_precision::fast, true); }
void exact(benchmark::State& state) { nearest(state, streamkit::nn_precision::exact, false); }

void shapes(benchmark::internal::Benchmark* b)
{
  b->Args({1 << 16, 1 << 13})->Args({1 << 24, 1 << 14})->Args({1 << 10, 1 << 22})->Args({1 << 20, 1 << 16});
  b->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
}

}  // namespace

BENCHMARK(fast)->Apply(shapes);
BENCHMARK(fast_with_update)->Args({1 << 16, 1 << 13})->Args({1 << 24, 1 << 14})->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(exact)->Args({1 << 16, 1 << 13})->Args({1 << 24, 1 << 14})->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(3)->ReportAggregatesOnly(true);

BENCHMARK(knn<streamkit::tree_index<float>>)->Name("tree")->Apply(knn_shapes);
BENCHMARK(knn<streamkit::nearest_index<float>>)->Name("front_end")->Apply(knn_shapes);
BENCHMARK(knn<streamkit::brute_force_index<float>>)->Name("brute_force_k")->Args({1 << 16, 1 << 13, 4})->Args({1 << 16, 1 << 13, 16})->Args({1 << 20, 1 << 16, 4})->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK_MAIN();
