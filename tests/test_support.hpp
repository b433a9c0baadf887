#pragma once
// Test helpers: device copies of host vectors and fresh random seeds.

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/core/stream_ref.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace streamkit_test {

template <class T>
streamkit::device_buffer<T> to_device(std::vector<T> const& host, streamkit::stream_ref stream,
                                      streamkit::device_resource_ref resource = streamkit::default_device_resource())
{
  streamkit::device_buffer<T> buffer(host.size(), stream, resource);
  buffer.copy_from_host_async(cuda::std::span<T const>(host.data(), host.size()), stream);
  return buffer;
}

template <class T>
std::vector<T> to_host(streamkit::device_buffer<T> const& buffer, streamkit::stream_ref stream)
{
  std::vector<T> host(buffer.size());
  buffer.copy_to_host_async(cuda::std::span<T>(host.data(), host.size()), stream);
  stream.sync();
  return host;
}

/// A fresh seed per call (inputs differ on every run), printed so a failure can be replayed.
inline std::uint64_t fresh_seed()
{
  std::uint64_t const seed = std::random_device{}();
  ::testing::Test::RecordProperty("seed", std::to_string(seed));
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

/// Calls f(begin, end) on disjoint ranges covering [0, count), on every hardware thread when the
/// `work` they stand for (default: `count`) is large (CPU references of billions of elements),
/// inline otherwise.
template <class F>
void parallel_for(std::size_t count, F const& f, std::size_t work = 0)
{
  std::size_t const threads = std::min<std::size_t>(std::max(1U, std::thread::hardware_concurrency()), count);
  if ((work == 0 ? count : work) < (std::size_t{1} << 16) || threads <= 1) {
    f(std::size_t{0}, count);
    return;
  }
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t) { pool.emplace_back(f, count * t / threads, count * (t + 1) / threads); }
  for (auto& thread : pool) { thread.join(); }
}

/// A well-mixed 64-bit hash (splitmix64's finaliser): random values by position, filled in parallel.
inline std::uint64_t mix(std::uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A uniform double in [0, 1) from a hash.
inline double unit_interval(std::uint64_t hash) { return static_cast<double>(hash >> 11) * 0x1.0p-53; }

/// Problems found by checks running on several host threads (parallel_for): all counted, the first
/// few kept with the row they concern; report() turns them into test failures on the test's thread.
class failure_log {
 public:
  /// `row_name` names a row in the messages ("row", "observation").
  explicit failure_log(std::string row_name) : row_name_(std::move(row_name)) {}
  /// Counts a problem of row `row`; keeps its message when fewer than 10 came before.
  void add(std::size_t row, std::string const& what)
  {
    if (count_.fetch_add(1) < 10) {
      std::lock_guard const lock(mutex_);
      messages_.push_back(row_name_ + " " + std::to_string(row) + ": " + what);
    }
  }
  /// A failure per kept message, and the count expected 0 (saying `what` was wrong).
  void report(char const* what) const
  {
    for (auto const& message : messages_) { ADD_FAILURE() << message; }
    EXPECT_EQ(count_.load(), 0U) << what;
  }

 private:
  std::string row_name_;
  std::atomic<std::size_t> count_{0};
  std::mutex mutex_;
  std::vector<std::string> messages_;
};

}  // namespace streamkit_test
