#pragma once
// What every example shares: the "no GPU" exit, and random points on the sphere.

#include <streamkit/core/device.hpp>
#include <streamkit/spatial/haversine.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace streamkit_examples {

/// Exit status that CTest reports as "skipped" (SKIP_RETURN_CODE).
inline constexpr int exit_skipped = 77;

/// Returns the number of GPUs; if there is none, says so and exits with exit_skipped.
inline int require_gpu(char const* example)
{
  int const count = streamkit::device_count();
  if (count == 0) {
    std::printf("%s: no CUDA device is visible (no driver or no GPU); nothing to run.\n", example);
    std::exit(exit_skipped);
  }
  return count;
}

/// Uniform random points on the sphere, in degrees.
inline void random_points(std::size_t count, std::mt19937_64& rng, std::vector<float>& lat, std::vector<float>& lon)
{
  std::uniform_real_distribution<double> u(0.0, 1.0);
  lat.resize(count);
  lon.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    lat[i] = static_cast<float>(std::asin(2.0 * u(rng) - 1.0) * 180.0 / streamkit::pi);
    lon[i] = static_cast<float>(360.0 * u(rng) - 180.0);
  }
}

}  // namespace streamkit_examples
