// Column min-max scaling against a float64 CPU reference.
#include "gpu_test.hpp"
#include "preprocessing/minmax_reference.hpp"
#include "spin_kernel.cuh"
#include "test_support.hpp"

#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/core/stream.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

namespace {

using streamkit::layout;
using streamkit::matrix_ref;
using streamkit_test::close;
using streamkit_test::expect_scaled;
using streamkit_test::fill_random;
using streamkit_test::fit_reference;
using streamkit_test::host_matrix;
using streamkit_test::poison;
using streamkit_test::reference_fit;
using streamkit_test::to_device;
using streamkit_test::transform_reference;
using streamkit_test::to_host;

/// Runs minmax_normalize on the device for `in` and returns the output (poisoned beforehand).
template <class T>
host_matrix<T> normalize_on_device(host_matrix<T> const& in, streamkit::minmax_options<T> const& options, bool in_place,
                                   streamkit::stream const& s, layout out_order, std::size_t out_pad = 0)
{
  auto d_in = to_device(in.storage, s);
  host_matrix<T> out(in.rows, in.cols, in_place ? in.order : out_order, in_place ? in.ld - (in.order == layout::row_major ? in.cols : in.rows) : out_pad);
  if (in_place) {
    streamkit::minmax_normalize_async<T>(in.ref(d_in.data()), in.ref(d_in.data()), options, s);
    out.storage = to_host(d_in, s);
    return out;
  }
  auto d_out = to_device(out.storage, s);
  streamkit::minmax_normalize_async<T>(in.ref(d_in.data()), out.ref(d_out.data()), options, s);
  out.storage = to_host(d_out, s);
  return out;
}

template <class T>
class MinMax : public ::testing::Test {
 protected:
  void SetUp() override { STREAMKIT_REQUIRE_GPU(); }
  std::mt19937_64 rng{streamkit_test::fresh_seed()};
};
using value_types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(MinMax, value_types);

TYPED_TEST(MinMax, EveryShapeLayoutAndPitchMatchesTheReference)
{
  using T = TypeParam;
  streamkit::stream const s(0);
  struct shape { std::size_t rows, cols; };
  for (layout order : {layout::row_major, layout::column_major}) {
    for (auto const [rows, cols] : {shape{1, 1}, shape{1, 37}, shape{37, 1}, shape{60, 1000}, shape{64, 33}, shape{65, 100},
                                    shape{256, 17}, shape{257, 5}, shape{3000, 7}, shape{2, 70001},
                                    shape{5000, 16}, shape{70000, 4}, shape{20000, 1},
                                    // column-major on sm_90: two-pass below the cluster kernel's shortest column, then
                                    // clusters of 1, 2, 3 and 8 blocks, the longest column for double, one beyond, and
                                    // two-pass for both types
                                    shape{1535, 3}, shape{1536, 3}, shape{8193, 2}, shape{16385, 2}, shape{114688, 2},
                                    shape{114689, 3}, shape{300000, 2}}) {
      for (std::size_t pad : {std::size_t{0}, std::size_t{3}}) {
        SCOPED_TRACE(::testing::Message() << rows << " x " << cols << (order == layout::row_major ? " row" : " column")
                                          << "-major, pad " << pad);
        host_matrix<T> in(rows, cols, order, pad);
        fill_random(in, this->rng);
        streamkit::minmax_options<T> const options{T(-2), T(3), false};
        expect_scaled(in, normalize_on_device(in, options, false, s, order, pad), -2, 3, false);
        expect_scaled(in, normalize_on_device(in, options, true, s, order), -2, 3, false);
        layout const other = order == layout::row_major ? layout::column_major : layout::row_major;
        expect_scaled(in, normalize_on_device(in, options, false, s, other, 1), -2, 3, false);
      }
    }
  }
}

TYPED_TEST(MinMax, BlockingFormsWaitForWorkAlreadyOnTheirStream)
{
  // The input lands on the caller's stream behind a 100 ms kernel. The blocking forms take that
  // stream, so they scale the data that lands (before they took none and ran on the thread's default
  // stream, which does not wait for a non-blocking stream: they read the poison). The mutable view
  // passes as the input without template arguments.
  using T = TypeParam;
  streamkit::stream const s(0);
  host_matrix<T> in(300, 20, layout::column_major);
  fill_random(in, this->rng);
  auto d_x = to_device(std::vector<T>(in.storage.size(), T(poison)), s);
  auto d_min = to_device(std::vector<T>(20, T(poison)), s);
  auto d_max = to_device(std::vector<T>(20, T(poison)), s);
  auto const x = in.ref(d_x.data());
  s.sync();
  streamkit_test::spin_then_increment<<<1, 32, 0, s.value()>>>(5 * streamkit_test::twenty_ms, nullptr);
  ASSERT_EQ(cudaMemcpyAsync(d_x.data(), in.storage.data(), in.storage.size() * sizeof(T), cudaMemcpyHostToDevice, s.value()),
            cudaSuccess);
  streamkit::column_minmax(x, d_min.data(), d_max.data(), s);
  streamkit::minmax_normalize(x, x, {T(0), T(1), false}, s);
  host_matrix<T> out = in;
  out.storage = to_host(d_x, s);
  expect_scaled(in, out, 0, 1, false);
  auto const f = fit_reference(in, 0, 1);
  auto const mins = to_host(d_min, s);
  for (std::size_t j = 0; j < 20; ++j) { EXPECT_EQ(static_cast<double>(mins[j]), f.min[j]) << j; }
}

TYPED_TEST(MinMax, ConstantNearConstantNanAndInfiniteColumns)
{
  using T = TypeParam;
  streamkit::stream const s(0);
  T const nan = std::numeric_limits<T>::quiet_NaN();
  T const inf = std::numeric_limits<T>::infinity();
  for (std::size_t rows : {std::size_t{50}, std::size_t{200}, std::size_t{5000}}) {
    for (layout order : {layout::row_major, layout::column_major}) {
      host_matrix<T> in(rows, 8, order);
      fill_random(in, this->rng);
      for (std::size_t i = 0; i < rows; ++i) {
        in.at(i, 0) = T(7.25);                                   // constant → lo
        in.at(i, 1) = T(1) + T(i % 5) * T(1e-3);                 // near-constant, well above 10 eps
        if (i % 3 == 0) { in.at(i, 2) = nan; }                   // NaN ignored in the fit, kept in the output
        in.at(i, 3) = nan;                                       // all NaN
        if (i == rows / 2) { in.at(i, 4) = inf; }                // +inf
        if (i == rows / 3) { in.at(i, 5) = -inf; }               // -inf
        if (i == 1) { in.at(i, 6) = nan; }
      }
      expect_scaled(in, normalize_on_device(in, streamkit::minmax_options<T>{T(0), T(1), false}, false, s, order), 0, 1, false);
      auto const out = normalize_on_device(in, streamkit::minmax_options<T>{T(0), T(1), false}, false, s, order);
      EXPECT_EQ(out.at(0, 0), T(0));
      EXPECT_TRUE(std::isnan(out.at(0, 3)));
    }
  }
}

TYPED_TEST(MinMax, ScalerFeatureRangeClipAndInverse)
{
  using T = TypeParam;
  streamkit::stream const s(0);
  host_matrix<T> train(500, 40, layout::row_major);
  fill_random(train, this->rng);
  host_matrix<T> test(300, 40, layout::row_major);
  std::uniform_real_distribution<double> u(-3000.0, 3000.0);  // beyond the training range
  for (auto& v : test.storage) { v = static_cast<T>(u(this->rng)); }
  auto const d_train = to_device(train.storage, s);
  auto const d_test = to_device(test.storage, s);
  for (bool clip : {false, true}) {
    streamkit::minmax_scaler<T> scaler({T(-1), T(4), clip});
    EXPECT_EQ(scaler.feature_range(), std::make_pair(T(-1), T(4)));
    scaler.fit_async(train.ref(const_cast<T*>(d_train.data())), s);
    host_matrix<T> out(300, 40, layout::row_major);
    auto d_out = to_device(out.storage, s);
    scaler.transform_async(test.ref(const_cast<T*>(d_test.data())), out.ref(d_out.data()), s);
    out.storage = to_host(d_out, s);
    auto const f = fit_reference(train, -1, 4);
    auto const mins = scaler.data_min_host();
    auto const maxs = scaler.data_max_host();
    for (std::size_t j = 0; j < 40; ++j) {
      EXPECT_EQ(static_cast<double>(mins[j]), f.min[j]);
      EXPECT_EQ(static_cast<double>(maxs[j]), f.max[j]);
      for (std::size_t i = 0; i < 300; ++i) {
        ASSERT_TRUE(close<T>(out.at(i, j), transform_reference(test.at(i, j), f.min[j], f.scale[j], -1, 4, clip), 5.0 + std::abs(test.at(i, j)) * std::abs(f.scale[j])))
          << i << ", " << j;
      }
    }
    if (!clip) {
      host_matrix<T> back(300, 40, layout::row_major);
      auto d_back = to_device(back.storage, s);
      scaler.inverse_transform_async(out.ref(d_out.data()), back.ref(d_back.data()), s);
      back.storage = to_host(d_back, s);
      for (std::size_t i = 0; i < 300; ++i) {
        for (std::size_t j = 0; j < 40; ++j) { ASSERT_TRUE(close<T>(back.at(i, j), test.at(i, j), 3000.0)) << i << ", " << j; }
      }
    }
    // A moved-to scaler gives the same answer; the moved-from one is unfitted and refuses to transform.
    streamkit::minmax_scaler<T> moved(std::move(scaler));
    EXPECT_FALSE(scaler.fitted());  // NOLINT(bugprone-use-after-move): the moved-from state is under test
    STREAMKIT_EXPECT_THROW_WITH(scaler.transform_async(test.ref(const_cast<T*>(d_test.data())), out.ref(d_out.data()), s),
                                std::logic_error, "transform() before fit()");
    auto d_again = to_device(std::vector<T>(out.storage.size(), T(-7)), s);
    moved.transform_async(test.ref(const_cast<T*>(d_test.data())), out.ref(d_again.data()), s);
    host_matrix<T> again = out;
    again.storage = to_host(d_again, s);
    for (std::size_t i = 0; i < 300; ++i) {
      for (std::size_t j = 0; j < 40; ++j) {  // bitwise, as NaN inputs give NaN outputs
        T const a = again.at(i, j), b = out.at(i, j);
        ASSERT_EQ(std::memcmp(&a, &b, sizeof(T)), 0) << i << ", " << j;
      }
    }
  }
}

TYPED_TEST(MinMax, PartialFitIsBitIdenticalToOneFit)
{
  using T = TypeParam;
  streamkit::stream const s(0);
  host_matrix<T> all(900, 70, layout::row_major);
  fill_random(all, this->rng);
  all.at(5, 3) = std::numeric_limits<T>::quiet_NaN();
  auto const d_all = to_device(all.storage, s);
  streamkit::minmax_scaler<T> whole;
  whole.fit_async(all.ref(const_cast<T*>(d_all.data())), s);
  streamkit::minmax_scaler<T> batches;
  for (std::size_t begin : {0, 100, 550}) {
    std::size_t const end = begin == 0 ? 100 : (begin == 100 ? 550 : 900);
    matrix_ref<T const> const part{d_all.data() + begin * 70, end - begin, 70, 70, layout::row_major};
    batches.partial_fit_async(part, s);
  }
  for (auto [a, b] : {std::pair{whole.data_min_host(), batches.data_min_host()}, std::pair{whole.data_max_host(), batches.data_max_host()},
                      std::pair{whole.scale_host(), batches.scale_host()}}) {
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(T)));
  }
  // A refit forgets earlier batches.
  matrix_ref<T const> const first{d_all.data(), 10, 70, 70, layout::row_major};
  batches.fit_async(first, s);
  EXPECT_NE(0, std::memcmp(whole.data_min_host().data(), batches.data_min_host().data(), 70 * sizeof(T)));
}

/// How many elements of `out` differ from transforming `x` with the fit `f` to [0, 1].
template <class T>
std::size_t mismatches(host_matrix<T> const& x, host_matrix<T> const& out, reference_fit const& f)
{
  std::size_t count = 0;
  for (std::size_t i = 0; i < x.rows; ++i) {
    for (std::size_t j = 0; j < x.cols; ++j) {
      double const want = transform_reference(x.at(i, j), f.min[j], f.scale[j], 0, 1, false);
      if (!close<T>(out.at(i, j), want, 5.0 + std::abs(x.at(i, j)) * std::abs(f.scale[j]))) { ++count; }
    }
  }
  return count;
}

TYPED_TEST(MinMax, ScalerOrdersFitsAndTransformsOnDifferentStreams)
{
  using T = TypeParam;
  streamkit::stream const first(0);
  streamkit::stream const second(0);
  std::size_t const rows = 2048, cols = 512;
  host_matrix<T> narrow(rows, cols, layout::row_major), wide(rows, cols, layout::row_major), x(rows, cols, layout::row_major);
  for (auto* m : {&narrow, &wide, &x}) { fill_random(*m, this->rng); }
  for (std::size_t i = 0; i < rows; ++i) {  // so that the two fits give different scales
    for (std::size_t j = 0; j < cols; ++j) { narrow.at(i, j) /= T(10); }
  }
  auto const d_narrow = to_device(narrow.storage, first);
  auto const d_wide = to_device(wide.storage, first);
  auto const d_x = to_device(x.storage, first);
  host_matrix<T> out(rows, cols, layout::row_major);
  auto d_out = to_device(out.storage, first);
  first.sync();
  streamkit::minmax_scaler<T> scaler;
  scaler.fit_async(narrow.ref(const_cast<T*>(d_narrow.data())), first);
  long long const delay = streamkit_test::twenty_ms / 4;

  // Read after write: a transform on `second` uses the refit enqueued before it on `first`, kept late by a spin.
  streamkit_test::spin_then_increment<<<1, 32, 0, first.value()>>>(delay, nullptr);
  scaler.fit_async(wide.ref(const_cast<T*>(d_wide.data())), first);
  scaler.transform_async(x.ref(const_cast<T*>(d_x.data())), out.ref(d_out.data()), second);
  out.storage = to_host(d_out, second);
  auto const wide_fit = fit_reference(wide, 0, 1);
  EXPECT_EQ(mismatches(x, out, wide_fit), 0U) << "the transform did not wait for the fit on another stream";

  // Write after read: a refit on `first` waits for a transform still pending on `second`.
  auto d_late = to_device(std::vector<T>(out.storage.size(), T(poison)), second);
  streamkit_test::spin_then_increment<<<1, 32, 0, second.value()>>>(delay, nullptr);
  scaler.transform_async(x.ref(const_cast<T*>(d_x.data())), out.ref(d_late.data()), second);
  scaler.fit_async(narrow.ref(const_cast<T*>(d_narrow.data())), first);
  out.storage = to_host(d_late, second);
  EXPECT_EQ(mismatches(x, out, wide_fit), 0U) << "the fit overwrote the state a transform on another stream still needed";
  auto const narrow_fit = fit_reference(narrow, 0, 1);
  auto const mins = scaler.data_min_host();
  ASSERT_EQ(mins.size(), cols);
  for (std::size_t j = 0; j < cols; ++j) { ASSERT_EQ(static_cast<double>(mins[j]), narrow_fit.min[j]) << j; }
}

TYPED_TEST(MinMax, ScalerIsSafeToShareBetweenThreads)
{
  using T = TypeParam;
  constexpr std::size_t threads = 8;
  std::size_t const rows = 256, cols = 300;
  streamkit::stream const setup(0);
  host_matrix<T> all(rows * threads, cols, layout::row_major);
  fill_random(all, this->rng);
  auto const d_all = to_device(all.storage, setup);
  host_matrix<T> x(rows, cols, layout::row_major), other(rows, cols, layout::row_major);
  fill_random(x, this->rng);
  fill_random(other, this->rng);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) { other.at(i, j) /= T(10); }
  }
  auto const d_x = to_device(x.storage, setup);
  auto const d_other = to_device(other.storage, setup);
  setup.sync();
  auto const batch = [&](std::size_t t) {
    return matrix_ref<T const>{d_all.data() + t * rows * cols, rows, cols, cols, layout::row_major};
  };

  // Partial fits from every thread at once: the running min and max cover all the batches.
  streamkit::minmax_scaler<T> scaler;
  std::vector<std::thread> workers;
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      streamkit::stream const s(0);
      for (int repeat = 0; repeat < 4; ++repeat) { scaler.partial_fit_async(batch(t), s); }
    });
  }
  for (auto& w : workers) { w.join(); }
  workers.clear();
  auto const whole = fit_reference(all, 0, 1);
  auto const mins = scaler.data_min_host();
  auto const maxs = scaler.data_max_host();
  ASSERT_EQ(mins.size(), cols);
  for (std::size_t j = 0; j < cols; ++j) {
    ASSERT_EQ(static_cast<double>(mins[j]), whole.min[j]) << j;
    ASSERT_EQ(static_cast<double>(maxs[j]), whole.max[j]) << j;
  }

  // Fits of two data sets and transforms interleaved from every thread: each transform sees one whole fit.
  scaler.fit(x.ref(const_cast<T*>(d_x.data())), setup);
  auto const fit_x = fit_reference(x, 0, 1);
  auto const fit_other = fit_reference(other, 0, 1);
  std::atomic<int> torn{0}, transforms{0};
  for (std::size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      streamkit::stream const s(0);
      host_matrix<T> out(rows, cols, layout::row_major);
      auto d_out = to_device(out.storage, s);
      for (std::size_t i = 0; i < 12; ++i) {
        if ((t + i) % 3 == 0) {
          scaler.fit_async(i % 2 == 0 ? x.ref(const_cast<T*>(d_x.data())) : other.ref(const_cast<T*>(d_other.data())), s);
          continue;
        }
        scaler.transform_async(x.ref(const_cast<T*>(d_x.data())), out.ref(d_out.data()), s);
        out.storage = to_host(d_out, s);
        ++transforms;
        if (mismatches(x, out, fit_x) != 0 && mismatches(x, out, fit_other) != 0) { ++torn; }
      }
    });
  }
  for (auto& w : workers) { w.join(); }
  EXPECT_EQ(torn.load(), 0) << "of " << transforms.load() << " transforms";
  EXPECT_GT(transforms.load(), 0);
}

TEST(MinMaxScaler, RejectsAStreamOfAnotherDevice)
{
  if (streamkit::device_count() < 2) { GTEST_SKIP() << "needs two GPUs; " << streamkit::device_count() << " visible"; }
  streamkit::stream const zero(0);
  streamkit::stream const one(1);
  host_matrix<double> x(10, 3, layout::row_major);
  std::mt19937_64 rng(streamkit_test::fresh_seed());
  fill_random(x, rng);
  auto const d_x = to_device(x.storage, zero);
  auto d_out = to_device(x.storage, zero);
  streamkit::minmax_scaler<double> scaler;
  scaler.fit_async(x.ref(const_cast<double*>(d_x.data())), zero);
  STREAMKIT_EXPECT_THROW_WITH(scaler.transform_async(x.ref(const_cast<double*>(d_x.data())), x.ref(d_out.data()), one),
                              std::invalid_argument, "stream: belongs to device 1 but the scaler was fitted on device 0");
  zero.sync();
}

TYPED_TEST(MinMax, ColumnMinmaxAndBadInputsWriteNothing)
{
  using T = TypeParam;
  streamkit::stream const s(0);
  host_matrix<T> in(123, 45, layout::column_major, 2);
  fill_random(in, this->rng);
  auto const d_in = to_device(in.storage, s);
  auto d_min = to_device(std::vector<T>(45, T(poison)), s);
  auto d_max = to_device(std::vector<T>(45, T(poison)), s);
  streamkit::column_minmax_async<T>(in.ref(const_cast<T*>(d_in.data())), d_min.data(), d_max.data(), s);
  auto const f = fit_reference(in, 0, 1);
  auto const mins = to_host(d_min, s);
  auto const maxs = to_host(d_max, s);
  for (std::size_t j = 0; j < 45; ++j) {
    EXPECT_EQ(static_cast<double>(mins[j]), f.min[j]);
    EXPECT_EQ(static_cast<double>(maxs[j]), f.max[j]);
  }
  host_matrix<T> out(123, 45, layout::column_major, 2);
  auto d_out = to_device(out.storage, s);
  auto const in_ref = in.ref(const_cast<T*>(d_in.data()));
  auto const out_ref = out.ref(d_out.data());
  EXPECT_THROW(streamkit::minmax_normalize_async<T>(in_ref, out_ref, {T(1), T(1), false}, s), std::invalid_argument);
  EXPECT_THROW(streamkit::minmax_normalize_async<T>(in_ref, matrix_ref<T>{out_ref.data, 122, 45, out_ref.ld, out_ref.order}, {}, s),
               std::invalid_argument);
  EXPECT_THROW(streamkit::minmax_normalize_async<T>(in_ref, matrix_ref<T>{out_ref.data, 123, 45, 100, out_ref.order}, {}, s),
               std::invalid_argument);
  EXPECT_EQ(to_host(d_out, s), out.storage) << "a rejected call must not write";
}

TYPED_TEST(MinMax, HostToHostIsIdenticalForPinnedPageableAndAnyDevicesAndStreams)
{
  using T = TypeParam;
  struct shape { std::size_t rows, cols; layout order; std::size_t pad; };
  std::vector<shape> const shapes{{60, 5000, layout::row_major, 0}, {7, 3, layout::row_major, 1}, {1000, 33, layout::column_major, 2},
                                  {300, 900, layout::row_major, 5}, {64, 1, layout::column_major, 0}};
  std::vector<host_matrix<T>> inputs;
  for (auto const& sh : shapes) {
    inputs.emplace_back(sh.rows, sh.cols, sh.order, sh.pad);
    fill_random(inputs.back(), this->rng);
  }
  streamkit::minmax_options<T> const options{T(-1), T(1), false};
  std::vector<std::vector<T>> first_result;
  struct setup { std::size_t chunk_bytes; std::vector<int> devices; int streams; };
  // Chunk size 0 is picked per array (one chunk per array here); 64 KiB cuts every array but the
  // smallest two into several, of 2 to 35 columns.
  for (auto const& [chunk_bytes, devices, streams] : std::vector<setup>{{0, {0}, 1}, {0, {0}, 3}, {0, {0, 0}, 2}, {std::size_t{1} << 16, {0, 0}, 2}}) {
    for (auto mode : {streamkit::pageable_transfer::stage, streamkit::pageable_transfer::register_in_place}) {
      for (bool pinned : {false, true}) {
        for (bool in_place : {false, true}) {
          SCOPED_TRACE(::testing::Message() << chunk_bytes << " B chunks, " << devices.size() << " devices, " << streams << " streams, pinned " << pinned << ", register " << (mode != streamkit::pageable_transfer::stage) << ", in place " << in_place);
          streamkit::dispatcher workers({devices, streams});
          std::vector<host_matrix<T>> outs;
          std::vector<streamkit::pinned_buffer<T>> pinned_storage;
          std::vector<matrix_ref<T const>> in_refs;
          std::vector<matrix_ref<T>> out_refs;
          std::vector<host_matrix<T>> work = inputs;
          for (std::size_t k = 0; k < inputs.size(); ++k) {
            outs.emplace_back(inputs[k].rows, inputs[k].cols, inputs[k].order, shapes[k].pad);
            T* in_data = work[k].storage.data();
            T* out_data = outs[k].storage.data();
            if (pinned) {
              pinned_storage.emplace_back(work[k].storage.size());
              std::copy(work[k].storage.begin(), work[k].storage.end(), pinned_storage.back().begin());
              in_data = pinned_storage.back().data();
              pinned_storage.emplace_back(outs[k].storage.size());
              std::copy(outs[k].storage.begin(), outs[k].storage.end(), pinned_storage.back().begin());
              out_data = pinned_storage.back().data();
            }
            in_refs.push_back(work[k].ref(in_data));
            out_refs.push_back(in_place ? work[k].ref(in_data) : outs[k].ref(out_data));
          }
          streamkit::dispatch_minmax_normalize(workers, in_refs, out_refs, options, mode, chunk_bytes);
          if (!in_place) { streamkit::dispatch_minmax_normalize(workers, in_refs, out_refs, options, mode, chunk_bytes); }  // again: reused buffers
          std::vector<std::vector<T>> result;
          for (std::size_t k = 0; k < inputs.size(); ++k) {
            host_matrix<T> got = in_place ? work[k] : outs[k];
            T const* data = out_refs[k].data;
            std::copy(data, data + got.storage.size(), got.storage.begin());
            expect_scaled(inputs[k], got, -1, 1, false);
            result.push_back(got.storage);
          }
          if (!in_place) {
            if (first_result.empty()) { first_result = result; }
            EXPECT_EQ(result, first_result) << "results differ between chunk sizes, transfer modes or stream counts";
          }
        }
      }
    }
  }
}

TYPED_TEST(MinMax, HostToHostWithOneColumnPerChunkAndItsFailuresNameTheArray)
{
  using T = TypeParam;
  struct shape { std::size_t rows, cols; layout order; std::size_t pad; };
  std::vector<shape> const shapes{{7, 3, layout::row_major, 1}, {50, 40, layout::row_major, 3}, {1000, 33, layout::column_major, 2},
                                  {64, 1, layout::column_major, 0}};
  std::vector<host_matrix<T>> inputs, outputs;
  std::vector<matrix_ref<T const>> in_refs;
  std::vector<matrix_ref<T>> out_refs;
  for (auto const& sh : shapes) {
    inputs.emplace_back(sh.rows, sh.cols, sh.order, sh.pad);
    fill_random(inputs.back(), this->rng);
    outputs.emplace_back(sh.rows, sh.cols, sh.order == layout::row_major ? layout::column_major : layout::row_major, sh.pad);
  }
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    in_refs.push_back(inputs[k].ref(inputs[k].storage.data()));
    out_refs.push_back(outputs[k].ref(outputs[k].storage.data()));
  }
  streamkit::dispatcher workers({{0}, 3});
  streamkit::dispatch_minmax_normalize(workers, in_refs, out_refs, {T(2), T(5), true}, streamkit::pageable_transfer::stage, 1);
  for (std::size_t k = 0; k < shapes.size(); ++k) { expect_scaled(inputs[k], outputs[k], 2, 5, true); }

  // A chunk too large for the device fails on its allocation, before anything is copied.
  std::vector<T> small(4, T(1)), untouched(4, T(-3));
  std::size_t const too_many = streamkit::device(0).total_memory();  // columns of one element: more bytes than the device has
  std::vector<matrix_ref<T const>> const bad_in{in_refs[0], matrix_ref<T const>{small.data(), 1, too_many, too_many, layout::row_major}};
  std::vector<matrix_ref<T>> const bad_out{out_refs[0], matrix_ref<T>{untouched.data(), 1, too_many, too_many, layout::row_major}};
  try {
    streamkit::dispatch_minmax_normalize(workers, bad_in, bad_out, {}, streamkit::pageable_transfer::stage, too_many * sizeof(T));
    FAIL() << "no exception";
  } catch (streamkit::dispatch_error const& error) {
    EXPECT_NE(std::string(error.what()).find("inputs[1], columns [0, " + std::to_string(too_many) + "): "), std::string::npos) << error.what();
    try {
      std::rethrow_exception(error.original());
    } catch (std::runtime_error const& wrapped) {
      EXPECT_THROW(std::rethrow_if_nested(wrapped), streamkit::bad_alloc);
    }
  }
  EXPECT_EQ(untouched, std::vector<T>(4, T(-3)));
  streamkit::dispatch_minmax_normalize(workers, in_refs, out_refs, {T(2), T(5), true}, streamkit::pageable_transfer::stage, 1);
  for (std::size_t k = 0; k < shapes.size(); ++k) { expect_scaled(inputs[k], outputs[k], 2, 5, true); }
}

// Host-side checks that run without a GPU: validation happens before any CUDA call.

TEST(MinMaxHost, BadArgumentsNameTheArgument)
{
  double x = 0.0;
  auto const stream = streamkit::stream_ref::per_thread_default();
  matrix_ref<double const> const null_in{nullptr, 3, 4, 4, layout::row_major};
  matrix_ref<double> const out{&x, 3, 4, 4, layout::row_major};
  STREAMKIT_EXPECT_THROW_WITH(streamkit::minmax_normalize_async<double>(null_in, out, {}, stream), std::invalid_argument,
                              "in: null data with 3 x 4 elements");
  matrix_ref<double const> const narrow{&x, 3, 4, 3, layout::row_major};
  STREAMKIT_EXPECT_THROW_WITH(streamkit::minmax_normalize_async<double>(narrow, out, {}, stream), std::invalid_argument,
                              "in: leading dimension 3 is less than the width 4");
  matrix_ref<double const> const short_col{&x, 5, 4, 4, layout::column_major};
  STREAMKIT_EXPECT_THROW_WITH(streamkit::column_minmax_async<double>(short_col, &x, &x, stream), std::invalid_argument,
                              "x: leading dimension 4 is less than the height 5");
  matrix_ref<double const> const in{&x, 3, 4, 4, layout::row_major};
  STREAMKIT_EXPECT_THROW_WITH(streamkit::minmax_normalize_async<double>(in, out, {1.0, 1.0, false}, stream), std::invalid_argument,
                              "feature_range: needs finite lo < hi");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::minmax_normalize_async<double>(in, matrix_ref<double>{&x, 3, 5, 5, layout::row_major}, {}, stream),
                              std::invalid_argument, "out: shape 3 x 5 does not match the input's 3 x 4");
  STREAMKIT_EXPECT_THROW_WITH(streamkit::minmax_scaler<float>({2.0F, -1.0F, false}), std::invalid_argument, "feature_range");
  streamkit::minmax_scaler<double> const unfitted;
  STREAMKIT_EXPECT_THROW_WITH(unfitted.transform_async(in, out, stream), std::logic_error, "transform() before fit()");
  EXPECT_NO_THROW(streamkit::minmax_normalize_async<double>(matrix_ref<double const>{nullptr, 0, 4, 4, layout::row_major},
                                                            matrix_ref<double>{nullptr, 0, 4, 4, layout::row_major}, {}, stream));
}

TEST(MinMaxHost, ColumnChunksCoverEveryColumnOnceWithinTheirSize)
{
  using streamkit::detail::column_chunks;
  double x = 0.0;
  std::vector<matrix_ref<double const>> const arrays{
    {&x, 60, 98450, 98450, layout::row_major}, {&x, 0, 5, 5, layout::row_major}, {&x, 1000, 33, 1000, layout::column_major},
    {&x, 3, 1, 1, layout::row_major},          {&x, 1 << 20, 2, 1 << 20, layout::column_major}};
  for (std::size_t const chunk_bytes : {std::size_t{1}, std::size_t{1} << 16, std::size_t{8} << 20, std::size_t{1} << 40}) {
    SCOPED_TRACE(chunk_bytes);
    auto const chunks = column_chunks(arrays, std::vector<std::size_t>(arrays.size(), chunk_bytes));
    std::vector<std::size_t> covered(arrays.size(), 0);
    for (auto const& c : chunks) {
      ASSERT_LT(c.array, arrays.size());
      EXPECT_EQ(c.begin, covered[c.array]) << "array " << c.array;
      EXPECT_GT(c.end, c.begin);
      std::size_t const column_bytes = arrays[c.array].rows * sizeof(double);
      std::size_t const widest = std::max<std::size_t>(1, chunk_bytes / column_bytes);
      EXPECT_LE(c.end - c.begin, widest + 31) << "array " << c.array << ", columns [" << c.begin << ", " << c.end << ")";
      if (c.end < arrays[c.array].cols && c.end - c.begin > 64) { EXPECT_EQ(c.end % 32, 0U); }
      covered[c.array] = c.end;
    }
    for (std::size_t k = 0; k < arrays.size(); ++k) { EXPECT_EQ(covered[k], arrays[k].rows == 0 ? 0 : arrays[k].cols) << "array " << k; }
  }
  // 47 MB in 6 chunks; the empty array in none; 1; 1; and two 8 MiB columns, one per chunk.
  EXPECT_EQ(column_chunks(arrays, std::vector<std::size_t>(arrays.size(), std::size_t{8} << 20)).size(), 6U + 0 + 1 + 1 + 2);
  // Sizes are per array: 4 MiB cuts the first array in 12.
  std::vector<std::size_t> sizes(arrays.size(), std::size_t{8} << 20);
  sizes[0] = std::size_t{4} << 20;
  EXPECT_EQ(column_chunks(arrays, sizes).size(), 12U + 0 + 1 + 1 + 2);
}

TEST(MinMaxHost, OrderedBitsPreserveTheOrder)
{
  std::vector<double> const values{-std::numeric_limits<double>::infinity(), -1e300, -1.0, -1e-300, -0.0, 0.0, 1e-300, 2.5, 1e300,
                                   std::numeric_limits<double>::infinity()};
  for (std::size_t a = 0; a + 1 < values.size(); ++a) {
    EXPECT_LE(streamkit::detail::to_ordered(values[a]), streamkit::detail::to_ordered(values[a + 1]));
    EXPECT_EQ(streamkit::detail::from_ordered<double>(streamkit::detail::to_ordered(values[a])), values[a]);
  }
  EXPECT_LT(streamkit::detail::to_ordered(-1.5F), streamkit::detail::to_ordered(1.5F));
}

TEST(MatrixRef, OffsetsAndExtentBeyond32Bits)
{
  matrix_ref<float> const row{nullptr, std::size_t{1} << 20, std::size_t{1} << 13, (std::size_t{1} << 13) + 7, layout::row_major};
  EXPECT_EQ(row.offset((std::size_t{1} << 20) - 1, 5), ((std::size_t{1} << 20) - 1) * ((std::size_t{1} << 13) + 7) + 5);
  EXPECT_GT(row.extent(), std::size_t{1} << 33);
  matrix_ref<float> const col{nullptr, 10, 3, 12, layout::column_major};
  EXPECT_EQ(col.offset(9, 2), 33U);
  EXPECT_EQ(col.extent(), 34U);
}

}  // namespace
