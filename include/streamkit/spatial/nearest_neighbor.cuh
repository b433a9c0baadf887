#pragma once
/// @file nearest_neighbor.cuh
/// Exact k-nearest-neighbour search on the sphere by great-circle (haversine) distance: the front end.
///
/// Two engines answer the same searches: brute_force_index (every pair; the better engine for small
/// reference sets or few observations, brute_force_index.cuh) and tree_index (a spatial index rebuilt
/// per time step, tree_index.cuh). nearest_index and nearest_neighbor pick the one a cost model
/// measured on an H100 predicts to be faster for the shape (N observations, M references, k), so that
/// a caller never has to know; search_engine and engine_for() say which was picked.
///
/// What every search promises:
/// - Results: row i of the n × k neighbors_ref holds observation i's k nearest references, nearest
///   first, ties to the smallest reference index; index −1 and a NaN distance where fewer than k
///   exist (M < k, invalid references, options.max_distance). Reported distances are the float64
///   haversine of the returned pairs, in options.unit.
/// - Ranking: k > 1, and k = 1 on the tree, are ranked in float64 (the answer of a float64 brute force
///   over every pair, up to ties closer than float64 rounding: on the tree's long walks for k ≤ 16, slot j's squared
///   chord is within a relative 2^-48 of the brute force's slot j, tree_index.cuh) in both precision modes; k = 1 on the
///   brute-force engine in nn_precision::fast ranks in float32 (within 2.4e-7 rad of the nearest for
///   near neighbours, brute_force_index.cuh).
/// - Invalid points (non-finite coordinate, latitude outside ±90°): never chosen as references;
///   invalid observations get −1 and NaN. Blocking calls with invalid_points::reject count them first
///   and throw std::invalid_argument before anything is written.
/// - k = 0 or k > max_neighbors (32) throws std::invalid_argument naming k; M = 0 throws; N = 0 does
///   nothing. `_async` calls never wait for the device.

#include <streamkit/core/stream_ref.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/spatial/brute_force_index.cuh>
#include <streamkit/spatial/detail/engine_choice.hpp>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/nearest_queries.cuh>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius_queries.cuh>
#include <streamkit/spatial/tree_index.cuh>

#include <cstddef>

namespace streamkit {

/// The front-end search object for time-stepping: references prepared once per update(), queries of
/// any size and k answered by the engine the cost model picks. The brute-force engine's preparation
/// is done by update(); the tree is built from it by the first query that picks the tree after an
/// update() (or by prepare()), on that query's stream. Such a query sorts its observations beside the
/// build, on a second stream the index owns, forked from the query's stream and joined back to it: the
/// query's work stays ordered on its stream. Not thread-safe: one object per concurrent
/// stream, or prepare() and then the const query_async() with a nearest_scratch per stream. Radius
/// queries (radius_queries) go to the engine radius_engine_for() picks, its tree built as for a query.
template <class T>
class nearest_index : public nearest_queries<nearest_index<T>, T>, public radius_queries<nearest_index<T>, T> {
 public:
  /// Prepares `references` (device memory) on `stream`; does not wait for the device. Memory comes
  /// from `resource`, which must outlive the index.
  /// @throws std::invalid_argument for M = 0, M ≥ 2^32, bad views or options; bad_alloc.
  nearest_index(points_ref<T> references, nearest_options const& options, stream_ref stream,
                device_resource_ref resource = default_device_resource());

  /// Replaces the reference set, ordered on `stream`; does not wait. `references` may change once
  /// the stream has passed this call. Allocates nothing when the set is no larger than before.
  void update(points_ref<T> references, stream_ref stream);

  /// The engine a query of `n` observations with `k` neighbours uses.
  [[nodiscard]] search_engine engine_for(std::size_t n, std::size_t k) const noexcept;

  /// Readies the engine that engine_for(n, k) picks (builds the tree if it is picked and out of date),
  /// on `stream`, without waiting; needed before the const query_async(). The k-nearest queries
  /// (nearest_queries) use the engine engine_for(observations.count, result.k) picks.
  void prepare(std::size_t n, std::size_t k, stream_ref stream);

  /// The engine a radius query of `n` observations uses (the k = 1 choice of the exact search; the
  /// cost model was measured on k-nearest searches only).
  [[nodiscard]] search_engine radius_engine_for(std::size_t n) const noexcept;
  /// Readies the engine radius_engine_for(n) picks, on `stream`, without waiting; needed before the
  /// const radius queries.
  void prepare_radius(std::size_t n, stream_ref stream);

  /// The number of references M.
  [[nodiscard]] std::size_t size() const noexcept { return brute_force_.size(); }
  /// Device counter of the invalid references of the last update(), in the order of its stream.
  [[nodiscard]] unsigned long long const* invalid_references() const noexcept { return brute_force_.invalid_references(); }
  /// The options given at construction.
  [[nodiscard]] nearest_options const& options() const noexcept { return brute_force_.options(); }

 private:
  template <class, class>
  friend class nearest_queries;
  template <class, class>
  friend class radius_queries;
  /// Calls f(engine) with `engine`, the tree built first on `stream` if it is picked and out of date.
  template <class F>
  void with_engine(search_engine engine, stream_ref stream, F&& f);
  /// As above, for the const queries: the tree must be ready (else std::logic_error, naming `ready`).
  template <class F>
  void with_engine(search_engine engine, char const* ready, F&& f) const;
  // k-nearest queries: forwarded to the engine engine_for() picks.
  template <class Index, class F>
  void query_dispatch(points_ref<T> const& observations, neighbors_ref<Index, T> const& result, stream_ref stream, F&& f);
  template <class Index, class F>
  void query_dispatch(points_ref<T> const& observations, neighbors_ref<Index, T> const& result, F&& f) const;
  // Radius queries: forwarded to the engine radius_engine_for() picks (detail/radius_front_end.cuh).
  template <class F>
  void radius_dispatch(std::size_t n, stream_ref stream, F&& f);
  template <class F>
  void radius_dispatch(std::size_t n, F&& f) const;

  brute_force_index<T> brute_force_;
  tree_index<T> tree_;
  bool tree_current_ = false;
};

/// One-shot search: picks the engine for the shape, prepares `references`, enqueues the search on
/// `stream` (memory from `resource`, allocated and freed in stream order); never waits for the device.
template <class T, class Index>
void nearest_neighbor_async(points_ref<T> observations, points_ref<T> references, neighbors_ref<Index, T> result,
                            nearest_options const& options, stream_ref stream,
                            device_resource_ref resource = default_device_resource());
/// As nearest_neighbor_async(), then waits for `stream`; with invalid_points::reject, throws for
/// invalid points before anything is written.
template <class T, class Index>
void nearest_neighbor(points_ref<T> observations, points_ref<T> references, neighbors_ref<Index, T> result,
                      nearest_options const& options, stream_ref stream,
                      device_resource_ref resource = default_device_resource());

/// One-shot radius query, blocking: picks the engine for the shape (radius_engine_for()), prepares
/// `references` on `stream` and runs both passes (radius_queries::radius_query(): bounds, rules and
/// exceptions), with every allocation, the result's included, from `resource`.
template <class Index = std::int64_t, class T>
radius_result<Index, T> radius_neighbors(points_ref<T> observations, points_ref<T> references, radius_options const& radius,
                                         nearest_options const& options, bool distances, stream_ref stream,
                                         device_resource_ref resource = default_device_resource());

}  // namespace streamkit

#include <streamkit/spatial/detail/nearest_index_impl.cuh>
#include <streamkit/spatial/detail/radius_front_end.cuh>
