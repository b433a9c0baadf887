#pragma once
// The frame both search engines share, written once: construction and update() over the engine's
// preparation, the k-nearest and radius queries (nearest_queries, radius_queries), the checks of a
// k-nearest query, and the one friend list through which the queries and the front end
// (nearest_index) reach an engine's parts. Each engine supplies its memory and passes as `Impl`
// (detail::brute_force_engine, detail::tree_engine, on index_core) and names itself as `Engine`.

#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/spatial/detail/index_core.cuh>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/nearest_queries.cuh>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius_queries.cuh>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace streamkit {

template <class T>
class nearest_index;

namespace detail {

/// An engine over `Impl`, which derives from index_core<T> and provides, protected: the engine's name
/// (`name`) and the most observations one query takes (`max_query_observations`); a constructor from
/// (options, resource) that prepares nothing; prepare(references, stream), the preparation that
/// construction and update() run; search_async(), used(), radius_scratch_bytes() and radius_run()
/// for the queries (nearest_queries_impl.cuh, radius_impl.cuh).
template <class Engine, class Impl, class T>
class engine_core : public Impl, public nearest_queries<Engine, T>, public radius_queries<Engine, T> {
 public:
  /// Prepares `references` (device memory) on `stream`, which also orders every later use of the
  /// object's memory; does not wait for the device. Memory (references and query scratch) comes from
  /// `resource`, which must outlive the index.
  /// @throws std::invalid_argument for M = 0, M ≥ 2^32, bad views or options; bad_alloc.
  engine_core(points_ref<T> references, nearest_options const& options, stream_ref stream,
              device_resource_ref resource = default_device_resource())
      : Impl(options, resource)
  {
    Impl::prepare(references, stream);
  }

  /// Replaces the reference set (same options) and prepares it, ordered on `stream`; does not wait
  /// for the device. Allocates nothing when the new set is no larger than every earlier one on the
  /// same device.
  void update(points_ref<T> references, stream_ref stream) { Impl::prepare(references, stream); }

 protected:
  /// An index with no references, which the front end prepares from another engine's (tree_index).
  engine_core(nearest_options const& options, device_resource_ref resource) : Impl(options, resource) {}

 private:
  template <class, class>
  friend class streamkit::nearest_queries;
  template <class, class>
  friend class streamkit::radius_queries;
  template <class>
  friend class streamkit::nearest_index;

  /// The checks of a k-nearest query.
  template <class Index>
  void expect_query(points_ref<T> const& observations, neighbors_ref<Index, T> const& result, stream_ref stream) const
  {
    expect_engine_query(Impl::name, this->count_, this->device_, observations, result, stream);
    STREAMKIT_EXPECTS(observations.count <= Impl::max_query_observations, std::invalid_argument,
                      "observations: " + std::to_string(observations.count) + " points; " + Impl::name + " takes at most " +
                        std::to_string(Impl::max_query_observations) + " per query");
  }
};

}  // namespace detail
}  // namespace streamkit
