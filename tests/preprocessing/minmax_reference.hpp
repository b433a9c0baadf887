#pragma once
// Host matrices and the float64 CPU reference of column min-max scaling, shared by the min-max tests
// and the shape fuzz. The reference and the checks run on every hardware thread, so that matrices of
// billions of elements are checked element by element.

#include "test_support.hpp"

#include <streamkit/core/matrix.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace streamkit_test {

inline constexpr double poison = -98765.4321;

/// A host matrix with its own storage (pitch included, one element beyond the last line), filled
/// with the poison.
template <class T>
struct host_matrix {
  std::size_t rows, cols, ld;
  streamkit::layout order;
  std::vector<T> storage;
  host_matrix(std::size_t r, std::size_t c, streamkit::layout o, std::size_t pad = 0)
      : rows(r), cols(c), ld((o == streamkit::layout::row_major ? c : r) + pad), order(o),
        storage((o == streamkit::layout::row_major ? r : c) * ld + 1, static_cast<T>(poison))
  {
  }
  [[nodiscard]] streamkit::matrix_ref<T> ref(T* base) const { return {base, rows, cols, ld, order}; }
  [[nodiscard]] streamkit::matrix_ref<T> ref() { return ref(storage.data()); }
  [[nodiscard]] T& at(std::size_t i, std::size_t j) { return storage[ref().offset(i, j)]; }
  [[nodiscard]] T at(std::size_t i, std::size_t j) const { return storage[ref(const_cast<T*>(storage.data())).offset(i, j)]; }
  /// Lines in storage order (rows of a row-major matrix, columns of a column-major one) and their length.
  [[nodiscard]] std::size_t lines() const { return order == streamkit::layout::row_major ? rows : cols; }
  [[nodiscard]] std::size_t line_length() const { return order == streamkit::layout::row_major ? cols : rows; }
  /// Calls f(i, j) for elements [begin, end) of the matrix in storage order (padding skipped).
  template <class F>
  void for_elements(std::size_t begin, std::size_t end, F const& f) const
  {
    std::size_t const length = line_length();
    if (begin >= end || length == 0) { return; }
    std::size_t line = begin / length, k = begin % length;
    for (std::size_t e = begin; e < end; ++e) {
      if (order == streamkit::layout::row_major) {
        f(line, k);
      } else {
        f(k, line);
      }
      if (++k == length) {
        k = 0;
        ++line;
      }
    }
  }
  /// Calls f(i, j) for every element, on every hardware thread when there are many.
  template <class F>
  void parallel_for_each(F const& f) const
  {
    parallel_for(rows * cols, [&](std::size_t begin, std::size_t end) { for_elements(begin, end, f); });
  }
};

/// Uniform values in [-1000, 1000), a fresh draw of `rng` deciding them all.
template <class T>
void fill_random(host_matrix<T>& m, std::mt19937_64& rng)
{
  std::uint64_t const seed = rng();
  m.parallel_for_each([&](std::size_t i, std::size_t j) {
    m.at(i, j) = static_cast<T>(2000.0 * unit_interval(mix(seed ^ mix(i * m.cols + j))) - 1000.0);
  });
}

/// Float64 reference of the documented semantics, from the T values.
struct reference_fit {
  std::vector<double> min, max, scale;
};

template <class T>
reference_fit fit_reference(host_matrix<T> const& m, double lo, double hi)
{
  double const infinity = std::numeric_limits<double>::infinity();
  reference_fit f{std::vector<double>(m.cols, infinity), std::vector<double>(m.cols, -infinity), std::vector<double>(m.cols)};
  bool const by_row = m.order == streamkit::layout::row_major;
  auto const fold = [&](std::size_t i, std::size_t j, double* mn, double* mx) {
    double const x = m.at(i, j);
    if (x < mn[j]) { mn[j] = x; }
    if (x > mx[j]) { mx[j] = x; }
  };
  if (m.cols >= 1024) {  // ranges of columns, each folded whole
    parallel_for(
      m.cols,
      [&](std::size_t begin, std::size_t end) {
        for (std::size_t outer = 0; outer < (by_row ? m.rows : end - begin); ++outer) {
          for (std::size_t inner = 0; inner < (by_row ? end - begin : m.rows); ++inner) {
            fold(by_row ? outer : inner, by_row ? begin + inner : begin + outer, f.min.data(), f.max.data());
          }
        }
      },
      m.rows * m.cols);
  } else {  // ranges of rows into partial minima and maxima, merged under a lock
    std::mutex merge;
    parallel_for(
      m.rows,
      [&](std::size_t begin, std::size_t end) {
        std::vector<double> mn(m.cols, infinity), mx(m.cols, -infinity);
        for (std::size_t outer = 0; outer < (by_row ? end - begin : m.cols); ++outer) {
          for (std::size_t inner = 0; inner < (by_row ? m.cols : end - begin); ++inner) {
            fold(by_row ? begin + outer : begin + inner, by_row ? inner : outer, mn.data(), mx.data());
          }
        }
        std::lock_guard const lock(merge);
        for (std::size_t j = 0; j < m.cols; ++j) {
          f.min[j] = std::min(f.min[j], mn[j]);
          f.max[j] = std::max(f.max[j], mx[j]);
        }
      },
      m.rows * m.cols);
  }
  double const eps = std::numeric_limits<T>::epsilon();
  for (std::size_t j = 0; j < m.cols; ++j) {
    if (f.min[j] > f.max[j]) { f.min[j] = f.max[j] = std::numeric_limits<double>::quiet_NaN(); }
    double range = f.max[j] - f.min[j];
    if (range < 10 * eps) { range = 1.0; }
    f.scale[j] = (hi - lo) / range;
  }
  return f;
}

inline double transform_reference(double x, double mn, double scale, double lo, double hi, bool clip)
{
  double y = lo + (x - mn) * scale;
  if (clip) { y = y < lo ? lo : (y > hi ? hi : y); }
  return y;
}

/// |got - want| within a few units of T's rounding of the values involved; NaN must match NaN.
template <class T>
::testing::AssertionResult close(double got, double want, double magnitude)
{
  if (std::isnan(want)) {
    return std::isnan(got) ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << "got " << got << ", want NaN";
  }
  double const tolerance = 16 * std::numeric_limits<T>::epsilon() * (magnitude + std::abs(want));
  if (std::abs(got - want) <= tolerance || got == want) { return ::testing::AssertionSuccess(); }
  return ::testing::AssertionFailure() << "got " << got << ", want " << want << " (tolerance " << tolerance << ")";
}

/// Checks every element of `out` against `want(i, j)` (with `magnitude(i, j)` for the tolerance)
/// and that every storage element outside the matrix (pitch padding, the element past the end)
/// still holds the poison. Reports the first 10 failures and their count.
template <class T, class Want, class Magnitude>
void expect_elements(host_matrix<T> const& out, Want const& want, Magnitude const& magnitude)
{
  std::atomic<std::size_t> failures{0};
  std::mutex report;
  std::vector<std::string> messages;
  out.parallel_for_each([&](std::size_t i, std::size_t j) {
    auto const result = close<T>(out.at(i, j), want(i, j), magnitude(i, j));
    if (!result && failures.fetch_add(1) < 10) {
      std::lock_guard const lock(report);
      messages.push_back("(" + std::to_string(i) + ", " + std::to_string(j) + "): " + result.message());
    }
  });
  parallel_for(out.lines(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t line = begin; line < end; ++line) {
      for (std::size_t k = out.line_length(); k < out.ld; ++k) {
        if (out.storage[line * out.ld + k] != static_cast<T>(poison) && failures.fetch_add(1) < 10) {
          std::lock_guard const lock(report);
          messages.push_back("wrote into the pitch padding at line " + std::to_string(line) + ", position " + std::to_string(k));
        }
      }
    }
  });
  for (std::size_t e = out.lines() * out.ld; e < out.storage.size(); ++e) {
    if (out.storage[e] != static_cast<T>(poison) && failures.fetch_add(1) < 10) {
      messages.push_back("wrote past the end of the output at " + std::to_string(e));
    }
  }
  for (auto const& message : messages) { ADD_FAILURE() << message; }
  EXPECT_EQ(failures.load(), 0U) << "elements wrong";
}

/// Checks `out` (every element, and that pitch padding still holds the poison) against scaling `in`;
/// returns the reference fit.
template <class T>
reference_fit expect_scaled(host_matrix<T> const& in, host_matrix<T> const& out, double lo, double hi, bool clip)
{
  auto const f = fit_reference(in, lo, hi);
  double const range = std::abs(lo) + std::abs(hi);
  expect_elements(
    out, [&](std::size_t i, std::size_t j) { return transform_reference(in.at(i, j), f.min[j], f.scale[j], lo, hi, clip); },
    [&](std::size_t, std::size_t) { return range; });
  return f;
}

}  // namespace streamkit_test
