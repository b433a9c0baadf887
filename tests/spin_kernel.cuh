#pragma once
// A kernel that keeps one SM busy for a while: makes a stream late on purpose, so that tests can see
// whether other work is ordered after it.

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

namespace streamkit_test {
namespace {  // one copy per test file: a kernel defined in a header cannot be inline

/// Keeps one SM busy for about `cycles` clock cycles, then adds 1 to *counter.
__global__ void spin_then_increment(long long cycles, unsigned* counter)
{
  long long const start = clock64();
  while (clock64() - start < cycles) {}
  if (threadIdx.x == 0 && counter != nullptr) { atomicAdd(counter, 1U); }
}

/// The cycle count that makes a spin kernel take about 20 ms on device 0.
long long cycles_for_20ms()
{
  int khz = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0), cudaSuccess);
  return static_cast<long long>(khz) * 20;
}

}  // namespace
}  // namespace streamkit_test
