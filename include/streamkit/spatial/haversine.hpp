#pragma once
/// @file haversine.hpp
/// The one definition of great-circle distance that streamkit's kernels, tests and users share.

#include <streamkit/core/config.hpp>

#include <cmath>

namespace streamkit {

/// Mean Earth radius (IUGG R1), in kilometres.
inline constexpr double earth_radius_km = 6371.0088;
/// π, in double precision.
inline constexpr double pi = 3.14159265358979323846;

/// Degrees to radians, in double precision.
[[nodiscard]] STREAMKIT_HOST_DEVICE constexpr double radians_from_degrees(double degrees) noexcept
{
  return degrees * (pi / 180.0);
}

/// Great-circle distance in radians between (lat1, lon1) and (lat2, lon2), all in radians, by the
/// haversine formula in double precision: accurate for tiny distances, and clamped so rounding can
/// never push the argument of asin past 1 near antipodes.
[[nodiscard]] STREAMKIT_HOST_DEVICE inline double haversine(double lat1, double lon1, double lat2, double lon2) noexcept
{
  double const sin_half_dlat = sin(0.5 * (lat2 - lat1));
  double const sin_half_dlon = sin(0.5 * (lon2 - lon1));
  double const h = sin_half_dlat * sin_half_dlat + cos(lat1) * cos(lat2) * sin_half_dlon * sin_half_dlon;
  return 2.0 * asin(sqrt(h < 1.0 ? h : 1.0));
}

}  // namespace streamkit
