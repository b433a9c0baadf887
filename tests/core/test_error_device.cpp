// Host-side tests of the error model and device queries; they run with and without a GPU.
#include "gpu_test.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace {

TEST(Error, CudaErrorCarriesCodeNameCallAndLocation)
{
  streamkit::cuda_error const error(cudaErrorMemoryAllocation, "cudaMalloc(&p, n)", "file.cu", 42);
  EXPECT_EQ(error.error(), cudaErrorMemoryAllocation);
  EXPECT_STREQ(error.name(), "cudaErrorMemoryAllocation");
  EXPECT_EQ(error.call(), "cudaMalloc(&p, n)");
  EXPECT_EQ(error.file(), "file.cu");
  EXPECT_EQ(error.line(), 42);
  std::string const text = error.what();
  EXPECT_NE(text.find("cudaErrorMemoryAllocation"), std::string::npos) << text;
  EXPECT_NE(text.find("out of memory"), std::string::npos) << text;
  EXPECT_NE(text.find("cudaMalloc(&p, n)"), std::string::npos) << text;
  EXPECT_NE(text.find("file.cu:42"), std::string::npos) << text;
  static_assert(std::is_base_of_v<std::runtime_error, streamkit::cuda_error>);
}

TEST(Error, TryMacroThrowsOnFailureOnly)
{
  EXPECT_NO_THROW(STREAMKIT_CUDA_TRY(cudaSuccess));
  try {
    STREAMKIT_CUDA_TRY(cudaErrorInvalidValue);
    FAIL() << "no exception";
  } catch (streamkit::cuda_error const& error) {
    EXPECT_EQ(error.error(), cudaErrorInvalidValue);
    EXPECT_EQ(error.call(), "cudaErrorInvalidValue");
    EXPECT_NE(error.file().find("core/test_error_device.cpp"), std::string::npos);
  }
}

TEST(Error, ExpectsThrowsTheNamedTypeWithTheMessage)
{
  int const width = -3;
  STREAMKIT_EXPECT_THROW_WITH(STREAMKIT_EXPECTS(width > 0, std::invalid_argument, "width: " + std::to_string(width)),
                              std::invalid_argument, "width: -3");
  EXPECT_NO_THROW(STREAMKIT_EXPECTS(true, std::invalid_argument, "unused"));
}

TEST(Error, ReleaseErrorsAtShutdownAreIgnoredAndOthersAssertInDebugBuilds)
{
  streamkit::detail::ignore_release_error(cudaSuccess);
  streamkit::detail::ignore_release_error(cudaErrorCudartUnloading);
  streamkit::detail::ignore_release_error(cudaErrorContextIsDestroyed);
#ifdef NDEBUG
  streamkit::detail::ignore_release_error(cudaErrorInvalidValue);  // cleared, not reported, in release builds
#else
  EXPECT_DEATH(streamkit::detail::ignore_release_error(cudaErrorInvalidValue), "releasing a CUDA resource failed");
#endif
}

TEST(Error, AllocationMacroThrowsBadAlloc)
{
  EXPECT_THROW(STREAMKIT_CUDA_TRY_ALLOC(cudaErrorMemoryAllocation), streamkit::bad_alloc);
  EXPECT_THROW(STREAMKIT_CUDA_TRY_ALLOC(cudaErrorMemoryAllocation), std::bad_alloc);
  STREAMKIT_CUDA_TRY_ALLOC(cudaSuccess);
}

TEST(Device, CountNeverThrows)
{
  int count = -1;
  EXPECT_NO_THROW(count = streamkit::device_count());
  EXPECT_GE(count, 0);
}

TEST(Device, OutOfRangeIdNamesTheIdAndTheRange)
{
  int const count = streamkit::device_count();
  STREAMKIT_EXPECT_THROW_WITH(streamkit::device{count}, std::out_of_range,
                              "device id " + std::to_string(count) + " is out of range [0, " + std::to_string(count) + ")");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::device{-1}, std::out_of_range, "device id -1");
}

TEST(Device, PropertiesOfEveryDevice)
{
  STREAMKIT_REQUIRE_GPU();
  for (int id = 0; id < streamkit::device_count(); ++id) {
    streamkit::device const d(id);
    EXPECT_EQ(d.id(), id);
    EXPECT_FALSE(d.name().empty());
    EXPECT_GT(d.sm_count(), 0);
    EXPECT_GE(d.compute_capability().first, 3);
    EXPECT_GE(d.copy_engine_count(), 1);
    EXPECT_GT(d.total_memory(), 0U);
    EXPECT_LE(d.free_memory(), d.total_memory());
    auto const [least, greatest] = d.stream_priority_range();
    EXPECT_LE(greatest, least);
  }
}

TEST(Device, GuardSwitchesAndRestores)
{
  STREAMKIT_REQUIRE_GPU();
  int const count = streamkit::device_count();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  {
    streamkit::device_guard guard(count - 1);
    EXPECT_EQ(streamkit::current_device_id(), count - 1);
    {
      streamkit::device_guard same(count - 1);
      EXPECT_EQ(streamkit::current_device_id(), count - 1);
    }
    EXPECT_EQ(streamkit::current_device_id(), count - 1);
  }
  EXPECT_EQ(streamkit::current_device_id(), 0);
  EXPECT_THROW(streamkit::device_guard(count + 5), streamkit::cuda_error);
  EXPECT_EQ(streamkit::current_device_id(), 0);
}

}  // namespace
