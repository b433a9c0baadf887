// Overlap copy and compute: a stream of batches goes host → device → kernel → host. Serially, the
// copy engines and the SMs take turns. Here the next batch is copied in while the current one
// computes and the previous one is copied out, with two buffer slots. A stream runs its work in
// order, so each of the three activities gets its own stream (with two, one stream would carry two
// of them and serialise them); events order the streams: copied in → compute → copied out, and a
// slot is rewritten only after its last reader is done. With several GPUs, the batches are dealt
// round-robin to one such pipeline per device. Prints both times, the speed-up, and checks a sample
// of every batch bit for bit against the CPU.
#include "common/example_support.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/core/stream.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

constexpr int iterations = 2500;  // about as long as copying the batch in, on an H100

/// Enough arithmetic per element that computing a batch takes about as long as copying it.
__global__ void relax(float const* in, float* out, std::size_t count)
{
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    float x = in[i];
    for (int k = 0; k < iterations; ++k) { x = __fmaf_rn(x, 0.999F, 0.001F); }
    out[i] = x;
  }
}

float relax_on_cpu(float x)
{
  for (int k = 0; k < iterations; ++k) { x = std::fma(x, 0.999F, 0.001F); }
  return x;
}

/// One device's pipeline: copy-in, compute and copy-out streams, two buffer slots.
struct device_pipeline {
  device_pipeline(int device_id, std::size_t count) : device(device_id), copies_in(device_id), compute(device_id), copies_out(device_id)
  {
    for (int k = 0; k < 2; ++k) {
      in.emplace_back(count, compute);
      out.emplace_back(count, compute);
      copied_in.emplace_back(device_id);
      computed.emplace_back(device_id);
      copied_out.emplace_back(device_id);
    }
    compute.sync();  // the slots exist before the other streams use them
  }
  int device;
  streamkit::stream copies_in, compute, copies_out;
  std::vector<streamkit::device_buffer<float>> in, out;
  std::vector<streamkit::event> copied_in, computed, copied_out;
};

void launch_relax(float const* in, float* out, std::size_t count, streamkit::stream_ref stream)
{
  relax<<<static_cast<unsigned>(std::min<std::size_t>((count + 255) / 256, 4096)), 256, 0, stream.value()>>>(in, out, count);
  STREAMKIT_CHECK_LAUNCH();
}

}  // namespace

int main()
{
  int const gpus = streamkit_examples::require_gpu("overlap_copy_compute");
  constexpr std::size_t batches = 24, count = std::size_t{1} << 23;  // 32 MiB per batch and direction
  std::vector<streamkit::pinned_buffer<float>> host_in, host_out;
  for (std::size_t b = 0; b < batches; ++b) {
    host_in.emplace_back(count);
    host_out.emplace_back(count);
    for (std::size_t i = 0; i < count; ++i) { host_in[b][i] = static_cast<float>((b * count + i) % 1000) * 0.001F; }
  }

  // Serial: one stream on device 0, copy in, compute, copy out, batch after batch.
  auto const serial = [&] {
    streamkit::stream s(0);
    streamkit::device_buffer<float> in(count, s), out(count, s);
    for (std::size_t b = 0; b < batches; ++b) {
      in.copy_from_host_async(host_in[b].span(), s);
      launch_relax(in.data(), out.data(), count, s);
      out.copy_to_host_async(host_out[b].span(), s);
    }
    s.sync();
  };

  // Overlapped: per device, copies in, kernels and copies out each on their own stream.
  std::vector<std::unique_ptr<device_pipeline>> pipelines;
  for (int d = 0; d < gpus; ++d) { pipelines.push_back(std::make_unique<device_pipeline>(d, count)); }
  auto const overlapped = [&] {
    for (std::size_t b = 0; b < batches; ++b) {
      device_pipeline& p = *pipelines[b % pipelines.size()];
      std::size_t const slot = (b / pipelines.size()) % 2;
      streamkit::device_guard guard(p.device);
      if (p.computed[slot].recorded()) { p.copies_in.wait(p.computed[slot]); }  // the kernel that read in[slot] is done
      p.in[slot].copy_from_host_async(host_in[b].span(), p.copies_in);
      p.copied_in[slot].record(p.copies_in);

      p.compute.wait(p.copied_in[slot]);
      if (p.copied_out[slot].recorded()) { p.compute.wait(p.copied_out[slot]); }  // out[slot] was copied back
      launch_relax(p.in[slot].data(), p.out[slot].data(), count, p.compute);
      p.computed[slot].record(p.compute);

      p.copies_out.wait(p.computed[slot]);
      p.out[slot].copy_to_host_async(host_out[b].span(), p.copies_out);
      p.copied_out[slot].record(p.copies_out);
    }
    for (auto& p : pipelines) { p->copies_out.sync(); }
  };

  auto const time_ms = [](auto&& work) {
    work();  // warm-up
    auto const begin = std::chrono::steady_clock::now();
    work();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
  };
  auto const check = [&] {
    std::size_t wrong = 0;
    for (std::size_t b = 0; b < batches; ++b) {
      for (std::size_t i = b; i < count; i += 997) { wrong += host_out[b][i] != relax_on_cpu(host_in[b][i]) ? 1 : 0; }
      for (auto& x : host_out[b]) { x = -1.0F; }  // poison for the next run
    }
    return wrong;
  };
  double const serial_ms = time_ms(serial);
  std::size_t const serial_wrong = check();
  double const overlapped_ms = time_ms(overlapped);
  std::size_t const overlapped_wrong = check();

  double const gb = 2.0 * batches * count * sizeof(float) / 1e9;
  std::printf("%zu batches of %zu floats host -> device -> kernel -> host (%.2f GB moved)\n", batches, count, gb);
  std::printf("serial, one stream on %s:            %8.2f ms\n", streamkit::device(0).name().c_str(), serial_ms);
  std::printf("overlapped, copy-in/compute/copy-out streams on %d GPU(s): %8.2f ms  (speed-up %.2fx)\n", gpus, overlapped_ms,
              serial_ms / overlapped_ms);
  std::printf("results differing from the CPU: %zu (serial), %zu (overlapped)\n", serial_wrong, overlapped_wrong);
  return serial_wrong == 0 && overlapped_wrong == 0 ? 0 : 1;
}
