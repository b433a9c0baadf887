#pragma once
// A spherical cap around a point set (host): which ranks' reference shards an observation must visit.

#include <streamkit/distributed/detail/parallel_ranges.hpp>
#include <streamkit/spatial/haversine.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

namespace streamkit::distributed::detail {

/// The cap with centre (x, y, z) (a unit vector) and angular radius `angle` holding a point set;
/// angle < 0 for an empty set, which no observation visits. The radius's cosine and sine travel with
/// it, so that routing an observation costs a dot product per cap (within_reach).
struct sphere_cap {
  double x = 0, y = 0, z = 1;
  double angle = -1;
  double cos_angle = 1, sin_angle = 0;
};

inline void unit_vector(double latitude, double longitude, double& x, double& y, double& z)
{
  x = std::cos(latitude) * std::cos(longitude);
  y = std::cos(latitude) * std::sin(longitude);
  z = std::sin(latitude);
}

/// Widening of every cap: covers the rounding of its radius (a few 1e-16 rad, up to 2e-11 within
/// whole_sphere_slack of π) with room to spare; a wider cap only sends an observation to one more
/// rank, never loses a neighbour.
inline constexpr double cap_margin = 1e-9;
/// Radii this close to π are taken as π (the whole sphere): there a chord's rounding moves its
/// angle by up to 2e-15 / (π − angle).
inline constexpr double whole_sphere_slack = 1e-4;

/// The cap around points (radians) [0, count), centred on their normalised mean (any centre is
/// correct; the mean keeps clustered shards small). Non-finite points are skipped (searches never
/// return them). Its radius is the largest chord's angle: chords keep their precision near 0, and a
/// radius within whole_sphere_slack of π, where they lose it, becomes π. Two passes over the points
/// on `threads` threads.
inline sphere_cap cap_of(double const* latitude, double const* longitude, std::size_t count, std::size_t threads = 1)
{
  struct part_sums {
    double x = 0, y = 0, z = 0, chord2 = 0;
    std::size_t valid = 0;
  };
  std::vector<part_sums> parts(part_count(count, threads));
  auto const for_each_point = [&](auto const& visit) {
    parallel_ranges(count, threads, [&](std::size_t begin, std::size_t end, std::size_t part) {
      part_sums sums = parts[part];  // parts share cache lines: each thread sums in its own copy
      for (std::size_t i = begin; i < end; ++i) {
        if (!std::isfinite(latitude[i]) || !std::isfinite(longitude[i])) { continue; }
        double x, y, z;
        unit_vector(latitude[i], longitude[i], x, y, z);
        visit(sums, x, y, z);
      }
      parts[part] = sums;
    });
  };
  for_each_point([](part_sums& p, double x, double y, double z) { p.x += x, p.y += y, p.z += z, ++p.valid; });
  part_sums total;
  for (auto const& p : parts) { total.x += p.x, total.y += p.y, total.z += p.z, total.valid += p.valid; }
  sphere_cap cap;
  if (total.valid == 0) { return cap; }
  double const norm = std::sqrt(total.x * total.x + total.y * total.y + total.z * total.z);
  if (norm > 1e-6 * static_cast<double>(total.valid)) { cap.x = total.x / norm, cap.y = total.y / norm, cap.z = total.z / norm; }
  for_each_point([&cap](part_sums& p, double x, double y, double z) {
    double const dx = x - cap.x, dy = y - cap.y, dz = z - cap.z;
    p.chord2 = std::max(p.chord2, dx * dx + dy * dy + dz * dz);
  });
  double chord2 = 0;
  for (auto const& p : parts) { chord2 = std::max(chord2, p.chord2); }
  cap.angle = 2 * std::asin(std::min(1.0, std::sqrt(chord2) / 2)) + cap_margin;
  if (cap.angle > pi - whole_sphere_slack) { cap.angle = pi; }
  cap.cos_angle = std::cos(cap.angle), cap.sin_angle = std::sin(cap.angle);
  return cap;
}

/// Lowering of within_reach's cosine threshold: covers the rounding of the unit vectors, the dot
/// product and the cosine of a sum (a few 1e-16); like cap_margin it can only add a visit.
inline constexpr double dot_margin = 1e-14;

/// Whether a point of the cap's set may lie within angle `bound` (cos_bound, sin_bound: its cosine
/// and sine; +inf: any distance) of the point with unit vector (px, py, pz): whether the angle to the
/// centre is at most radius + bound, tested as dot ≥ cos(radius + bound), without inverse
/// trigonometry. Never for an empty set.
inline bool within_reach(sphere_cap const& cap, double px, double py, double pz, double bound, double cos_bound, double sin_bound)
{
  if (cap.angle < 0) { return false; }
  if (!(cap.angle + bound < pi)) { return true; }  // the reach covers the sphere (also bound = +inf)
  double const cos_reach = cap.cos_angle * cos_bound - cap.sin_angle * sin_bound;
  return cap.x * px + cap.y * py + cap.z * pz >= cos_reach - dot_margin;
}

}  // namespace streamkit::distributed::detail
