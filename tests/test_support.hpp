#pragma once
// Test helpers: device copies of host vectors and fresh random seeds.

#include <streamkit/device_buffer.hpp>
#include <streamkit/stream_ref.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace streamkit_test {

template <class T>
streamkit::device_buffer<T> to_device(std::vector<T> const& host, streamkit::stream_ref stream)
{
  streamkit::device_buffer<T> buffer(host.size(), stream);
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

}  // namespace streamkit_test
