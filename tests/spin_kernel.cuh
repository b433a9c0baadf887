#pragma once
// A kernel that keeps one SM busy for a while: makes a stream late on purpose, so that tests can see
// whether other work is ordered after it.

namespace streamkit_test {
namespace {  // one copy per test file: a kernel defined in a header cannot be inline

/// 20 ms in the unit of spin_then_increment.
constexpr long long twenty_ms = 20'000'000;

/// Keeps one SM busy for about `nanoseconds`, then adds 1 to *counter. Timed with the global
/// nanosecond timer rather than clock64(), whose rate follows the SM clock, so the duration does not
/// depend on the clock the GPU happens to run at.
__global__ void spin_then_increment(long long nanoseconds, unsigned* counter)
{
  auto const now = [] {
    long long t = 0;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
  };
  long long const start = now();
  while (now() - start < nanoseconds) {}
  if (threadIdx.x == 0 && counter != nullptr) { atomicAdd(counter, 1U); }
}

}  // namespace
}  // namespace streamkit_test
