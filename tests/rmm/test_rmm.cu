// RMM's own resources as streamkit's memory: an rmm::mr::pool_memory_resource over a
// cuda_async_memory_resource, counted by rmm::mr::statistics_resource_adaptor, handed to streamkit as
// rmm::device_async_resource_ref. Every streamkit allocation must go through it (the device's
// default memory pool, where streamkit's own default resource allocates, stays untouched), loops of
// one shape must allocate nothing after their first step, everything must be given back, and the
// results must be those of streamkit's default resource. Built against the headers and library of
// PyPI's librmm-cu13 (tests/rmm/CMakeLists.txt says which version); skipped without a GPU.

#include <rmm/cuda_stream_view.hpp>
#include <rmm/mr/device/cuda_async_memory_resource.hpp>
#include <rmm/mr/device/pool_memory_resource.hpp>
#include <rmm/mr/device/statistics_resource_adaptor.hpp>
#include <rmm/resource_ref.hpp>

#include "gpu_test.hpp"
#include "test_support.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

namespace {

using pool_type = rmm::mr::pool_memory_resource<rmm::mr::cuda_async_memory_resource>;
using counted_type = rmm::mr::statistics_resource_adaptor<pool_type>;

// The premise of the drop-in: RMM's reference (derived from CCCL's) converts to streamkit's.
static_assert(std::is_convertible_v<rmm::device_async_resource_ref, streamkit::device_resource_ref>);

/// The device's default memory pool (where streamkit's default resource allocates): its high-water
/// mark of memory in use, which a test resets and then expects to stay 0.
struct default_pool_watch {
  cudaMemPool_t pool = nullptr;
  default_pool_watch()
  {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    std::uint64_t zero = 0;
    EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
  }
  [[nodiscard]] std::uint64_t high() const
  {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::uint64_t bytes = 0;
    EXPECT_EQ(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &bytes), cudaSuccess);
    return bytes;
  }
};

/// RMM's resources for one test: a 256 MiB pool over cudaMallocAsync (its own CUDA pool), counted.
struct rmm_resources {
  rmm::mr::cuda_async_memory_resource async{std::size_t{64} << 20};
  pool_type pool{&async, std::size_t{256} << 20};
  counted_type counted{&pool};
  rmm::device_async_resource_ref ref{counted};

  [[nodiscard]] std::int64_t allocations() const { return counted.get_allocations_counter().total; }
  [[nodiscard]] std::int64_t outstanding() const { return counted.get_allocations_counter().value; }
};

TEST(Rmm, DeviceBufferAllocatesFromRmmAndGivesBack)
{
  STREAMKIT_REQUIRE_GPU();
  rmm_resources rmm;
  default_pool_watch const watch;
  streamkit::stream const s(0);
  std::int64_t const before = rmm.allocations();
  {
    std::vector<double> host(100000);
    for (std::size_t i = 0; i < host.size(); ++i) { host[i] = 0.5 * static_cast<double>(i); }
    auto buffer = streamkit_test::to_device(host, s, rmm.ref);
    EXPECT_EQ(rmm.allocations(), before + 1);
    EXPECT_EQ(rmm.outstanding(), 1);
    EXPECT_TRUE(buffer.resource() == streamkit::device_resource_ref(rmm.ref));
    EXPECT_EQ(streamkit_test::to_host(buffer, s), host);
  }
  s.sync();
  EXPECT_EQ(rmm.outstanding(), 0) << "the buffer gave its memory back to RMM";
  EXPECT_EQ(watch.high(), 0U) << "the default pool was used";
}

TEST(Rmm, NearestNeighbourEnginesAllocateThroughRmmOnlyAndNothingInSteadyState)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::size_t const n = 30000, m = 4000, k = 8;
  std::vector<float> lat(n), lon(n);
  for (std::size_t i = 0; i < n; ++i) {
    lat[i] = static_cast<float>(u(rng) / 2);
    lon[i] = static_cast<float>(u(rng));
  }
  // The answer with streamkit's default resource, before the watch starts.
  std::vector<std::int64_t> expected;
  {
    auto const d_lat = streamkit_test::to_device(lat, s, streamkit::default_device_resource());
    auto const d_lon = streamkit_test::to_device(lon, s, streamkit::default_device_resource());
    streamkit::device_buffer<std::int64_t> rows(n * k, s);
    streamkit::nearest_neighbor_async(streamkit::points_ref<float>::separate(d_lat.data(), d_lon.data(), n),
                                      streamkit::points_ref<float>::separate(d_lat.data() + 1, d_lon.data() + 1, m),
                                      streamkit::neighbors_ref<std::int64_t, float>::dense(rows.data(), nullptr, n, k), {}, s);
    expected = streamkit_test::to_host(rows, s);
  }

  rmm_resources rmm;
  default_pool_watch const watch;
  {
    auto const d_lat = streamkit_test::to_device(lat, s, rmm.ref);
    auto const d_lon = streamkit_test::to_device(lon, s, rmm.ref);
    auto const observations = streamkit::points_ref<float>::separate(d_lat.data(), d_lon.data(), n);
    auto const first_references = streamkit::points_ref<float>::separate(d_lat.data() + 1, d_lon.data() + 1, m);
    auto rows = streamkit_test::to_device(std::vector<std::int64_t>(n * k, -7), s, rmm.ref);
    auto const result = streamkit::neighbors_ref<std::int64_t, float>::dense(rows.data(), nullptr, n, k);

    // The one-shot search: its scratch comes from RMM and goes back in stream order.
    std::int64_t const before = rmm.allocations();
    streamkit::nearest_neighbor_async(observations, first_references, result, {}, s, rmm.ref);
    EXPECT_GT(rmm.allocations(), before);
    EXPECT_EQ(streamkit_test::to_host(rows, s), expected) << "RMM's memory gave another answer than the default resource's";

    // Each engine updated and queried every step: allocations on the first step only.
    auto const steps = [&](auto&& engine, char const* name) {
      SCOPED_TRACE(name);
      std::int64_t const at_start = rmm.allocations();
      std::int64_t after_first = 0;
      for (std::size_t step = 0; step < 5; ++step) {
        engine.update(streamkit::points_ref<float>::separate(d_lat.data() + 1 + step, d_lon.data() + 1 + step, m - step), s);
        engine.query_async(observations, result, s);
        if (step == 0) { after_first = rmm.allocations(); }
      }
      EXPECT_EQ(rmm.allocations(), after_first) << "steps of one size allocated after the first";
      engine.update(first_references, s);
      engine.query_async(observations, result, s);
      EXPECT_EQ(streamkit_test::to_host(rows, s), expected);
      return after_first - at_start;
    };
    std::int64_t const at_construction = rmm.allocations();
    streamkit::brute_force_index<float> brute_force(first_references, {}, s, rmm.ref);
    EXPECT_GT(rmm.allocations(), at_construction) << "the brute force index took its memory from RMM";
    steps(brute_force, "brute_force_index");
    steps(streamkit::tree_index<float>(first_references, {}, s, rmm.ref), "tree_index");
    streamkit::nearest_index<float> front_end(first_references, {}, s, rmm.ref);
    ASSERT_EQ(front_end.engine_for(n, k), streamkit::search_engine::tree) << "the shape must exercise the tree";
    EXPECT_GT(steps(std::move(front_end), "nearest_index"), 0) << "the front end built its tree with RMM's memory";
  }
  s.sync();
  EXPECT_EQ(rmm.outstanding(), 0) << "everything allocated was given back to RMM";
  EXPECT_EQ(watch.high(), 0U) << "streamkit allocated from the default pool instead of RMM";
}

TEST(Rmm, MinMaxAllocatesThroughRmmOnlyAndNothingInSteadyState)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::size_t const rows = 5000, cols = 37;
  std::vector<double> host(rows * cols);
  for (double& v : host) { v = u(rng); }
  std::vector<double> expected;
  {
    auto const x = streamkit_test::to_device(host, s, streamkit::default_device_resource());
    streamkit::device_buffer<double> y(host.size(), s);
    streamkit::minmax_normalize_async(streamkit::matrix_ref<double const>::dense(x.data(), rows, cols),
                                      streamkit::matrix_ref<double>::dense(y.data(), rows, cols), streamkit::minmax_options<double>{}, s);
    expected = streamkit_test::to_host(y, s);
  }

  rmm_resources rmm;
  default_pool_watch const watch;
  {
    auto const x = streamkit_test::to_device(host, s, rmm.ref);
    auto y = streamkit_test::to_device(host, s, rmm.ref);
    auto const in = streamkit::matrix_ref<double const>::dense(x.data(), rows, cols);
    auto const out = streamkit::matrix_ref<double>::dense(y.data(), rows, cols);

    std::int64_t const before = rmm.allocations();
    streamkit::minmax_normalize_async(in, out, streamkit::minmax_options<double>{}, s, nullptr, nullptr, rmm.ref);
    EXPECT_EQ(rmm.allocations(), before + 1) << "the two-pass shape allocates one scratch buffer, from RMM";
    EXPECT_EQ(streamkit_test::to_host(y, s), expected);

    streamkit::minmax_scaler<double> scaler({}, rmm.ref);
    std::int64_t after_first = 0;
    for (int step = 0; step < 5; ++step) {
      scaler.fit_async(in, s);
      scaler.partial_fit_async(in, s);
      scaler.transform_async(in, out, s);
      if (step == 0) {
        after_first = rmm.allocations();
        EXPECT_GT(after_first, before + 1) << "the scaler took its state from RMM";
      }
    }
    EXPECT_EQ(rmm.allocations(), after_first) << "fits and transforms of one shape allocated after the first";
    auto const transformed = streamkit_test::to_host(y, s);
    for (std::size_t i = 0; i < transformed.size(); ++i) {
      ASSERT_NEAR(transformed[i], expected[i], 1e-12) << "element " << i;  // the scaler's formula differs by rounding
    }
  }
  s.sync();
  EXPECT_EQ(rmm.outstanding(), 0);
  EXPECT_EQ(watch.high(), 0U) << "streamkit allocated from the default pool instead of RMM";
}

TEST(Rmm, DispatcherWorkspacesComeFromRmmAndTimeStepsAllocateNothing)
{
  STREAMKIT_REQUIRE_GPU();
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  std::size_t const n = 20000, m = 500;
  std::vector<float> lat(n), lon(n);
  for (std::size_t i = 0; i < n; ++i) {
    lat[i] = static_cast<float>(u(rng) / 2);
    lon[i] = static_cast<float>(u(rng));
  }
  auto const references = streamkit::points_ref<float>::separate(lat.data(), lon.data(), m);
  auto const observations = streamkit::points_ref<float>::separate(lat.data(), lon.data(), n);
  std::vector<std::int64_t> expected(n), index(n);
  {
    streamkit::dispatcher workers({{0, 0}, 2});
    streamkit::dispatch_nearest_neighbor(workers, observations, references,
                                         streamkit::neighbors_ref<std::int64_t, float>::dense(expected.data(), nullptr, n), {});
  }

  rmm_resources rmm;
  default_pool_watch const watch;
  {
    // Every device's workspaces and workloads from RMM (one device here: the resource is per device).
    streamkit::dispatcher workers({{0, 0}, 2}, [&](int) { return streamkit::device_resource_ref(rmm.ref); });
    std::int64_t const before = rmm.allocations();
    streamkit::multi_gpu_nearest_neighbor<float> search(workers, references, {});
    std::int64_t after_first = 0;
    for (int step = 0; step < 4; ++step) {
      search.update(references);
      search.query(observations, streamkit::neighbors_ref<std::int64_t, float>::dense(index.data(), nullptr, n), 2500);
      if (step == 0) {
        after_first = rmm.allocations();
        EXPECT_GT(after_first, before);
      }
    }
    EXPECT_EQ(rmm.allocations(), after_first) << "time steps of one size allocated after the first";
    EXPECT_EQ(index, expected);

    std::vector<double> matrix(600 * 40);
    for (double& v : matrix) { v = u(rng); }
    std::int64_t const before_minmax = rmm.allocations();
    for (int step = 0; step < 3; ++step) {
      std::vector<double> copy = matrix;
      streamkit::dispatch_minmax_normalize<double>(workers, {streamkit::matrix_ref<double const>::dense(copy.data(), 600, 40)},
                                                   {streamkit::matrix_ref<double>::dense(copy.data(), 600, 40)});
      if (step == 0) {
        EXPECT_GT(rmm.allocations(), before_minmax);
        after_first = rmm.allocations();
      }
      EXPECT_GE(*std::min_element(copy.begin(), copy.end()), 0.0);
      EXPECT_LE(*std::max_element(copy.begin(), copy.end()), 1.0);
    }
    EXPECT_EQ(rmm.allocations(), after_first);
  }
  EXPECT_EQ(rmm.outstanding(), 0) << "the dispatcher gave every workspace back to RMM";
  EXPECT_EQ(watch.high(), 0U) << "streamkit allocated from the default pool instead of RMM";
}

}  // namespace
