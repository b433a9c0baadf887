#pragma once
// The front end's radius queries (radius_queries.cuh): nearest_index forwards them to the engine it
// picks; the one-shot radius_neighbors.

#include <streamkit/spatial/detail/engine_choice.hpp>
#include <streamkit/spatial/detail/radius_impl.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <stdexcept>
#include <string>

namespace streamkit {

// ---- the front end --------------------------------------------------------------------------------

template <class T>
search_engine nearest_index<T>::radius_engine_for(std::size_t n) const noexcept
{
  return detail::choose_engine(n, size(), 1, nn_precision::exact);
}

template <class T>
void nearest_index<T>::prepare_radius(std::size_t n, stream_ref stream)
{
  with_engine(radius_engine_for(n), stream, [](auto&) {});
}

template <class T>
template <class F>
void nearest_index<T>::radius_dispatch(std::size_t n, stream_ref stream, F&& f)
{
  STREAMKIT_EXPECTS(size() > 0, std::logic_error, "radius query of a moved-from index");
  if (n == 0) {  // nothing to search: no tree is built for it
    f(brute_force_);
    return;
  }
  int const stream_device = stream.device();  // before a tree is built on the stream's device
  STREAMKIT_EXPECTS(stream_device == brute_force_.device_, std::invalid_argument,
                    "stream: belongs to device " + std::to_string(stream_device) + " but the reference set to device " +
                      std::to_string(brute_force_.device_));
  with_engine(radius_engine_for(n), stream, f);
}

template <class T>
template <class F>
void nearest_index<T>::radius_dispatch(std::size_t n, F&& f) const
{
  with_engine(n > 0 ? radius_engine_for(n) : search_engine::brute_force, "prepare_radius()", f);
}

template <class Index, class T>
radius_result<Index, T> radius_neighbors(points_ref<T> observations, points_ref<T> references, radius_options const& radius,
                                         nearest_options const& options, bool distances, stream_ref stream, device_resource_ref resource)
{
  detail::expect_options(options);
  detail::expect_points(observations, "observations");
  detail::expect_points(references, "references");
  detail::expect_reference_count(references.count);
  detail::expect_radius_options(radius);
  detail::expect_index_capacity<Index>(references.count);
  if (detail::choose_engine(observations.count, references.count, 1, nn_precision::exact) == search_engine::tree &&
      observations.count > 0) {
    return tree_index<T>(references, options, stream, resource).template radius_query<Index>(observations, radius, distances, stream);
  }
  return brute_force_index<T>(references, options, stream, resource).template radius_query<Index>(observations, radius, distances, stream);
}

}  // namespace streamkit
