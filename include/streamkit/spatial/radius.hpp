#pragma once
/// @file radius.hpp
/// The types of the radius queries (every reference within a distance of each observation) that
/// brute_force_index, tree_index and nearest_index answer through radius_queries (radius_queries.cuh):
/// what to search for (`radius_options`), a compressed-row view of the caller's storage
/// (`radius_neighbors_ref`) and the owning result of a blocking query (`radius_result`). Plain C++.

#include <streamkit/memory/device_buffer.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace streamkit {

/// What a radius query looks for: the references whose float64 haversine distance from the
/// observation, in the index's nearest_options::unit, is at most the radius (the distance a query
/// reports, so a returned neighbour's reported distance never exceeds its radius).
struct radius_options {
  /// The radius of every observation, in the index's distance unit: at least 0, infinity for every
  /// valid reference; ignored when `radii` is set.
  double radius = 0.0;
  /// Optional device array of one radius per observation (same unit); a NaN or negative radius gives an
  /// empty row.
  double const* radii = nullptr;
  /// Rows ordered by (squared chord, then reference index), the order of the k-nearest searches, so
  /// that a row's first k entries are its k nearest; false: each row in no particular order (faster).
  bool sorted = true;
  /// Blocking queries throw std::length_error, naming the largest row, when a row would hold more.
  std::size_t max_per_row = std::numeric_limits<std::size_t>::max();
  /// Blocking queries throw std::length_error, naming the total, when all rows together would hold more.
  std::size_t max_total = std::numeric_limits<std::size_t>::max();
};

/// A non-owning compressed-row (CSR) view of a radius result in device memory: row i holds
/// index[offsets[i] … offsets[i + 1]) and, when `distance` is set, the float64 haversine distances of
/// those pairs (times the unit's scale, rounded to T) at the same positions.
template <class Index, class T>
struct radius_neighbors_ref {
  static_assert(std::is_same_v<Index, std::int32_t> || std::is_same_v<Index, std::int64_t>, "indices are int32 or int64");
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "distances are float or double");
  std::int64_t const* offsets = nullptr;        ///< count + 1 row offsets (from radius_offsets_async), offsets[0] = 0
  Index* index = nullptr;                       ///< `capacity` elements; required unless capacity = 0
  T* distance = nullptr;                        ///< optional, `capacity` elements
  std::size_t count = 0;                        ///< rows: one per observation
  std::size_t capacity = 0;                     ///< elements `index` (and `distance`) hold: at least offsets[count]
  unsigned long long* invalid_count = nullptr;  ///< optional device counter of invalid observations (added to)
  /// Optional: the largest row (offsets[i + 1] − offsets[i]), when the caller has read the offsets; 0:
  /// unknown. Up to radius_small_row, a sorted fill sorts each row in registers (rows of up to 32
  /// several a warp; up to 512 entries one warp, longer ones the warps of a block) instead of
  /// radix-sorting the whole result, and copies the rows the offsets pass kept
  /// (radius_queries.cuh) instead of searching them again.
  std::size_t largest_row = 0;
};

/// The largest row that a sorted fill told radius_neighbors_ref::largest_row sorts row by row (in
/// launches by row length); the blocking radius_query() tells it.
inline constexpr std::size_t radius_small_row = 4096;

/// The result of a blocking radius query, in device memory from the index's memory resource:
/// `offsets` (rows + 1), `index` and, when asked for, `distance` (total() elements each).
template <class Index, class T>
struct radius_result {
  device_buffer<std::int64_t> offsets;  ///< rows + 1 row offsets; offsets[rows] = total()
  device_buffer<Index> index;           ///< reference indices, row after row
  device_buffer<T> distance;            ///< distances in the index's unit (empty when not asked for)

  /// The number of observations (rows).
  [[nodiscard]] std::size_t rows() const noexcept { return offsets.empty() ? 0 : offsets.size() - 1; }
  /// The number of (observation, reference) pairs within the radius.
  [[nodiscard]] std::size_t total() const noexcept { return index.size(); }
  /// A view of the result (for radius_fill_async and the like).
  [[nodiscard]] radius_neighbors_ref<Index, T> view() noexcept
  {
    return {offsets.data(), index.data(), distance.empty() ? nullptr : distance.data(), rows(), total(), nullptr, 0};
  }
};

}  // namespace streamkit
