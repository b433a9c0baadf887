#pragma once
// A spherical cap around a point set (host): which ranks' reference shards an observation must visit.

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace streamkit::distributed::detail {

/// The cap with centre (x, y, z) (a unit vector) and angular radius `angle` holding a point set;
/// angle < 0 for an empty set, which no observation visits.
struct sphere_cap {
  double x = 0, y = 0, z = 1;
  double angle = -1;
};

inline void unit_vector(double latitude, double longitude, double& x, double& y, double& z)
{
  x = std::cos(latitude) * std::cos(longitude);
  y = std::cos(latitude) * std::sin(longitude);
  z = std::sin(latitude);
}

/// Angle between unit vectors, by atan2 (accurate near 0 and π, where acos is not).
inline double angle_between(double ax, double ay, double az, double bx, double by, double bz)
{
  double const cx = ay * bz - az * by, cy = az * bx - ax * bz, cz = ax * by - ay * bx;
  return std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), ax * bx + ay * by + az * bz);
}

/// Widening of every cap: covers the rounding of angle_between (a few 1e-16 rad) with room to spare;
/// a wider cap only sends an observation to one more rank, never loses a neighbour.
inline constexpr double cap_margin = 1e-9;

/// The cap around points (radians) [0, count), centred on their normalised mean (any centre is
/// correct; the mean keeps clustered shards small). Non-finite points are skipped (searches never
/// return them).
inline sphere_cap cap_of(double const* latitude, double const* longitude, std::size_t count)
{
  double sx = 0, sy = 0, sz = 0;
  std::size_t valid = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!std::isfinite(latitude[i]) || !std::isfinite(longitude[i])) { continue; }
    double x, y, z;
    unit_vector(latitude[i], longitude[i], x, y, z);
    sx += x, sy += y, sz += z;
    ++valid;
  }
  sphere_cap cap;
  if (valid == 0) { return cap; }
  double const norm = std::sqrt(sx * sx + sy * sy + sz * sz);
  if (norm > 1e-6 * static_cast<double>(valid)) { cap.x = sx / norm, cap.y = sy / norm, cap.z = sz / norm; }
  cap.angle = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (!std::isfinite(latitude[i]) || !std::isfinite(longitude[i])) { continue; }
    double x, y, z;
    unit_vector(latitude[i], longitude[i], x, y, z);
    cap.angle = std::max(cap.angle, angle_between(cap.x, cap.y, cap.z, x, y, z));
  }
  cap.angle += cap_margin;
  return cap;
}

/// A lower bound of the angle from point (radians) to any point of the cap's set; +inf for an empty
/// set, NaN for a non-finite point (which then visits no cap).
inline double min_angle_to(sphere_cap const& cap, double latitude, double longitude)
{
  if (cap.angle < 0) { return HUGE_VAL; }
  double x, y, z;
  unit_vector(latitude, longitude, x, y, z);
  return std::max(0.0, angle_between(cap.x, cap.y, cap.z, x, y, z) - cap.angle);
}

}  // namespace streamkit::distributed::detail
