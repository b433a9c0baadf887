#pragma once
/// @file tree_index.cuh
/// The spatial-index engine of the nearest-neighbour search: an exact k-nearest search that visits
/// only the parts of the reference set that can hold an answer, rebuilt cheaply every time step.
///
/// Build (all on the stream, nothing waits): each reference's float64 unit vector gets a 126-bit Morton
/// key (42 bits per axis of [−1, 1]^3, about 3 µm on Earth; the first 21 bits per axis in one word);
/// a radix sort orders the references by key (stable, so equal keys keep index order). References
/// with the same float64 unit vector (exact duplicates, and those the caller's float32 rounding made
/// identical; a pole is one point whatever its longitude) become one entry, a group that carries its
/// run of indices. Consecutive runs of 16 entries form the leaves, each with its bounding box in float
/// rounded outward and in float64, and a float64 capsule (the segment from its first entry to its
/// last, and how far the others lie from it, which stays tight along curves); an implicit binary tree of boxes (heap order, the leaf count
/// rounded up to a power of two) sits above them. No pointers, no per-node allocation: update() for a
/// set no larger than before rebuilds in place.
///
/// Query: observations are ordered by a 30-bit Morton key (from 64 of them on), so that the 32
/// threads of a warp hold neighbouring observations. Each thread first scans the 32 entries around
/// its own key in the sorted order (a binary search over the kept keys), which gives it a tight
/// bound; then a warp walks the tree together, depth first, entering a box when any of its threads
/// may still find a point there, and each thread scans the leaves entered with its own list of k
/// candidates in registers. A float32 filter, whose bound covers float32 rounding, decides which
/// entries are ranked in float64 (squared chords between float64 unit vectors, as the brute force's
/// exact mode), with ties to the smallest reference index: the answer is the float64 brute force's
/// for every k in both precision modes, up to near-ties. A group is ranked once and offered with its k smallest
/// indices; a box narrower than ~6e-5 rad (the float filter cannot tell its points apart) is also
/// tested in float64, box and capsule, so a pile of identical points, or millions within a metre, cost a query about
/// what a uniform set does. Near-ties: a walk for k ≤ 16 longer than 256 steps (detail::tree_near_tie_steps; none
/// in a tree of up to 2,048 entries, few over uniform references) skips a box whose float64 tests put every
/// reference in it above (1 − 2^-48) times the list's worst entry (detail::tree_near_tie), so slot j of its
/// row holds a reference whose float64 squared chord is within a relative 2^-48 (16 ulps; the chord within
/// 2^-49, 1.8e-15) of the brute force's slot j: seen from afar, the hundreds of points of a tiny circle round
/// a pole that lie within float64 rounding of the nearest one are not all ranked. Among such near-ties
/// (distinct references at one float64 distance too) which one a long walk returns may depend on the other
/// observations of the query (a warp walks together); identical references always keep their index order (a
/// build that cannot make each identical vector one group, more than 1,024 references in one key cell of
/// 4.5e-13 with more than one vector among them, turns near-ties off for that tree: detail::tree_order_ties).
/// Reported distances are float64 haversines of the returned pairs.
///
/// Many observations against few references (from 2^21 observations, at least 16 per reference, up to 2^18 references): the
/// query answers from cell lists instead (detail/tree_cells.cuh). The sphere is cut into the cells of
/// a cube map, about two per reference; the tree gives each cell k references near its centre (its k
/// nearest, or farther by at most 2^-11 of their distance: no near-ties told apart) and then every
/// entry that can be among the k nearest of any point of the cell. Each observation
/// scans its cell's list with the same float32 filter and float64 ranking, so the answers are the
/// brute force's (the walk's but for near-ties). For k > 1 the observations are first sorted by cell (a radix sort of keys of a
/// few bits, not 30), so that the threads of a warp read and rank the same entries; for k = 1 (lists of
/// about ten entries, one or two ranked) each is scanned in the caller's order, no sort. A cell whose
/// list would be long (more than 32 + 4k entries: references piled within the cell's reach) has none,
/// and its observations walk the tree as above, in cell order.
///
/// Cost: about 120 bytes per reference for the tree (sorted float and float64 vectors, float64
/// coordinates, float and float64 boxes and capsules, keys and runs of the groups) and 56 more of build scratch
/// kept for the next update() (queries read its sorted indices); 16 bytes per observation of query
/// scratch, or with cell lists 16 bytes per observation (12 at k = 1) and 152 + 32k per cell (624 at
/// k = 1), one to four cells per reference (the grid is rounded to a power of two).
///
/// Invalid points, reject/mark, blocking and `_async` forms, streams and memory resources: as
/// brute_force_index (brute_force_index.cuh).

#include <streamkit/spatial/detail/engine_core.cuh>
#include <streamkit/spatial/detail/tree_impl.cuh>

#include <cstddef>

namespace streamkit {

/// The spatial-index engine (see the file comment): build, update() each time step, k-nearest queries
/// into an n × k neighbors_ref (1 ≤ k ≤ max_neighbors), optionally within options.max_distance.
/// Construction: `tree_index<T>(references, options, stream, resource = default_device_resource())`
/// builds the tree over `references` (device memory) on `stream`, which also orders every later use
/// of the object's memory, without waiting for the device; memory comes from `resource`, which must
/// outlive the index; throws std::invalid_argument for M = 0, M ≥ 2^32, bad views or options, and
/// bad_alloc. update(references, stream) rebuilds the tree over a new reference set (same options),
/// ordered on `stream`, without waiting; it allocates nothing when the new set is no larger than every
/// earlier one on the same device. Construction and update() come from detail::engine_core; queries,
/// moves, threads and streams: as brute_force_index.
template <class T>
class tree_index : public detail::engine_core<tree_index<T>, detail::tree_engine<T>, T> {
  using core = detail::engine_core<tree_index<T>, detail::tree_engine<T>, T>;

 public:
  using core::core;

  /// Device memory the index holds (tree and build scratch, whose sorted keys queries read), in bytes;
  /// queries' scratch not counted.
  [[nodiscard]] std::size_t memory_bytes() const noexcept { return this->tree_.size() + this->build_scratch_.size(); }
};

}  // namespace streamkit

#include <streamkit/spatial/detail/nearest_queries_impl.cuh>
#include <streamkit/spatial/detail/radius_impl.cuh>
