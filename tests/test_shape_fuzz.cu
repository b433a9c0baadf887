// Shape fuzz: random and extreme shapes for every public bulk entry point, each result compared
// element by element with a float64 CPU reference, outputs poisoned first.
//
//   STREAMKIT_FUZZ_SEED    seed of the random shapes (default 20261123; printed)
//   STREAMKIT_FUZZ_SHAPES  random shapes per family, min-max and nearest neighbour (default 100)
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
#include "gpu_test.hpp"
#include "preprocessing/minmax_reference.hpp"
#include "spatial/nearest_reference.hpp"
#include "test_support.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/core/stream.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
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

template <class T>
device_points<T> upload(streamkit_test::point_set const& p, nearest_case const& c, streamkit::stream const& s)
{
  device_points<T> d;
  d.lat = streamkit_test::converted<T>(p.lat, c.unit);
  d.lon = streamkit_test::converted<T>(p.lon, c.unit);
  d.seen = streamkit_test::as_seen(d.lat, d.lon, c.unit);
  if (c.stride == 1) {
    d.storage.push_back(to_device(d.lat, s));
    d.storage.push_back(to_device(d.lon, s));
    d.ref = streamkit::points_ref<T>::separate(d.storage[0].data(), d.storage[1].data(), p.size(), c.unit);
    return d;
  }
  d.storage.push_back(to_device(records_of(d.lat, d.lon, c.stride), s));
  d.ref = {d.storage[0].data(), d.storage[0].data() + 1, p.size(), c.stride, c.unit};
  return d;
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

}  // namespace
