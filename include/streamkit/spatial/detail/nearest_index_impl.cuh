#pragma once
// The front end: engine choice and delegation.

#include <streamkit/core/error.hpp>
#include <streamkit/spatial/detail/engine_choice.hpp>
#include <streamkit/spatial/detail/nearest_checks.hpp>
#include <streamkit/spatial/detail/nearest_launch.cuh>

#include <stdexcept>
#include <string>

namespace streamkit {

template <class T>
nearest_index<T>::nearest_index(points_ref<T> references, nearest_options const& options, stream_ref stream,
                                device_resource_ref resource)
    : brute_force_(references, options, stream, resource), tree_(options, resource)
{
}

template <class T>
void nearest_index<T>::update(points_ref<T> references, stream_ref stream)
{
  brute_force_.update(references, stream);
  tree_current_ = false;
}

template <class T>
search_engine nearest_index<T>::engine_for(std::size_t n, std::size_t k) const noexcept
{
  return detail::choose_engine(n, size(), k, options().precision);
}

template <class T>
void nearest_index<T>::prepare(std::size_t n, std::size_t k, stream_ref stream)
{
  with_engine(engine_for(n, k), stream, [](auto&) {});
}

template <class T>
template <class F>
void nearest_index<T>::with_engine(search_engine engine, stream_ref stream, F&& f)
{
  if (engine != search_engine::tree) {
    f(brute_force_);
    return;
  }
  if (!tree_current_) {
    tree_.prepare(brute_force_.prepared_points(), stream);
    tree_current_ = true;
  }
  f(tree_);
}

template <class T>
template <class F>
void nearest_index<T>::with_engine(search_engine engine, char const* ready, F&& f) const
{
  if (engine != search_engine::tree) {
    f(brute_force_);
    return;
  }
  STREAMKIT_EXPECTS(tree_current_, std::logic_error,
                    std::string("nearest_index: the tree this query needs is not built for the current references; call ") + ready +
                      " first");
  f(tree_);
}

template <class T>
template <class Index, class F>
void nearest_index<T>::query_dispatch(points_ref<T> const& observations, neighbors_ref<Index, T> const& result, stream_ref stream,
                                      F&& f)
{
  brute_force_.expect_query(observations, result, stream);  // before a tree is built for a bad query
  search_engine const engine = engine_for(observations.count, result.k);
  if (engine == search_engine::tree && !tree_current_) {
    // The tree's build and the order its search sorts the observations in first, side by side.
    tree_.prepare_ordering(brute_force_.prepared_points(), observations, stream);
    tree_current_ = true;
  }
  struct forget_order {
    tree_index<T>& tree;
    ~forget_order() { tree.forget_order(); }
  } const once{tree_};  // the order is this query's only, whether it is enqueued or throws
  with_engine(engine, stream, f);
}

template <class T>
template <class Index, class F>
void nearest_index<T>::query_dispatch(points_ref<T> const& observations, neighbors_ref<Index, T> const& result, F&& f) const
{
  with_engine(engine_for(observations.count, result.k), "prepare()", f);
}

namespace detail {
/// The checks of a one-shot search that need no prepared references, before anything is built.
template <class T, class Index>
void expect_one_shot(points_ref<T> const& observations, points_ref<T> const& references, neighbors_ref<Index, T> const& result,
                     nearest_options const& options)
{
  expect_options(options);
  expect_points(observations, "observations");
  expect_points(references, "references");
  expect_reference_count(references.count);
  expect_neighbors(result, observations.count);
  expect_index_capacity<Index>(references.count);
}
}  // namespace detail

namespace detail {
/// A one-shot search: the engine the cost model picks for the shape, prepared on `stream`, then
/// query_async() (`blocking` = false) or query().
template <class T, class Index>
void one_shot(points_ref<T> const& observations, points_ref<T> const& references, neighbors_ref<Index, T> const& result,
              nearest_options const& options, stream_ref stream, device_resource_ref resource, bool blocking)
{
  expect_one_shot(observations, references, result, options);
  if (observations.count == 0) { return; }  // nothing to search: nothing prepared either
  auto const search = [&](auto&& index) {
    if (blocking) {
      index.query(observations, result, stream);
    } else {
      index.query_async(observations, result, stream);
    }
  };
  if (choose_engine(observations.count, references.count, result.k, options.precision) == search_engine::tree) {
    search(tree_index<T>(references, options, stream, resource));
  } else {
    search(brute_force_index<T>(references, options, stream, resource));
  }
}
}  // namespace detail

template <class T, class Index>
void nearest_neighbor_async(points_ref<T> observations, points_ref<T> references, neighbors_ref<Index, T> result,
                            nearest_options const& options, stream_ref stream, device_resource_ref resource)
{
  detail::one_shot(observations, references, result, options, stream, resource, false);
}

template <class T, class Index>
void nearest_neighbor(points_ref<T> observations, points_ref<T> references, neighbors_ref<Index, T> result,
                      nearest_options const& options, stream_ref stream, device_resource_ref resource)
{
  detail::one_shot(observations, references, result, options, stream, resource, true);
}

}  // namespace streamkit
