// Column min-max scaling: device-resident (GPU event time) and host to host (wall time), bytes/s.
//   bench_minmax --benchmark_format=json > minmax.json
#include "gpu_timing.hpp"

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/memory/pinned_buffer.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <random>
#include <vector>

namespace {

constexpr std::size_t batch = 18;
constexpr std::size_t rows = 60;
constexpr std::size_t cols = 98450;

template <class T>
void random_fill(T* data, std::size_t count, std::uint64_t seed)
{
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  for (std::size_t i = 0; i < count; ++i) { data[i] = static_cast<T>(u(rng)); }
}

/// All 18 arrays device-resident, one stream each, timed from the first launch to the last completion.
void device_resident_18x60x98450(benchmark::State& state)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  streamkit::stream const main(0);
  std::vector<streamkit::stream> streams;
  std::vector<streamkit::device_buffer<double>> data;
  std::vector<double> host(rows * cols);
  for (std::size_t k = 0; k < batch; ++k) {
    streams.emplace_back(0);
    random_fill(host.data(), host.size(), k);
    data.emplace_back(host.size(), main);
    data.back().copy_from_host_async(cuda::std::span<double const>(host.data(), host.size()), main);
  }
  std::vector<streamkit::device_buffer<double>> out;
  for (std::size_t k = 0; k < batch; ++k) { out.emplace_back(rows * cols, main); }
  std::vector<streamkit::event> done;
  for (std::size_t k = 0; k < batch; ++k) { done.emplace_back(0); }
  streamkit::event start(0);
  streamkit_bench::time_on_stream(state, main, [&](streamkit::stream_ref s) {
    start.record(s);
    for (std::size_t k = 0; k < batch; ++k) {
      streams[k].wait(start);
      streamkit::minmax_normalize_async<double>(streamkit::matrix_ref<double const>::dense(data[k].data(), rows, cols),
                                                streamkit::matrix_ref<double>::dense(out[k].data(), rows, cols), {}, streams[k]);
      done[k].record(streams[k]);
      s.wait(done[k]);
    }
  });
  state.counters["bytes_per_s"] = benchmark::Counter(static_cast<double>(2 * batch * rows * cols * sizeof(double)),
                                                     benchmark::Counter::kIsIterationInvariantRate);
}

/// One large array, device-resident: the tall and the column-major cases. Bytes counted: what must
/// move for fit + transform of data larger than L2 (read twice, written once), or read once and
/// written once when the columns are short enough to fuse (one kernel, see minmax_normalize).
template <class T>
void device_resident_single(benchmark::State& state, std::size_t r, std::size_t c, streamkit::layout order)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  streamkit::stream const s(0);
  std::vector<T> host(r * c);
  random_fill(host.data(), host.size(), 7);
  streamkit::device_buffer<T> in(host.size(), s);
  in.copy_from_host_async(cuda::std::span<T const>(host.data(), host.size()), s);
  streamkit::device_buffer<T> out(host.size(), s);
  auto const in_ref = streamkit::matrix_ref<T const>::dense(in.data(), r, c, order);
  auto const out_ref = streamkit::matrix_ref<T>::dense(out.data(), r, c, order);
  streamkit_bench::time_on_stream(state, s, [&](streamkit::stream_ref stream) {
    streamkit::minmax_normalize_async<T>(in_ref, out_ref, {}, stream);
  });
  bool const fused = streamkit::detail::plan_normalize(in_ref, streamkit::detail::clusters_available<T>).path !=
                     streamkit::detail::minmax_path::two_pass;
  double const passes = fused ? 2.0 : 3.0;
  state.counters["bytes_per_s"] =
    benchmark::Counter(passes * static_cast<double>(r * c * sizeof(T)), benchmark::Counter::kIsIterationInvariantRate);
}

void tall_2p24x16_float_row_major(benchmark::State& state)
{
  device_resident_single<float>(state, std::size_t{1} << 24, 16, streamkit::layout::row_major);
}
void column_major_98450x60_double(benchmark::State& state)
{
  device_resident_single<double>(state, cols, rows, streamkit::layout::column_major);
}
void column_major_4000x1500_double(benchmark::State& state)
{
  device_resident_single<double>(state, 4000, 1500, streamkit::layout::column_major);
}
void column_major_200x500000_float(benchmark::State& state)
{
  device_resident_single<float>(state, 200, 500000, streamkit::layout::column_major);
}

/// The reference the device-resident cases are held to: a device-to-device cudaMemcpyAsync of
/// `bytes`, timed the same way (one call between two events); bytes/s counts the read and the write.
void device_copy(benchmark::State& state, std::size_t bytes)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  streamkit::stream const s(0);
  streamkit::device_buffer<std::byte> from(bytes, s);
  streamkit::device_buffer<std::byte> to(bytes, s);
  STREAMKIT_CUDA_TRY(cudaMemsetAsync(from.data(), 1, bytes, s.value()));
  streamkit_bench::time_on_stream(state, s, [&](streamkit::stream_ref stream) {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(to.data(), from.data(), bytes, cudaMemcpyDeviceToDevice, stream.value()));
  });
  state.counters["bytes_per_s"] = benchmark::Counter(2.0 * static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}
/// As many bytes as the 98450 x 60 double case holds (47 MB, about the size of the H100's 50 MB L2).
void device_copy_98450x60_double(benchmark::State& state) { device_copy(state, cols * rows * sizeof(double)); }
void device_copy_1GiB(benchmark::State& state) { device_copy(state, std::size_t{1} << 30); }

/// Host to host: 18 arrays from host memory (pinned, or std::vector) and back over the first
/// `gpus` devices with `streams` streams each, in chunks of `chunk_mib` MiB (0: the default), wall time.
void host_to_host(benchmark::State& state, bool pinned, streamkit::pageable_transfer mode, int gpus, int streams,
                  std::size_t chunk_mib = 0)
{
  if (!streamkit_bench::require_gpu(state)) { return; }
  if (gpus > streamkit::device_count()) {
    state.SkipWithError("not enough GPUs");
    for (auto _ : state) {}
    return;
  }
  std::size_t const count = rows * cols;
  std::vector<std::vector<double>> pageable_in(pinned ? 0 : batch), pageable_out(pinned ? 0 : batch);
  std::vector<streamkit::pinned_buffer<double>> pinned_in, pinned_out;
  std::vector<streamkit::matrix_ref<double const>> inputs;
  std::vector<streamkit::matrix_ref<double>> outputs;
  for (std::size_t k = 0; k < batch; ++k) {
    double* in = nullptr;
    double* out = nullptr;
    if (pinned) {
      pinned_in.emplace_back(count);
      pinned_out.emplace_back(count);
      in = pinned_in.back().data();
      out = pinned_out.back().data();
    } else {
      pageable_in[k].resize(count);
      pageable_out[k].resize(count);
      in = pageable_in[k].data();
      out = pageable_out[k].data();
    }
    random_fill(in, count, k);
    inputs.push_back(streamkit::matrix_ref<double const>::dense(in, rows, cols));
    outputs.push_back(streamkit::matrix_ref<double>::dense(out, rows, cols));
  }
  std::vector<int> devices(static_cast<std::size_t>(gpus));
  for (int g = 0; g < gpus; ++g) { devices[static_cast<std::size_t>(g)] = g; }
  streamkit::dispatcher workers({devices, streams});
  std::size_t const chunk_bytes = chunk_mib << 20;
  streamkit::dispatch_minmax_normalize(workers, inputs, outputs, {}, mode, chunk_bytes);  // warm-up: buffers are allocated here
  for (auto _ : state) {
    auto const begin = std::chrono::steady_clock::now();
    streamkit::dispatch_minmax_normalize(workers, inputs, outputs, {}, mode, chunk_bytes);
    state.SetIterationTime(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
  }
  state.counters["bytes_per_s"] = benchmark::Counter(static_cast<double>(2 * batch * count * sizeof(double)),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["gpus"] = gpus;
}

using streamkit::pageable_transfer;
/// Arguments: streams per device, on device 0; chunk size in MiB (0: the default; 64: one chunk per array).
void host_pinned(benchmark::State& state)
{
  host_to_host(state, true, pageable_transfer::stage, 1, static_cast<int>(state.range(0)), static_cast<std::size_t>(state.range(1)));
}
void host_pageable_staged(benchmark::State& state)
{
  host_to_host(state, false, pageable_transfer::stage, 1, static_cast<int>(state.range(0)), static_cast<std::size_t>(state.range(1)));
}
/// Argument: streams per device, on device 0.
void host_pageable_registered(benchmark::State& state)
{
  host_to_host(state, false, pageable_transfer::register_in_place, 1, static_cast<int>(state.range(0)));
}
/// Argument: GPUs, 3 streams each; pinned memory.
void host_pinned_gpus(benchmark::State& state) { host_to_host(state, true, pageable_transfer::stage, static_cast<int>(state.range(0)), 3); }

}  // namespace

#define STREAMKIT_DEVICE_BENCH(name) \
  BENCHMARK(name)->UseManualTime()->Unit(benchmark::kMillisecond)->Repetitions(5)->ReportAggregatesOnly(true)
STREAMKIT_DEVICE_BENCH(device_resident_18x60x98450);
STREAMKIT_DEVICE_BENCH(tall_2p24x16_float_row_major);
STREAMKIT_DEVICE_BENCH(column_major_98450x60_double);
STREAMKIT_DEVICE_BENCH(column_major_4000x1500_double);
STREAMKIT_DEVICE_BENCH(column_major_200x500000_float);
STREAMKIT_DEVICE_BENCH(device_copy_98450x60_double);
STREAMKIT_DEVICE_BENCH(device_copy_1GiB);
STREAMKIT_DEVICE_BENCH(host_pinned)->ArgsProduct({{3, 4}, {0, 4, 64}});
STREAMKIT_DEVICE_BENCH(host_pageable_staged)->ArgsProduct({{16, 32}, {0, 8}})->Args({16, 64});
STREAMKIT_DEVICE_BENCH(host_pinned_gpus)->Arg(1)->Arg(2)->Arg(4);
BENCHMARK(host_pageable_registered)->Arg(16)->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(2)->Repetitions(1);

BENCHMARK_MAIN();
