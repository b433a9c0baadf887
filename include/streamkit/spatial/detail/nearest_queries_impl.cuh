#pragma once
// The k-nearest queries (nearest_queries.cuh), written once over the engines: the checks (expect_query)
// are engine_core's, each engine supplies its search (search_async) and where its memory is used
// (used); the front end forwards to the engine it picks (query_dispatch).

#include <streamkit/spatial/nearest_queries.cuh>

namespace streamkit {

template <class Engine, class T>
template <class Index>
void nearest_queries<Engine, T>::query_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream)
{
  self().query_dispatch(observations, result, stream, [&](auto& engine) {
    engine.expect_query(observations, result, stream);
    if (observations.count == 0) { return; }
    engine.search_async(observations, result, stream, engine.scratch_);
    engine.used(stream);
  });
}

template <class Engine, class T>
template <class Index>
void nearest_queries<Engine, T>::query_async(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream,
                                             nearest_scratch& scratch) const
{
  self().query_dispatch(observations, result, [&](auto const& engine) {
    engine.expect_query(observations, result, stream);
    if (observations.count == 0) { return; }
    engine.search_async(observations, result, stream, scratch);
  });
}

template <class Engine, class T>
template <class Index>
void nearest_queries<Engine, T>::query(points_ref<T> observations, neighbors_ref<Index, T> result, stream_ref stream)
{
  self().query_dispatch(observations, result, stream, [&](auto& engine) {
    engine.expect_query(observations, result, stream);
    if (observations.count == 0) { return; }
    engine.reject_invalid(observations, stream);
    engine.search_async(observations, result, stream, engine.scratch_);
    engine.used(stream);
  });
  stream.sync();
}

}  // namespace streamkit
