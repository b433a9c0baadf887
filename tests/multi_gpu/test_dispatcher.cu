// The multi-GPU dispatcher: planning (host), results, failures and memory (GPU).
#include "device_memory.hpp"
#include "gpu_test.hpp"
#include "test_support.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace {

using streamkit_test::settled_free_memory;

__global__ void square_plus_one(double const* in, double* out, std::size_t count)
{
  std::size_t const i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < count) { out[i] = __fma_rn(in[i], in[i], 1.0); }  // fused, as the host reference
}

/// The generic workload of these tests: out[i] = in[i]^2 + 1 through each worker's workspace, with
/// the copies queued per device (ordered) or left to the streams.
void enqueue_squares(streamkit::chunk_context& chunk, double const* in, double* out, std::size_t capacity, bool ordered = true)
{
  std::size_t const count = chunk.items.size();
  double* d_in = chunk.workspace.device<double>(capacity, 0);
  double* d_out = chunk.workspace.device<double>(capacity, 1);
  cudaStream_t const s = chunk.stream.value();
  auto const copy_in = [&] {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(d_in, in + chunk.items.begin, count * sizeof(double), cudaMemcpyHostToDevice, s));
  };
  auto const copy_out = [&] {
    STREAMKIT_CUDA_TRY(cudaMemcpyAsync(out + chunk.items.begin, d_out, count * sizeof(double), cudaMemcpyDeviceToHost, s));
  };
  ordered ? chunk.copy_in(copy_in) : copy_in();
  square_plus_one<<<static_cast<unsigned>((count + 255) / 256), 256, 0, s>>>(d_in, d_out, count);
  STREAMKIT_CHECK_LAUNCH();
  ordered ? chunk.copy_out(copy_out) : copy_out();
}

TEST(DispatcherPlan, ChunksCoverTheBatchExactlyOnce)
{
  for (std::size_t items : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{1001}}) {
    for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{5000}}) {
      std::size_t const chunks = streamkit::detail::chunk_count(items, chunk);
      std::size_t covered = 0;
      for (std::size_t c = 0; c < chunks; ++c) {
        auto const range = streamkit::detail::chunk_at(items, chunk, c);
        EXPECT_EQ(range.begin, covered);
        EXPECT_GT(range.size(), 0U);
        EXPECT_LE(range.size(), chunk);
        covered = range.end;
      }
      EXPECT_EQ(covered, items);
    }
  }
}

TEST(DispatcherPlan, DeviceListsAreValidated)
{
  EXPECT_EQ(streamkit::detail::resolve_devices({}, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(streamkit::detail::resolve_devices({0, 0, 0}, 1), (std::vector<int>{0, 0, 0}));
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(streamkit::detail::resolve_devices({0, 2}, 2)), std::out_of_range, "options.devices: device id 2 is out of range [0, 2)");
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(streamkit::detail::resolve_devices({}, 0)), std::runtime_error, "no CUDA device is visible");
}

TEST(DispatcherPlan, NegativeStreamCountIsRejectedBeforeAnyCudaCall)
{
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatcher({{}, -2}), std::invalid_argument, "options.streams_per_device: must not be negative, got -2");
}

TEST(DispatcherError, NamesTheDeviceAndTheItems)
{
  streamkit::dispatch_error const error(1, {40, 50}, nullptr, "boom");
  EXPECT_STREQ(error.what(), "device 1, items [40, 50): boom");
  EXPECT_EQ(error.items().begin, 40U);
}

class Dispatcher : public ::testing::Test {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
};

TEST_F(Dispatcher, ResultsAreIdenticalForAnyDevicesChunksAndStreams)
{
  std::size_t const n = 100003;
  std::vector<double> in(n);
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<double> u(-10.0, 10.0);
  for (auto& x : in) { x = u(rng); }
  std::vector<int> all_devices;
  for (int d = 0; d < streamkit::device_count(); ++d) { all_devices.push_back(d); }
  for (auto const& devices : std::vector<std::vector<int>>{{0}, {0, 0, 0}, all_devices}) {
    for (int streams : {1, 3}) {
      streamkit::dispatcher d({devices, streams});
      for (std::size_t chunk : {std::size_t{1000}, std::size_t{77777}, n, 10 * n}) {
        bool const ordered = chunk != 1000;
        SCOPED_TRACE(::testing::Message() << devices.size() << " devices, " << streams << " streams, chunk " << chunk);
        std::vector<double> out(n, std::nan(""));
        std::atomic<std::size_t> calls{0};
        std::size_t last_done = 0;
        d.run(n, chunk, [&](streamkit::chunk_context& c) { ++calls; enqueue_squares(c, in.data(), out.data(), chunk, ordered); },
              [&](std::size_t done, std::size_t total) {
                EXPECT_EQ(done, last_done + 1);
                last_done = done;
                EXPECT_EQ(total, (n + chunk - 1) / chunk);
              });
        EXPECT_EQ(calls.load(), (n + chunk - 1) / chunk);
        for (std::size_t i = 0; i < n; ++i) { ASSERT_EQ(out[i], std::fma(in[i], in[i], 1.0)) << i; }
      }
    }
  }
}

TEST_F(Dispatcher, ABatchOfOneAndAnEmptyBatch)
{
  streamkit::dispatcher d({{0, 0}, 2});
  double const in = 3.0;
  double out = 0.0;
  d.run(1, 64, [&](streamkit::chunk_context& c) { enqueue_squares(c, &in, &out, 64); });
  EXPECT_EQ(out, 10.0);
  bool called = false;
  d.run(0, 64, [&](streamkit::chunk_context&) { called = true; });
  EXPECT_FALSE(called);
  EXPECT_THROW(d.run(1, 0, [](streamkit::chunk_context&) {}), std::invalid_argument);
}

TEST_F(Dispatcher, EveryWorkerStartsWithItsOwnChunk)
{
  // However the worker threads start, worker i's first chunk is chunk i: in every run with at least as
  // many chunks as workers, each worker's memory meets a chunk (so the first run sizes all of it).
  streamkit::dispatcher workers({{0, 0, 0}, 2});  // 6 workers on one device
  std::size_t const count = workers.worker_count();
  for (int run = 0; run < 20; ++run) {
    std::vector<std::size_t> first_chunk(count, std::size_t(-1));
    std::mutex mutex;
    workers.run(count * 10, 10, [&](streamkit::chunk_context& chunk) {
      std::lock_guard<std::mutex> lock(mutex);
      if (first_chunk[chunk.worker] == std::size_t(-1)) { first_chunk[chunk.worker] = chunk.items.begin / 10; }
    });
    for (std::size_t w = 0; w < count; ++w) { EXPECT_EQ(first_chunk[w], w) << "run " << run << ", worker " << w; }
  }
}

TEST_F(Dispatcher, AThrowingCallableStopsTheRunAndTheDispatcherStaysUsable)
{
  streamkit::dispatcher d({{0, 0}, 2});
  std::size_t const n = 10000;
  std::vector<double> in(n, 2.0), out(n, 0.0);
  try {
    d.run(n, 100, [&](streamkit::chunk_context& c) {
      if (c.items.begin == 2500) { throw std::runtime_error("injected failure"); }
      enqueue_squares(c, in.data(), out.data(), 100);
    });
    FAIL() << "no exception";
  } catch (streamkit::dispatch_error const& error) {
    EXPECT_EQ(error.items().begin, 2500U);
    EXPECT_EQ(error.items().end, 2600U);
    EXPECT_NE(std::string(error.what()).find("items [2500, 2600): injected failure"), std::string::npos) << error.what();
    EXPECT_THROW(std::rethrow_exception(error.original()), std::runtime_error);
  }
  std::fill(out.begin(), out.end(), 0.0);
  d.run(n, 100, [&](streamkit::chunk_context& c) { enqueue_squares(c, in.data(), out.data(), 100); });
  for (double x : out) { ASSERT_EQ(x, 5.0); }
}

TEST_F(Dispatcher, AnAllocationFailurePropagatesWithoutAHang)
{
  streamkit::dispatcher d({{0}, 2});
  std::size_t const too_much = streamkit::device(0).total_memory() * 2;
  try {
    d.run(100, 10, [&](streamkit::chunk_context& c) { static_cast<void>(c.workspace.device<std::byte>(too_much, 7)); });
    FAIL() << "no exception";
  } catch (streamkit::dispatch_error const& error) {
    EXPECT_THROW(std::rethrow_exception(error.original()), streamkit::bad_alloc);
  }
}

TEST_F(Dispatcher, APinnedAllocationFailurePropagatesAndReleasesEverything)
{
  streamkit::dispatcher d({{0}, 2});
  std::vector<double> in(1000, 2.0), out(1000, 0.0);
  d.run(1000, 100, [&](streamkit::chunk_context& c) { enqueue_squares(c, in.data(), out.data(), 100); });  // warm-up
  std::size_t const pinned_before = streamkit::pinned_bytes_in_use();
  std::size_t const allocations = d.workspace_allocations();
  std::size_t const free_before = settled_free_memory();
  std::size_t const impossible = std::size_t{1} << 52;  // 4 PiB of page-locked memory
  try {
    d.run(1000, 100, [&](streamkit::chunk_context& c) {
      if (c.items.begin == 500) { static_cast<void>(c.workspace.pinned<std::byte>(impossible, 3)); }
      enqueue_squares(c, in.data(), out.data(), 100);
    });
    FAIL() << "no exception";
  } catch (streamkit::dispatch_error const& error) {
    EXPECT_EQ(error.items().begin, 500U);
    EXPECT_THROW(std::rethrow_exception(error.original()), streamkit::bad_alloc);
  }
  EXPECT_EQ(streamkit::pinned_bytes_in_use(), pinned_before);
  EXPECT_EQ(d.workspace_allocations(), allocations);
  // Device memory in use must not grow. It may shrink: seen on H200s, the driver returns a few MiB
  // (page tables of earlier pinned buffers, we believe) around a failed cudaHostAlloc.
  EXPECT_GE(settled_free_memory(), free_before);
  std::fill(out.begin(), out.end(), 0.0);
  d.run(1000, 100, [&](streamkit::chunk_context& c) { enqueue_squares(c, in.data(), out.data(), 100); });
  for (double x : out) { ASSERT_EQ(x, 5.0); }
}

TEST_F(Dispatcher, ACudaErrorInsideAChunkNamesTheChunk)
{
  streamkit::dispatcher d({{0}, 2});
  std::vector<double> in(1000, 2.0), out(1000, 0.0);
  try {
    d.run(1000, 100, [&](streamkit::chunk_context& c) {
      enqueue_squares(c, in.data(), out.data(), 100);
      if (c.items.begin == 300) {  // an invalid copy: a CUDA error, not a C++ one
        STREAMKIT_CUDA_TRY(cudaMemcpyAsync(nullptr, in.data(), 8, cudaMemcpyHostToDevice, c.stream.value()));
      }
    });
    FAIL() << "no exception";
  } catch (streamkit::dispatch_error const& error) {
    EXPECT_EQ(error.items().begin, 300U);
    EXPECT_THROW(std::rethrow_exception(error.original()), streamkit::cuda_error);
    EXPECT_NE(std::string(error.what()).find("cudaMemcpyAsync"), std::string::npos) << error.what();
  }
  d.run(1000, 100, [&](streamkit::chunk_context& c) { enqueue_squares(c, in.data(), out.data(), 100); });
  for (double x : out) { ASSERT_EQ(x, 5.0); }
}

TEST_F(Dispatcher, OneRunAtATimeFromManyThreads)
{
  // Threads sharing one dispatcher: each run either completes correctly or is refused with
  // std::logic_error while another is in progress; nothing else happens.
  streamkit::dispatcher d({{0}, 2});
  constexpr int threads = 8;
  std::vector<std::vector<double>> in(threads), out(threads);
  std::atomic<int> completed{0}, refused{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    in[t].assign(20000, static_cast<double>(t));
    out[t].assign(20000, -1.0);
    pool.emplace_back([&, t] {
      for (int attempt = 0; attempt < 20; ++attempt) {
        try {
          d.run(20000, 1000, [&](streamkit::chunk_context& c) { enqueue_squares(c, in[t].data(), out[t].data(), 1000); });
          ++completed;
        } catch (std::logic_error const& error) {
          EXPECT_NE(std::string(error.what()).find("already running"), std::string::npos);
          ++refused;
        }
      }
    });
  }
  for (auto& thread : pool) { thread.join(); }
  EXPECT_EQ(completed + refused, threads * 20);
  EXPECT_GT(completed.load(), 0);
  for (int t = 0; t < threads; ++t) {
    bool const ran = out[t][0] != -1.0;
    for (double x : out[t]) { ASSERT_EQ(x, ran ? std::fma(double(t), double(t), 1.0) : -1.0); }
  }
}

/// Threads of this process, from /proc/self/status (Linux).
std::size_t process_threads()
{
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) { return std::stoul(line.substr(8)); }
  }
  return 0;
}

TEST_F(Dispatcher, WorkerThreadsLiveAsLongAsTheDispatcher)
{
  // Before, every run started a thread per worker but the first and joined them at its end.
  std::size_t const outside = process_threads();
  ASSERT_GT(outside, 0U) << "/proc/self/status has no thread count";
  std::size_t between = 0;
  {
    streamkit::dispatcher d({{0}, 4});
    std::vector<double> in(64, 2.0), out(64, 0.0);
    std::atomic<std::size_t> during{0};
    auto const enqueue = [&](streamkit::chunk_context& c) {
      during = std::max(during.load(), process_threads());
      enqueue_squares(c, in.data(), out.data(), 8);
    };
    d.run(64, 8, enqueue);  // warm-up: the CUDA runtime may start threads of its own on first use
    between = process_threads();
    EXPECT_GE(between, outside + 3) << "three worker threads besides the caller's";
    during = 0;
    d.run(64, 8, enqueue);
    EXPECT_EQ(during.load(), between) << "a run started threads";
    EXPECT_EQ(process_threads(), between) << "a run ended threads";
    for (double x : out) { ASSERT_EQ(x, 5.0); }
  }
  EXPECT_LE(process_threads(), between - 3) << "the dispatcher's threads outlived it";
}

TEST_F(Dispatcher, AsyncRunAndProgress)
{
  streamkit::dispatcher d({{0}, 2});
  std::size_t const n = 5000;
  std::vector<double> in(n, 3.0), out(n, 0.0);
  std::atomic<std::size_t> reported{0};
  auto done = d.run_async(n, 500, [&](streamkit::chunk_context& c) { enqueue_squares(c, in.data(), out.data(), 500); },
                          [&](std::size_t finished, std::size_t) { reported = finished; });
  done.get();
  EXPECT_EQ(reported.load(), 10U);
  for (double x : out) { ASSERT_EQ(x, 10.0); }
}

TEST_F(Dispatcher, StressOfSmallBatchesKeepsMemoryFlat)
{
  streamkit::dispatcher d({{0, 0}, 2});
  std::vector<double> in(512, 1.5), out(512, 0.0);
  std::vector<std::atomic<bool>> ran(d.worker_count());
  auto const enqueue = [&](streamkit::chunk_context& c) {
    ran[c.worker] = true;
    enqueue_squares(c, in.data(), out.data(), 64);
  };
  // Warm-up until every worker has had a chunk and so allocated its buffers (chunks go to whichever
  // worker is free: one batch may leave a worker idle).
  for (int batch = 0; batch < 1000 && !std::all_of(ran.begin(), ran.end(), [](auto const& r) { return r.load(); }); ++batch) {
    d.run(512, 64, enqueue);
  }
  ASSERT_TRUE(std::all_of(ran.begin(), ran.end(), [](auto const& r) { return r.load(); }));
  std::size_t const allocations = d.workspace_allocations();
  std::size_t const free_before = settled_free_memory();
  std::size_t const pinned_before = streamkit::pinned_bytes_in_use();
  for (int batch = 0; batch < 1000; ++batch) { d.run(512, 64, enqueue); }
  EXPECT_EQ(d.workspace_allocations(), allocations) << "no allocation after warm-up";
  if (streamkit_test::free_memory_is_measurable()) { EXPECT_EQ(settled_free_memory(), free_before); }
  EXPECT_EQ(streamkit::pinned_bytes_in_use(), pinned_before);
  for (double x : out) { ASSERT_EQ(x, 3.25); }
}

TEST_F(Dispatcher, BuiltInWorkloadsValidateBeforeWritingAnything)
{
  streamkit::dispatcher d({{0}, 2});
  float lat[2] = {0.1F, 0.2F}, lon[2] = {0.3F, 0.4F};
  std::int32_t index[2] = {-7, -7};
  using points = streamkit::points_ref<float>;
  auto const result = streamkit::neighbors_ref<std::int32_t, float>::dense(index, nullptr, 2);
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(lat, lon, 2), points::separate(lat, lon, 0), result, {}),
                              std::invalid_argument, "references: the reference set is empty (M = 0)");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(nullptr, lon, 2), points::separate(lat, lon, 2), result, {}),
                              std::invalid_argument, "observations: null coordinates with a count of 2");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(lat, lon, 2), points::separate(nullptr, nullptr, 2), result, {}),
                              std::invalid_argument, "references: null coordinates with a count of 2");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(lat, lon, 2), points::separate(lat, lon, 2),
                                                                   streamkit::neighbors_ref<std::int32_t, float>::dense(index, nullptr, 1), {}),
                              std::invalid_argument, "result.count: 1 rows for 2 observations");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(lat, lon, 2), points::separate(lat, lon, 2),
                                                                   streamkit::neighbors_ref<std::int32_t, float>::dense(index, nullptr, 2, 33), {}),
                              std::invalid_argument, "result.k: 33 neighbours asked; this search answers k from 1 to 32");
  float bad_lat[2] = {0.1F, 2.0F};  // 2 rad is beyond the pole
  // Invalid coordinates are found on the device, inside the chunk: the chunk's error names them,
  // whether the result goes through staging (pageable) or straight to pinned memory.
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(bad_lat, lon, 2), points::separate(lat, lon, 2), result, {}),
                              streamkit::dispatch_error, "items [0, 2): observations: 1 point(s) have a non-finite coordinate or a latitude outside");
  streamkit::pinned_buffer<std::int32_t> pinned_index(2);
  pinned_index[0] = pinned_index[1] = -7;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_nearest_neighbor(d, points::separate(bad_lat, lon, 2), points::separate(lat, lon, 2),
                                                                   streamkit::neighbors_ref<std::int32_t, float>::dense(pinned_index.data(), nullptr, 2), {}),
                              streamkit::dispatch_error, "observations: 1 point(s)");
  EXPECT_EQ(pinned_index[0], -7);
  EXPECT_EQ(pinned_index[1], -7);
  EXPECT_EQ(index[0], -7);
  EXPECT_EQ(index[1], -7);

  double x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {-1, -1, -1, -1, -1, -1};
  using in_ref = streamkit::matrix_ref<double const>;
  using out_ref = streamkit::matrix_ref<double>;
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_minmax_normalize<double>(d, {in_ref::dense(x, 2, 3)}, {}), std::invalid_argument,
                              "outputs: 0 arrays for 1 inputs");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_minmax_normalize<double>(d, {in_ref::dense(x, 2, 3)}, {out_ref::dense(y, 3, 2)}),
                              std::invalid_argument, "outputs[0]: shape 3 x 2 does not match the input's 2 x 3");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_minmax_normalize<double>(d, {in_ref::dense(nullptr, 2, 3)}, {out_ref::dense(y, 2, 3)}),
                              std::invalid_argument, "inputs[0]: null data with 2 x 3 elements");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::dispatch_minmax_normalize<double>(d, {in_ref::dense(x, 2, 3)}, {out_ref::dense(y, 2, 3)}, {1.0, 0.0, false}),
                              std::invalid_argument, "feature_range");
  for (double v : y) { EXPECT_EQ(v, -1.0); }
}

TEST_F(Dispatcher, NearestNeighboursMatchTheSingleGpuPathForAnyLanesChunksAndK)
{
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  std::size_t const n = 50001, m = 3001;
  std::vector<float> obs_lat(n), obs_lon(n), ref_lat(m), ref_lon(m);
  for (std::size_t i = 0; i < n; ++i) {
    obs_lat[i] = std::asin(2.0F * u(rng) - 1.0F);
    obs_lon[i] = 6.2831853F * u(rng) - 3.1415926F;
  }
  for (std::size_t j = 0; j < m; ++j) {
    ref_lat[j] = std::asin(2.0F * u(rng) - 1.0F);
    ref_lon[j] = 6.2831853F * u(rng) - 3.1415926F;
  }
  // Single GPU, device resident; exact ranking, so that every engine the front end may pick for a
  // chunk size gives the same answer. Then one GPU, three lanes on one GPU, and every GPU.
  streamkit::stream const s(0);
  auto const d_obs_lat = streamkit_test::to_device(obs_lat, s), d_obs_lon = streamkit_test::to_device(obs_lon, s);
  auto const d_ref_lat = streamkit_test::to_device(ref_lat, s), d_ref_lon = streamkit_test::to_device(ref_lon, s);
  streamkit::nearest_options options;
  options.precision = streamkit::nn_precision::exact;
  std::vector<std::vector<int>> device_sets{{0}, {0, 0, 0}};
  if (streamkit::device_count() >= 2) {
    device_sets.emplace_back();
    for (int g = 0; g < streamkit::device_count(); ++g) { device_sets.back().push_back(g); }
  }
  for (std::size_t k : {std::size_t{1}, std::size_t{16}}) {
    auto d_index = streamkit_test::to_device(std::vector<std::int32_t>(n * k, -7), s);
    auto d_distance = streamkit_test::to_device(std::vector<float>(n * k, -1.0F), s);
    streamkit::nearest_neighbor_async(streamkit::points_ref<float>::separate(d_obs_lat.data(), d_obs_lon.data(), n),
                                      streamkit::points_ref<float>::separate(d_ref_lat.data(), d_ref_lon.data(), m),
                                      streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), d_distance.data(), n, k),
                                      options, s);
    auto const expected_index = streamkit_test::to_host(d_index, s);
    auto const expected_distance = streamkit_test::to_host(d_distance, s);
    for (auto const& devices : device_sets) {
      for (std::size_t chunk : {std::size_t{0}, std::size_t{4999}, 2 * n}) {
        SCOPED_TRACE("k " + std::to_string(k) + ", " + std::to_string(devices.size()) + " lanes, chunk " + std::to_string(chunk));
        streamkit::dispatcher d({devices, 2});
        std::vector<std::int32_t> index(n * k, -7);
        std::vector<float> distance(n * k, -1.0F);
        streamkit::dispatch_nearest_neighbor(d, streamkit::points_ref<float>::separate(obs_lat.data(), obs_lon.data(), n),
                                             streamkit::points_ref<float>::separate(ref_lat.data(), ref_lon.data(), m),
                                             streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), n, k),
                                             options, chunk);
        EXPECT_EQ(index, expected_index);
        EXPECT_EQ(distance, expected_distance);
      }
    }
  }
}

TEST_F(Dispatcher, NearestNeighbourObjectKeepsItsReferencesBetweenTimeSteps)
{
  // Time steps with references of changing size (smaller, then larger than the first), through
  // every host layout the staging pipeline takes: separate pageable arrays, interleaved pinned
  // observations, results in pinned memory with a row stride (the columns between stay untouched).
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  auto const random_points = [&](std::size_t count) {
    std::vector<float> latlon(2 * count);
    for (std::size_t i = 0; i < count; ++i) {
      latlon[2 * i] = std::asin(2.0F * u(rng) - 1.0F);
      latlon[2 * i + 1] = 6.2831853F * u(rng) - 3.1415926F;
    }
    return latlon;
  };
  std::size_t const n = 20011;
  streamkit::dispatcher d({{0, 0}, 2});
  streamkit::stream const s(0);
  std::vector<float> refs = random_points(1500);
  using points = streamkit::points_ref<float>;
  streamkit::multi_gpu_nearest_neighbor<float> search(d, points::interleaved(refs.data(), 1500), {});
  streamkit::pinned_buffer<float> pinned_obs(2 * n);
  streamkit::pinned_buffer<std::int32_t> pinned_index(3 * n);
  std::size_t allocations_after_first = 0;
  for (std::size_t step = 0; step < 4; ++step) {
    std::size_t const m = step == 1 ? 700 : step == 2 ? 2900 : 1500;
    if (step > 0) {
      refs = random_points(m);
      std::vector<float> lat(m), lon(m);
      for (std::size_t j = 0; j < m; ++j) {
        lat[j] = refs[2 * j];
        lon[j] = refs[2 * j + 1];
      }
      search.update(step % 2 == 0 ? points::interleaved(refs.data(), m) : points::separate(lat.data(), lon.data(), m));
    }
    ASSERT_EQ(search.size(), m);
    std::vector<float> const obs = random_points(n);
    std::copy(obs.begin(), obs.end(), pinned_obs.begin());
    // The single-GPU answer on the same data.
    auto const d_obs = streamkit_test::to_device(obs, s);
    auto const d_refs = streamkit_test::to_device(refs, s);
    auto d_index = streamkit_test::to_device(std::vector<std::int32_t>(n, -7), s);
    streamkit::nearest_neighbor(points::interleaved(d_obs.data(), n), points::interleaved(d_refs.data(), m),
                                streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), nullptr, n), {}, s);
    auto const expected = streamkit_test::to_host(d_index, s);

    std::vector<std::int32_t> index(n, -7);
    std::vector<float> distance(n, -1.0F);
    std::vector<float> lat(n), lon(n);
    for (std::size_t i = 0; i < n; ++i) {
      lat[i] = obs[2 * i];
      lon[i] = obs[2 * i + 1];
    }
    search.query(points::separate(lat.data(), lon.data(), n), streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), n), 3001);
    EXPECT_EQ(index, expected) << "step " << step;
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(distance[i], streamkit::haversine(obs[2 * i], obs[2 * i + 1], refs[2 * index[i]], refs[2 * index[i] + 1]), 1e-6) << i;
    }
    std::fill(pinned_index.begin(), pinned_index.end(), -7);
    search.query(points::interleaved(pinned_obs.data(), n), streamkit::neighbors_ref<std::int32_t, float>{pinned_index.data(), nullptr, n, 1, 3}, 4096);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(pinned_index[3 * i], expected[i]) << "step " << step << ", row " << i;
      ASSERT_EQ(pinned_index[3 * i + 1], -7) << i;
      ASSERT_EQ(pinned_index[3 * i + 2], -7) << i;
    }
    if (step == 0) { allocations_after_first = d.workspace_allocations(); }
  }
  EXPECT_EQ(d.workspace_allocations(), allocations_after_first) << "queries of one size allocate nothing after the first";
}

}  // namespace
