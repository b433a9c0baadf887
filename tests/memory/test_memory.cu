// Pinned buffers, host registration and stream-ordered device buffers.
#include "gpu_test.hpp"

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/core/stream.hpp>

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

namespace {

static_assert(!std::is_copy_constructible_v<streamkit::pinned_buffer<float>>);
static_assert(std::is_nothrow_move_constructible_v<streamkit::pinned_buffer<float>>);
static_assert(!std::is_copy_constructible_v<streamkit::device_buffer<float>>);
static_assert(std::is_nothrow_move_assignable_v<streamkit::device_buffer<float>>);
static_assert(std::is_nothrow_move_constructible_v<streamkit::host_registration>);

TEST(PinnedBuffer, EmptyBuffersMoveWithoutCuda)
{
  streamkit::pinned_buffer<double> a;
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  streamkit::pinned_buffer<double> b(std::move(a));
  a = std::move(b);
  EXPECT_EQ(a.span().size(), 0U);
}

TEST(PinnedBuffer, OverflowingSizeIsRejectedBeforeAllocation)
{
  STREAMKIT_EXPECT_THROW_WITH(streamkit::pinned_buffer<double>(std::numeric_limits<std::size_t>::max() / 4),
                              std::invalid_argument, "count: ");
}

TEST(DeviceBuffer, EmptyBuffersMoveWithoutCuda)
{
  streamkit::device_buffer<int> a;
  streamkit::device_buffer<int> b(std::move(a));
  a = std::move(b);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
}

TEST(DeviceBuffer, OverflowingSizeIsRejectedBeforeAnyCudaCall)
{
  STREAMKIT_EXPECT_THROW_WITH(streamkit::device_buffer<double>(std::numeric_limits<std::size_t>::max() / 2,
                                                               streamkit::stream_ref::legacy_default()),
                              std::invalid_argument, "overflow");
}

TEST(HostRegistration, NullWithSizeIsRejected)
{
  STREAMKIT_EXPECT_THROW_WITH(streamkit::host_registration(nullptr, 64), std::invalid_argument, "pointer: null with a size of 64");
  streamkit::host_registration const nothing(nullptr, 0);
  EXPECT_EQ(nothing.registered_chunks(), 0U);
}

TEST(PinnedBuffer, IsPinnedAndRoundTripsThroughTheDevice)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  std::size_t const n = 1000003;
  streamkit::pinned_buffer<std::int32_t> host(n);
  EXPECT_TRUE(streamkit::is_pinned(host.data()));
  std::iota(host.begin(), host.end(), -17);
  streamkit::device_buffer<std::int32_t> device(n, s);
  device.copy_from_host_async(host.span(), s);
  streamkit::device_buffer<std::int32_t> copy(n, s);
  copy.copy_from_async(device, s);
  streamkit::pinned_buffer<std::int32_t> back(n);
  std::fill(back.begin(), back.end(), 0x7eadbeef);
  copy.copy_to_host_async(back.span(), s);
  s.sync();
  for (std::size_t i = 0; i < n; ++i) { ASSERT_EQ(back[i], static_cast<std::int32_t>(i) - 17) << i; }
  STREAMKIT_EXPECT_THROW_WITH(device.copy_to_host_async(cuda::std::span<std::int32_t>(back.data(), n - 1), s),
                              std::invalid_argument, "destination: has 1000002 elements, the buffer 1000003");
}

TEST(PinnedBuffer, FlagsAreHonoured)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::pinned_buffer<float> mapped(1024, streamkit::pinned_flags::portable | streamkit::pinned_flags::mapped);
  unsigned flags = 0;
  ASSERT_EQ(cudaHostGetFlags(&flags, mapped.data()), cudaSuccess);
  EXPECT_NE(flags & cudaHostAllocMapped, 0U);
  EXPECT_NE(flags & cudaHostAllocPortable, 0U);
}

TEST(HostRegistration, RegistersInChunksIsIdempotentAndUnregisters)
{
  STREAMKIT_REQUIRE_GPU();
  std::size_t const page = 4096;
  std::vector<unsigned char> storage(64 * page + page);
  // Page-aligned start so chunk boundaries are page boundaries.
  auto* aligned = reinterpret_cast<unsigned char*>((reinterpret_cast<std::uintptr_t>(storage.data()) + page - 1) / page * page);
  std::size_t const bytes = 64 * page;
  EXPECT_FALSE(streamkit::is_pinned(aligned));
  {
    streamkit::host_registration outer(aligned, bytes, 16 * page);
    EXPECT_EQ(outer.registered_chunks(), 4U);
    EXPECT_TRUE(streamkit::is_pinned(aligned));
    EXPECT_TRUE(streamkit::is_pinned(aligned + bytes - 1));
    {
      streamkit::host_registration inner(cuda::std::span<unsigned char>(aligned, bytes));
      EXPECT_EQ(inner.registered_chunks(), 0U) << "already pinned ranges must be left alone";
    }
    EXPECT_TRUE(streamkit::is_pinned(aligned)) << "the nested registration must not unregister";
    streamkit::host_registration moved(std::move(outer));
    EXPECT_EQ(moved.registered_chunks(), 4U);
  }
  EXPECT_FALSE(streamkit::is_pinned(aligned));
}

TEST(DeviceBuffer, AllocatedOnTheStreamsDevice)
{
  STREAMKIT_REQUIRE_GPU();
  for (int id = 0; id < streamkit::device_count(); ++id) {
    streamkit::stream const s(id);
    streamkit::device_buffer<float> buffer(1 << 20, s);
    cudaPointerAttributes attributes{};
    ASSERT_EQ(cudaPointerGetAttributes(&attributes, buffer.data()), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
    EXPECT_EQ(attributes.device, id);
    EXPECT_EQ(buffer.device(), id);
    s.sync();
  }
}

/// GPU time of one host-to-device copy of `bytes` from `source`.
float copy_milliseconds(void* device, void const* source, std::size_t bytes, streamkit::stream const& s)
{
  streamkit::timed_event start(s.ref());
  streamkit::timed_event stop(s.ref());
  float best = std::numeric_limits<float>::max();
  for (int repeat = 0; repeat < 5; ++repeat) {
    start.record(s);
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(device, source, bytes, cudaMemcpyHostToDevice, s.value()));
    stop.record(s);
    stop.sync();
    best = std::min(best, streamkit::elapsed(start, stop).count());
  }
  return best;
}

TEST(PinnedBuffer, CopiesFasterThanPageableMemory)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  std::size_t const n = std::size_t{64} << 20;  // 256 MB of float
  std::vector<float> pageable(n, 1.0F);
  streamkit::pinned_buffer<float> pinned(n);
  std::fill(pinned.begin(), pinned.end(), 1.0F);
  streamkit::device_buffer<float> device(n, s);
  float const pageable_ms = copy_milliseconds(device.data(), pageable.data(), n * sizeof(float), s);
  float const pinned_ms = copy_milliseconds(device.data(), pinned.data(), n * sizeof(float), s);
  double const gb = static_cast<double>(n * sizeof(float)) / 1e9;
  std::printf("H2D 256 MB: pinned %.2f ms (%.1f GB/s), pageable %.2f ms (%.1f GB/s)\n", pinned_ms, gb / pinned_ms * 1e3,
              pageable_ms, gb / pageable_ms * 1e3);
  EXPECT_LT(pinned_ms, pageable_ms);
}

}  // namespace
