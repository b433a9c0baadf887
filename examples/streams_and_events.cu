// Streams and events: a batch of arrays, each normalised by its sum, first all on one stream, then
// one stream per array; both timed with events (scoped_timer) and checked against the CPU.
#include "common/example_support.hpp"

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/core/timer.hpp>

#include <cub/device/device_reduce.cuh>

#include <cstdio>
#include <random>
#include <vector>

namespace {

__global__ void divide_by(float* data, std::size_t count, float const* sum)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    data[i] /= *sum;
  }
}

/// Reduce then divide, both on `stream`; `scratch` is CUB's temporary storage.
void normalise(streamkit::device_buffer<float>& data, float* sum, streamkit::device_buffer<std::byte>& scratch, streamkit::stream_ref stream)
{
  std::size_t bytes = scratch.size();
  STREAMKIT_CUDA_TRY(cub::DeviceReduce::Sum(scratch.data(), bytes, data.data(), sum, data.size(), stream.value()));
  divide_by<<<264, 256, 0, stream.value()>>>(data.data(), data.size(), sum);
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace

int main()
{
  streamkit_examples::require_gpu("streams_and_events");
  constexpr std::size_t arrays = 10;
  constexpr std::size_t count = std::size_t{1} << 22;
  std::vector<streamkit::stream> streams;
  for (std::size_t k = 0; k < arrays; ++k) { streams.emplace_back(0); }
  streamkit::stream const& first = streams.front();

  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  std::vector<std::vector<float>> host(arrays, std::vector<float>(count));
  std::vector<streamkit::device_buffer<float>> data;
  streamkit::device_buffer<float> sums(arrays, first);
  std::size_t scratch_bytes = 0;
  STREAMKIT_CUDA_TRY(cub::DeviceReduce::Sum(nullptr, scratch_bytes, static_cast<float*>(nullptr), sums.data(), count, first.value()));
  std::vector<streamkit::device_buffer<std::byte>> scratch;
  for (std::size_t k = 0; k < arrays; ++k) {
    for (auto& x : host[k]) { x = u(rng); }
    data.emplace_back(count, first);
    scratch.emplace_back(scratch_bytes, first);
  }
  auto const upload = [&] {
    for (std::size_t k = 0; k < arrays; ++k) { data[k].copy_from_host_async(cuda::std::span<float const>(host[k].data(), count), first); }
    first.sync();
  };

  upload();
  for (std::size_t k = 0; k < arrays; ++k) { normalise(data[k], sums.data() + k, scratch[k], first); }  // warm-up
  upload();
  streamkit::gpu_duration one_stream{};
  {
    streamkit::scoped_timer timer(first, one_stream);
    for (std::size_t k = 0; k < arrays; ++k) { normalise(data[k], sums.data() + k, scratch[k], first); }
  }
  upload();
  streamkit::gpu_duration many_streams{};
  {
    streamkit::scoped_timer timer(first, many_streams);
    streamkit::event start(first.ref());
    start.record(first);
    std::vector<streamkit::event> done;
    for (std::size_t k = 0; k < arrays; ++k) {
      streams[k].wait(start);
      normalise(data[k], sums.data() + k, scratch[k], streams[k]);
      done.emplace_back(streams[k].ref());
      done.back().record(streams[k]);
      first.wait(done.back());
    }
  }
  // Check: every normalised array sums to 1.
  double worst = 0.0;
  for (std::size_t k = 0; k < arrays; ++k) {
    std::vector<float> back(count);
    data[k].copy_to_host_async(cuda::std::span<float>(back.data(), count), first);
    first.sync();
    double total = 0.0;
    for (float x : back) { total += x; }
    worst = std::max(worst, std::abs(total - 1.0));
  }
  std::printf("%zu arrays of %zu floats, normalised by their sum on %s\n", arrays, count, streamkit::device(0).name().c_str());
  std::printf("one stream:        %.3f ms\n", one_stream.count());
  std::printf("a stream per array: %.3f ms (speed-up %.2fx)\n", many_streams.count(), one_stream.count() / many_streams.count());
  std::printf("largest |sum - 1| after normalising: %.2e\n", worst);
  return worst < 1e-3 ? 0 : 1;
}
