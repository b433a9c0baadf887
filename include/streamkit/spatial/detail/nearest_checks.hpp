#pragma once
// Validation and unit handling shared by the nearest-neighbour engines and the front end.

#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

namespace streamkit::detail {

template <class T>
void expect_points(points_ref<T> const& points, char const* argument)
{
  STREAMKIT_EXPECTS((points.latitude != nullptr && points.longitude != nullptr) || points.count == 0, std::invalid_argument,
                    std::string(argument) + ": null coordinates with a count of " + std::to_string(points.count));
  STREAMKIT_EXPECTS(points.stride > 0, std::invalid_argument, std::string(argument) + ": stride must be positive");
}

/// Throws std::invalid_argument naming the field unless `result` is a well-formed table of `n` rows
/// of k neighbours, 1 ≤ k ≤ max_neighbors.
template <class Index, class T>
void expect_neighbors(neighbors_ref<Index, T> const& result, std::size_t n)
{
  constexpr std::size_t max_k = max_neighbors;
  STREAMKIT_EXPECTS(result.count == n, std::invalid_argument,
                    "result.count: " + std::to_string(result.count) + " rows for " + std::to_string(n) + " observations");
  STREAMKIT_EXPECTS(result.k >= 1 && result.k <= max_k, std::invalid_argument,
                    "result.k: " + std::to_string(result.k) + " neighbours asked; this search answers k from 1 to " + std::to_string(max_k));
  STREAMKIT_EXPECTS(result.stride >= result.k || n <= 1, std::invalid_argument,
                    "result.stride: " + std::to_string(result.stride) + " is less than k = " + std::to_string(result.k));
  STREAMKIT_EXPECTS(result.index != nullptr || n == 0, std::invalid_argument,
                    "result.index: null with " + std::to_string(n) + " observations");
}

/// The checks of every engine's query: a prepared index (`references` > 0, else std::logic_error
/// naming `engine`), well-formed views and k, indices that fit Index, and (with observations) a stream
/// of the index's device.
template <class T, class Index>
void expect_engine_query(char const* engine, std::size_t references, int device, points_ref<T> const& observations,
                         neighbors_ref<Index, T> const& result, stream_ref stream);

/// Throws unless every index of `m` references fits in Index.
template <class Index>
void expect_index_capacity(std::size_t m)
{
  STREAMKIT_EXPECTS(m == 0 || m - 1 <= static_cast<std::size_t>(std::numeric_limits<Index>::max()), std::invalid_argument,
                    "result.index: a " + std::to_string(sizeof(Index) * 8) + "-bit index cannot hold " + std::to_string(m) +
                      " references; use int64");
}

/// Throws std::invalid_argument unless a search can hold `m` references: at least one, and fewer
/// than 2^32 (32-bit ids in the k-nearest lists).
inline void expect_reference_count(std::size_t m)
{
  STREAMKIT_EXPECTS(m > 0, std::invalid_argument, "references: the reference set is empty (M = 0)");
  STREAMKIT_EXPECTS(m < std::size_t{1} << 32, std::invalid_argument,
                    "references: " + std::to_string(m) + " points; a search takes at most 2^32 - 1");
}

template <class T, class Index>
void expect_engine_query(char const* engine, std::size_t references, int device, points_ref<T> const& observations,
                         neighbors_ref<Index, T> const& result, stream_ref stream)
{
  STREAMKIT_EXPECTS(references > 0, std::logic_error, std::string(engine) + ": query of a moved-from index");
  expect_points(observations, "observations");
  expect_neighbors(result, observations.count);
  expect_index_capacity<Index>(references);
  if (observations.count == 0) { return; }
  int const stream_device = stream.device();
  STREAMKIT_EXPECTS(stream_device == device, std::invalid_argument,
                    "stream: belongs to device " + std::to_string(stream_device) + " but the reference set to device " +
                      std::to_string(device));
}

/// With invalid_points::reject, throws std::invalid_argument naming `argument` unless `invalid` is 0.
inline void expect_valid_points(nearest_options const& options, unsigned long long invalid, char const* argument)
{
  STREAMKIT_EXPECTS(options.on_invalid != invalid_points::reject || invalid == 0, std::invalid_argument,
                    std::string(argument) + ": " + std::to_string(invalid) +
                      " point(s) have a non-finite coordinate or a latitude outside [-90, 90] degrees");
}

inline std::size_t align_up(std::size_t bytes) noexcept { return (bytes + 255) / 256 * 256; }

inline double distance_scale(nearest_options const& options)
{
  switch (options.unit) {
    case distance_unit::kilometres: return options.sphere_radius_km;
    case distance_unit::metres: return options.sphere_radius_km * 1000.0;
    default: return 1.0;
  }
}

/// Throws std::invalid_argument naming the field unless the options are usable.
inline void expect_options(nearest_options const& options)
{
  STREAMKIT_EXPECTS(options.sphere_radius_km > 0 && std::isfinite(options.sphere_radius_km), std::invalid_argument,
                    "options.sphere_radius_km: must be positive and finite, got " + std::to_string(options.sphere_radius_km));
  STREAMKIT_EXPECTS(options.max_distance >= 0, std::invalid_argument,
                    "options.max_distance: must be at least 0 (infinity for no limit), got " + std::to_string(options.max_distance));
}

/// The largest great-circle angle (radians) a returned neighbour may have: options.max_distance in radians.
inline double max_angle(nearest_options const& options) { return options.max_distance / distance_scale(options); }

/// options.max_distance as the largest squared chord between unit vectors (+inf from half a turn on).
inline double max_chord2(nearest_options const& options)
{
  double const angle = max_angle(options);
  if (!(angle < pi)) { return std::numeric_limits<double>::infinity(); }
  double const chord = 2.0 * std::sin(angle / 2.0);
  return chord * chord;
}

}  // namespace streamkit::detail
