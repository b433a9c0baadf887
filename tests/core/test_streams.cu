// Streams, events, the scoped timer and graph capture.
#include "gpu_test.hpp"
#include "spin_kernel.cuh"

#include <streamkit/core/event.hpp>
#include <streamkit/core/graph.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/core/timer.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <type_traits>

namespace {

using namespace std::chrono_literals;

using streamkit_test::twenty_ms;
using streamkit_test::spin_then_increment;

static_assert(std::is_trivially_copyable_v<streamkit::stream_ref>);
static_assert(!std::is_constructible_v<streamkit::stream_ref, int>);
static_assert(!std::is_constructible_v<streamkit::stream_ref, std::nullptr_t>);
static_assert(std::is_convertible_v<streamkit::stream_ref, cuda::stream_ref>);
static_assert(!std::is_copy_constructible_v<streamkit::stream>);
static_assert(std::is_nothrow_move_constructible_v<streamkit::stream>);
static_assert(std::is_nothrow_move_assignable_v<streamkit::stream>);
static_assert(std::is_nothrow_destructible_v<streamkit::timed_event>);

TEST(StreamRef, NamedDefaultStreams)
{
  EXPECT_EQ(streamkit::stream_ref::legacy_default().value(), cudaStreamLegacy);
  EXPECT_EQ(streamkit::stream_ref::per_thread_default().value(), cudaStreamPerThread);
  EXPECT_TRUE(streamkit::stream_ref::legacy_default().is_default());
  cuda::stream_ref const libcu = streamkit::stream_ref::per_thread_default();
  EXPECT_EQ(libcu.get(), cudaStreamPerThread);
  // The legacy stream is named, never implied by a 0 or a nullptr.
  static_assert(!std::is_constructible_v<streamkit::stream_ref, int>);
  static_assert(!std::is_constructible_v<streamkit::stream_ref, std::nullptr_t>);
  static_assert(std::is_trivially_copyable_v<streamkit::stream_ref>);
}

TEST(GraphCapture, RejectsDefaultStreamsWithoutTouchingCuda)
{
  STREAMKIT_EXPECT_THROW_WITH(streamkit::graph_capture(streamkit::stream_ref::legacy_default()), std::invalid_argument,
                              "stream: graph capture needs a created stream");
}

TEST(GraphExec, EmptyObjectsMoveAndRefuseToLaunch)
{
  streamkit::graph_exec a;
  streamkit::graph_exec b(std::move(a));
  a = std::move(b);
  STREAMKIT_EXPECT_THROW_WITH(a.launch(streamkit::stream_ref::per_thread_default()), std::logic_error, "moved-from");
}

TEST(Stream, CreatedNonBlockingOnTheChosenDevice)
{
  STREAMKIT_REQUIRE_GPU();
  for (int id = 0; id < streamkit::device_count(); ++id) {
    streamkit::stream const s(id);
    EXPECT_EQ(s.device(), id);
    EXPECT_EQ(s.ref().device(), id);
    unsigned flags = 0;
    ASSERT_EQ(cudaStreamGetFlags(s.value(), &flags), cudaSuccess);
    EXPECT_EQ(flags & cudaStreamNonBlocking, cudaStreamNonBlocking);
    EXPECT_TRUE(s.ready());
  }
}

TEST(Stream, PriorityIsValidatedAgainstTheDeviceRange)
{
  STREAMKIT_REQUIRE_GPU();
  auto const [least, greatest] = streamkit::device(0).stream_priority_range();
  streamkit::stream const high(0, greatest);
  int priority = 1;
  ASSERT_EQ(cudaStreamGetPriority(high.value(), &priority), cudaSuccess);
  EXPECT_EQ(priority, greatest);
  STREAMKIT_EXPECT_THROW_WITH(streamkit::stream(0, greatest - 1), std::out_of_range,
                              "priority " + std::to_string(greatest - 1) + " is outside device 0's range");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::stream(0, least + 1), std::out_of_range, "outside");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::stream(streamkit::device_count()), std::out_of_range, "device id");
}

TEST(Stream, MoveIsSelfSafeAndLeavesAnEmptySource)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream a(0);
  cudaStream_t const handle = a.value();
  auto& alias = a;
  a = std::move(alias);
  EXPECT_EQ(a.value(), handle);
  streamkit::stream b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.value(), handle);
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(a.ref()), std::logic_error, "moved-from");
  streamkit::stream c(0);
  c = std::move(b);
  EXPECT_EQ(c.value(), handle);
  c.sync();
}

TEST(Stream, TwoStreamsOnDeviceZeroOverlap)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const first(0);
  streamkit::stream const second(0);
  long long const duration = twenty_ms;
  spin_then_increment<<<1, 32, 0, first.value()>>>(duration / 4, nullptr);  // warm-up
  STREAMKIT_CHECK_LAUNCH();
  first.sync();

  streamkit::gpu_duration serial{};
  {
    streamkit::scoped_timer timer(first, serial);
    spin_then_increment<<<1, 32, 0, first.value()>>>(duration, nullptr);
    spin_then_increment<<<1, 32, 0, first.value()>>>(duration, nullptr);
    STREAMKIT_CHECK_LAUNCH();
  }
  streamkit::gpu_duration overlapped{};
  {
    streamkit::scoped_timer timer(first, overlapped);
    second.wait(first.ref());
    spin_then_increment<<<1, 32, 0, first.value()>>>(duration, nullptr);
    spin_then_increment<<<1, 32, 0, second.value()>>>(duration, nullptr);
    STREAMKIT_CHECK_LAUNCH();
    first.wait(second.ref());
  }
  // Serial runs two ~20 ms kernels back to back; overlapped ones should take about one.
  EXPECT_GT(serial.count(), 30.0F);
  EXPECT_LT(overlapped.count(), 0.75F * serial.count()) << "serial " << serial.count() << " ms, two streams "
                                                        << overlapped.count() << " ms";
}

TEST(Stream, WaitOnEventOrdersWorkAcrossStreams)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const producer(0);
  streamkit::stream const consumer(0);
  unsigned* counter = nullptr;
  ASSERT_EQ(cudaMallocManaged(&counter, sizeof(unsigned)), cudaSuccess);
  *counter = 0;
  streamkit::event done(producer.ref());
  spin_then_increment<<<1, 32, 0, producer.value()>>>(twenty_ms, counter);
  STREAMKIT_CHECK_LAUNCH();
  done.record(producer);
  consumer.wait(done);
  unsigned* observed = nullptr;
  ASSERT_EQ(cudaMallocManaged(&observed, sizeof(unsigned)), cudaSuccess);
  *observed = 99;
  // Reads the counter on the consumer stream: it must see the producer's increment.
  ASSERT_EQ(cudaMemcpyAsync(observed, counter, sizeof(unsigned), cudaMemcpyDefault, consumer.value()), cudaSuccess);
  consumer.sync();
  EXPECT_EQ(*observed, 1U);
  EXPECT_TRUE(done.ready());
  ASSERT_EQ(cudaFree(counter), cudaSuccess);
  ASSERT_EQ(cudaFree(observed), cudaSuccess);
}

TEST(Stream, HostCallbackRunsAfterEarlierWork)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  unsigned* counter = nullptr;
  ASSERT_EQ(cudaMallocManaged(&counter, sizeof(unsigned)), cudaSuccess);
  *counter = 0;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::atomic<unsigned> seen{100};
  spin_then_increment<<<1, 32, 0, s.value()>>>(twenty_ms / 4, counter);
  STREAMKIT_CHECK_LAUNCH();
  s.host_callback([&seen, counter] { seen = *counter; });
  s.sync();
  EXPECT_EQ(seen.load(), 1U);
  ASSERT_EQ(cudaFree(counter), cudaSuccess);
}

TEST(StreamPool, RoundRobinAndIndexedAccess)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream_pool pool(0, 3);
  EXPECT_EQ(pool.size(), 3U);
  EXPECT_EQ(pool.device(), 0);
  auto const a = pool.next();
  auto const b = pool.next();
  auto const c = pool.next();
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  EXPECT_EQ(pool.next(), a);
  EXPECT_EQ(pool[1], b);
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(pool.at(3)), std::out_of_range, "index 3 is out of range for a pool of 3");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::stream_pool(0, 0), std::invalid_argument, "count");
  pool.sync_all();
}

TEST(Event, ElapsedIsCheckedAndPlausible)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  streamkit::timed_event start(s.ref());
  streamkit::timed_event stop(s.ref());
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(streamkit::elapsed(start, stop)), std::logic_error,
                              "start event was never recorded");
  EXPECT_FALSE(streamkit::try_elapsed(start, stop).has_value());
  start.record(s);
  spin_then_increment<<<1, 32, 0, s.value()>>>(twenty_ms, nullptr);
  STREAMKIT_CHECK_LAUNCH();
  stop.record(s);
  if (!stop.ready()) {
    STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(streamkit::elapsed(start, stop)), std::logic_error, "not completed");
  }
  stop.sync();
  auto const time = streamkit::elapsed(start, stop);
  EXPECT_GT(time.count(), 10.0F);
  EXPECT_LT(time.count(), 200.0F);
  ASSERT_TRUE(streamkit::try_elapsed(start, stop).has_value());
  EXPECT_EQ(streamkit::try_elapsed(start, stop)->count(), time.count());
}

TEST(Event, RecordRejectsAStreamOfAnotherDevice)
{
  STREAMKIT_REQUIRE_GPU();
  if (streamkit::device_count() < 2) { GTEST_SKIP() << "needs two GPUs; " << streamkit::device_count() << " visible"; }
  streamkit::stream const other(1);
  streamkit::event e(0);
  STREAMKIT_EXPECT_THROW_WITH(e.record(other), std::invalid_argument, "belongs to device 1 but the event to device 0");
}

TEST(ScopedTimer, StopReturnsTheSameValueEachTime)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  streamkit::scoped_timer timer(s);
  spin_then_increment<<<1, 32, 0, s.value()>>>(twenty_ms / 2, nullptr);
  STREAMKIT_CHECK_LAUNCH();
  auto const first = timer.stop();
  EXPECT_GT(first.count(), 5.0F);
  EXPECT_EQ(timer.stop().count(), first.count());
}

TEST(GraphCapture, ReplaysTheCapturedWork)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  unsigned* counter = nullptr;
  ASSERT_EQ(cudaMallocManaged(&counter, sizeof(unsigned)), cudaSuccess);
  *counter = 0;
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  streamkit::graph_exec graph;
  {
    streamkit::graph_capture capture(s);
    spin_then_increment<<<1, 32, 0, s.value()>>>(1000, counter);
    spin_then_increment<<<1, 32, 0, s.value()>>>(1000, counter);
    STREAMKIT_CHECK_LAUNCH();
    graph = capture.finish();
  }
  s.sync();
  EXPECT_EQ(*counter, 0U) << "capture must not run the work";
  for (int i = 0; i < 3; ++i) { graph.launch(s); }
  s.sync();
  EXPECT_EQ(*counter, 6U);
  ASSERT_EQ(cudaFree(counter), cudaSuccess);
}

TEST(GraphCapture, EndsTheCaptureWhenTheCapturedCodeThrows)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  auto const capture_and_throw = [&s] {
    streamkit::graph_capture capture(s);
    spin_then_increment<<<1, 32, 0, s.value()>>>(10, nullptr);
    throw std::runtime_error("user code failed");
  };
  EXPECT_THROW(capture_and_throw(), std::runtime_error);
  cudaStreamCaptureStatus status{};
  ASSERT_EQ(cudaStreamIsCapturing(s.value(), &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  spin_then_increment<<<1, 32, 0, s.value()>>>(10, nullptr);
  STREAMKIT_CHECK_LAUNCH();
  s.sync();
}

}  // namespace
