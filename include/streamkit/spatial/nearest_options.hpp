#pragma once
/// @file nearest_options.hpp
/// Options of the nearest-neighbour searches, shared by both engines (brute_force_index, tree_index)
/// and the front end (nearest_index, nearest_neighbor), and the working memory of their queries.

#include <streamkit/core/stream_ref.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/spatial/haversine.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>

namespace streamkit {

/// The most neighbours a search returns per observation (neighbors_ref::k): each thread keeps its
/// list in registers, 32 float64 distances and 32 indices; a larger k throws std::invalid_argument.
inline constexpr std::size_t max_neighbors = 32;

/// Unit of the distances a search reports.
enum class distance_unit {
  radians,     ///< great-circle angle
  kilometres,  ///< angle × nearest_options::sphere_radius_km
  metres,      ///< angle × nearest_options::sphere_radius_km × 1000
};
/// What a search does with invalid points (non-finite coordinate, latitude outside ±90°).
enum class invalid_points {
  reject,  ///< blocking calls throw std::invalid_argument before writing anything; `_async` calls mark
  mark,    ///< invalid observations get index −1 and NaN; invalid references are never chosen
};
/// How the nearest reference is decided (k = 1 on the brute-force engine; every other search is exact).
enum class nn_precision {
  fast,   ///< float32 ranking: within 2.4e-7 rad of the nearest for near neighbours (nearest_neighbor.cuh)
  exact,  ///< the float64 answer
};

/// Options of a nearest-neighbour search.
struct nearest_options {
  nn_precision precision = nn_precision::fast;         ///< fast or exact ranking
  invalid_points on_invalid = invalid_points::reject;  ///< what blocking calls do with invalid points
  distance_unit unit = distance_unit::radians;         ///< unit of the reported distances and of max_distance
  /// Sphere radius in kilometres, used when `unit` is kilometres or metres.
  double sphere_radius_km = earth_radius_km;
  /// Neighbours farther than this (in `unit`) are not returned: their slots hold index −1 and NaN.
  double max_distance = std::numeric_limits<double>::infinity();
};

namespace detail {
template <class T>
class brute_force_engine;
template <class T>
class tree_engine;
}  // namespace detail

/// Working memory of nearest-neighbour queries, kept between queries so that repeated queries
/// allocate nothing. One per stream lets several streams, and host threads, query one index at once.
class nearest_scratch {
 public:
  /// Empty scratch; the first query sizes it (from the index's memory resource).
  nearest_scratch() = default;

 private:
  template <class>
  friend class detail::brute_force_engine;
  template <class>
  friend class detail::tree_engine;
  template <class, class>
  friend class radius_queries;
  /// At least `bytes` on `device`, ordered on `stream`: memory of another device is dropped, and too
  /// little is replaced from `resource`; otherwise nothing is allocated.
  std::byte* reserve(std::size_t bytes, int device, stream_ref stream, device_resource_ref resource)
  {
    return reserve_in(bytes_, bytes, device, stream, resource);
  }
  /// As reserve(), for the rows a radius offsets pass keeps (kept_).
  std::byte* reserve_kept(std::size_t bytes, int device, stream_ref stream, device_resource_ref resource)
  {
    return reserve_in(kept_, bytes, device, stream, resource);
  }
  static std::byte* reserve_in(device_buffer<std::byte>& buffer, std::size_t bytes, int device, stream_ref stream,
                               device_resource_ref resource)
  {
    if (!buffer.empty() && buffer.device() != device) { buffer = device_buffer<std::byte>(); }
    if (buffer.size() < bytes) { buffer = device_buffer<std::byte>(bytes, stream, resource); }
    buffer.set_stream(stream);
    return buffer.data();
  }
  /// What the last radius offsets pass on this scratch left in kept_ for the fill that follows
  /// (radius_impl.cuh): the preparation of the references it searched (0: nothing), its rows and the
  /// entries it kept of each.
  struct radius_kept_rows {
    std::uint64_t preparation = 0;
    std::size_t rows = 0;
    unsigned slots = 0;
  };
  device_buffer<std::byte> bytes_;
  device_buffer<std::byte> kept_;
  radius_kept_rows kept_rows_;
};

}  // namespace streamkit
