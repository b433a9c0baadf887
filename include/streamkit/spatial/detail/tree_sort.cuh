#pragma once
// The tree build's stable sort of (tree_key, reference id) pairs: a merge sort whose passes each take one
// launch. CUB's merge sort runs a partition kernel before each merge pass, a binary search of log2(run)
// dependent loads per tile; here each block finds its own bounds, a warp probing 32 places a round
// (measured on an H200, 144,563 keys: CUB's 116 µs, 8 passes of two launches after its block sort).

#include <streamkit/core/detail/launch.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/spatial/detail/tree_kernels.cuh>

#include <cub/block/block_merge_sort.cuh>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace streamkit::detail {

/// Threads of a block of the sort's kernels, and the pairs each holds: a tile is their product.
inline constexpr int tree_sort_threads = 256;
inline constexpr int tree_sort_items = 8;
inline constexpr std::size_t tree_sort_tile = std::size_t{tree_sort_threads} * tree_sort_items;

/// Where a sort left its keys and ids.
template <class Key>
struct sorted_pairs {
  Key* keys;
  std::uint32_t* ids;
};

/// Sorts each tile of tree_sort_tile pairs in place, stably (CUB's block merge sort); the last tile may be short.
static __global__ void __launch_bounds__(tree_sort_threads) tree_sort_tiles(tree_key* keys, std::uint32_t* ids, std::size_t count)
{
  using block_sort = cub::BlockMergeSort<tree_key, tree_sort_threads, tree_sort_items, std::uint32_t>;
  __shared__ typename block_sort::TempStorage storage;
  std::size_t const first = blockIdx.x * tree_sort_tile;
  int const valid = static_cast<int>(min_of(count - first, tree_sort_tile));
  tree_key key[tree_sort_items];
  std::uint32_t id[tree_sort_items];
  // Blocked: thread t holds the tile's items t × tree_sort_items onwards, the order the stable sort keeps.
  for (int e = 0; e < tree_sort_items; ++e) {
    int const at = static_cast<int>(threadIdx.x) * tree_sort_items + e;
    key[e] = at < valid ? keys[first + at] : tree_key{};
    id[e] = at < valid ? ids[first + at] : 0u;
  }
  tree_key const last{~std::uint64_t{0}, ~std::uint64_t{0}};  // the largest key: past-the-end items stay last
  block_sort(storage).StableSort(key, id, tree_key_less{}, valid, last);
  for (int e = 0; e < tree_sort_items; ++e) {
    int const at = static_cast<int>(threadIdx.x) * tree_sort_items + e;
    if (at < valid) {
      keys[first + at] = key[e];
      ids[first + at] = id[e];
    }
  }
}

/// How many of the first `diagonal` pairs of the stable merge of a (a_count keys) and b (b_count) come
/// from a: the smallest i with b[diagonal − 1 − i] < a[i] (a's keys go first on ties), found by the
/// calling warp, each lane probing one of 32 places a round; the same in every lane.
__device__ inline std::size_t merge_split(tree_key const* a, std::size_t a_count, tree_key const* b, std::size_t b_count, std::size_t diagonal)
{
  constexpr unsigned all = 0xffffffffu;
  unsigned const lane = threadIdx.x % 32;
  std::size_t low = diagonal > b_count ? diagonal - b_count : 0;
  std::size_t high = min_of(diagonal, a_count);
  while (low < high) {
    std::size_t const step = (high - low + 31) / 32;
    std::size_t const probe = low + lane * step;
    // Whether a[probe] still belongs before the diagonal (true up to the split, false from it on).
    bool const before = probe < high && !tree_key_less{}(b[diagonal - 1 - probe], a[probe]);
    int const taken = __popc(__ballot_sync(all, before));
    if (taken == 0) { break; }  // the split is low
    low += (taken - 1) * step + 1;
    high = min_of(high, low - 1 + step);
  }
  return low;
}

/// One pass: merges each two neighbouring sorted runs of `width` pairs (the last ones may be short or
/// missing) from `keys`, `ids` into `keys_out`, `ids_out`, stably; a block writes one tile, a thread
/// tree_sort_items pairs of it. `width` is a multiple of tree_sort_tile, so a tile lies in one merge.
static __global__ void __launch_bounds__(tree_sort_threads)
  tree_merge_pass(tree_key const* keys, std::uint32_t const* ids, tree_key* keys_out, std::uint32_t* ids_out, std::size_t count,
                  std::size_t width)
{
  __shared__ tree_key tile_keys[tree_sort_tile];
  __shared__ std::uint32_t tile_ids[tree_sort_tile];
  __shared__ std::size_t splits[2];
  std::size_t const out_first = blockIdx.x * tree_sort_tile;
  std::size_t const merge_first = out_first / (2 * width) * (2 * width);
  std::size_t const a_first = merge_first, a_end = min_of(merge_first + width, count);
  std::size_t const b_first = a_end, b_end = min_of(merge_first + 2 * width, count);
  std::size_t const a_count = a_end - a_first, b_count = b_end - b_first;
  std::size_t const diagonal_first = out_first - merge_first;
  std::size_t const diagonal_end = min_of(out_first + tree_sort_tile, b_end) - merge_first;
  // The tile's bounds in a: warp 0 at its first diagonal, warp 1 at its end.
  if (threadIdx.x < 64) {
    std::size_t const split =
      merge_split(keys + a_first, a_count, keys + b_first, b_count, threadIdx.x < 32 ? diagonal_first : diagonal_end);
    if (threadIdx.x % 32 == 0) { splits[threadIdx.x / 32] = split; }
  }
  __syncthreads();
  std::size_t const a_from = a_first + splits[0], a_tile = splits[1] - splits[0];
  std::size_t const b_from = b_first + (diagonal_first - splits[0]), b_tile = (diagonal_end - diagonal_first) - a_tile;
  for (std::size_t at = threadIdx.x; at < a_tile + b_tile; at += blockDim.x) {
    std::size_t const from = at < a_tile ? a_from + at : b_from + (at - a_tile);
    tile_keys[at] = keys[from];
    tile_ids[at] = ids[from];
  }
  __syncthreads();
  // This thread's pairs: from its diagonal in the tile's part of a (tile_keys[0, a_tile)) and of b (the rest).
  std::size_t const own = threadIdx.x * std::size_t{tree_sort_items};
  std::size_t const total = a_tile + b_tile;
  if (own >= total) { return; }
  std::size_t low = own > b_tile ? own - b_tile : 0, high = min_of(own, a_tile);
  while (low < high) {
    std::size_t const middle = low + (high - low) / 2;
    if (!tree_key_less{}(tile_keys[a_tile + own - 1 - middle], tile_keys[middle])) {
      low = middle + 1;
    } else {
      high = middle;
    }
  }
  std::size_t i = low, j = a_tile + (own - low);
  std::size_t const end = min_of(own + tree_sort_items, total);
  for (std::size_t out = own; out < end; ++out) {
    bool const from_a = j >= total || (i < a_tile && !tree_key_less{}(tile_keys[j], tile_keys[i]));
    std::size_t const at = from_a ? i++ : j++;
    keys_out[out_first + out] = tile_keys[at];
    ids_out[out_first + out] = tile_ids[at];
  }
}

/// Sorts `count` (tree_key, id) pairs stably (identical points keep their indices ascending) on
/// `stream`: the pairs in `keys`, `ids`, and as many again in `spare_keys`, `spare_ids` for the passes
/// to alternate with. Returns which of the two holds the result.
inline sorted_pairs<tree_key> sort_tree_keys(tree_key* keys, std::uint32_t* ids, tree_key* spare_keys, std::uint32_t* spare_ids,
                                             std::size_t count, stream_ref stream)
{
  if (count == 0) { return {keys, ids}; }
  unsigned const tiles = grid_size("tree_sort_tiles", count, tree_sort_tile);
  tree_sort_tiles<<<tiles, tree_sort_threads, 0, stream.value()>>>(keys, ids, count);
  STREAMKIT_CHECK_LAUNCH();
  for (std::size_t width = tree_sort_tile; width < count; width *= 2) {
    tree_merge_pass<<<tiles, tree_sort_threads, 0, stream.value()>>>(keys, ids, spare_keys, spare_ids, count, width);
    STREAMKIT_CHECK_LAUNCH();
    std::swap(keys, spare_keys);
    std::swap(ids, spare_ids);
  }
  return {keys, ids};
}

}  // namespace streamkit::detail
