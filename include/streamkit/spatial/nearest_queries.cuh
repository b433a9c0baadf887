#pragma once
/// @file nearest_queries.cuh
/// The k-nearest queries, written once for both engines (brute_force_index, tree_index) and the front
/// end (nearest_index), which inherit them from nearest_queries (as they inherit radius_queries).
/// What every search promises (results, ranking, ties, invalid points): nearest_neighbor.cuh.

#include <streamkit/core/stream_ref.hpp>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/points.hpp>

#include <cstddef>

namespace streamkit {

/// The k-nearest queries of an index (`Engine`), into an n × k neighbors_ref with 1 ≤ k ≤
/// max_neighbors (another k throws std::invalid_argument naming k); neighbours farther than
/// options.max_distance come back as −1 and NaN.
template <class Engine, class T>
class nearest_queries {
 public:
  /// Enqueues the search of every observation on `stream`, which also orders the index's memory from
  /// then on; never waits for the device. Invalid observations are marked (and counted when
  /// `result.invalid_count` is set).
  /// @throws std::invalid_argument for bad views, k or a stream of another device;
  /// std::logic_error for a moved-from index.
  template <class Index>
  void query_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream);
  /// As query_async(), with the caller's working memory and without touching the index: several host
  /// threads may query one index at once, each with its own stream and scratch (on the index's
  /// device). The index must outlive those queries: destroy it only after their streams are
  /// synchronised. The front end's engine must be ready (nearest_index::prepare()).
  template <class Index>
  void query_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                   nearest_scratch& scratch) const;
  /// As query_async(), then waits for the result. With invalid_points::reject it first counts the
  /// invalid references and observations on `stream`, waits, and throws std::invalid_argument with
  /// the count before anything is written.
  template <class Index>
  void query(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream);

 protected:
  nearest_queries() = default;
  /// Calls f(engine) with the engine that answers the query: the index itself, unless `Engine` (the
  /// front end) hides these with its own choice.
  template <class Index, class F>
  void query_dispatch(points_ref<T> const&, neighbors_ref<Index, T> const&, stream_ref, F&& f)
  {
    f(self());
  }
  /// As above, for the const query (which takes the caller's scratch).
  template <class Index, class F>
  void query_dispatch(points_ref<T> const&, neighbors_ref<Index, T> const&, F&& f) const
  {
    f(self());
  }

 private:
  Engine& self() noexcept { return static_cast<Engine&>(*this); }
  Engine const& self() const noexcept { return static_cast<Engine const&>(*this); }
};

}  // namespace streamkit
