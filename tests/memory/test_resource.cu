// Memory resources: the default resource, a caller's resource through every allocating call, and
// the allocation-failure exception.
#include "gpu_test.hpp"
#include "test_support.hpp"

#include <streamkit/memory/resource.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <random>
#include <vector>

namespace {

static_assert(cuda::mr::async_resource_with<streamkit::stream_ordered_resource, cuda::mr::device_accessible>);

/// Counts what passes through it to the default resource.
class counting_resource {
 public:
  void* allocate(std::size_t bytes, std::size_t alignment) { return upstream_.allocate(bytes, alignment); }
  void deallocate(void* memory, std::size_t bytes, std::size_t alignment) noexcept { upstream_.deallocate(memory, bytes, alignment); }
  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda::stream_ref stream)
  {
    void* const memory = upstream_.allocate_async(bytes, alignment, stream);
    ++allocations;
    return memory;
  }
  void deallocate_async(void* memory, std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) noexcept
  {
    ++deallocations;
    upstream_.deallocate_async(memory, bytes, alignment, stream);
  }
  bool operator==(counting_resource const& other) const noexcept { return this == &other; }
  bool operator!=(counting_resource const& other) const noexcept { return this != &other; }
  friend void get_property(counting_resource const&, cuda::mr::device_accessible) noexcept {}

  std::atomic<std::size_t> allocations{0};
  std::atomic<std::size_t> deallocations{0};

 private:
  streamkit::stream_ordered_resource upstream_;
};

TEST(BadAlloc, IsAStdBadAllocThatCarriesTheCudaError)
{
  try {
    throw streamkit::bad_alloc(cudaErrorMemoryAllocation, "cudaMallocAsync(&memory, bytes, stream)", "resource.hpp", 7);
  } catch (std::bad_alloc const& caught) {
    std::string const what = caught.what();
    EXPECT_NE(what.find("cudaErrorMemoryAllocation"), std::string::npos) << what;
    EXPECT_NE(what.find("cudaMallocAsync(&memory, bytes, stream)"), std::string::npos) << what;
    EXPECT_NE(what.find("resource.hpp:7"), std::string::npos) << what;
    auto const* typed = dynamic_cast<streamkit::bad_alloc const*>(&caught);
    ASSERT_NE(typed, nullptr);
    EXPECT_EQ(typed->error(), cudaErrorMemoryAllocation);
  }
}

TEST(BadAlloc, OutOfDeviceMemoryThrowsIt)
{
  STREAMKIT_REQUIRE_GPU();
  streamkit::stream const s(0);
  try {
    streamkit::device_buffer<std::byte> impossible(std::size_t{1} << 52, s);  // 4 PiB
    ADD_FAILURE() << "a 4 PiB allocation succeeded";
  } catch (std::bad_alloc const& caught) {
    auto const* typed = dynamic_cast<streamkit::bad_alloc const*>(&caught);
    ASSERT_NE(typed, nullptr) << caught.what();
    EXPECT_EQ(typed->error(), cudaErrorMemoryAllocation);
  }
  streamkit::device_buffer<float> fine(16, s);  // the failure left nothing behind
  s.sync();
}

TEST(MemoryResource, AlignmentAboveTheDevicesIsRejected)
{
  streamkit::stream_ordered_resource resource;
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(resource.allocate_async(64, 512, cuda::stream_ref(cudaStream_t{}))),
                              std::invalid_argument, "alignment: 512");
  STREAMKIT_EXPECT_THROW_WITH(static_cast<void>(resource.allocate(64, 3)), std::invalid_argument, "alignment: 3");
}

TEST(MemoryResource, EveryAllocationGoesThroughTheCallersResourceAndSteadyStateLoopsAllocateNothing)
{
  STREAMKIT_REQUIRE_GPU();
  counting_resource counter;
  streamkit::device_resource_ref const resource(counter);
  streamkit::stream const s(0);
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  std::uniform_real_distribution<double> u(-3.0, 3.0);
  {
    // Min-max: a scaler fitted and applied each step allocates on its first fit only.
    std::size_t const rows = 5000, cols = 37;
    std::vector<double> host(rows * cols);
    for (double& v : host) { v = u(rng); }
    auto const x = streamkit_test::to_device(host, s);
    auto y = streamkit_test::to_device(host, s);
    auto const in = streamkit::matrix_ref<double const>::dense(x.data(), rows, cols);
    auto const out = streamkit::matrix_ref<double>::dense(y.data(), rows, cols);
    streamkit::minmax_scaler<double> scaler({}, resource);
    std::size_t after_first = 0;
    for (int step = 0; step < 5; ++step) {
      scaler.fit_async(in, s);
      scaler.partial_fit_async(in, s);
      scaler.transform_async(in, out, s);
      scaler.inverse_transform_async(out, out, s);
      if (step == 0) {
        after_first = counter.allocations;
        EXPECT_GT(after_first, 0U) << "the scaler must allocate from the resource it was given";
      }
    }
    EXPECT_EQ(counter.allocations, after_first) << "a loop of fits and transforms of one shape allocates nothing after the first";
    // The one-shot calls take the resource too: the fused shapes allocate nothing, the others one buffer.
    std::size_t const before = counter.allocations;
    streamkit::minmax_normalize_async(streamkit::matrix_ref<double const>::dense(x.data(), 64, cols), streamkit::matrix_ref<double>::dense(y.data(), 64, cols),
                                      streamkit::minmax_options<double>{}, s, nullptr, nullptr, resource);
    EXPECT_EQ(counter.allocations, before) << "64 row-major rows are read once, without scratch";
    streamkit::minmax_normalize_async(in, out, streamkit::minmax_options<double>{}, s, nullptr, nullptr, resource);
    EXPECT_EQ(counter.allocations, before + 1);
    streamkit::column_minmax_async(in, y.data(), y.data() + cols, s, resource);
    EXPECT_EQ(counter.allocations, before + 2);
    s.sync();
  }
  {
    // Nearest neighbour: the engine updated and queried every step allocates on its first step only.
    std::size_t const n = 30000, m = 4000;
    std::vector<float> lat(n), lon(n);
    for (std::size_t i = 0; i < n; ++i) {
      lat[i] = static_cast<float>(u(rng) / 2);
      lon[i] = static_cast<float>(u(rng));
    }
    auto const d_lat = streamkit_test::to_device(lat, s), d_lon = streamkit_test::to_device(lon, s);
    auto const observations = streamkit::points_ref<float>::separate(d_lat.data(), d_lon.data(), n);
    // Every engine: the brute force (k = 1 and k = 8), the tree, and the front end (which picks the tree
    // here and builds it inside its first query after each update).
    auto const steps = [&](auto&& engine, std::size_t k, char const* name) {
      SCOPED_TRACE(name);
      auto d_rows = streamkit_test::to_device(std::vector<std::int32_t>(n * k, -7), s);
      auto const result = streamkit::neighbors_ref<std::int32_t, float>::dense(d_rows.data(), nullptr, n, k);
      std::size_t after_first = 0;
      for (std::size_t step = 0; step < 5; ++step) {
        engine.update(streamkit::points_ref<float>::separate(d_lat.data() + step, d_lon.data() + step, m - step), s);
        engine.query_async(observations, result, s);
        if (step == 0) { after_first = counter.allocations; }
      }
      EXPECT_EQ(counter.allocations, after_first) << "updates (no larger) and queries of one size allocate nothing after the first";
      s.sync();
    };
    auto const first_references = streamkit::points_ref<float>::separate(d_lat.data() + 1, d_lon.data() + 1, m);
    std::size_t const before = counter.allocations;
    steps(streamkit::brute_force_index<float>(first_references, {}, s, resource), 1, "brute_force_index, k = 1");
    EXPECT_GT(counter.allocations, before);
    steps(streamkit::brute_force_index<float>(first_references, {}, s, resource), 8, "brute_force_index, k = 8");
    steps(streamkit::tree_index<float>(first_references, {}, s, resource), 8, "tree_index, k = 8");
    streamkit::nearest_index<float> front_end(first_references, {}, s, resource);
    ASSERT_EQ(front_end.engine_for(n, 8), streamkit::search_engine::tree) << "the shape must exercise the tree";
    steps(std::move(front_end), 8, "nearest_index, k = 8");
  }
  {
    // The dispatcher's workspaces and the multi-GPU workloads' state come from the resource of each device.
    streamkit::dispatcher workers({{0, 0}, 2}, [&](int) { return resource; });
    std::size_t const n = 20000, m = 500;
    std::vector<float> lat(n), lon(n);
    for (std::size_t i = 0; i < n; ++i) {
      lat[i] = static_cast<float>(u(rng) / 2);
      lon[i] = static_cast<float>(u(rng));
    }
    std::vector<std::int32_t> index(n);
    std::size_t const before = counter.allocations;
    auto const references = streamkit::points_ref<float>::separate(lat.data(), lon.data(), m);
    streamkit::multi_gpu_nearest_neighbor<float> search(workers, references, {});
    std::size_t after_first = 0;
    for (int step = 0; step < 4; ++step) {
      search.update(references);
      search.query(streamkit::points_ref<float>::separate(lat.data(), lon.data(), n),
                   streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), nullptr, n), 2500);
      if (step == 0) {
        after_first = counter.allocations;
        EXPECT_GT(after_first, before);
      }
    }
    EXPECT_EQ(counter.allocations, after_first) << "time steps of one size allocate nothing after the first";
    std::vector<double> matrix(600 * 40, 1.5);
    std::size_t const before_minmax = counter.allocations;
    for (int step = 0; step < 3; ++step) {
      streamkit::dispatch_minmax_normalize<double>(workers, {streamkit::matrix_ref<double const>::dense(matrix.data(), 600, 40)},
                                                   {streamkit::matrix_ref<double>::dense(matrix.data(), 600, 40)});
      if (step == 0) {
        EXPECT_GT(counter.allocations, before_minmax);
        after_first = counter.allocations;
      }
    }
    EXPECT_EQ(counter.allocations, after_first);
  }
  s.sync();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(counter.deallocations, counter.allocations) << "everything allocated was given back to the resource";
}

}  // namespace
