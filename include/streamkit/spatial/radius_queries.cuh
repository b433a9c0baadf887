#pragma once
/// @file radius_queries.cuh
/// Radius queries: every reference within a distance of each observation, written once for both
/// engines (brute_force_index, tree_index) and the front end (nearest_index), which inherit them from
/// radius_queries.
///
/// What every radius query promises:
/// - The rule: a valid reference is within radius r (radius_options, in the index's
///   nearest_options::unit) of a valid observation when their float64 haversine distance times the
///   unit's scale is at most r: the distance the query reports, so a reported distance never exceeds
///   its radius, and a reference exactly at r is returned. From r ≥ π × scale on, every valid
///   reference is within; r = 0 returns the references at the observation's very coordinates.
///   Identical references (a tree's groups) each come back, with their own index.
/// - Results are compressed rows: n + 1 offsets, then indices and optional distances; each row sorted
///   by (float64 squared chord, reference index), the order of the k-nearest searches (its first k
///   entries are the k nearest within r), or in no particular order with radius_options::sorted = false.
/// - Invalid points (non-finite, latitude outside ±90°) are never returned and get empty rows; the
///   blocking forms with invalid_points::reject throw std::invalid_argument first, as the k-nearest
///   queries do. A NaN or negative radius in radius_options::radii gives an empty row.
/// - Two passes. radius_offsets_async() counts each row and writes the offsets; the caller reads
///   offsets[n] (the total) when it chooses, provides storage, and radius_fill_async() fills it. The
///   `_async` forms never wait for the device. The blocking radius_query() does both passes, with the
///   memory from the index's resource, and throws std::length_error saying how many would have come
///   back when a row exceeds radius_options::max_per_row or the total radius_options::max_total,
///   before the second pass: nothing is ever cut silently. radius_count_async() only counts.
/// - One search where it can: the offsets pass keeps, in the scratch it runs on, the first 32 entries
///   of each row it counts (12 bytes each, 32 more per row: at most 1 GiB in all, so fewer entries
///   above about 2.6 million observations and none above 13 million), and the fill that follows on
///   the same scratch, unsorted or told result.largest_row, copies each row that was kept whole
///   instead of searching it again; it searches only the longer rows and any row whose observation,
///   radius or references are not those the offsets pass counted. The results are the same either way.
/// - Working memory: the index's scratch (or the caller's nearest_scratch, in the const forms, which
///   let several streams query one index), from the index's resource. A sorted fill takes 16 bytes
///   per element of the storage's capacity on top of the result when told the largest row (each row
///   sorted by one warp), else 32 (a radix sort of (row, squared chord, index) keys over the whole
///   result: no segmented sort, which would wait for the device).
/// - Limits: at most 2^32 − 1 observations per query.

#include <streamkit/core/stream_ref.hpp>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius.hpp>

#include <cstddef>
#include <cstdint>

namespace streamkit {

namespace detail {
template <class Index, class T>
struct radius_pass;
struct radius_kept;
struct lat_lon;
}  // namespace detail

/// The radius queries of an index (see the file comment), inherited by brute_force_index, tree_index
/// and nearest_index (`Engine`), whose references and options they search.
template <class Engine, class T>
class radius_queries {
 public:
  /// Enqueues the count of every observation's references within its radius: counts[i] (device
  /// memory, observations.count elements) on `stream`; never waits for the device.
  /// @throws std::invalid_argument for bad views, a null `counts` with observations, a negative or NaN
  /// radius, a stream of another device; std::logic_error for a moved-from index.
  void radius_count_async(points_ref<T> observations, radius_options const& radius, std::int64_t* counts, stream_ref stream);
  /// As radius_count_async(), with the caller's working memory, without touching the index.
  void radius_count_async(points_ref<T> observations, radius_options const& radius, std::int64_t* counts, stream_ref stream,
                          nearest_scratch& scratch) const;
  /// As radius_count_async(), then waits; with invalid_points::reject, throws for invalid points
  /// before anything is written.
  void radius_count(points_ref<T> observations, radius_options const& radius, std::int64_t* counts, stream_ref stream);

  /// The first pass: enqueues the row offsets of the result, `offsets` (device memory,
  /// observations.count + 1 elements): offsets[0] = 0, row i holds offsets[i + 1] − offsets[i]
  /// references, offsets[n] is the total. Never waits for the device.
  /// @throws as radius_count_async().
  void radius_offsets_async(points_ref<T> observations, radius_options const& radius, std::int64_t* offsets, stream_ref stream);
  /// As radius_offsets_async(), with the caller's working memory, without touching the index.
  void radius_offsets_async(points_ref<T> observations, radius_options const& radius, std::int64_t* offsets, stream_ref stream,
                            nearest_scratch& scratch) const;

  /// The second pass: enqueues the rows into `result`, whose offsets are those radius_offsets_async()
  /// wrote for the same observations, radius and references, and whose capacity is at least
  /// offsets[n]; never waits for the device. (Storage smaller than offsets[n] is never written past;
  /// its rows are then incomplete.) Invalid observations are added to result.invalid_count when set.
  /// @throws std::invalid_argument for bad views or a result of another row count, as radius_count_async().
  template <class Index>
  void radius_fill_async(points_ref<T> observations, radius_options const& radius, radius_neighbors_ref<Index, T> result,
                         stream_ref stream);
  /// As radius_fill_async(), with the caller's working memory, without touching the index.
  template <class Index>
  void radius_fill_async(points_ref<T> observations, radius_options const& radius, radius_neighbors_ref<Index, T> result,
                         stream_ref stream, nearest_scratch& scratch) const;

  /// Both passes, blocking: counts, waits, checks the bounds, allocates the result from the index's
  /// memory resource, fills it and waits. Distances come back when `distances` is true.
  /// @throws std::length_error, before the second pass, when a row would hold more than
  /// radius.max_per_row or all rows more than radius.max_total (the message says how many); with
  /// invalid_points::reject, std::invalid_argument for invalid points before anything is written;
  /// otherwise as radius_count_async().
  template <class Index = std::int64_t>
  radius_result<Index, T> radius_query(points_ref<T> observations, radius_options const& radius, bool distances, stream_ref stream);

 protected:
  radius_queries() = default;
  /// Calls f(engine) with the engine that answers a query of `n` observations: the index itself,
  /// unless `Engine` (the front end) hides these with its own choice.
  template <class F>
  void radius_dispatch(std::size_t, stream_ref, F&& f)
  {
    f(self());
  }
  /// As above, for the const queries (which take the caller's scratch).
  template <class F>
  void radius_dispatch(std::size_t, F&& f) const
  {
    f(self());
  }

 private:
  Engine& self() noexcept { return static_cast<Engine&>(*this); }
  Engine const& self() const noexcept { return static_cast<Engine const&>(*this); }
  template <class E>
  static void count_on(E const& engine, points_ref<T> const& observations, radius_options const& radius, std::int64_t* out,
                       bool offsets, stream_ref stream, nearest_scratch& scratch);
  template <class E, class Index>
  static void fill_on(E const& engine, points_ref<T> const& observations, radius_options const& radius,
                      radius_neighbors_ref<Index, T> const& result, stream_ref stream, nearest_scratch& scratch);
  template <class E, class Index>
  static void fill_from_kept(E const& engine, points_ref<T> const& observations, radius_options const& radius,
                             radius_neighbors_ref<Index, T> const& result, stream_ref stream, nearest_scratch& scratch,
                             detail::radius_kept const& kept);
};

}  // namespace streamkit
