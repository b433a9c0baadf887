// The dispatcher: copy/compute overlap on one GPU, and nearest-neighbour scaling over GPUs.
//   bench_dispatcher --benchmark_format=json
#include "gpu_timing.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>

#include <benchmark/benchmark.h>
#include <cub/device/device_reduce.cuh>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <vector>

namespace {

__global__ void divide_by(float* data, std::size_t count, float const* sum)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    data[i] /= *sum;
  }
}

template <class Run>
void wall_time(benchmark::State& state, Run&& run)
{
  run();  // warm-up
  for (auto _ : state) {
    auto const begin = std::chrono::steady_clock::now();
    run();
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
}

/// 10 pinned host arrays of 10M floats, each normalised by its sum (copy in, reduce, divide, copy
/// out), one array per chunk over the streams of device 0.
void sum_normalize_10x10M(benchmark::State& state)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  constexpr std::size_t arrays = 10, count = 10000000;
  std::vector<streamkit::pinned_buffer<float>> host;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  for (std::size_t k = 0; k < arrays; ++k) {
    host.emplace_back(count);
    for (auto& x : host.back()) { x = u(rng); }
  }
  streamkit::dispatcher d({{0}, static_cast<int>(state.range(0))});
  std::size_t scratch_bytes = 0;
  STREAMKIT_CUDA_TRY(cub::DeviceReduce::Sum(nullptr, scratch_bytes, static_cast<float*>(nullptr), static_cast<float*>(nullptr), count));
  wall_time(state, [&] {
    d.run(arrays, 1, [&](streamkit::chunk_context& c) {
      float* data = c.workspace.device<float>(count, 0);
      float* sum = c.workspace.device<float>(1, 1);
      std::byte* scratch = c.workspace.device<std::byte>(scratch_bytes, 2);
      float* h = host[c.items.begin].data();
      c.copy_in([&] { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(data, h, count * sizeof(float), cudaMemcpyHostToDevice, c.stream.value())); });
      std::size_t bytes = scratch_bytes;
      STREAMKIT_CUDA_TRY(cub::DeviceReduce::Sum(scratch, bytes, data, sum, count, c.stream.value()));
      divide_by<<<528, 256, 0, c.stream.value()>>>(data, count, sum);
      STREAMKIT_CHECK_LAUNCH();
      c.copy_out([&] { STREAMKIT_CUDA_TRY(cudaMemcpyAsync(h, data, count * sizeof(float), cudaMemcpyDeviceToHost, c.stream.value())); });
    });
  });
  state.counters["bytes_per_s"] =
    benchmark::Counter(2.0 * arrays * count * sizeof(float), benchmark::Counter::kIsIterationInvariantRate);
}

/// The bus ceiling the pipelines above are held to: 400 MB of pinned memory copied to device 0 as
/// 10 copies of 40 MB (range(0) = 1), and at the same time 400 MB copied back on a second stream
/// (range(0) = 2: both directions at once).
void pcie_ceiling(benchmark::State& state)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  bool const both = state.range(0) == 2;
  constexpr std::size_t pieces = 10, count = 10000000;
  streamkit::stream up(0), down(0);
  streamkit::pinned_buffer<float> host_in(pieces * count), host_out(pieces * count);
  std::fill(host_in.begin(), host_in.end(), 1.0F);
  streamkit::device_buffer<float> device_in(pieces * count, up), device_out(pieces * count, up);
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(device_out.data(), 0, pieces * count * sizeof(float), up.value()));
  up.sync();
  wall_time(state, [&] {
    for (std::size_t k = 0; k < pieces; ++k) {
      STREAMKIT_CUDA_TRY(cudaMemcpyAsync(device_in.data() + k * count, host_in.data() + k * count, count * sizeof(float),
                                         cudaMemcpyHostToDevice, up.value()));
      if (both) {
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host_out.data() + k * count, device_out.data() + k * count, count * sizeof(float),
                                           cudaMemcpyDeviceToHost, down.value()));
      }
    }
    up.sync();
    down.sync();
  });
  state.counters["bytes_per_s_each_way"] =
    benchmark::Counter(static_cast<double>(pieces * count * sizeof(float)), benchmark::Counter::kIsIterationInvariantRate);
}

/// 2^26 observations x 2^16 references, host in / host out, on the first `range(0)` GPUs.
void nearest_on_gpus(benchmark::State& state)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  int const gpus = static_cast<int>(state.range(0));
  if (gpus > streamkit::device_count()) {
    state.SkipWithError("not enough GPUs");
    for (auto _ : state) {}
    return;
  }
  std::size_t const n = std::size_t{1} << 26, m = std::size_t{1} << 16;
  static std::vector<float> obs_lat, obs_lon, ref_lat, ref_lon;
  if (obs_lat.empty()) {
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    auto fill = [&](std::vector<float>& lat, std::vector<float>& lon, std::size_t count) {
      lat.resize(count);
      lon.resize(count);
      for (std::size_t i = 0; i < count; ++i) {
        lat[i] = static_cast<float>(std::asin(2.0 * u(rng) - 1.0));
        lon[i] = static_cast<float>(streamkit::pi * (2.0 * u(rng) - 1.0));
      }
    };
    fill(obs_lat, obs_lon, n);
    fill(ref_lat, ref_lon, m);
  }
  std::vector<int> devices(static_cast<std::size_t>(gpus));
  for (int g = 0; g < gpus; ++g) { devices[static_cast<std::size_t>(g)] = g; }
  streamkit::dispatcher d({devices, 2});
  std::vector<std::int32_t> index(n);
  std::vector<float> distance(n);
  streamkit::nearest_options options;
  options.on_invalid = streamkit::invalid_points::mark;
  // One time step: the moved references are prepared on every GPU, then the observations searched.
  auto const references = streamkit::points_ref<float>::separate(ref_lat.data(), ref_lon.data(), m);
  streamkit::multi_gpu_nearest_neighbor<float> search(d, references, options);
  wall_time(state, [&] {
    search.update(references);
    search.query(streamkit::points_ref<float>::separate(obs_lat.data(), obs_lon.data(), n),
                 streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), n));
  });
  state.counters["pairs_per_s"] = benchmark::Counter(static_cast<double>(n) * m, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gpus"] = gpus;
}

}  // namespace

BENCHMARK(sum_normalize_10x10M)->Arg(1)->Arg(2)->Arg(3)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(pcie_ceiling)->Arg(1)->Arg(2)->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(nearest_on_gpus)->Arg(1)->Arg(2)->Arg(4)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(3)->Repetitions(1);

BENCHMARK_MAIN();
