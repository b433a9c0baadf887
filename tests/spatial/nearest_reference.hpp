#pragma once
// Points and the float64 CPU brute force of the nearest-neighbour search, shared by the
// nearest-neighbour tests and the shape fuzz. The brute force runs on every hardware thread.

#include "test_support.hpp"

#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <gtest/gtest.h>

#include <algorithm>
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

/// Points in degrees (lat, lon) as double; converted to the tested type when uploaded.
struct point_set {
  std::vector<double> lat, lon;
  [[nodiscard]] std::size_t size() const { return lat.size(); }
  void add(double la, double lo)
  {
    lat.push_back(la);
    lon.push_back(lo);
  }
};

inline point_set uniform_points(std::size_t count, std::mt19937_64& rng)
{
  std::uint64_t const seed = rng();
  point_set points;
  points.lat.resize(count);
  points.lon.resize(count);
  parallel_for(count, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      points.lat[i] = std::asin(2.0 * unit_interval(mix(seed ^ mix(2 * i))) - 1.0) * 180.0 / streamkit::pi;
      points.lon[i] = 360.0 * unit_interval(mix(seed ^ mix(2 * i + 1))) - 180.0;
    }
  });
  return points;
}

/// `count` points within `radius_m` metres of (lat, lon), longitudes wrapped into [-180, 180].
inline void add_cluster(point_set& points, double lat, double lon, double radius_m, std::size_t count, std::mt19937_64& rng)
{
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  double const degrees = radius_m / (streamkit::earth_radius_km * 1000.0) * 180.0 / streamkit::pi;
  for (std::size_t i = 0; i < count; ++i) {
    double const la = std::clamp(lat + degrees * u(rng), -90.0, 90.0);
    double lo = lon + degrees * u(rng) / std::max(std::cos(la * streamkit::pi / 180.0), 1e-3);
    lo = lo > 180.0 ? lo - 360.0 : (lo < -180.0 ? lo + 360.0 : lo);
    points.add(la, lo);
  }
}

template <class T>
std::vector<T> converted(std::vector<double> const& degrees, streamkit::angle_unit unit)
{
  std::vector<T> out(degrees.size());
  for (std::size_t i = 0; i < degrees.size(); ++i) {
    out[i] = static_cast<T>(unit == streamkit::angle_unit::degrees ? degrees[i] : streamkit::radians_from_degrees(degrees[i]));
  }
  return out;
}

/// Points as the kernel sees them: latitude and longitude in radians, double, from the uploaded
/// values, and whether each is valid (finite, latitude within ±90°).
struct radians_set {
  std::vector<double> lat, lon;
  std::vector<char> valid;
  [[nodiscard]] std::size_t size() const { return lat.size(); }
};

template <class T>
radians_set as_seen(std::vector<T> const& lat, std::vector<T> const& lon, streamkit::angle_unit unit)
{
  bool const degrees = unit == streamkit::angle_unit::degrees;
  double const limit = degrees ? 90.0 : std::max(static_cast<double>(static_cast<T>(streamkit::pi / 2)), streamkit::pi / 2);
  radians_set out{std::vector<double>(lat.size()), std::vector<double>(lat.size()), std::vector<char>(lat.size())};
  parallel_for(lat.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      double la = static_cast<double>(lat[i]);
      double lo = static_cast<double>(lon[i]);
      out.valid[i] = std::isfinite(la) && std::isfinite(lo) && std::abs(la) <= limit;
      if (degrees) {
        la = streamkit::radians_from_degrees(la);
        lo = streamkit::radians_from_degrees(lo);
      }
      out.lat[i] = std::clamp(la, -streamkit::pi / 2, streamkit::pi / 2);
      out.lon[i] = lo;
    }
  });
  return out;
}

inline double true_distance(radians_set const& a, std::size_t i, radians_set const& b, std::size_t j)
{
  return streamkit::haversine(a.lat[i], a.lon[i], b.lat[j], b.lon[j]);
}

struct reference_answer {
  std::vector<std::int64_t> index;
  std::vector<double> distance;
};

/// Float64 haversine brute force over every pair; ties go to the smallest index; invalid points are
/// never chosen, and an invalid observation (or one with no valid reference) gets -1 and NaN.
inline reference_answer brute_force(radians_set const& obs, radians_set const& refs)
{
  reference_answer answer{std::vector<std::int64_t>(obs.size()), std::vector<double>(obs.size())};
  // Nearest valid reference in [j_begin, j_end) of observation i, ties to the smallest index.
  auto const nearest_in = [&](std::size_t i, std::size_t j_begin, std::size_t j_end, double& best, std::int64_t& index) {
    for (std::size_t j = j_begin; obs.valid[i] && j < j_end; ++j) {
      if (!refs.valid[j]) { continue; }
      double const d = true_distance(obs, i, refs, j);
      if (d < best) {  // ascending j: ties keep the smallest index
        best = d;
        index = static_cast<std::int64_t>(j);
      }
    }
  };
  std::vector<double> best(obs.size(), std::numeric_limits<double>::infinity());
  std::vector<std::int64_t> index(obs.size(), -1);
  if (obs.size() >= 64) {  // ranges of observations
    parallel_for(
      obs.size(), [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) { nearest_in(i, 0, refs.size(), best[i], index[i]); }
      },
      obs.size() * refs.size());
  } else {  // few observations: ranges of references, merged under a lock
    std::mutex merge;
    parallel_for(
      refs.size(), [&](std::size_t begin, std::size_t end) {
        for (std::size_t i = 0; i < obs.size(); ++i) {
          double part_best = std::numeric_limits<double>::infinity();
          std::int64_t part_index = -1;
          nearest_in(i, begin, end, part_best, part_index);
          std::lock_guard const lock(merge);
          if (part_index >= 0 && (part_best < best[i] || (part_best == best[i] && part_index < index[i]))) {
            best[i] = part_best;
            index[i] = part_index;
          }
        }
      },
      obs.size() * refs.size());
  }
  for (std::size_t i = 0; i < obs.size(); ++i) {
    answer.index[i] = index[i];
    answer.distance[i] = index[i] < 0 ? std::numeric_limits<double>::quiet_NaN() : best[i];
  }
  return answer;
}

/// The chord between two points `d` radians apart on the unit sphere.
inline double chord_of(double d) { return 2.0 * std::sin(d / 2.0); }

/// How much the chord of fast mode's answer may exceed the nearest one's (nearest_neighbor.cuh,
/// "Precision"): each float32 chord is within 2u + 2.5u·c of the true one (u = 2^-24; unit vectors
/// rounded component-wise, then five roundings in the squared chord), so a pair compared in float32
/// is ordered right unless the chords differ by less than the sum. The 1e-14 covers this check's own
/// float64 arithmetic.
inline double fast_chord_excess(double c_returned, double c_nearest)
{
  double const u = 0x1.0p-24;
  return 4 * u + 2.5 * u * (c_returned + c_nearest) + 1e-14;
}

/// How far two float64 evaluations of the haversine of `d` radians may differ. d = 2 asin(sqrt(h))
/// moves by δh · sqrt(h) / sqrt(h (1 − h)) for an error δh in h, so near antipodes (h → 1) two
/// evaluations in another order (fused multiply-adds on the device, other sin and cos) differ by far
/// more than a rounding of d; 16 epsilons in h cover the roundings of its few operations on both sides.
inline double haversine_rounding(double d)
{
  double const h = std::sin(d / 2) * std::sin(d / 2);
  return 16 * std::numeric_limits<double>::epsilon() * std::sqrt(h) / std::sqrt(std::max(1.0 - h, 1e-300));
}

/// How far a reported distance of `d` radians may lie from this file's float64 haversine: T's
/// rounding and the evaluation's.
template <class T>
double distance_tolerance(double d)
{
  return 4 * std::numeric_limits<T>::epsilon() * d + haversine_rounding(d) + 1e-12;
}

/// Checks every result against the brute force: the index is the nearest (fast mode: within
/// fast_chord_excess of it; exact mode: the float64 answer but at ties closer than float64 rounding), invalid
/// observations are marked (-1, NaN), and each reported distance is the float64 haversine of the
/// returned pair times `scale`, rounded to T (`got_distance` may be empty when none was asked for).
template <class T, class Index>
void expect_nearest(radians_set const& obs, radians_set const& refs, std::vector<Index> const& got_index,
                    std::vector<T> const& got_distance, streamkit::nn_precision precision, double scale)
{
  reference_answer const expected = brute_force(obs, refs);
  failure_log failures("observation");
  auto const fail = [&](std::size_t i, std::string const& what) { failures.add(i, what); };
  parallel_for(obs.size(), [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      Index const j = got_index[i];
      double const reported = got_distance.empty() ? 0.0 : static_cast<double>(got_distance[i]);
      if (expected.index[i] < 0) {
        if (j != -1) { fail(i, "index " + std::to_string(j) + ", expected -1 (invalid, or no valid reference)"); }
        if (!got_distance.empty() && !std::isnan(reported)) { fail(i, "distance " + std::to_string(reported) + ", expected NaN"); }
        continue;
      }
      if (j < 0 || static_cast<std::size_t>(j) >= refs.size() || !refs.valid[static_cast<std::size_t>(j)]) {
        fail(i, "index " + std::to_string(j) + " (expected " + std::to_string(expected.index[i]) + ")");
        continue;
      }
      double const d = true_distance(obs, i, refs, static_cast<std::size_t>(j));
      if (precision == streamkit::nn_precision::exact) {
        // Ties closer than the rounding of this file's haversine (both candidates' evaluations).
        if (j != expected.index[i] && d - expected.distance[i] > 4e-16 + 2 * haversine_rounding(d)) {
          fail(i, "index " + std::to_string(j) + " at " + std::to_string(d) + " rad, expected " + std::to_string(expected.index[i]) +
                    " at " + std::to_string(expected.distance[i]));
        }
      } else if (double const excess = chord_of(d) - chord_of(expected.distance[i]);
                 excess > fast_chord_excess(chord_of(d), chord_of(expected.distance[i]))) {
        std::ostringstream what;
        what.precision(17);
        what << "index " << j << " at " << d << " rad: its chord exceeds the nearest's (" << expected.index[i] << " at "
             << expected.distance[i] << " rad) by " << excess << ", above the fast-mode bound "
             << fast_chord_excess(chord_of(d), chord_of(expected.distance[i]));
        fail(i, what.str());
      }
      double const want = d * scale;
      if (!got_distance.empty() && !(std::abs(reported - want) <= distance_tolerance<T>(d) * scale)) {
        std::ostringstream what;
        what.precision(17);
        what << "reported distance " << reported << ", true " << want << " (tolerance " << distance_tolerance<T>(d) * scale << ")";
        fail(i, what.str());
      }
    }
  });
  failures.report("observations wrong");
}


// ---- k nearest neighbours ------------------------------------------------------------------------

/// Values the k-nearest tests fill their outputs with before a search, so that elements a search
/// left unwritten (or wrote where it must not, such as the padding between k and the row stride) show.
inline constexpr std::int64_t poison_index = -7;
inline constexpr double poison_distance = -12345.0;

/// The k nearest valid references of every observation, row i at [i * k, (i + 1) * k).
struct knn_answer {
  std::size_t k = 0;
  std::vector<std::int64_t> index;
  std::vector<double> distance;
};

/// Float64 haversine k-nearest brute force: for each observation the k nearest valid references by
/// the float64 haversine (true_distance, as brute_force() ranks), nearest first, ties to the smallest
/// index; -1 and NaN past the last one (invalid observation, fewer than k valid references). The
/// first k' entries of a row are the answer for any k' < k, so one call serves every smaller k.
inline knn_answer brute_force_knn(radians_set const& obs, radians_set const& refs, std::size_t k)
{
  std::size_t const n = obs.size();
  std::size_t const m = refs.size();
  knn_answer answer{k, std::vector<std::int64_t>(n * k, -1), std::vector<double>(n * k, std::numeric_limits<double>::quiet_NaN())};
  if (k == 0) { return answer; }
  std::vector<double> cos_lat(m);
  for (std::size_t j = 0; j < m; ++j) { cos_lat[j] = std::cos(refs.lat[j]); }
  parallel_for(
    n,
    [&](std::size_t begin, std::size_t end) {
      std::vector<double> best_d(k), best_h(k);
      std::vector<std::int64_t> best_j(k);
      for (std::size_t i = begin; i < end; ++i) {
        if (!obs.valid[i]) { continue; }
        double const lat1 = obs.lat[i];
        double const lon1 = obs.lon[i];
        double const cos1 = std::cos(lat1);
        std::size_t found = 0;
        for (std::size_t j = 0; j < m; ++j) {
          if (!refs.valid[j]) { continue; }
          // streamkit::haversine's h, term for term: d = 2 asin(sqrt(h)) does not decrease with h, so a
          // reference whose h exceeds the k-th entry's is no nearer, and (ascending j) not a tie winner.
          double const s1 = std::sin(0.5 * (refs.lat[j] - lat1));
          double const s2 = std::sin(0.5 * (refs.lon[j] - lon1));
          double const h = s1 * s1 + cos1 * cos_lat[j] * s2 * s2;
          if (found == k && h > best_h[k - 1]) { continue; }
          double const d = true_distance(obs, i, refs, j);
          if (found == k && !(d < best_d[k - 1])) { continue; }  // equal distance: the earlier index stays
          std::size_t at = found < k ? found : k - 1;
          while (at > 0 && d < best_d[at - 1]) {
            best_d[at] = best_d[at - 1];
            best_h[at] = best_h[at - 1];
            best_j[at] = best_j[at - 1];
            --at;
          }
          best_d[at] = d;
          best_h[at] = h;
          best_j[at] = static_cast<std::int64_t>(j);
          found += found < k ? 1 : 0;
        }
        for (std::size_t s = 0; s < found; ++s) {
          answer.index[i * k + s] = best_j[s];
          answer.distance[i * k + s] = best_d[s];
        }
      }
    },
    n * m);
  return answer;
}

/// Where the elements of a row between k and `stride` no longer hold the poison: one line each (at most `limit`),
/// and the count.
template <class T, class Index>
std::size_t padding_written(std::vector<Index> const& got_index, std::vector<T> const& got_distance, std::size_t k, std::size_t stride,
                            std::vector<std::string>& lines, std::size_t limit = 10)
{
  std::size_t wrong = 0;
  std::size_t const rows = stride == 0 ? 0 : got_index.size() / stride;
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = k; j < stride; ++j) {
      bool const index_ok = got_index[i * stride + j] == static_cast<Index>(poison_index);
      bool const distance_ok = got_distance.empty() || got_distance[i * stride + j] == static_cast<T>(poison_distance);
      if ((!index_ok || !distance_ok) && wrong++ < limit) {
        lines.push_back("row " + std::to_string(i) + " padding element " + std::to_string(j) + " (k = " + std::to_string(k) +
                        ", stride = " + std::to_string(stride) + ") was written: index " + std::to_string(got_index[i * stride + j]) +
                        (got_distance.empty() ? std::string() : ", distance " + std::to_string(got_distance[i * stride + j])));
      }
    }
  }
  return wrong;
}

/// Checks that the elements of every row between k and `stride` still hold the poison (one failure
/// listing the first few that do not).
template <class T, class Index>
void expect_padding_untouched(std::vector<Index> const& got_index, std::vector<T> const& got_distance, std::size_t k,
                              std::size_t stride)
{
  std::vector<std::string> lines;
  std::size_t const wrong = padding_written(got_index, got_distance, k, stride, lines);
  if (wrong > 0) {
    std::string all;
    for (auto const& line : lines) { all += "\n  " + line; }
    ADD_FAILURE() << wrong << " padding element(s) written:" << all;
  }
}

/// Checks a k-nearest result of got_index.size() / stride rows (the first rows of `obs`) against
/// `expected` (a brute_force_knn() of at least k per row over at least those rows). A row passes when:
/// - its neighbours are valid, distinct references, followed by -1 and NaN (never a neighbour after a -1);
/// - it has as many neighbours as the reference has within `max_angle` (radians), where a reference
///   neighbour within 1e-9 relative of max_angle may be present or not;
/// - the j-th neighbour's float64 haversine equals the reference's j-th distance up to float64
///   rounding, 4e-16 + 2 haversine_rounding(d): so the indices are the reference's except where two
///   references lie closer to each other in distance than that (ties broken by rounding);
/// - each reported distance is the float64 haversine of its pair times `scale`, rounded to T;
/// - the elements between k and `stride` still hold the poison.
/// `got_distance` may be empty (no distances asked for). Problems are reported as one failure.
template <class T, class Index>
void expect_knn(knn_answer const& expected, radians_set const& obs, radians_set const& refs, std::vector<Index> const& got_index,
                std::vector<T> const& got_distance, std::size_t k, std::size_t stride, double scale,
                double max_angle = std::numeric_limits<double>::infinity())
{
  ASSERT_GE(k, 1U);
  ASSERT_GE(stride, k);
  ASSERT_GE(expected.k, k) << "the reference answer holds fewer neighbours per row than asked";
  ASSERT_EQ(got_index.size() % stride, 0U);
  std::size_t const rows = got_index.size() / stride;
  ASSERT_LE(rows, obs.size());
  ASSERT_LE(rows * expected.k, expected.index.size()) << "the reference answer holds fewer rows than the result";
  ASSERT_TRUE(got_distance.empty() || got_distance.size() == got_index.size());
  bool const limited = !(max_angle == std::numeric_limits<double>::infinity());
  double const inside = limited ? max_angle * (1.0 - 1e-9) : max_angle;
  double const reachable = limited ? max_angle * (1.0 + 1e-9) : max_angle;

  std::atomic<std::size_t> failures{0};
  std::mutex report;
  std::vector<std::string> messages;
  auto const fail = [&](std::size_t i, std::string const& what) {
    if (failures.fetch_add(1) < 10) {
      std::lock_guard const lock(report);
      messages.push_back("observation " + std::to_string(i) + " (k = " + std::to_string(k) + "): " + what);
    }
  };
  parallel_for(
    rows,
    [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        std::int64_t const* const want_index = expected.index.data() + i * expected.k;
        double const* const want_distance = expected.distance.data() + i * expected.k;
        // How many neighbours the row must hold: [must, may].
        std::size_t must = 0, may = 0;
        for (std::size_t j = 0; j < k && want_index[j] >= 0; ++j) {
          must += want_distance[j] <= inside ? 1 : 0;
          may += want_distance[j] <= reachable ? 1 : 0;
        }
        Index const* const row = got_index.data() + i * stride;
        T const* const row_distance = got_distance.empty() ? nullptr : got_distance.data() + i * stride;
        std::size_t have = 0;
        while (have < k && row[have] != Index(-1)) { ++have; }
        for (std::size_t j = have; j < k; ++j) {
          if (row[j] != Index(-1)) { fail(i, "slot " + std::to_string(j) + " holds index " + std::to_string(row[j]) + " after a -1"); }
          if (row_distance != nullptr && !std::isnan(static_cast<double>(row_distance[j]))) {
            fail(i, "slot " + std::to_string(j) + " has index -1 and distance " + std::to_string(row_distance[j]) + ", expected NaN");
          }
        }
        if (have < must || have > may) {
          std::ostringstream what;
          what.precision(17);
          what << have << " neighbour(s), expected " << must;
          if (may != must) { what << " to " << may; }
          what << " (reference";
          for (std::size_t j = 0; j < k && j < 4; ++j) { what << " " << want_index[j] << "@" << want_distance[j]; }
          what << (k > 4 ? " ..." : "") << "; max_angle " << max_angle << ")";
          fail(i, what.str());
        }
        for (std::size_t j = 0; j < have && j < may; ++j) {
          Index const g = row[j];
          if (g < 0 || static_cast<std::size_t>(g) >= refs.size() || !refs.valid[static_cast<std::size_t>(g)]) {
            fail(i, "slot " + std::to_string(j) + " holds index " + std::to_string(g) + ", not a valid reference (expected " +
                      std::to_string(want_index[j]) + ")");
            continue;
          }
          for (std::size_t before = 0; before < j; ++before) {
            if (row[before] == g) { fail(i, "index " + std::to_string(g) + " in slots " + std::to_string(before) + " and " + std::to_string(j)); }
          }
          double const d = true_distance(obs, i, refs, static_cast<std::size_t>(g));
          double const tolerance = 4e-16 + 2 * haversine_rounding(std::max(d, want_distance[j]));
          if (g != want_index[j] && !(std::abs(d - want_distance[j]) <= tolerance)) {
            std::ostringstream what;
            what.precision(17);
            what << "slot " << j << " holds index " << g << " at " << d << " rad, expected " << want_index[j] << " at "
                 << want_distance[j] << " rad (tolerance " << tolerance << ")";
            fail(i, what.str());
          }
          if (row_distance != nullptr) {
            double const reported = static_cast<double>(row_distance[j]);
            double const want = d * scale;
            if (!(std::abs(reported - want) <= distance_tolerance<T>(d) * scale)) {
              std::ostringstream what;
              what.precision(17);
              what << "slot " << j << " (index " << g << "): reported distance " << reported << ", true " << want << " (tolerance "
                   << distance_tolerance<T>(d) * scale << ")";
              fail(i, what.str());
            }
          }
        }
      }
    },
    rows * k * 64);
  std::size_t const padding = padding_written(got_index, got_distance, k, stride, messages);
  if (failures.load() > 0 || padding > 0) {  // one failure, listing the first few problems
    std::string all;
    for (auto const& message : messages) { all += "\n  " + message; }
    ADD_FAILURE() << failures.load() << " problem(s) in the rows and " << padding << " padding element(s) written, of " << rows
                  << " rows (k = " << k << ", stride " << stride << "):" << all;
  }
}

/// As above, with the reference answer computed here.
template <class T, class Index>
void expect_knn(radians_set const& obs, radians_set const& refs, std::vector<Index> const& got_index,
                std::vector<T> const& got_distance, std::size_t k, std::size_t stride, double scale,
                double max_angle = std::numeric_limits<double>::infinity())
{
  expect_knn(brute_force_knn(obs, refs, k), obs, refs, got_index, got_distance, k, stride, scale, max_angle);
}

}  // namespace streamkit_test
