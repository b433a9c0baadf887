#pragma once
// Times GPU work for Google Benchmark with CUDA events (manual time), after a warm-up call.

#include <streamkit/core/device.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>

#include <benchmark/benchmark.h>

namespace streamkit_bench {

/// Runs `enqueue(stream)` once to warm up, then once per benchmark iteration between two events
/// on `stream`, reporting the GPU time as the iteration time.
template <class Enqueue>
void time_on_stream(benchmark::State& state, streamkit::stream const& stream, Enqueue&& enqueue)
{
  streamkit::timed_event start(stream.ref());
  streamkit::timed_event stop(stream.ref());
  enqueue(stream.ref());
  stream.sync();
  for (auto _ : state) {
    start.record(stream);
    enqueue(stream.ref());
    stop.record(stream);
    stop.sync();
    state.SetIterationTime(static_cast<double>(streamkit::elapsed(start, stop).count()) * 1e-3);
  }
}

/// Skips the benchmark with a reason when no GPU is visible; returns false then.
inline bool require_gpu(benchmark::State& state)
{
  if (streamkit::device_count() > 0) { return true; }
  state.SkipWithError("no CUDA device visible");
  for (auto _ : state) {}
  return false;
}

}  // namespace streamkit_bench
