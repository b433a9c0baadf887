// Portability: every public header, and every kernel template instantiated for every type the
// library takes (coordinates float and double, indices int32 and int64, every list size K through
// the runtime k, every min-max path), compiled (never run) for each architecture the binary wheel
// carries (tests/portability/CMakeLists.txt: one object per architecture, sm_75 to sm_120), so that a
// change that breaks an older or newer GPU fails the build. check_portability.py then verifies that
// this file includes every public header and that each object holds every __global__ function
// declared in include/streamkit.

#include <streamkit/core.hpp>
#include <streamkit/core/config.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/graph.hpp>
#include <streamkit/core/matrix.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/core/timer.hpp>
#include <streamkit/memory.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/multi_gpu.cuh>
#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/preprocessing.cuh>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/spatial.cuh>
#include <streamkit/spatial/brute_force_index.cuh>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/nearest_queries.cuh>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius.hpp>
#include <streamkit/spatial/radius_queries.cuh>
#include <streamkit/spatial/tree_index.cuh>
#include <streamkit/streamkit.hpp>

#if STREAMKIT_PORTABILITY_MPI
#  include <streamkit/distributed/column_extrema.hpp>
#  include <streamkit/distributed/communicator.hpp>
#  include <streamkit/distributed/gpu_searcher.cuh>
#  include <streamkit/distributed/minmax_scaler.cuh>
#  include <streamkit/distributed/nearest_neighbor.hpp>
#endif

#include <cstdint>
#include <utility>
#include <vector>

namespace streamkit {

// Class templates: every member that is not itself a template.
template class brute_force_index<float>;
template class brute_force_index<double>;
template class tree_index<float>;
template class tree_index<double>;
template class nearest_index<float>;
template class nearest_index<double>;
template class radius_queries<brute_force_index<float>, float>;
template class radius_queries<brute_force_index<double>, double>;
template class radius_queries<tree_index<float>, float>;
template class radius_queries<tree_index<double>, double>;
template class radius_queries<nearest_index<float>, float>;
template class radius_queries<nearest_index<double>, double>;
template class minmax_scaler<float>;
template class minmax_scaler<double>;
template class multi_gpu_nearest_neighbor<float>;
template class multi_gpu_nearest_neighbor<double>;
}  // namespace streamkit

#if STREAMKIT_PORTABILITY_MPI
template class streamkit::distributed::distributed_minmax_scaler<float>;
template class streamkit::distributed::distributed_minmax_scaler<double>;
#endif

namespace streamkit_portability {

using namespace streamkit;

/// Calls every function template and member template for coordinates T and indices Index (never
/// run: its explicit instantiations below make nvcc compile everything it reaches).
template <class T, class Index>
void use_everything(points_ref<T> points, neighbors_ref<Index, T> result, nearest_options const& options, stream_ref stream,
                    device_resource_ref resource, nearest_scratch& scratch, dispatcher& workers)
{
  nearest_neighbor_async(points, points, result, options, stream, resource);
  nearest_neighbor(points, points, result, options, stream, resource);

  brute_force_index<T> brute_force(points, options, stream, resource);
  brute_force.query_async(points, result, stream);
  std::as_const(brute_force).query_async(points, result, stream, scratch);
  brute_force.query(points, result, stream);

  tree_index<T> tree(points, options, stream, resource);
  tree.query_async(points, result, stream);
  std::as_const(tree).query_async(points, result, stream, scratch);
  tree.query(points, result, stream);

  nearest_index<T> front_end(points, options, stream, resource);
  front_end.query_async(points, result, stream);
  std::as_const(front_end).query_async(points, result, stream, scratch);
  front_end.query(points, result, stream);

  // Radius queries: the member templates of every engine's radius_queries base, and the one-shot form.
  radius_options const radius{};
  radius_neighbors_ref<Index, T> const rows{};
  auto const radius_of = [&](auto& engine) {
    engine.radius_fill_async(points, radius, rows, stream);
    std::as_const(engine).radius_fill_async(points, radius, rows, stream, scratch);
    (void)engine.template radius_query<Index>(points, radius, true, stream);
  };
  radius_of(brute_force);
  radius_of(tree);
  radius_of(front_end);
  (void)radius_neighbors<Index>(points, points, radius, options, true, stream, resource);

  multi_gpu_nearest_neighbor<T> multi_gpu(workers, points, options);
  multi_gpu.query(points, result);
  dispatch_nearest_neighbor(workers, points, points, result, options);
}

template <class T>
void use_minmax(matrix_ref<T> x, T* min, T* max, stream_ref stream, device_resource_ref resource, dispatcher& workers)
{
  minmax_options<T> const options{};
  matrix_ref<T const> const in = x;
  column_minmax_async(in, min, max, stream, resource);
  column_minmax(in, min, max, stream, resource);
  minmax_normalize_async(in, x, options, stream, min, max, resource);
  minmax_normalize(in, x, options, stream, resource);
  dispatch_minmax_normalize<T>(workers, {in}, {x}, options);
}

template void use_everything<float, std::int32_t>(points_ref<float>, neighbors_ref<std::int32_t, float>, nearest_options const&,
                                                  stream_ref, device_resource_ref, nearest_scratch&, dispatcher&);
template void use_everything<float, std::int64_t>(points_ref<float>, neighbors_ref<std::int64_t, float>, nearest_options const&,
                                                  stream_ref, device_resource_ref, nearest_scratch&, dispatcher&);
template void use_everything<double, std::int32_t>(points_ref<double>, neighbors_ref<std::int32_t, double>, nearest_options const&,
                                                   stream_ref, device_resource_ref, nearest_scratch&, dispatcher&);
template void use_everything<double, std::int64_t>(points_ref<double>, neighbors_ref<std::int64_t, double>, nearest_options const&,
                                                   stream_ref, device_resource_ref, nearest_scratch&, dispatcher&);
template void use_minmax<float>(matrix_ref<float>, float*, float*, stream_ref, device_resource_ref, dispatcher&);
template void use_minmax<double>(matrix_ref<double>, double*, double*, stream_ref, device_resource_ref, dispatcher&);

#if STREAMKIT_PORTABILITY_MPI
void use_distributed(MPI_Comm comm, double const* latitude, double const* longitude, std::size_t count, std::int64_t* index,
                     double* angle)
{
  auto nearest = distributed::make_distributed_gpu_nearest(comm, distributed::reference_layout::sharded);
  nearest.update(latitude, longitude, count);
  nearest.query(latitude, longitude, count, 1, index, angle);
}
#endif

}  // namespace streamkit_portability
