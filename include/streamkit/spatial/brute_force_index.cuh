#pragma once
/// @file brute_force_index.cuh
/// The brute-force engine of the nearest-neighbour search: every observation against every reference.
///
/// k = 1: for each of N observation points, finds the index and distance of the nearest of M reference
/// points, considering every pair. Two passes: pass 1 splits the reference set into as
/// many slices as it takes to fill the GPU for the given N and M, and each block reduces its slice
/// with per-thread running minima; pass 2 merges the slices per observation and computes the
/// winner's distance in double precision from the original coordinates.
///
/// The inner loop ranks references by squared chord length |p - q|^2 between unit vectors, which is
/// 4 hav(d) and so orders pairs exactly as the haversine distance does. The unit vectors are computed
/// from the coordinates in double precision (no fast-math trigonometry decides an answer).
///
/// Precision (default `nn_precision::fast`, float32 vectors): each float32 chord is within 2u + 2.5u·c
/// of the true chord c (u = 2^-24: unit vectors rounded component-wise, then five roundings in the
/// squared chord), so the returned point's chord exceeds the nearest one's by at most
/// 4u + 2.5u·(c + c_nearest). In distance that is at most 2.4e-7 rad (1.5 m on Earth) for near
/// neighbours and 2.5e-7 rad at 300 km, growing as 1 / cos(d / 2) with the distance d to the nearest
/// point: 2.5e-6 rad at d = 2.5 rad, where the nearest reference lies on the far side of the globe
/// (the shape fuzz found such answers with a small cluster of references). The reported distance is the float64
/// haversine of the returned pair. `nn_precision::exact` returns the float64 answer (indices differ
/// from a float64 haversine brute force only at ties closer than rounding): its loop still runs in
/// float32 and rescans in float64, in index order, every group of references whose float32 minimum
/// comes within the float32 error bound (squared chord 4e-6, about 13 km) of the best float64 value so
/// far. On uniform data that is a small fraction of the pairs; where many references lie within ~13 km
/// of an observation (dense clusters) most groups are rescanned and exact mode is correspondingly slower.
///
/// k > 1 (up to max_neighbors): pass 1 keeps, per observation and slice, the k nearest in a register
/// list; every pair is filtered in float32 and ranked in float64, so the answer is the float64 one in
/// both precision modes. Pass 2 merges the slices.
///
/// Ties resolve to the smallest reference index; results do not depend on the launch configuration.
///
/// Inputs that are not well formed: M = 0 throws std::invalid_argument; N = 0 does nothing. A point
/// with a non-finite coordinate or a latitude outside [-90°, 90°] is *invalid*. Invalid references are
/// never chosen; an invalid observation (or one with no valid reference) gets index -1 and a NaN
/// distance. The `_async` calls and preparation never wait for the device: they mark, and count on the
/// device (`neighbors_ref::invalid_count`, `brute_force_index::invalid_references()`), where the
/// caller reads the counts when it chooses. The blocking calls (`brute_force_index::query`,
/// `nearest_neighbor`) with `invalid_points::reject` (the default) count first, wait, and throw
/// std::invalid_argument with the count of invalid references or observations before anything is
/// written; with `invalid_points::mark` they mark as the `_async` calls do.
/// Longitudes may take any finite value.

#include <streamkit/spatial/detail/brute_force_impl.cuh>
#include <streamkit/spatial/detail/engine_core.cuh>

namespace streamkit {

/// The brute-force search engine: a prepared reference set that is searched pair by pair (every
/// observation against every reference), the better engine for small shapes; tree_index, with the
/// same construct / update() / query interface, is the other engine.
/// Construction: `brute_force_index<T>(references, options, stream, resource = default_device_resource())`
/// prepares `references` (device memory) on `stream`, which also orders every later use of the
/// object's memory, without waiting for the device; memory (references and query scratch) comes from
/// `resource`, which must outlive the index; throws std::invalid_argument for M = 0, M ≥ 2^32, bad
/// views or options, and bad_alloc. Preparation (unit vectors and double coordinates, one pass over M
/// points) is cheap, so call update(references, stream) every time step when the references move
/// (same options, ordered on `stream`, no wait); it allocates nothing when the new set is no larger
/// than every earlier one on the same device. Scratch memory for queries is kept and reused, so a loop
/// of query_async() calls allocates nothing after the first. Construction and update() come from
/// detail::engine_core; queries: k-nearest (nearest_queries) and within a distance (radius_queries),
/// inherited; size(), options() and invalid_references() from detail::index_core. Move-only (a
/// moved-from index is empty: querying it throws std::logic_error); destruction and assignment return
/// at once, the memory released in the order of the stream last used. Not thread-safe: use one object
/// per concurrent stream, or the const query_async() with a nearest_scratch per stream.
template <class T>
class brute_force_index : public detail::engine_core<brute_force_index<T>, detail::brute_force_engine<T>, T> {
  using core = detail::engine_core<brute_force_index<T>, detail::brute_force_engine<T>, T>;

 public:
  using core::core;
};

}  // namespace streamkit

#include <streamkit/spatial/detail/nearest_queries_impl.cuh>
#include <streamkit/spatial/detail/radius_impl.cuh>
