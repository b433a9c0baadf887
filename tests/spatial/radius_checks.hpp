#pragma once
// Radius-query results on the host and their checks against the float64 CPU brute force of
// nearest_reference.hpp, shared by the radius tests (spatial/test_radius.cu) and the shape fuzz
// (test_shape_fuzz.cu).

#include "spatial/nearest_reference.hpp"
#include "test_support.hpp"

#include <streamkit/core/stream.hpp>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/radius.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

namespace streamkit_test {

/// Search options in `unit`, invalid points rejected unless told otherwise.
inline streamkit::nearest_options options_in(streamkit::distance_unit unit,
                                             streamkit::invalid_points on_invalid = streamkit::invalid_points::reject)
{
  streamkit::nearest_options options;
  options.unit = unit;
  options.on_invalid = on_invalid;
  return options;
}

/// A radius result on the host.
template <class Index, class T>
struct host_csr {
  std::vector<std::int64_t> offsets;
  std::vector<Index> index;
  std::vector<T> distance;  // empty when not asked for
};

template <class Index, class T>
host_csr<Index, T> fetch(streamkit::radius_result<Index, T> const& r, streamkit::stream const& s)
{
  host_csr<Index, T> out{to_host(r.offsets, s), to_host(r.index, s), {}};
  if (!r.distance.empty()) { out.distance = to_host(r.distance, s); }
  return out;
}

/// Checks a radius result against the float64 CPU brute force: offsets well formed; every row holds
/// each valid reference whose haversine × scale is below its radius by more than the rounding of two
/// evaluations, none above it by more, no invalid or repeated reference; distances are the float64
/// haversine × scale rounded to T (and, in T = double, never above the radius); sorted rows ascend by
/// distance, identical references by index. `radii`: each row's radius (in the unit).
template <class Index, class T>
void expect_radius(host_csr<Index, T> const& got, radians_set const& obs, radians_set const& refs, std::vector<double> const& radii,
                   double scale, bool sorted, bool distances)
{
  std::size_t const n = obs.size();
  ASSERT_EQ(got.offsets.size(), n + 1);
  ASSERT_EQ(got.offsets[0], 0);
  for (std::size_t i = 0; i < n; ++i) { ASSERT_LE(got.offsets[i], got.offsets[i + 1]) << "row " << i; }
  ASSERT_EQ(static_cast<std::size_t>(got.offsets[n]), got.index.size());
  if (distances) { ASSERT_EQ(got.distance.size(), got.index.size()); }
  failure_log failures("row");
  auto const fail = [&](std::size_t i, std::string const& what) { failures.add(i, what); };
  streamkit_test::parallel_for(
    n,
    [&](std::size_t begin, std::size_t end) {
      std::vector<char> in_row(refs.size());
      for (std::size_t i = begin; i < end; ++i) {
        double const r = radii[i];
        auto const first = static_cast<std::size_t>(got.offsets[i]);
        auto const last = static_cast<std::size_t>(got.offsets[i + 1]);
        double previous = -1.0;
        std::int64_t previous_j = -1;
        for (std::size_t e = first; e < last; ++e) {
          auto const j = static_cast<std::int64_t>(got.index[e]);
          if (j < 0 || static_cast<std::size_t>(j) >= refs.size() || !refs.valid[static_cast<std::size_t>(j)] || !obs.valid[i]) {
            fail(i, "index " + std::to_string(j) + " (invalid reference or observation, or out of range)");
            continue;
          }
          if (in_row[static_cast<std::size_t>(j)] != 0) { fail(i, "index " + std::to_string(j) + " twice"); }
          in_row[static_cast<std::size_t>(j)] = 1;
          double const d = streamkit_test::true_distance(obs, i, refs, static_cast<std::size_t>(j));
          double const tolerance = streamkit_test::distance_tolerance<double>(d) * scale;
          if (!(d * scale <= r + tolerance)) {
            std::ostringstream what;
            what.precision(17);
            what << "index " << j << " at " << d * scale << ", beyond the radius " << r;
            fail(i, what.str());
          }
          if (distances) {
            double const reported = static_cast<double>(got.distance[e]);
            if (!(std::abs(reported - d * scale) <= streamkit_test::distance_tolerance<T>(d) * scale)) {
              std::ostringstream what;
              what.precision(17);
              what << "index " << j << ": distance " << reported << ", true " << d * scale;
              fail(i, what.str());
            }
            if (std::is_same_v<T, double> && !(reported <= r)) {
              std::ostringstream what;
              what.precision(17);
              what << "index " << j << ": reported distance " << reported << " above the radius " << r;
              fail(i, what.str());
            }
          }
          if (sorted && e > first) {
            bool const same_point = refs.lat[static_cast<std::size_t>(j)] == refs.lat[static_cast<std::size_t>(previous_j)] &&
                                    refs.lon[static_cast<std::size_t>(j)] == refs.lon[static_cast<std::size_t>(previous_j)];
            if (d < previous - 2 * streamkit_test::haversine_rounding(d) - 4e-16) {
              fail(i, "not sorted by distance at element " + std::to_string(e - first));
            } else if (same_point && j < previous_j) {
              fail(i, "identical references out of index order at element " + std::to_string(e - first));
            }
          }
          previous = d;
          previous_j = j;
        }
        // Every reference surely within is there.
        for (std::size_t j = 0; obs.valid[i] && j < refs.size(); ++j) {
          if (!refs.valid[j] || in_row[j] != 0) { continue; }
          double const d = streamkit_test::true_distance(obs, i, refs, j);
          if (d * scale < r - streamkit_test::distance_tolerance<double>(d) * scale) {
            std::ostringstream what;
            what.precision(17);
            what << "reference " << j << " at " << d * scale << " within the radius " << r << " is missing";
            fail(i, what.str());
          }
        }
        for (std::size_t e = first; e < last; ++e) {
          auto const j = static_cast<std::int64_t>(got.index[e]);
          if (j >= 0 && static_cast<std::size_t>(j) < refs.size()) { in_row[static_cast<std::size_t>(j)] = 0; }
        }
      }
    },
    n * refs.size());
  failures.report("rows wrong");
}

/// The same rows, each taken as a set (unsorted results).
template <class Index, class T>
void expect_same_sets(host_csr<Index, T> const& a, host_csr<Index, T> const& b, char const* what)
{
  ASSERT_EQ(a.offsets, b.offsets) << what;
  for (std::size_t i = 0; i + 1 < a.offsets.size(); ++i) {
    std::vector<Index> x(a.index.begin() + a.offsets[i], a.index.begin() + a.offsets[i + 1]);
    std::vector<Index> y(b.index.begin() + b.offsets[i], b.index.begin() + b.offsets[i + 1]);
    std::sort(x.begin(), x.end());
    std::sort(y.begin(), y.end());
    if (x != y) {
      ADD_FAILURE() << what << ": row " << i << " differs";
      return;
    }
  }
}

/// Checks per-row counts (radius_count_async, or the rows of radius_offsets_async) against the float64
/// CPU brute force with expect_radius's bounds: each row counts at least the valid references whose
/// haversine × scale is below its radius by more than the rounding of two evaluations and at most those
/// not above it by more; an invalid observation counts 0. `radii`: each row's radius (in the unit).
inline void expect_radius_counts(std::vector<std::int64_t> const& counts, radians_set const& obs, radians_set const& refs,
                                 std::vector<double> const& radii, double scale)
{
  std::size_t const n = obs.size();
  ASSERT_EQ(counts.size(), n);
  failure_log failures("row");
  parallel_for(
    n,
    [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        std::int64_t must = 0, may = 0;
        for (std::size_t j = 0; obs.valid[i] && j < refs.size(); ++j) {
          if (!refs.valid[j]) { continue; }
          double const d = true_distance(obs, i, refs, j);
          double const tolerance = distance_tolerance<double>(d) * scale;
          must += d * scale < radii[i] - tolerance ? 1 : 0;
          may += d * scale <= radii[i] + tolerance ? 1 : 0;
        }
        if (counts[i] < must || counts[i] > may) {
          std::ostringstream what;
          what.precision(17);
          what << "count " << counts[i] << ", expected " << must;
          if (may != must) { what << " to " << may; }
          what << " (radius " << radii[i] << (obs.valid[i] ? "" : ", invalid observation") << ")";
          failures.add(i, what.str());
        }
      }
    },
    n * refs.size());
  failures.report("counts wrong");
}

}  // namespace streamkit_test
