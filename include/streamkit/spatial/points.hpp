#pragma once
/// @file points.hpp
/// The views of the spatial part: points on the sphere (`points_ref`) and an n × k table of
/// neighbours (`neighbors_ref`). Views are plain, non-owning structs; the memory they point to is the
/// caller's: device memory for the single-GPU calls, host memory for the multi-GPU workloads.

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace streamkit {

/// Unit of point coordinates.
enum class angle_unit {
  radians,  ///< latitude in [-π/2, π/2]
  degrees,  ///< latitude in [-90, 90]
};

/// A non-owning view of `count` points: latitude[i * stride] and longitude[i * stride], in radians or
/// degrees. Build it with separate() or interleaved(), or set the fields for other strides.
template <class T>
struct points_ref {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "coordinates are float or double");
  T const* latitude = nullptr;        ///< first latitude
  T const* longitude = nullptr;       ///< first longitude
  std::size_t count = 0;              ///< number of points
  std::size_t stride = 1;             ///< elements from one point's coordinate to the next point's (≥ 1)
  angle_unit unit = angle_unit::radians;  ///< unit of both coordinates

  /// Two arrays of `count` elements: latitude[i], longitude[i].
  [[nodiscard]] static points_ref separate(T const* latitude, T const* longitude, std::size_t count,
                                           angle_unit unit = angle_unit::radians) noexcept
  {
    return {latitude, longitude, count, 1, unit};
  }
  /// One array of (lat, lon) pairs: latlon[2i], latlon[2i+1].
  [[nodiscard]] static points_ref interleaved(T const* latlon, std::size_t count, angle_unit unit = angle_unit::radians) noexcept
  {
    return {latlon, latlon == nullptr ? nullptr : latlon + 1, count, 2, unit};
  }
};

/// A non-owning n × k table of neighbours, written by a search: row i holds the k nearest references
/// of observation i, nearest first, at index[i * stride + j] and (when `distance` is set)
/// distance[i * stride + j]. A neighbour that does not exist (invalid observation, too few valid
/// references) is index −1 with a NaN distance. `invalid_count`, when set, is a device counter to
/// which a search adds its number of invalid observations, in stream order: the caller zeroes it and
/// reads it when it chooses.
template <class Index, class T>
struct neighbors_ref {
  static_assert(std::is_same_v<Index, std::int32_t> || std::is_same_v<Index, std::int64_t>, "indices are int32 or int64");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "distances are float or double");
  Index* index = nullptr;                       ///< required unless count = 0
  T* distance = nullptr;                        ///< optional
  std::size_t count = 0;                        ///< rows: one per observation
  std::size_t k = 1;                            ///< neighbours per row
  std::size_t stride = 1;                       ///< elements from one row to the next (≥ k)
  unsigned long long* invalid_count = nullptr;  ///< optional device counter of invalid observations

  /// Rows packed one after another (stride = k).
  [[nodiscard]] static neighbors_ref dense(Index* index, T* distance, std::size_t count, std::size_t k = 1,
                                           unsigned long long* invalid_count = nullptr) noexcept
  {
    return {index, distance, count, k, k, invalid_count};
  }
};

}  // namespace streamkit
