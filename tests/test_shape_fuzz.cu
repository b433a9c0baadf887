// Shape fuzz: random and extreme shapes for every public bulk entry point, each result compared
// element by element with a float64 CPU reference, outputs poisoned first.
//
//   STREAMKIT_FUZZ_SEED    seed of the random shapes (default 20261123; printed)
//   STREAMKIT_FUZZ_SHAPES  random shapes per family: min-max, nearest neighbour, radius (default 100)
//   STREAMKIT_FUZZ_GIANT   0 leaves out the shapes of 2^31 elements and more (sanitizer runs)
//   STREAMKIT_FUZZ_EXTREMES 0 leaves out the fixed extreme shapes too (racecheck, which instruments
//                          every shared-memory access and would take hours over them)
//
// The extreme shapes are named after the launch-size thresholds of the code they sit at
// (detail/minmax_plan.hpp, detail/launch.hpp, detail/nearest_neighbor_kernels.cuh, the tree's
// detail/tree_impl.cuh and tree_kernels.cuh); the giant ones run only where the GPU and the host have
// the memory, and say so when they do not.
//
// Nearest neighbour: every engine (brute_force_index, tree_index), the front end (nearest_index), the
// one-shot and the multi-GPU searches, for k from 1 to max_neighbors into rows of a stride up to
// k + 2 (the gaps poisoned and checked), sometimes within a max_distance; k-nearest and float64-ranked
// answers are checked with expect_knn, the brute force's k = 1 with expect_nearest.
//
// Radius queries: every engine (brute_force_index, tree_index) and the front end (nearest_index), each
// through radius_count_async, radius_count, radius_offsets_async + radius_fill_async (sorted or not,
// with or without distances, the largest row told or not, storage for the whole result or half of
// it) and radius_query, the non-const forms and the const ones with a nearest_scratch, and the
// one-shot radius_neighbors; one radius per call or per observation (some NaN, negative, 0 and
// infinite), r = 0 to every reference, max_per_row / max_total one below the result (the
// std::length_error's counts checked) or at it; checked with spatial/radius_checks.hpp against the
// float64 CPU brute force. Results past 2^31 pairs are a giant shape.
#include "gpu_test.hpp"
#include "preprocessing/minmax_reference.hpp"
#include "spatial/nearest_reference.hpp"
#include "spatial/radius_checks.hpp"
#include "test_support.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/radius.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/core/stream.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using streamkit::layout;
using streamkit_test::host_matrix;
using streamkit_test::to_device;
using streamkit_test::to_host;

std::uint64_t environment(char const* name, std::uint64_t fallback)
{
  char const* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::strtoull(value, nullptr, 10) : fallback;
}

struct fuzz_settings {
  std::uint64_t seed = environment("STREAMKIT_FUZZ_SEED", 20261123);
  std::size_t shapes = environment("STREAMKIT_FUZZ_SHAPES", 100);
  bool giant = environment("STREAMKIT_FUZZ_GIANT", 1) != 0;
  bool extremes = environment("STREAMKIT_FUZZ_EXTREMES", 1) != 0;
};

/// Whether `device_bytes` fit in the GPU's free memory and `host_bytes` in the host's available
/// memory, with a margin; prints why not.
bool memory_allows(std::size_t device_bytes, std::size_t host_bytes, std::string const& what)
{
  std::size_t free = 0, total = 0;
  STREAMKIT_CUDA_TRY(cudaMemGetInfo(&free, &total));
  std::size_t const host = static_cast<std::size_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  if (device_bytes <= free / 10 * 9 && host_bytes <= host / 10 * 8) { return true; }
  std::printf("shape fuzz: %s left out: needs %.1f GB of GPU memory (%.1f free) and %.1f GB of host memory (%.1f available)\n",
              what.c_str(), device_bytes / 1e9, free / 1e9, host_bytes / 1e9, host / 1e9);
  return false;
}

std::size_t log_uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi)
{
  std::uniform_real_distribution<double> u(std::log(static_cast<double>(lo)), std::log(static_cast<double>(hi) + 1.0));
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::exp(u(rng))), lo, hi);
}

/// A value at or around one of `thresholds` (−2 … +2), or log-uniform in [lo, hi].
std::size_t near_threshold_or_random(std::mt19937_64& rng, std::vector<std::size_t> const& thresholds, std::size_t lo, std::size_t hi)
{
  if (std::bernoulli_distribution(0.5)(rng)) {
    std::size_t const t = thresholds[std::uniform_int_distribution<std::size_t>(0, thresholds.size() - 1)(rng)];
    long const delta = std::uniform_int_distribution<long>(-2, 2)(rng);
    return std::clamp<std::size_t>(static_cast<std::size_t>(std::max<long>(1, static_cast<long>(t) + delta)), lo, hi);
  }
  return log_uniform(rng, lo, hi);
}

// ---------------------------------------------------------------------------------------------
// Min-max

enum class minmax_entry { normalize_async, normalize, column_minmax, scaler, scaler_partial, dispatch };
char const* name_of(minmax_entry e)
{
  switch (e) {
    case minmax_entry::normalize_async: return "minmax_normalize_async";
    case minmax_entry::normalize: return "minmax_normalize";
    case minmax_entry::column_minmax: return "column_minmax_async";
    case minmax_entry::scaler: return "minmax_scaler fit/transform/inverse_transform";
    case minmax_entry::scaler_partial: return "minmax_scaler fit/partial_fit/transform";
    case minmax_entry::dispatch: break;
  }
  return "dispatch_minmax_normalize";
}

struct minmax_case {
  minmax_entry entry = minmax_entry::normalize_async;
  bool is_double = false;
  std::size_t rows = 1, cols = 1, pad = 0;
  layout order = layout::row_major;
  bool in_place = true;
  layout out_order = layout::row_major;
  std::size_t out_pad = 0;
  double lo = 0, hi = 1;
  bool clip = false;
  bool special_columns = false;  // NaN, all-NaN and constant columns
  std::size_t chunk_bytes = 0;   // dispatch only
  [[nodiscard]] std::string describe() const
  {
    std::ostringstream s;
    s << name_of(entry) << " " << (is_double ? "double " : "float ") << rows << " x " << cols
      << (order == layout::row_major ? " row" : " column") << "-major pad " << pad;
    if (in_place) {
      s << " in place";
    } else {
      s << " -> " << (out_order == layout::row_major ? "row" : "column") << "-major pad " << out_pad;
    }
    s << " range [" << lo << ", " << hi << "]" << (clip ? " clip" : "") << (special_columns ? " NaN/constant columns" : "");
    if (entry == minmax_entry::dispatch) { s << " chunk_bytes " << chunk_bytes; }
    return s.str();
  }
};

template <class T>
void add_special_columns(host_matrix<T>& m, std::mt19937_64& rng)
{
  std::uniform_int_distribution<std::size_t> column(0, m.cols - 1);
  T const nan = std::numeric_limits<T>::quiet_NaN();
  for (int k = 0; k < 3; ++k) {
    std::size_t const j = column(rng);
    for (std::size_t i = 0; i < m.rows; ++i) {
      if (k == 0 && i % 3 == 1) { m.at(i, j) = nan; }  // some NaN
      if (k == 1) { m.at(i, j) = T(42.5); }           // constant
      if (k == 2) { m.at(i, j) = nan; }               // all NaN
    }
  }
}

/// Runs one min-max case on the device and checks every element.
template <class T>
void run_minmax(minmax_case const& c, std::mt19937_64& rng, streamkit::stream const& s, streamkit::dispatcher& gpus)
{
  SCOPED_TRACE(c.describe());
  host_matrix<T> in(c.rows, c.cols, c.order, c.pad);
  streamkit_test::fill_random(in, rng);
  if (c.special_columns) { add_special_columns(in, rng); }
  streamkit::minmax_options<T> const options{static_cast<T>(c.lo), static_cast<T>(c.hi), c.clip};
  host_matrix<T> out(c.rows, c.cols, c.in_place ? c.order : c.out_order, c.in_place ? c.pad : c.out_pad);

  if (c.entry == minmax_entry::dispatch) {
    host_matrix<T> scratch = in;
    host_matrix<T>& target = c.in_place ? scratch : out;
    streamkit::dispatch_minmax_normalize<T>(gpus, {scratch.ref()}, {target.ref()}, options,
                                            streamkit::pageable_transfer::stage, c.chunk_bytes);
    streamkit_test::expect_scaled(in, target, c.lo, c.hi, c.clip);
    return;
  }

  auto d_in = to_device(in.storage, s);
  auto const in_ref = in.ref(d_in.data());
  std::optional<streamkit::device_buffer<T>> d_out;
  if (!c.in_place) { d_out.emplace(to_device(out.storage, s)); }
  auto const out_ref = c.in_place ? in_ref : out.ref(d_out->data());
  auto const fetch = [&] { return c.in_place ? to_host(d_in, s) : to_host(*d_out, s); };

  switch (c.entry) {
    case minmax_entry::normalize_async:
    case minmax_entry::normalize: {
      auto d_min = to_device(std::vector<T>(c.cols, T(streamkit_test::poison)), s);
      auto d_max = to_device(std::vector<T>(c.cols, T(streamkit_test::poison)), s);
      if (c.entry == minmax_entry::normalize) {
        streamkit::minmax_normalize(in_ref, out_ref, options, s);  // a mutable view passes as the input
      } else {
        streamkit::minmax_normalize_async<T>(in_ref, out_ref, options, s, d_min.data(), d_max.data());
      }
      out.storage = fetch();
      auto const f = streamkit_test::expect_scaled(in, out, c.lo, c.hi, c.clip);
      if (c.entry == minmax_entry::normalize_async) {
        auto const mins = to_host(d_min, s), maxs = to_host(d_max, s);
        for (std::size_t j = 0; j < c.cols; ++j) {
          bool const nan = std::isnan(f.min[j]);
          ASSERT_TRUE(nan ? std::isnan(mins[j]) && std::isnan(maxs[j]) : mins[j] == f.min[j] && maxs[j] == f.max[j])
            << "column " << j << ": min " << mins[j] << " max " << maxs[j] << ", want " << f.min[j] << " " << f.max[j];
        }
      }
      return;
    }
    case minmax_entry::column_minmax: {
      auto d_min = to_device(std::vector<T>(c.cols, T(streamkit_test::poison)), s);
      auto d_max = to_device(std::vector<T>(c.cols, T(streamkit_test::poison)), s);
      streamkit::column_minmax_async<T>(in_ref, d_min.data(), d_max.data(), s);
      auto const f = streamkit_test::fit_reference(in, 0, 1);
      auto const mins = to_host(d_min, s), maxs = to_host(d_max, s);
      std::size_t wrong = 0;
      for (std::size_t j = 0; j < c.cols; ++j) {
        bool const nan = std::isnan(f.min[j]);
        bool const right = nan ? std::isnan(mins[j]) && std::isnan(maxs[j]) : mins[j] == f.min[j] && maxs[j] == f.max[j];
        if (!right && ++wrong <= 10) { ADD_FAILURE() << "column " << j << ": min " << mins[j] << " max " << maxs[j]; }
      }
      EXPECT_EQ(wrong, 0U);
      return;
    }
    case minmax_entry::scaler:
    case minmax_entry::scaler_partial: {
      // Fit on `in` (whole, or in two row batches), transform another matrix of the same width.
      streamkit::minmax_scaler<T> scaler(options);
      if (c.entry == minmax_entry::scaler_partial && c.rows >= 2) {
        std::size_t const split = std::uniform_int_distribution<std::size_t>(1, c.rows - 1)(rng);
        auto first = in_ref, second = in_ref;
        first.rows = split;
        second.rows = c.rows - split;
        second.data = in_ref.data + (c.order == layout::row_major ? split * in_ref.ld : split);
        scaler.fit_async(first, s);
        scaler.partial_fit_async(second, s);
      } else {
        scaler.fit_async(in_ref, s);
      }
      host_matrix<T> y(std::max<std::size_t>(1, c.rows / 2 + 1), c.cols, c.order, c.pad);
      streamkit_test::fill_random(y, rng);
      for (auto& v : y.storage) { v = v * T(1.5); }  // beyond the fitted range, so that clip matters
      host_matrix<T> z(y.rows, y.cols, c.in_place ? c.order : c.out_order, c.in_place ? c.pad : c.out_pad);
      auto d_y = to_device(y.storage, s);
      auto d_z = to_device(z.storage, s);
      scaler.transform_async(y.ref(d_y.data()), z.ref(d_z.data()), s);
      z.storage = to_host(d_z, s);
      auto const f = streamkit_test::fit_reference(in, c.lo, c.hi);
      double const range = std::abs(c.lo) + std::abs(c.hi);
      streamkit_test::expect_elements(
        z, [&](std::size_t i, std::size_t j) { return streamkit_test::transform_reference(y.at(i, j), f.min[j], f.scale[j], c.lo, c.hi, c.clip); },
        [&](std::size_t i, std::size_t j) { return range + std::abs((std::abs(y.at(i, j)) + std::abs(f.min[j])) * f.scale[j]); });
      if (c.entry == minmax_entry::scaler && !c.clip) {
        host_matrix<T> back(y.rows, y.cols, y.order, y.ld - y.line_length());
        auto d_back = to_device(back.storage, s);
        scaler.inverse_transform_async(z.ref(d_z.data()), back.ref(d_back.data()), s);
        back.storage = to_host(d_back, s);
        streamkit_test::expect_elements(
          back,
          [&](std::size_t i, std::size_t j) {  // an all-NaN fitted column transforms everything to NaN
            return std::isnan(f.min[j]) ? std::numeric_limits<double>::quiet_NaN() : static_cast<double>(y.at(i, j));
          },
          [&](std::size_t i, std::size_t j) { return 3000.0 + std::abs(f.min[j]) + range / std::abs(f.scale[j]) + std::abs(y.at(i, j)); });
      }
      return;
    }
    case minmax_entry::dispatch: break;
  }
}

/// Thresholds of the min-max launch code that a row count can sit at.
std::vector<std::size_t> minmax_row_thresholds()
{
  using namespace streamkit::detail;
  std::size_t const per_cluster_block = cluster_block * cluster_values;  // rows where cluster_size steps
  return {1, 2, rows_fused_limit, cols_fused_limit, cluster_min_rows, per_cluster_block, 2 * per_cluster_block,
          cluster_blocks * cluster_slice_bytes / sizeof(double), cluster_blocks * cluster_slice_bytes / sizeof(float),
          std::size_t{apply_block} * apply_unroll};
}
/// ... and a column count: block widths, the flat reduction's widths (divisors of 256) and the
/// per-column kernels' blocks.
std::vector<std::size_t> minmax_column_thresholds()
{
  using namespace streamkit::detail;
  return {1, 2, 3, 7, 8, rows_block_x, 64, 255, 256, 257, column_block, 4096};
}

minmax_case random_minmax_case(std::mt19937_64& rng)
{
  minmax_case c;
  std::bernoulli_distribution coin(0.5);
  c.entry = static_cast<minmax_entry>(std::uniform_int_distribution<int>(0, 5)(rng));
  c.is_double = coin(rng);
  c.order = coin(rng) ? layout::row_major : layout::column_major;
  std::size_t const budget = log_uniform(rng, 1, c.entry == minmax_entry::dispatch ? std::size_t{1} << 21 : std::size_t{1} << 23);
  if (coin(rng)) {
    c.rows = near_threshold_or_random(rng, minmax_row_thresholds(), 1, budget);
    c.cols = std::max<std::size_t>(1, log_uniform(rng, 1, std::max<std::size_t>(1, budget / c.rows)));
  } else {
    c.cols = near_threshold_or_random(rng, minmax_column_thresholds(), 1, budget);
    c.rows = std::max<std::size_t>(1, log_uniform(rng, 1, std::max<std::size_t>(1, budget / c.cols)));
  }
  c.pad = coin(rng) ? 0 : std::uniform_int_distribution<std::size_t>(1, 40)(rng);
  c.in_place = coin(rng);
  c.out_order = coin(rng) ? layout::row_major : layout::column_major;
  c.out_pad = coin(rng) ? 0 : std::uniform_int_distribution<std::size_t>(1, 9)(rng);
  c.lo = std::uniform_real_distribution<double>(-5, 5)(rng);
  c.hi = c.lo + log_uniform(rng, 1, 100) / 10.0;
  c.clip = coin(rng);
  c.special_columns = std::bernoulli_distribution(0.3)(rng);
  if (c.entry == minmax_entry::dispatch) { c.chunk_bytes = coin(rng) ? 0 : log_uniform(rng, 1, std::size_t{1} << 22); }
  return c;
}

/// A fixed shape, in place, in the given layout, type and entry point.
minmax_case fixed_minmax_case(std::size_t rows, std::size_t cols, layout order, bool is_double = false,
                              minmax_entry entry = minmax_entry::normalize_async)
{
  minmax_case c;
  c.rows = rows;
  c.cols = cols;
  c.order = order;
  c.out_order = order;
  c.is_double = is_double;
  c.entry = entry;
  return c;
}

/// Shapes at the edges of the launch arithmetic, in place with the asynchronous form unless said.
std::vector<minmax_case> extreme_minmax_cases()
{
  std::vector<minmax_case> cases;
  auto const add = [&](std::size_t rows, std::size_t cols, layout order, bool is_double = false,
                       minmax_entry entry = minmax_entry::normalize_async) {
    cases.push_back(fixed_minmax_case(rows, cols, order, is_double, entry));
  };
  std::size_t const past_old_cap = (std::size_t{1} << 23) + 1000;  // 2^20 blocks of 8 columns, the cap before the fix
  for (layout order : {layout::row_major, layout::column_major}) {
    for (bool is_double : {false, true}) {
      add(1, past_old_cap, order, is_double);
      add(2, past_old_cap, order, is_double);
      add(past_old_cap, 1, order, is_double);
    }
    add(1, past_old_cap, order, false, minmax_entry::scaler);
    add(past_old_cap, 2, order, false, minmax_entry::column_minmax);
    add(1, past_old_cap, order, false, minmax_entry::column_minmax);
  }
  return cases;
}

/// Shapes of 2^31 elements and more, in place: each kernel's index arithmetic past 32 bits.
std::vector<minmax_case> giant_minmax_cases()
{
  std::vector<minmax_case> cases;
  auto const add = [&](std::size_t rows, std::size_t cols, layout order) { cases.push_back(fixed_minmax_case(rows, cols, order)); };
  std::size_t const past_2p31 = (std::size_t{1} << 31) + 5;
  add(4, (std::size_t{1} << 29) + 5, layout::row_major);                                       // minmax_rows_fused
  add(past_2p31, 1, layout::row_major);                                                        // minmax_reduce_narrow, minmax_apply's stride
  add(past_2p31, 1, layout::column_major);                                                     // two-pass: one column of 2^31 rows
  add(streamkit::detail::cols_fused_limit, (std::size_t{1} << 23) + 3, layout::column_major);  // minmax_cols_fused
  add(65, (std::size_t{1} << 24) + 5, layout::row_major);  // minmax_reset/finalize past their grid-stride cap
  return cases;
}

/// Runs `count` cases, printing the time of each one that takes over a second, and of all.
template <class Run>
void run_cases(char const* family, std::size_t count, Run const& run)
{
  using clock = std::chrono::steady_clock;
  auto const start = clock::now();
  std::size_t done = 0;
  for (; done < count && !::testing::Test::HasFatalFailure(); ++done) {
    auto const case_start = clock::now();
    std::string const what = run(done);
    double const seconds = std::chrono::duration<double>(clock::now() - case_start).count();
    if (seconds > 1.0) { std::printf("shape fuzz:   %.1f s: %s\n", seconds, what.c_str()); }
  }
  std::printf("shape fuzz: %zu %s shapes in %.1f s\n", done, family, std::chrono::duration<double>(clock::now() - start).count());
}

class ShapeFuzz : public ::testing::Test {
 protected:
  void SetUp() override
  {
    STREAMKIT_REQUIRE_GPU();
    std::printf("shape fuzz: seed %llu (STREAMKIT_FUZZ_SEED), %zu random shapes (STREAMKIT_FUZZ_SHAPES), extreme shapes %s, giant shapes %s\n",
                static_cast<unsigned long long>(settings.seed), settings.shapes,
                settings.extremes ? "on" : "off (STREAMKIT_FUZZ_EXTREMES=0)", settings.giant ? "on" : "off (STREAMKIT_FUZZ_GIANT=0)");
    RecordProperty("seed", std::to_string(settings.seed));
  }
  fuzz_settings settings;
  std::mt19937_64 rng{settings.seed};
};

std::string run_minmax_case(minmax_case const& c, std::mt19937_64& rng, streamkit::stream const& s, streamkit::dispatcher& gpus)
{
  if (c.is_double) {
    run_minmax<double>(c, rng, s, gpus);
  } else {
    run_minmax<float>(c, rng, s, gpus);
  }
  return c.describe();
}

TEST_F(ShapeFuzz, MinMaxEveryEntryPointMatchesTheReference)
{
  streamkit::stream const s(0);
  streamkit::dispatcher gpus;
  auto const extremes = settings.extremes ? extreme_minmax_cases() : std::vector<minmax_case>{};
  run_cases("extreme min-max", extremes.size(), [&](std::size_t k) { return run_minmax_case(extremes[k], rng, s, gpus); });
  run_cases("random min-max", settings.shapes, [&](std::size_t) { return run_minmax_case(random_minmax_case(rng), rng, s, gpus); });
}

TEST_F(ShapeFuzz, MinMaxGiantShapesMatchTheReference)
{
  if (!settings.giant || !settings.extremes) {
    GTEST_SKIP() << "STREAMKIT_FUZZ_GIANT=0 or STREAMKIT_FUZZ_EXTREMES=0: shapes of 2^31 elements left out";
  }
  streamkit::stream const s(0);
  streamkit::dispatcher gpus;
  auto const giants = giant_minmax_cases();
  run_cases("giant min-max", giants.size(), [&](std::size_t k) {
    auto const& c = giants[k];
    std::size_t const value = c.is_double ? 8 : 4;
    std::size_t const bytes = c.rows * c.cols * value;
    // Device: the matrix in place, fitted minima and maxima and the two-pass scratch. Host: input,
    // output and the copy coming back, and the float64 reference per column.
    if (memory_allows(bytes + c.cols * 8 * value, 3 * bytes + c.cols * (24 + 2 * value), c.describe())) {
      run_minmax_case(c, rng, s, gpus);
    }
    return c.describe();
  });
}

// ---------------------------------------------------------------------------------------------
// Nearest neighbour

enum class nearest_entry {
  index_query,
  index_query_scratch,
  index_update,
  tree_query,
  tree_query_scratch,
  tree_update,
  front_end_query,
  front_end_prepared,
  front_end_blocking,
  one_shot_async,
  one_shot,
  dispatch,
  multi_gpu_update,
};
constexpr int nearest_entry_count = static_cast<int>(nearest_entry::multi_gpu_update) + 1;

char const* name_of(nearest_entry e)
{
  switch (e) {
    case nearest_entry::index_query: return "brute_force_index::query_async";
    case nearest_entry::index_query_scratch: return "brute_force_index::query_async with a scratch";
    case nearest_entry::index_update: return "brute_force_index::update then query";
    case nearest_entry::tree_query: return "tree_index::query_async";
    case nearest_entry::tree_query_scratch: return "tree_index::query_async with a scratch";
    case nearest_entry::tree_update: return "tree_index::update then query";
    case nearest_entry::front_end_query: return "nearest_index::query_async";
    case nearest_entry::front_end_prepared: return "nearest_index::prepare then const query_async with a scratch";
    case nearest_entry::front_end_blocking: return "nearest_index::query";
    case nearest_entry::one_shot_async: return "nearest_neighbor_async";
    case nearest_entry::one_shot: return "nearest_neighbor";
    case nearest_entry::multi_gpu_update: return "multi_gpu_nearest_neighbor::update then query";
    case nearest_entry::dispatch: break;
  }
  return "dispatch_nearest_neighbor";
}

char const* name_of(streamkit::search_engine e) { return e == streamkit::search_engine::tree ? "tree" : "brute force"; }

char const* name_of(streamkit::distance_unit u)
{
  switch (u) {
    case streamkit::distance_unit::kilometres: return "km";
    case streamkit::distance_unit::metres: return "m";
    case streamkit::distance_unit::radians: break;
  }
  return "rad";
}

bool is_multi_gpu(nearest_entry e) { return e == nearest_entry::dispatch || e == nearest_entry::multi_gpu_update; }
bool is_front_end(nearest_entry e)
{
  return e == nearest_entry::front_end_query || e == nearest_entry::front_end_prepared || e == nearest_entry::front_end_blocking;
}
/// The blocking calls: with invalid_points::reject they throw for invalid observations before writing.
bool is_blocking(nearest_entry e) { return e == nearest_entry::one_shot || e == nearest_entry::front_end_blocking; }

struct nearest_case {
  nearest_entry entry = nearest_entry::index_query;
  bool is_double = false;
  bool int64 = false;
  std::size_t n = 1, m = 1;
  std::size_t k = 1;       // neighbours per row
  std::size_t stride = 1;  // 1: separate arrays; 2 and more: lat and lon interleaved in records of `stride`
  std::size_t result_stride = 1;  // elements between result rows, ≥ k (the gaps must stay untouched)
  bool pinned = false;            // multi-GPU entries: host observations and results page-locked
  streamkit::angle_unit unit = streamkit::angle_unit::degrees;
  streamkit::nn_precision precision = streamkit::nn_precision::fast;
  streamkit::distance_unit distance = streamkit::distance_unit::radians;
  double max_distance = std::numeric_limits<double>::infinity();  // options.max_distance, in `distance`
  bool with_distance = true;
  streamkit::invalid_points on_invalid = streamkit::invalid_points::reject;
  bool invalid_observations = false;  // with reject: the blocking calls must throw and write nothing
  bool clustered = false;             // many near-ties and duplicates
  bool prior_set = false;             // nearest_index entries: built on another set of another size and queried, then updated
  std::size_t chunk_items = 0;        // multi-GPU entries only

  /// The engine that answers: the engines' own entries theirs, the front end and the one-shot calls the
  /// cost model's pick for the shape; none for the multi-GPU entries, whose front end picks per chunk
  /// (and the chunks' size depends on the number of GPUs when chunk_items is 0).
  [[nodiscard]] std::optional<streamkit::search_engine> engine() const
  {
    switch (entry) {
      case nearest_entry::index_query:
      case nearest_entry::index_query_scratch:
      case nearest_entry::index_update: return streamkit::search_engine::brute_force;
      case nearest_entry::tree_query:
      case nearest_entry::tree_query_scratch:
      case nearest_entry::tree_update: return streamkit::search_engine::tree;
      case nearest_entry::front_end_query:
      case nearest_entry::front_end_prepared:
      case nearest_entry::front_end_blocking:
      case nearest_entry::one_shot_async:
      case nearest_entry::one_shot: return streamkit::detail::choose_engine(n, m, k, precision);
      case nearest_entry::dispatch:
      case nearest_entry::multi_gpu_update: break;
    }
    return std::nullopt;
  }
  /// Whether the float32-ranked search (the brute force's k = 1 in fast mode) may answer: its answer
  /// is not the float64 one, and it is checked with expect_nearest's fast-mode bound, without a
  /// distance limit.
  [[nodiscard]] bool float32_ranked() const
  {
    return k == 1 && precision == streamkit::nn_precision::fast && engine() != streamkit::search_engine::tree;
  }

  [[nodiscard]] std::string describe() const
  {
    std::ostringstream s;
    s << name_of(entry) << " " << (is_double ? "double" : "float") << (int64 ? " int64 " : " int32 ") << n << " x " << m << " k " << k
      << " stride " << stride << " result stride " << result_stride << (pinned ? " pinned" : "")
      << (unit == streamkit::angle_unit::degrees ? " degrees" : " radians") << (precision == streamkit::nn_precision::exact ? " exact" : " fast")
      << " distance unit " << name_of(distance) << (with_distance ? "" : " no distance")
      << (on_invalid == streamkit::invalid_points::mark ? " mark" : " reject") << (invalid_observations ? " with invalid observations" : "")
      << (clustered ? " clustered" : "") << (prior_set ? " after a query of a prior set" : "");
    if (max_distance != std::numeric_limits<double>::infinity()) {
      s.precision(17);
      s << " max_distance " << max_distance << " " << name_of(distance);
    }
    if (auto const e = engine()) {
      s << " engine " << name_of(*e);
    } else {
      s << " engine per chunk";
      if (chunk_items != 0) {
        s << " (" << name_of(streamkit::detail::choose_engine(std::min(chunk_items, n), m, k, precision)) << " for a chunk of "
          << std::min(chunk_items, n) << ")";
      }
    }
    if (is_multi_gpu(entry)) { s << " chunk_items " << chunk_items; }
    return s.str();
  }
};

streamkit_test::point_set random_points(std::size_t count, bool clustered, std::mt19937_64& rng)
{
  if (!clustered) { return streamkit_test::uniform_points(count, rng); }
  streamkit_test::point_set points;
  auto const centres = streamkit_test::uniform_points(std::max<std::size_t>(1, count / 500), rng);
  for (std::size_t k = 0; points.size() < count; ++k) {
    std::size_t const c = k % centres.size();
    streamkit_test::add_cluster(points, centres.lat[c], centres.lon[c], 2000.0, std::min<std::size_t>(count - points.size(), 50), rng);
    if (points.size() < count && k % 7 == 0) { points.add(points.lat.back(), points.lon.back()); }  // an exact duplicate
  }
  return points;
}

/// Marks about 1 % of `points` invalid (NaN, ±inf, a latitude beyond the pole), at least one.
void spoil(streamkit_test::point_set& points, std::mt19937_64& rng)
{
  std::uniform_int_distribution<std::size_t> pick(0, points.size() - 1);
  double const bad[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(), 95.0, -91.0};
  for (std::size_t k = 0; k <= points.size() / 100; ++k) {
    std::size_t const i = pick(rng);
    if (k % 2 == 0) {
      points.lat[i] = bad[k / 2 % 4];
    } else {
      points.lon[i] = bad[k / 2 % 2];
    }
  }
}

/// (lat, lon) in records of `stride` elements, with padding between records.
template <class T>
std::vector<T> records_of(std::vector<T> const& lat, std::vector<T> const& lon, std::size_t stride)
{
  std::vector<T> records(lat.size() * stride + 1, T(-777));
  for (std::size_t i = 0; i < lat.size(); ++i) {
    records[i * stride] = lat[i];
    records[i * stride + 1] = lon[i];
  }
  return records;
}

/// Element 0 of every result row of `stride` elements; fails if an element of a row past its first k,
/// in the gap before the next row, no longer holds `poison`.
template <class V>
std::vector<V> first_of_rows(std::vector<V> const& rows, std::size_t stride, std::size_t k, V poison)
{
  std::vector<V> first(rows.size() / stride);
  std::size_t written = 0;
  std::ostringstream where;
  for (std::size_t i = 0; i < first.size(); ++i) {
    first[i] = rows[i * stride];
    for (std::size_t j = k; j < stride; ++j) {
      if (!(rows[i * stride + j] == poison) && written++ < 5) { where << " row " << i << " element " << j << ";"; }
    }
  }
  if (written > 0) {
    ADD_FAILURE() << written << " element(s) beyond k = " << k << " in rows of stride " << stride << " written:" << where.str();
  }
  return first;
}

/// Device points in the case's layout, and what the kernel sees.
template <class T>
struct device_points {
  std::vector<streamkit::device_buffer<T>> storage;
  std::vector<T> lat, lon;  // host values, in the case's unit
  streamkit::points_ref<T> ref;
  streamkit_test::radians_set seen;
};

/// `p` in `unit`, as separate arrays (stride 1) or records of `stride` elements.
template <class T>
device_points<T> upload(streamkit_test::point_set const& p, streamkit::angle_unit unit, std::size_t stride, streamkit::stream const& s)
{
  device_points<T> d;
  d.lat = streamkit_test::converted<T>(p.lat, unit);
  d.lon = streamkit_test::converted<T>(p.lon, unit);
  d.seen = streamkit_test::as_seen(d.lat, d.lon, unit);
  if (stride == 1) {
    d.storage.push_back(to_device(d.lat, s));
    d.storage.push_back(to_device(d.lon, s));
    d.ref = streamkit::points_ref<T>::separate(d.storage[0].data(), d.storage[1].data(), p.size(), unit);
    return d;
  }
  d.storage.push_back(to_device(records_of(d.lat, d.lon, stride), s));
  d.ref = {d.storage[0].data(), d.storage[0].data() + 1, p.size(), stride, unit};
  return d;
}

template <class T>
device_points<T> upload(streamkit_test::point_set const& p, nearest_case const& c, streamkit::stream const& s)
{
  return upload<T>(p, c.unit, c.stride, s);
}

double scale_of(streamkit::distance_unit unit)
{
  switch (unit) {
    case streamkit::distance_unit::kilometres: return streamkit::earth_radius_km;
    case streamkit::distance_unit::metres: return streamkit::earth_radius_km * 1000.0;
    case streamkit::distance_unit::radians: break;
  }
  return 1.0;
}

/// Checks the n result rows of `result_stride` elements (the poison still between them) against the
/// float64 CPU reference. Where the brute force may answer k = 1 without a distance limit: element 0
/// of each row with expect_nearest, as before k-nearest searches existed (its fast mode ranks in
/// float32: within the fast-mode bound of the nearest; its exact mode: the float64 answer). Every
/// other search is float64-ranked: expect_knn, with neighbours beyond max_distance expected as −1
/// and NaN.
template <class T, class Index>
void expect_neighbours(nearest_case const& c, streamkit_test::radians_set const& obs, streamkit_test::radians_set const& refs,
                       std::vector<Index> const& got_index, std::vector<T> const& got_distance)
{
  double const scale = scale_of(c.distance);
  bool const limited = c.max_distance != std::numeric_limits<double>::infinity();
  if (c.k == 1 && c.engine() != streamkit::search_engine::tree && !limited) {
    auto const index = first_of_rows(got_index, c.result_stride, 1, static_cast<Index>(streamkit_test::poison_index));
    auto const distance =
      c.with_distance ? first_of_rows(got_distance, c.result_stride, 1, static_cast<T>(streamkit_test::poison_distance)) : got_distance;
    streamkit_test::expect_nearest(obs, refs, index, distance, c.precision, scale);
    return;
  }
  ASSERT_FALSE(c.float32_ranked()) << "a float32-ranked search is checked only without a distance limit";
  streamkit_test::expect_knn(obs, refs, got_index, got_distance, c.k, c.result_stride, scale, c.max_distance / scale);
}

template <class T, class Index>
void run_nearest(nearest_case const& c, std::mt19937_64& rng, streamkit::stream const& s, streamkit::dispatcher& gpus)
{
  SCOPED_TRACE(c.describe());
  auto obs_points = random_points(c.n, c.clustered, rng);
  auto ref_points = random_points(c.m, c.clustered, rng);
  if (c.clustered && c.n > 1) {  // observations exactly on references: ties between duplicates
    for (std::size_t i = 0; i < c.n; i += 11) {
      obs_points.lat[i] = ref_points.lat[i % c.m];
      obs_points.lon[i] = ref_points.lon[i % c.m];
    }
  }
  if (c.on_invalid == streamkit::invalid_points::mark) {
    spoil(obs_points, rng);
    spoil(ref_points, rng);
  }
  if (c.invalid_observations) { spoil(obs_points, rng); }
  streamkit::nearest_options options;
  options.precision = c.precision;
  options.on_invalid = c.on_invalid;
  options.unit = c.distance;
  options.max_distance = c.max_distance;

  Index const index_poison = static_cast<Index>(streamkit_test::poison_index);
  T const distance_poison = static_cast<T>(streamkit_test::poison_distance);
  std::size_t const rows = c.n * c.result_stride;
  std::vector<Index> got_index(rows, index_poison);
  std::vector<T> got_distance(c.with_distance ? rows : 0, distance_poison);
  if (is_multi_gpu(c.entry)) {
    auto const obs_lat = streamkit_test::converted<T>(obs_points.lat, c.unit), obs_lon = streamkit_test::converted<T>(obs_points.lon, c.unit);
    auto const ref_lat = streamkit_test::converted<T>(ref_points.lat, c.unit), ref_lon = streamkit_test::converted<T>(ref_points.lon, c.unit);
    // Host points in the case's layout: separate arrays, or records; pageable or pinned.
    auto const host_points = [&](std::vector<T> const& lat, std::vector<T> const& lon, std::vector<T>& records,
                                 streamkit::pinned_buffer<T>& pinned) {
      if (c.stride == 1) { return streamkit::points_ref<T>::separate(lat.data(), lon.data(), lat.size(), c.unit); }
      records = records_of(lat, lon, c.stride);
      T* data = records.data();
      if (c.pinned) {
        pinned = streamkit::pinned_buffer<T>(records.size());
        std::copy(records.begin(), records.end(), pinned.begin());
        data = pinned.data();
      }
      return streamkit::points_ref<T>{data, data + 1, lat.size(), c.stride, c.unit};
    };
    std::vector<T> obs_records, ref_records;
    streamkit::pinned_buffer<T> obs_pinned, ref_pinned, pinned_distance;
    streamkit::pinned_buffer<Index> pinned_index;
    auto const observations = host_points(obs_lat, obs_lon, obs_records, obs_pinned);
    auto const references = host_points(ref_lat, ref_lon, ref_records, ref_pinned);
    Index* index = got_index.data();
    T* distance = c.with_distance ? got_distance.data() : nullptr;
    if (c.pinned) {
      pinned_index = streamkit::pinned_buffer<Index>(rows);
      std::fill(pinned_index.begin(), pinned_index.end(), index_poison);
      index = pinned_index.data();
      if (c.with_distance) {
        pinned_distance = streamkit::pinned_buffer<T>(rows);
        std::fill(pinned_distance.begin(), pinned_distance.end(), distance_poison);
        distance = pinned_distance.data();
      }
    }
    streamkit::neighbors_ref<Index, T> const result{index, distance, c.n, c.k, c.result_stride, nullptr};
    if (c.entry == nearest_entry::dispatch) {
      streamkit::dispatch_nearest_neighbor(gpus, observations, references, result, options, c.chunk_items);
    } else {
      // Prepared on another set of another size first, then updated to this one.
      auto const other = streamkit_test::uniform_points(log_uniform(rng, 1, 2 * c.m), rng);
      auto const other_lat = streamkit_test::converted<T>(other.lat, c.unit), other_lon = streamkit_test::converted<T>(other.lon, c.unit);
      streamkit::multi_gpu_nearest_neighbor<T> search(gpus, streamkit::points_ref<T>::separate(other_lat.data(), other_lon.data(), other.size(), c.unit),
                                                      options);
      search.update(references);
      search.query(observations, result, c.chunk_items);
    }
    if (c.pinned) {
      std::copy(pinned_index.begin(), pinned_index.end(), got_index.begin());
      if (c.with_distance) { std::copy(pinned_distance.begin(), pinned_distance.end(), got_distance.begin()); }
    }
    expect_neighbours(c, streamkit_test::as_seen(obs_lat, obs_lon, c.unit), streamkit_test::as_seen(ref_lat, ref_lon, c.unit), got_index,
                      got_distance);
    return;
  }

  auto const obs = upload<T>(obs_points, c, s);
  auto const refs = upload<T>(ref_points, c, s);
  auto d_index = to_device(got_index, s);
  std::optional<streamkit::device_buffer<T>> d_distance;
  if (c.with_distance) { d_distance.emplace(to_device(got_distance, s)); }
  auto d_invalid = to_device(std::vector<unsigned long long>{0}, s);
  streamkit::neighbors_ref<Index, T> const result{d_index.data(), c.with_distance ? d_distance->data() : nullptr, c.n, c.k,
                                                  c.result_stride, d_invalid.data()};
  // Another set of another size, on which an index is built before it is updated to the references.
  auto const other_set = [&] { return upload<T>(streamkit_test::uniform_points(log_uniform(rng, 1, 2 * c.m), rng), nearest_case{}, s); };
  // One engine (brute force or tree), asked in one of three ways; the index and any scratch outlive the query.
  enum class engine_call { query, query_with_scratch, update_then_query };
  auto const engine_search = [&](auto&& index, engine_call call) {
    if (call == engine_call::update_then_query) { index.update(refs.ref, s); }
    if (call == engine_call::query_with_scratch) {
      streamkit::nearest_scratch scratch;
      std::as_const(index).query_async(obs.ref, result, s, scratch);
      s.sync();
    } else {
      index.query_async(obs.ref, result, s);
    }
  };
  auto const search = [&] {
    switch (c.entry) {
      case nearest_entry::index_query: engine_search(streamkit::brute_force_index<T>{refs.ref, options, s}, engine_call::query); break;
      case nearest_entry::index_query_scratch:
        engine_search(streamkit::brute_force_index<T>{refs.ref, options, s}, engine_call::query_with_scratch);
        break;
      case nearest_entry::index_update:
        engine_search(streamkit::brute_force_index<T>{other_set().ref, options, s}, engine_call::update_then_query);
        break;
      case nearest_entry::tree_query: engine_search(streamkit::tree_index<T>{refs.ref, options, s}, engine_call::query); break;
      case nearest_entry::tree_query_scratch:
        engine_search(streamkit::tree_index<T>{refs.ref, options, s}, engine_call::query_with_scratch);
        break;
      case nearest_entry::tree_update:
        engine_search(streamkit::tree_index<T>{other_set().ref, options, s}, engine_call::update_then_query);
        break;
      case nearest_entry::front_end_query:
      case nearest_entry::front_end_prepared:
      case nearest_entry::front_end_blocking: {
        std::optional<device_points<T>> other;
        std::optional<streamkit::device_buffer<Index>> prior_result;
        std::optional<streamkit::nearest_index<T>> index;
        if (c.prior_set) {
          // Built and queried on another set (a tree is built if one is picked for it), then updated:
          // the next query must not use what was prepared for the other set.
          other.emplace(other_set());
          index.emplace(other->ref, options, s);
          prior_result.emplace(c.n * c.k, s);
          index->query_async(obs.ref, streamkit::neighbors_ref<Index, T>::dense(prior_result->data(), nullptr, c.n, c.k), s);
          index->update(refs.ref, s);
        } else {
          index.emplace(refs.ref, options, s);
        }
        EXPECT_EQ(index->engine_for(c.n, c.k), *c.engine()) << "nearest_index::engine_for";
        if (c.entry == nearest_entry::front_end_query) {
          index->query_async(obs.ref, result, s);
        } else if (c.entry == nearest_entry::front_end_prepared) {
          index->prepare(c.n, c.k, s);
          streamkit::nearest_scratch scratch;
          std::as_const(*index).query_async(obs.ref, result, s, scratch);
          s.sync();  // the index and the scratch must outlive the query
        } else {
          index->query(obs.ref, result, s);
        }
        s.sync();  // the other set and the prior result outlive the queries that read and write them
        break;
      }
      case nearest_entry::one_shot_async: streamkit::nearest_neighbor_async(obs.ref, refs.ref, result, options, s); break;
      case nearest_entry::one_shot: streamkit::nearest_neighbor(obs.ref, refs.ref, result, options, s); break;
      case nearest_entry::dispatch:
      case nearest_entry::multi_gpu_update: break;
    }
  };
  // The blocking forms reject; the asynchronous ones mark and count on the device.
  if (c.invalid_observations && c.on_invalid == streamkit::invalid_points::reject && is_blocking(c.entry)) {
    STREAMKIT_EXPECT_THROW_WITH(search(), std::invalid_argument, "observations: ");
    for (Index j : to_host(d_index, s)) { ASSERT_EQ(j, index_poison) << "a rejected search wrote an index"; }
    return;
  }
  search();
  got_index = to_host(d_index, s);
  if (c.with_distance) { got_distance = to_host(*d_distance, s); }
  expect_neighbours(c, obs.seen, refs.seen, got_index, got_distance);
  std::size_t invalid = 0;
  for (char valid : obs.seen.valid) { invalid += valid ? 0 : 1; }
  EXPECT_EQ(to_host(d_invalid, s)[0], invalid) << "result.invalid_count";
}

/// Neighbours per row: 1 half the time; else 2 to max_neighbors, with extra weight on 2, 16 and 32
/// and on the edges of the engines' list sizes (1, 2, 4, 8, 16, 32: knn_list.cuh).
std::size_t random_k(std::mt19937_64& rng)
{
  if (std::bernoulli_distribution(0.5)(rng)) { return 1; }
  double const u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (u < 0.3) {
    std::size_t const favoured[] = {2, 16, streamkit::max_neighbors};
    return favoured[std::uniform_int_distribution<int>(0, 2)(rng)];
  }
  if (u < 0.45) {
    std::size_t const edges[] = {3, 4, 5, 8, 9, 17};
    return edges[std::uniform_int_distribution<int>(0, 5)(rng)];
  }
  return std::uniform_int_distribution<std::size_t>(2, streamkit::max_neighbors)(rng);
}

/// Thresholds an observation count can sit at: observations per pass-1 block of the brute force
/// (1024 fast, 512 exact; the k-nearest pass 1: 128), the tree's sorting of observations.
std::vector<std::size_t> nearest_observation_thresholds()
{
  return {1, 2, 32, 128, 512, 1024, 2048, 4096, streamkit::detail::tree_sort_threshold};
}

/// ... and a reference count: the brute force's tiles (512; the k-nearest pass 1: 256), and the tree's
/// leaves: a power of two of them (the implicit tree's leaf count is rounded up to one), and one more
/// leaf than a power of two (a tree of twice as many leaves, nearly half of them empty).
std::vector<std::size_t> nearest_reference_thresholds()
{
  std::size_t const leaf = streamkit::detail::tree_leaf_size;
  std::vector<std::size_t> thresholds{1, 2, 32, 128, 256, 512, 1024, 2048, 4096};
  for (std::size_t leaves = 1; leaves <= std::size_t{1} << 16; leaves *= 2) {
    thresholds.push_back(leaves * leaf);
    if (leaves % 8 == 1) { thresholds.push_back((leaves + 1) * leaf); }  // 1, 8 + 1, 64 + 1, ... leaves
  }
  thresholds.push_back(3 * leaf);
  return thresholds;
}

nearest_case random_nearest_case(std::mt19937_64& rng)
{
  nearest_case c;
  std::bernoulli_distribution coin(0.5);
  c.entry = static_cast<nearest_entry>(std::uniform_int_distribution<int>(0, nearest_entry_count - 1)(rng));
  c.is_double = coin(rng);
  c.int64 = coin(rng);
  c.precision = coin(rng) ? streamkit::nn_precision::fast : streamkit::nn_precision::exact;
  c.k = random_k(rng);
  // Pairs: the CPU references (expect_nearest's and brute_force_knn) cost n × m.
  std::size_t const pairs = log_uniform(rng, 1, std::size_t{1} << 24);
  int const shape = std::uniform_int_distribution<int>(0, 19)(rng);
  if (shape < 2 && c.k > 1) {  // fewer references than k: the rows end in −1 and NaN
    c.m = std::uniform_int_distribution<std::size_t>(1, c.k - 1)(rng);
    c.n = log_uniform(rng, 1, std::max<std::size_t>(1, pairs / c.m));
  } else if (shape < 5) {  // at the tree's sorting of observations
    long const delta = std::uniform_int_distribution<long>(-2, 2)(rng);
    c.n = static_cast<std::size_t>(static_cast<long>(streamkit::detail::tree_sort_threshold) + delta);
    c.m = log_uniform(rng, 1, std::max<std::size_t>(1, (std::size_t{1} << 24) / c.n));
  } else if (shape < 12) {
    c.n = near_threshold_or_random(rng, nearest_observation_thresholds(), 1, pairs);
    c.m = log_uniform(rng, 1, std::max<std::size_t>(1, pairs / c.n));
  } else {
    c.m = near_threshold_or_random(rng, nearest_reference_thresholds(), 1, pairs);
    c.n = log_uniform(rng, 1, std::max<std::size_t>(1, pairs / c.m));
  }
  c.result_stride = c.k + std::uniform_int_distribution<std::size_t>(0, 2)(rng);
  // Host memory: the result rows, and the reference's k per row.
  c.n = std::min(c.n, (std::size_t{1} << 24) / c.result_stride);
  c.stride = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
  c.unit = coin(rng) ? streamkit::angle_unit::degrees : streamkit::angle_unit::radians;
  c.distance = static_cast<streamkit::distance_unit>(std::uniform_int_distribution<int>(0, 2)(rng));
  c.with_distance = std::bernoulli_distribution(0.8)(rng);
  c.on_invalid = coin(rng) ? streamkit::invalid_points::reject : streamkit::invalid_points::mark;
  bool const multi_gpu = is_multi_gpu(c.entry);
  c.invalid_observations = c.on_invalid == streamkit::invalid_points::reject && !multi_gpu && std::bernoulli_distribution(0.1)(rng);
  c.clustered = std::bernoulli_distribution(0.3)(rng);
  c.prior_set = is_front_end(c.entry) && coin(rng);
  if (multi_gpu) {
    c.pinned = coin(rng);
    c.chunk_items = coin(rng) ? 0 : log_uniform(rng, 1, c.n);
  }
  // A distance limit around the distance of the k-th neighbour (the nearest cluster's when clustered),
  // sometimes 0 (coincident references only); never where the float32-ranked search may answer.
  if (std::bernoulli_distribution(0.2)(rng) && !c.float32_ranked()) {
    if (std::bernoulli_distribution(0.05)(rng)) {
      c.max_distance = 0.0;
    } else {
      // The k nearest of M uniform points lie within about 2 sqrt(k / M) radians (a cap of area 4πk / M);
      // clustered references lie in about M / 500 spots, and the nearest spot holds k of them.
      double const m = static_cast<double>(c.m);
      double const spots = c.clustered ? std::max(1.0, m / 500.0) : m;
      double const nearest = c.clustered ? 1.0 : std::min(static_cast<double>(c.k), m);
      double const typical = std::min(streamkit::pi / 2, 2.0 * std::sqrt(nearest / spots));
      double const factor = std::exp(std::uniform_real_distribution<double>(std::log(0.25), std::log(4.0))(rng));
      c.max_distance = typical * factor * scale_of(c.distance);
    }
  }
  return c;
}

std::vector<nearest_case> extreme_nearest_cases()
{
  std::vector<nearest_case> cases;
  auto const add = [&](std::size_t n, std::size_t m, streamkit::nn_precision precision, bool int64 = false,
                       nearest_entry entry = nearest_entry::index_query, std::size_t k = 1, std::size_t result_stride = 0) -> nearest_case& {
    nearest_case c;
    c.n = n;
    c.m = m;
    c.precision = precision;
    c.int64 = int64;
    c.entry = entry;
    c.k = k;
    c.result_stride = result_stride == 0 ? k : result_stride;
    cases.push_back(c);
    return cases.back();
  };
  using streamkit::nn_precision;
  // Past the grid-stride kernels' cap (grid_stride_blocks × 256 observations), with few references.
  std::size_t const past_stride_cap = streamkit::detail::grid_stride_blocks * 256 + 259;
  // More tiles than pass 1 has slices (max_grid_yz × 512 references), with few observations.
  std::size_t const past_slice_cap = streamkit::detail::max_grid_yz * 512 + 7;
  for (auto precision : {nn_precision::fast, nn_precision::exact}) {
    add(1, 1, precision);
    add(past_stride_cap, 3, precision);
    add(3, past_slice_cap, precision, precision == nn_precision::exact);
    add((std::size_t{1} << 24) + 1, 1, precision);
    add(1, (std::size_t{1} << 24) + 1, precision);
  }

  // The tree (tree_impl.cuh): leaves of tree_leaf_size under a tree of a power of two of leaves,
  // observations sorted from tree_sort_threshold on.
  std::size_t const leaf = streamkit::detail::tree_leaf_size;
  std::size_t const sort_from = streamkit::detail::tree_sort_threshold;
  add(1, 1, nn_precision::exact, false, nearest_entry::tree_query);                      // one leaf of one reference
  add(1, 1, nn_precision::fast, false, nearest_entry::tree_query_scratch, 32, 33);       // M < k: 31 slots of −1
  add(1, (std::size_t{1} << 20) + 1, nn_precision::fast, false, nearest_entry::tree_query, 32);  // 2^16 + 1 leaves in a tree of 2^17
  add((std::size_t{1} << 22) + 3, 5, nn_precision::exact, true, nearest_entry::tree_query_scratch, 7, 9);  // sorted, M < k
  add(5000, 33, nn_precision::fast, false, nearest_entry::tree_update, 32);  // k = 32 of M = 33: three leaves
  add(sort_from - 1, 256 * leaf + 1, nn_precision::fast, false, nearest_entry::tree_query, 16, 17);  // just below sorting
  add(sort_from, 256 * leaf + 1, nn_precision::exact, false, nearest_entry::tree_query_scratch, 16, 18);  // sorted
  add(past_stride_cap, 3, nn_precision::fast, false, nearest_entry::tree_query, 2);  // tree_observation_keys' grid-stride loop
  add(3, past_stride_cap, nn_precision::exact, true, nearest_entry::tree_update, 16);  // tree_reference_keys' loop, 2^21 leaves
  // Shapes for which the front end's cost model picks the tree (engine_choice.hpp; the case's
  // description names the engine picked), and the multi-GPU search's per chunk of 2^14.
  add(std::size_t{1} << 16, (std::size_t{1} << 12) + 1, nn_precision::fast, false, nearest_entry::front_end_query, 16);
  add(std::size_t{1} << 20, std::size_t{1} << 8, nn_precision::exact, false, nearest_entry::front_end_prepared, 2, 3).prior_set = true;
  add(std::size_t{1} << 14, (std::size_t{1} << 12) + 1, nn_precision::fast, true, nearest_entry::front_end_blocking, 32);
  add(std::size_t{1} << 16, std::size_t{1} << 12, nn_precision::exact, false, nearest_entry::one_shot_async, 8);
  add(std::size_t{1} << 16, (std::size_t{1} << 12) + 1, nn_precision::fast, false, nearest_entry::multi_gpu_update, 32, 34).chunk_items =
    std::size_t{1} << 14;
  return cases;
}

TEST_F(ShapeFuzz, NearestNeighbourEveryEntryPointMatchesTheBruteForce)
{
  streamkit::stream const s(0);
  streamkit::dispatcher gpus;
  auto const run = [&](nearest_case const& c) {
    if (c.is_double) {
      c.int64 ? run_nearest<double, std::int64_t>(c, rng, s, gpus) : run_nearest<double, std::int32_t>(c, rng, s, gpus);
    } else {
      c.int64 ? run_nearest<float, std::int64_t>(c, rng, s, gpus) : run_nearest<float, std::int32_t>(c, rng, s, gpus);
    }
    return c.describe();
  };
  auto const extremes = settings.extremes ? extreme_nearest_cases() : std::vector<nearest_case>{};
  run_cases("extreme nearest-neighbour", extremes.size(), [&](std::size_t k) { return run(extremes[k]); });
  run_cases("random nearest-neighbour", settings.shapes, [&](std::size_t) { return run(random_nearest_case(rng)); });
}

// ---------------------------------------------------------------------------------------------
// Radius queries

enum class radius_engine { brute_force, tree, front_end, one_shot };
enum class radius_call { count_async, count_with_scratch, count_blocking, two_pass, two_pass_with_scratch, blocking };
/// Blocking calls only: radius_options::max_per_row / max_total one below the result (std::length_error
/// naming the counts), or both exactly at it (the query answers).
enum class radius_bound { none, max_per_row, max_total, both_at_the_result };

char const* name_of(radius_engine e)
{
  switch (e) {
    case radius_engine::brute_force: return "brute_force_index";
    case radius_engine::tree: return "tree_index";
    case radius_engine::front_end: return "nearest_index";
    case radius_engine::one_shot: break;
  }
  return "radius_neighbors";
}

char const* name_of(radius_call c)
{
  switch (c) {
    case radius_call::count_async: return "radius_count_async";
    case radius_call::count_with_scratch: return "const radius_count_async with a scratch";
    case radius_call::count_blocking: return "radius_count";
    case radius_call::two_pass: return "radius_offsets_async + radius_fill_async";
    case radius_call::two_pass_with_scratch: return "const radius_offsets_async + radius_fill_async with a scratch";
    case radius_call::blocking: break;
  }
  return "radius_query";
}

char const* name_of(radius_bound b)
{
  switch (b) {
    case radius_bound::none: return "";
    case radius_bound::max_per_row: return " max_per_row one below the largest row";
    case radius_bound::max_total: return " max_total one below the total";
    case radius_bound::both_at_the_result: break;
  }
  return " max_per_row and max_total at the result";
}

struct radius_case {
  radius_engine engine = radius_engine::brute_force;
  radius_call call = radius_call::two_pass;
  bool is_double = false;
  bool int64 = false;
  std::size_t n = 1, m = 1;
  std::size_t stride = 1;  // 1: separate arrays; 2 and more: lat and lon interleaved in records of `stride`
  streamkit::angle_unit unit = streamkit::angle_unit::degrees;
  streamkit::distance_unit distance = streamkit::distance_unit::radians;
  double radius = 0.0;            // in `distance` (infinity: every valid reference); the base of per-observation radii
  bool per_observation = false;   // radius_options::radii: radius × [1/4, 4], and some 0, NaN, negative and infinite radii
  bool sorted = true;
  bool with_distance = true;
  bool tell_largest = false;      // two passes, sorted: radius_neighbors_ref::largest_row read from the offsets
  bool short_storage = false;     // two passes: storage for half the total (never written past; rows incomplete)
  radius_bound bound = radius_bound::none;
  streamkit::invalid_points on_invalid = streamkit::invalid_points::reject;
  bool invalid_observations = false;  // with reject: the blocking calls must throw and write nothing
  bool clustered = false;             // many near-ties and duplicates; observations on references
  bool prior_set = false;             // engines: built on another set and radius-queried, then updated

  [[nodiscard]] bool blocking() const { return call == radius_call::count_blocking || call == radius_call::blocking; }
  [[nodiscard]] bool counts_only() const
  {
    return call == radius_call::count_async || call == radius_call::count_with_scratch || call == radius_call::count_blocking;
  }
  /// The engine that answers: the engines' own; the front end's and the one-shot's the k = 1 exact choice
  /// (nearest_index::radius_engine_for).
  [[nodiscard]] streamkit::search_engine engine_picked() const
  {
    switch (engine) {
      case radius_engine::brute_force: return streamkit::search_engine::brute_force;
      case radius_engine::tree: return streamkit::search_engine::tree;
      case radius_engine::front_end: break;
      case radius_engine::one_shot:
        if (n == 0) { return streamkit::search_engine::brute_force; }  // radius_neighbors returns after the checks
        break;
    }
    return streamkit::detail::choose_engine(n, m, 1, streamkit::nn_precision::exact);
  }
  [[nodiscard]] std::string describe() const
  {
    std::ostringstream s;
    s.precision(17);
    s << name_of(engine) << "::" << name_of(call) << " " << (is_double ? "double" : "float") << (int64 ? " int64 " : " int32 ") << n
      << " x " << m << " stride " << stride << (unit == streamkit::angle_unit::degrees ? " degrees" : " radians") << " radius " << radius
      << " " << name_of(distance) << (per_observation ? " per observation" : "");
    if (!counts_only()) { s << (sorted ? " sorted" : " unsorted") << (with_distance ? "" : " no distance"); }
    s << (tell_largest ? " largest row told" : "") << (short_storage ? " storage for half the total" : "") << name_of(bound)
      << (on_invalid == streamkit::invalid_points::mark ? " mark" : " reject") << (invalid_observations ? " with invalid observations" : "")
      << (clustered ? " clustered" : "") << (prior_set ? " after a query of a prior set" : "") << " engine " << name_of(engine_picked());
    return s.str();
  }
};

template <class Type>
struct tag_of {
  using type = Type;
};

/// What the fuzz fills the count and offset outputs with before a pass.
constexpr std::int64_t count_poison = -5;
constexpr std::size_t radius_spare = 7;  // poisoned elements past a fill's capacity, which it must leave alone

/// Each observation's radius for a case with per-observation radii: the case's radius × [1/4, 4], and
/// about 2 % each NaN, negative, 0 and infinite.
std::vector<double> random_radii(radius_case const& c, std::mt19937_64& rng)
{
  std::vector<double> radii(c.n, c.radius);
  std::uniform_real_distribution<double> u(0.0, 1.0), factor(std::log(0.25), std::log(4.0));
  for (double& r : radii) {
    double const p = u(rng);
    r = p < 0.02   ? std::numeric_limits<double>::quiet_NaN()
        : p < 0.04 ? -1.0
        : p < 0.06 ? 0.0
        : p < 0.08 ? std::numeric_limits<double>::infinity()
                   : c.radius * std::exp(factor(rng));
  }
  return radii;
}

template <class T, class Index>
void run_radius(radius_case const& c, std::mt19937_64& rng, streamkit::stream const& s)
{
  SCOPED_TRACE(c.describe());
  auto obs_points = random_points(c.n, c.clustered, rng);
  auto ref_points = random_points(c.m, c.clustered, rng);
  if (c.clustered && c.n > 1) {  // observations exactly on references: rows of identical references, r = 0
    for (std::size_t i = 0; i < c.n; i += 11) {
      obs_points.lat[i] = ref_points.lat[i % c.m];
      obs_points.lon[i] = ref_points.lon[i % c.m];
    }
  }
  if (c.on_invalid == streamkit::invalid_points::mark) {
    if (c.n > 0) { spoil(obs_points, rng); }
    spoil(ref_points, rng);
  }
  if (c.invalid_observations && c.n > 0) { spoil(obs_points, rng); }
  streamkit::nearest_options options;
  options.on_invalid = c.on_invalid;
  options.unit = c.distance;
  auto const obs = upload<T>(obs_points, c.unit, c.stride, s);
  auto const refs = upload<T>(ref_points, c.unit, c.stride, s);

  // The radii: the device's, and the checker's (a NaN or negative radius: an empty row).
  std::vector<double> radii = c.per_observation ? random_radii(c, rng) : std::vector<double>(c.n, c.radius);
  std::optional<streamkit::device_buffer<double>> d_radii;
  streamkit::radius_options r;
  r.sorted = c.sorted;
  if (c.per_observation) {
    d_radii.emplace(to_device(radii, s));
    r.radii = d_radii->data();
    r.radius = -1.0;  // ignored when radii are given
  } else {
    r.radius = c.radius;
  }
  for (double& radius : radii) { radius = radius >= 0.0 ? radius : -1.0; }
  double const scale = scale_of(c.distance);
  std::size_t invalid = 0;
  for (char valid : obs.seen.valid) { invalid += valid ? 0 : 1; }
  bool const rejects = c.invalid_observations && c.on_invalid == streamkit::invalid_points::reject && c.blocking();
  Index const index_poison = static_cast<Index>(streamkit_test::poison_index);
  T const distance_poison = static_cast<T>(streamkit_test::poison_distance);

  // A blocking query (an index's radius_query, or radius_neighbors) with the case's bound.
  auto const check_blocking = [&](auto const& query) {
    if (rejects) {
      STREAMKIT_EXPECT_THROW_WITH(query(r), std::invalid_argument, "observations: ");
      return;
    }
    streamkit::radius_options bounded = r;
    if (c.bound != radius_bound::none) {
      // The rows' sizes, counted by a brute-force index over the same references (every engine returns
      // the same rows) and checked against the CPU.
      auto d_counts = to_device(std::vector<std::int64_t>(std::max<std::size_t>(c.n, 1), count_poison), s);
      streamkit::brute_force_index<T> counter(refs.ref, options, s);
      counter.radius_count_async(obs.ref, r, d_counts.data(), s);
      std::vector<std::int64_t> counts = to_host(d_counts, s);
      counts.resize(c.n);
      streamkit_test::expect_radius_counts(counts, obs.seen, refs.seen, radii, scale);
      std::size_t largest = 0, total = 0;
      for (std::int64_t count : counts) {
        largest = std::max(largest, static_cast<std::size_t>(count));
        total += static_cast<std::size_t>(count);
      }
      std::string const rows = std::to_string(c.n);
      if (c.bound == radius_bound::max_per_row && largest > 0) {
        bounded.max_per_row = largest - 1;
        STREAMKIT_EXPECT_THROW_WITH(query(bounded), std::length_error,
                                    "a row would hold " + std::to_string(largest) + " references within the radius, above max_per_row = " +
                                      std::to_string(largest - 1) + " (" + std::to_string(total) + " in all over " + rows + " rows)");
        return;
      }
      if (c.bound == radius_bound::max_total && total > 0) {
        bounded.max_total = total - 1;
        STREAMKIT_EXPECT_THROW_WITH(query(bounded), std::length_error,
                                    std::to_string(total) + " references within the radius in all (" + rows + " rows, the largest " +
                                      std::to_string(largest) + "), above max_total = " + std::to_string(total - 1));
        return;
      }
      bounded.max_per_row = largest;  // at the result (or a bound that no empty result exceeds): answers
      bounded.max_total = total;
    }
    auto const got = streamkit_test::fetch(query(bounded), s);
    streamkit_test::expect_radius(got, obs.seen, refs.seen, radii, scale, c.sorted, c.with_distance);
  };

  // The case's call on an index (brute_force_index, tree_index or nearest_index).
  auto const on_index = [&](auto& index) {
    using engine_type = std::decay_t<decltype(index)>;
    constexpr bool front_end = std::is_same_v<engine_type, streamkit::nearest_index<T>>;
    if constexpr (front_end) { EXPECT_EQ(index.radius_engine_for(c.n), c.engine_picked()) << "nearest_index::radius_engine_for"; }
    streamkit::nearest_scratch scratch;
    bool const with_scratch = c.call == radius_call::count_with_scratch || c.call == radius_call::two_pass_with_scratch;
    if constexpr (front_end) {
      if (with_scratch) { index.prepare_radius(c.n, s); }  // the const forms need the engine picked ready
    }
    switch (c.call) {
      case radius_call::count_async:
      case radius_call::count_with_scratch:
      case radius_call::count_blocking: {
        auto d_counts = to_device(std::vector<std::int64_t>(std::max<std::size_t>(c.n, 1), count_poison), s);
        if (c.call == radius_call::count_with_scratch) {
          std::as_const(index).radius_count_async(obs.ref, r, d_counts.data(), s, scratch);
        } else if (c.call == radius_call::count_async) {
          index.radius_count_async(obs.ref, r, d_counts.data(), s);
        } else if (rejects) {
          STREAMKIT_EXPECT_THROW_WITH(index.radius_count(obs.ref, r, d_counts.data(), s), std::invalid_argument, "observations: ");
          for (std::int64_t count : to_host(d_counts, s)) { ASSERT_EQ(count, count_poison) << "a rejected radius_count wrote a count"; }
          return;
        } else {
          index.radius_count(obs.ref, r, d_counts.data(), s);
        }
        std::vector<std::int64_t> counts = to_host(d_counts, s);
        counts.resize(c.n);
        streamkit_test::expect_radius_counts(counts, obs.seen, refs.seen, radii, scale);
        return;
      }
      case radius_call::two_pass:
      case radius_call::two_pass_with_scratch: {
        auto d_offsets = to_device(std::vector<std::int64_t>(c.n + 1, count_poison), s);
        if (with_scratch) {
          std::as_const(index).radius_offsets_async(obs.ref, r, d_offsets.data(), s, scratch);
        } else {
          index.radius_offsets_async(obs.ref, r, d_offsets.data(), s);
        }
        std::vector<std::int64_t> const offsets = to_host(d_offsets, s);
        ASSERT_EQ(offsets[0], 0) << "offsets[0]";
        std::vector<std::int64_t> counts(c.n);
        std::size_t largest = 0;
        for (std::size_t i = 0; i < c.n; ++i) {
          counts[i] = offsets[i + 1] - offsets[i];
          ASSERT_GE(counts[i], 0) << "row " << i << ": offsets " << offsets[i] << " then " << offsets[i + 1];
          largest = std::max(largest, static_cast<std::size_t>(counts[i]));
        }
        std::size_t const total = static_cast<std::size_t>(offsets[c.n]);
        std::size_t const capacity = c.short_storage ? total / 2 : total;
        auto d_index = to_device(std::vector<Index>(capacity + radius_spare, index_poison), s);
        std::optional<streamkit::device_buffer<T>> d_distance;
        if (c.with_distance) { d_distance.emplace(to_device(std::vector<T>(capacity + radius_spare, distance_poison), s)); }
        auto d_invalid = to_device(std::vector<unsigned long long>{0}, s);
        streamkit::radius_neighbors_ref<Index, T> view{d_offsets.data(), d_index.data(), c.with_distance ? d_distance->data() : nullptr,
                                                       c.n, capacity, d_invalid.data(), c.tell_largest ? largest : 0};
        if (with_scratch) {
          std::as_const(index).radius_fill_async(obs.ref, r, view, s, scratch);
        } else {
          index.radius_fill_async(obs.ref, r, view, s);
        }
        streamkit_test::host_csr<Index, T> got{offsets, to_host(d_index, s), c.with_distance ? to_host(*d_distance, s) : std::vector<T>{}};
        EXPECT_EQ(to_host(d_invalid, s)[0], invalid) << "result.invalid_count";
        std::size_t past = 0;
        for (std::size_t e = capacity; e < capacity + radius_spare; ++e) {
          past += got.index[e] != index_poison || (c.with_distance && !(got.distance[e] == distance_poison)) ? 1 : 0;
        }
        EXPECT_EQ(past, 0U) << "elements past the capacity " << capacity << " written";
        if (c.short_storage) {
          // The offsets are the whole result's; the rows that fit are complete; the slots of the row cut
          // short hold a reference, −1 (a sorted fill's unwritten slot) or the poison.
          streamkit_test::expect_radius_counts(counts, obs.seen, refs.seen, radii, scale);
          std::size_t complete = 0;
          while (complete < c.n && static_cast<std::size_t>(offsets[complete + 1]) <= capacity) { ++complete; }
          auto const fitted = static_cast<std::size_t>(offsets[complete]);
          std::size_t wrong = 0;
          for (std::size_t e = fitted; e < capacity; ++e) {
            Index const j = got.index[e];
            wrong += j == index_poison || j == Index(-1) || (j >= 0 && static_cast<std::size_t>(j) < c.m) ? 0 : 1;
          }
          EXPECT_EQ(wrong, 0U) << "slots of the row cut short hold indices that are no reference";
          streamkit_test::radians_set rows;
          rows.lat.assign(obs.seen.lat.begin(), obs.seen.lat.begin() + static_cast<std::ptrdiff_t>(complete));
          rows.lon.assign(obs.seen.lon.begin(), obs.seen.lon.begin() + static_cast<std::ptrdiff_t>(complete));
          rows.valid.assign(obs.seen.valid.begin(), obs.seen.valid.begin() + static_cast<std::ptrdiff_t>(complete));
          got.offsets.resize(complete + 1);
          got.index.resize(fitted);
          if (c.with_distance) { got.distance.resize(fitted); }
          streamkit_test::expect_radius(got, rows, refs.seen, std::vector<double>(radii.begin(), radii.begin() + static_cast<std::ptrdiff_t>(complete)),
                                        scale, c.sorted, c.with_distance);
          return;
        }
        got.index.resize(total);
        if (c.with_distance) { got.distance.resize(total); }
        streamkit_test::expect_radius(got, obs.seen, refs.seen, radii, scale, c.sorted, c.with_distance);
        return;
      }
      case radius_call::blocking:
        check_blocking([&](streamkit::radius_options const& bounded) {
          return index.template radius_query<Index>(obs.ref, bounded, c.with_distance, s);
        });
        return;
    }
  };

  // The index: on the references, or built on another set of another size and radius-queried there
  // (a nearest_index builds the tree it picks), then updated to the references.
  auto const with_index = [&](auto tag) {
    using engine_type = typename decltype(tag)::type;
    if (!c.prior_set) {
      engine_type index(refs.ref, options, s);
      on_index(index);
      s.sync();
      return;
    }
    auto const other = upload<T>(streamkit_test::uniform_points(log_uniform(rng, 1, 2 * c.m), rng), c.unit, 1, s);
    engine_type index(other.ref, options, s);
    streamkit::device_buffer<std::int64_t> prior(c.n + 1, s);
    index.radius_offsets_async(obs.ref, r, prior.data(), s);
    index.update(refs.ref, s);
    on_index(index);
    s.sync();  // the other set and the prior offsets outlive the queries that read and write them
  };
  switch (c.engine) {
    case radius_engine::brute_force: with_index(tag_of<streamkit::brute_force_index<T>>{}); break;
    case radius_engine::tree: with_index(tag_of<streamkit::tree_index<T>>{}); break;
    case radius_engine::front_end: with_index(tag_of<streamkit::nearest_index<T>>{}); break;
    case radius_engine::one_shot:
      check_blocking([&](streamkit::radius_options const& bounded) {
        return streamkit::radius_neighbors<Index>(obs.ref, refs.ref, bounded, options, c.with_distance, s);
      });
      break;
  }
}

radius_case random_radius_case(std::mt19937_64& rng)
{
  radius_case c;
  std::bernoulli_distribution coin(0.5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  c.engine = static_cast<radius_engine>(std::uniform_int_distribution<int>(0, 3)(rng));
  if (c.engine == radius_engine::one_shot) {
    c.call = radius_call::blocking;
  } else {  // the two passes and the blocking query most often
    double const p = u(rng);
    c.call = p < 0.3    ? radius_call::two_pass
             : p < 0.45 ? radius_call::two_pass_with_scratch
             : p < 0.7  ? radius_call::blocking
             : p < 0.8  ? radius_call::count_async
             : p < 0.9  ? radius_call::count_with_scratch
                        : radius_call::count_blocking;
  }
  c.is_double = coin(rng);
  c.int64 = coin(rng);
  // Pairs: the CPU reference costs n × m.
  std::size_t const pairs = log_uniform(rng, 1, std::size_t{1} << 24);
  int const shape = std::uniform_int_distribution<int>(0, 19)(rng);
  if (shape < 3) {  // at the tree's sorting of observations
    long const delta = std::uniform_int_distribution<long>(-2, 2)(rng);
    c.n = static_cast<std::size_t>(static_cast<long>(streamkit::detail::tree_sort_threshold) + delta);
    c.m = log_uniform(rng, 1, std::max<std::size_t>(1, (std::size_t{1} << 24) / c.n));
  } else if (shape < 11) {
    c.n = near_threshold_or_random(rng, nearest_observation_thresholds(), 1, pairs);
    c.m = log_uniform(rng, 1, std::max<std::size_t>(1, pairs / c.n));
  } else {
    c.m = near_threshold_or_random(rng, nearest_reference_thresholds(), 1, pairs);
    c.n = log_uniform(rng, 1, std::max<std::size_t>(1, pairs / c.m));
  }
  c.stride = std::uniform_int_distribution<std::size_t>(1, 4)(rng);
  c.unit = coin(rng) ? streamkit::angle_unit::degrees : streamkit::angle_unit::radians;
  c.distance = static_cast<streamkit::distance_unit>(std::uniform_int_distribution<int>(0, 2)(rng));
  c.on_invalid = coin(rng) ? streamkit::invalid_points::reject : streamkit::invalid_points::mark;
  c.invalid_observations = c.on_invalid == streamkit::invalid_points::reject && std::bernoulli_distribution(0.1)(rng);
  c.clustered = std::bernoulli_distribution(0.3)(rng);
  c.prior_set = c.engine != radius_engine::one_shot && std::bernoulli_distribution(0.3)(rng);
  c.per_observation = std::bernoulli_distribution(0.3)(rng);
  c.sorted = std::bernoulli_distribution(0.7)(rng);
  c.with_distance = std::bernoulli_distribution(0.7)(rng);
  bool const two_pass = c.call == radius_call::two_pass || c.call == radius_call::two_pass_with_scratch;
  c.tell_largest = two_pass && c.sorted && coin(rng);
  c.short_storage = two_pass && std::bernoulli_distribution(0.08)(rng);
  if (c.call == radius_call::blocking && std::bernoulli_distribution(0.3)(rng)) {
    c.bound = static_cast<radius_bound>(std::uniform_int_distribution<int>(1, 3)(rng));
  }
  // The radius, in radians: for a mean row of `rows` (a cap of ρ holds about M ρ² / 4 of M uniform
  // references; clustered ones lie in spots of about 500 within 2 km), sometimes 0, the clusters'
  // scale, or every reference (small shapes only: the result holds n × m pairs).
  double const m = static_cast<double>(c.m);
  double const n = static_cast<double>(std::max<std::size_t>(c.n, 1));
  double rho = 0.0;
  double const kind = u(rng);
  if (kind < 0.05) {
    rho = 0.0;
  } else if (kind < 0.1 && n * m <= static_cast<double>(std::size_t{1} << 21)) {
    rho = coin(rng) ? std::numeric_limits<double>::infinity() : streamkit::pi;
  } else if (kind < 0.25 && c.clustered) {
    rho = 2000.0 / (streamkit::earth_radius_km * 1000.0) * std::exp(std::uniform_real_distribution<double>(std::log(0.01), std::log(2.0))(rng));
  } else {
    double const rows = std::min(std::exp(std::uniform_real_distribution<double>(std::log(0.05), std::log(100.0))(rng)),
                                 static_cast<double>(std::size_t{1} << 20) / n);
    rho = std::min(streamkit::pi, 2.0 * std::sqrt(rows / m));
  }
  c.radius = rho * scale_of(c.distance);
  return c;
}

std::vector<radius_case> extreme_radius_cases()
{
  std::vector<radius_case> cases;
  double const every = std::numeric_limits<double>::infinity();
  auto const add = [&](radius_engine engine, radius_call call, std::size_t n, std::size_t m, double radians) -> radius_case& {
    radius_case c;
    c.engine = engine;
    c.call = engine == radius_engine::one_shot ? radius_call::blocking : call;
    c.n = n;
    c.m = m;
    c.radius = radians;
    cases.push_back(c);
    return cases.back();
  };
  // A radius holding about `rows` of M uniform references.
  auto const holding = [](double rows, std::size_t m) { return std::min(streamkit::pi, 2.0 * std::sqrt(rows / static_cast<double>(m))); };
  using e = radius_engine;
  using rc = radius_call;
  // One observation and one reference; no observations.
  for (e engine : {e::brute_force, e::tree, e::front_end}) {
    add(engine, rc::two_pass, 1, 1, 0.0);
    add(engine, rc::blocking, 1, 1, every).with_distance = false;
    add(engine, rc::count_async, 0, 100, 1.0);
    add(engine, rc::two_pass_with_scratch, 0, 100, 1.0);
    add(engine, rc::blocking, 0, 100, 1.0).is_double = true;
  }
  add(e::one_shot, rc::blocking, 1, 1, streamkit::pi).is_double = true;
  add(e::one_shot, rc::blocking, 0, 5, 1.0);
  // Past the grid-stride kernels' cap (grid_stride_blocks × 256 rows: radius_clamp_offsets,
  // radius_largest_row, the row sorts radius_sort_*), three references each within every radius.
  std::size_t const past_stride_cap = streamkit::detail::grid_stride_blocks * 256 + 259;
  add(e::brute_force, rc::two_pass, past_stride_cap, 3, every).tell_largest = true;
  add(e::tree, rc::blocking, past_stride_cap, 3, streamkit::pi);
  // More reference tiles than the brute force has slices (max_grid_yz × 256 references), few observations.
  std::size_t const past_slice_cap = streamkit::detail::max_grid_yz * 256 + 7;
  {
    auto& c = add(e::brute_force, rc::two_pass, 3, past_slice_cap, holding(200, past_slice_cap) * streamkit::earth_radius_km);
    c.distance = streamkit::distance_unit::kilometres;
  }
  {
    auto& c = add(e::brute_force, rc::blocking, 3, past_slice_cap, every);
    c.sorted = false;
    c.with_distance = false;
    c.int64 = true;
  }
  add(e::tree, rc::two_pass_with_scratch, 5, past_slice_cap, holding(50, past_slice_cap)).is_double = true;
  // One row of 2^20 + 1 references, radix-sorted.
  add(e::tree, rc::blocking, 1, (std::size_t{1} << 20) + 1, streamkit::pi).is_double = true;
  // A sorted fill told the largest row: rows of radius_small_row (each sorted by one warp, in shared memory) and one more (radix sort).
  add(e::brute_force, rc::two_pass, 2000, streamkit::radius_small_row, every).tell_largest = true;
  add(e::tree, rc::two_pass, 2000, streamkit::radius_small_row, every).tell_largest = true;
  add(e::front_end, rc::two_pass, 2000, streamkit::radius_small_row + 1, every).tell_largest = true;
  add(e::brute_force, rc::two_pass, 2000, streamkit::radius_small_row + 1, every);
  // The tree's sorting of observations.
  std::size_t const leaf = streamkit::detail::tree_leaf_size;
  std::size_t const sort_from = streamkit::detail::tree_sort_threshold;
  add(e::tree, rc::two_pass, sort_from - 1, 256 * leaf + 1, holding(16, 256 * leaf + 1)).tell_largest = true;
  add(e::tree, rc::blocking, sort_from, 256 * leaf + 1, holding(16, 256 * leaf + 1)).is_double = true;
  // Identical references and observations on them: r = 0 and a few metres.
  for (e engine : {e::brute_force, e::tree, e::front_end, e::one_shot}) {
    auto& zero = add(engine, rc::two_pass, 5000, 5000, 0.0);
    zero.clustered = true;
    zero.is_double = true;
    auto& metres = add(engine, rc::blocking, 5000, 5000, 6.0);
    metres.clustered = true;
    metres.distance = streamkit::distance_unit::metres;
  }
  // Storage for half the total.
  add(e::brute_force, rc::two_pass, 4000, 4000, holding(20, 4000)).short_storage = true;
  {
    auto& c = add(e::tree, rc::two_pass, 4000, 4000, holding(20, 4000));
    c.short_storage = true;
    c.sorted = false;
  }
  {
    auto& c = add(e::front_end, rc::two_pass_with_scratch, 4000, 4000, holding(20, 4000));
    c.short_storage = true;
    c.tell_largest = true;
  }
  // The front end's tree (picked for 2^20 observations), after a query of a prior set.
  {
    auto& c = add(e::front_end, rc::two_pass_with_scratch, std::size_t{1} << 20, 32, holding(4, 32));
    c.prior_set = true;
    c.tell_largest = true;
  }
  add(e::front_end, rc::blocking, std::size_t{1} << 20, 32, holding(4, 32)).bound = radius_bound::both_at_the_result;
  // Bounds, per observation radii, invalid points.
  for (radius_bound bound : {radius_bound::max_per_row, radius_bound::max_total}) {
    for (e engine : {e::brute_force, e::tree, e::front_end, e::one_shot}) {
      add(engine, rc::blocking, 3000, 5000, holding(10, 5000)).bound = bound;
    }
  }
  for (e engine : {e::brute_force, e::tree, e::front_end}) {
    auto& c = add(engine, rc::two_pass, 3000, 5000, holding(10, 5000));
    c.per_observation = true;
    c.on_invalid = streamkit::invalid_points::mark;
    auto& rejected = add(engine, engine == e::tree ? rc::count_blocking : rc::blocking, 3000, 5000, holding(10, 5000));
    rejected.invalid_observations = true;
  }
  add(e::one_shot, rc::blocking, 3000, 5000, holding(10, 5000)).invalid_observations = true;
  return cases;
}

std::string run_radius_case(radius_case const& c, std::mt19937_64& rng, streamkit::stream const& s)
{
  if (c.is_double) {
    c.int64 ? run_radius<double, std::int64_t>(c, rng, s) : run_radius<double, std::int32_t>(c, rng, s);
  } else {
    c.int64 ? run_radius<float, std::int64_t>(c, rng, s) : run_radius<float, std::int32_t>(c, rng, s);
  }
  return c.describe();
}

TEST_F(ShapeFuzz, RadiusEveryEntryPointMatchesTheBruteForce)
{
  streamkit::stream const s(0);
  auto const extremes = settings.extremes ? extreme_radius_cases() : std::vector<radius_case>{};
  run_cases("extreme radius", extremes.size(), [&](std::size_t k) { return run_radius_case(extremes[k], rng, s); });
  run_cases("random radius", settings.shapes, [&](std::size_t) { return run_radius_case(random_radius_case(rng), rng, s); });
}

/// Results of more than 2^31 pairs: every one of 2^16 observations within an infinite radius of each of
/// 2^15 + 3 references. The offsets (their scan past 2^31) and, on the brute force, the unsorted fill
/// into int32 storage (positions past 2^31), every row checked to hold each reference once.
TEST_F(ShapeFuzz, RadiusGiantResultsPast2To31)
{
  if (!settings.giant || !settings.extremes) {
    GTEST_SKIP() << "STREAMKIT_FUZZ_GIANT=0 or STREAMKIT_FUZZ_EXTREMES=0: results of 2^31 pairs left out";
  }
  streamkit::stream const s(0);
  std::size_t const n = std::size_t{1} << 16, m = (std::size_t{1} << 15) + 3, total = n * m;
  streamkit::radius_options r;
  r.radius = std::numeric_limits<double>::infinity();
  r.sorted = false;
  run_cases("giant radius", 2, [&](std::size_t k) {
    bool const fill = k == 0;
    std::string const what = std::string(fill ? "brute_force_index::radius_offsets_async + radius_fill_async unsorted int32 "
                                               : "tree_index::radius_offsets_async + radius_count_async ") +
                             std::to_string(n) + " x " + std::to_string(m) + " infinite radius: " + std::to_string(total) + " pairs";
    SCOPED_TRACE(what);
    // Device: the result's indices (fill) and offsets. Host: the indices coming back and the offsets.
    if (!memory_allows(fill ? total * sizeof(std::int32_t) + n * 32 : n * 32, fill ? total * sizeof(std::int32_t) + n * 32 : n * 32, what)) {
      return what;
    }
    auto const obs = upload<float>(streamkit_test::uniform_points(n, rng), streamkit::angle_unit::degrees, 1, s);
    auto const refs = upload<float>(streamkit_test::uniform_points(m, rng), streamkit::angle_unit::degrees, 1, s);
    auto d_offsets = to_device(std::vector<std::int64_t>(n + 1, count_poison), s);
    auto const expect_offsets = [&] {
      std::vector<std::int64_t> const offsets = to_host(d_offsets, s);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i <= n; ++i) {
        if (offsets[i] != static_cast<std::int64_t>(i * m) && wrong++ < 5) { ADD_FAILURE() << "offsets[" << i << "] = " << offsets[i]; }
      }
      EXPECT_EQ(wrong, 0U) << "offsets wrong";
    };
    if (!fill) {
      streamkit::tree_index<float> index(refs.ref, streamkit::nearest_options{}, s);
      index.radius_offsets_async(obs.ref, r, d_offsets.data(), s);
      expect_offsets();
      auto d_counts = to_device(std::vector<std::int64_t>(n, count_poison), s);
      index.radius_count_async(obs.ref, r, d_counts.data(), s);
      std::vector<std::int64_t> const counts = to_host(d_counts, s);
      EXPECT_EQ(std::count(counts.begin(), counts.end(), static_cast<std::int64_t>(m)), static_cast<std::ptrdiff_t>(n)) << "counts";
      return what;
    }
    streamkit::brute_force_index<float> index(refs.ref, streamkit::nearest_options{}, s);
    index.radius_offsets_async(obs.ref, r, d_offsets.data(), s);
    expect_offsets();
    streamkit::device_buffer<std::int32_t> d_index(total, s);
    STREAMKIT_CUDA_TRY(cudaMemsetAsync(d_index.data(), 0xf9, total * sizeof(std::int32_t), s.value()));  // poison: a negative index
    index.radius_fill_async(obs.ref, r, streamkit::radius_neighbors_ref<std::int32_t, float>{d_offsets.data(), d_index.data(), nullptr, n, total, nullptr, 0},
                            s);
    std::vector<std::int32_t> const got = to_host(d_index, s);
    std::atomic<std::size_t> wrong{0};
    streamkit_test::parallel_for(
      n,
      [&](std::size_t begin, std::size_t end) {
        std::vector<char> seen(m);
        for (std::size_t i = begin; i < end; ++i) {
          std::fill(seen.begin(), seen.end(), 0);
          bool right = true;
          for (std::size_t e = i * m; e < (i + 1) * m; ++e) {
            std::int32_t const j = got[e];
            right = right && j >= 0 && static_cast<std::size_t>(j) < m && seen[static_cast<std::size_t>(j)] == 0;
            if (right) { seen[static_cast<std::size_t>(j)] = 1; }
          }
          wrong += right ? 0 : 1;
        }
      },
      total);
    EXPECT_EQ(wrong.load(), 0U) << "rows that do not hold every reference once";
    return what;
  });
}

}  // namespace
