// The order a tree's build gives runs of equal sort keys (detail/tree_impl.cuh, order_tie_runs: tree_order_ties, a
// warp a run of up to 32 entries, and tree_order_long_runs, a block a run of up to 1,024): identical vectors next to
// each other, their indices ascending, so that each is one group; a run too long to order, which holds more than one
// vector, flags the tree so that no walk allows near-ties. Checked on random runs of equal keys, made as the stable key
// sort leaves them (indices ascending), of distinct and identical vectors, including distinct coordinates that make one
// vector (a pole at several longitudes).
#include "gpu_test.hpp"

#include <streamkit/core/error.hpp>
#include <streamkit/spatial/detail/tree_impl.cuh>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

namespace {

namespace sd = streamkit::detail;

constexpr double half_pi = 1.5707963267948966;

/// Sorted keys (one per run, ascending; then invalid ones), ids ascending within each run, and the coordinates by id.
struct runs {
  std::vector<sd::tree_key> keys;
  std::vector<std::uint32_t> ids;
  std::vector<sd::lat_lon> coordinates;
  std::vector<std::pair<std::size_t, std::size_t>> bounds;  // [first, last) of each run
  /// The vector a reference stands for, as a comparable value: the pole for any longitude at latitude ±π/2.
  [[nodiscard]] std::pair<double, double> point(std::uint32_t id) const
  {
    sd::lat_lon const c = coordinates[id];
    return std::abs(c.lat) == half_pi ? std::pair<double, double>{c.lat, 0.0} : std::pair<double, double>{c.lat, c.lon};
  }
  /// Appends 3 invalid references (the largest key, NaN coordinates), which sort last.
  void add_invalid()
  {
    for (int j = 0; j < 3; ++j) {
      keys.push_back({~std::uint64_t{0}, ~std::uint64_t{0}});
      ids.push_back(static_cast<std::uint32_t>(coordinates.size()));
      coordinates.push_back({std::nan(""), std::nan("")});
    }
  }
};

/// `count` runs of 1 to `longest` entries, each of `kinds` vectors or fewer (a random one an entry), and 3 invalid references.
runs make_runs(std::mt19937_64& random, int count, int longest, int kinds)
{
  runs r;
  std::uniform_real_distribution<double> angle(-1.0, 1.0);
  std::vector<std::pair<sd::tree_key, sd::lat_lon>> entries;
  for (int run = 0; run < count; ++run) {
    int const length = std::uniform_int_distribution<int>(1, longest)(random);
    std::vector<sd::lat_lon> vectors;
    int const here = std::uniform_int_distribution<int>(1, kinds)(random);
    for (int v = 0; v < here; ++v) {
      // Every third run's vectors include the pole at two longitudes: distinct coordinates, one vector.
      vectors.push_back(run % 3 == 0 && v < 2 ? sd::lat_lon{half_pi, angle(random)} : sd::lat_lon{angle(random), angle(random)});
    }
    for (int e = 0; e < length; ++e) {
      sd::lat_lon const c = vectors[std::uniform_int_distribution<std::size_t>(0, vectors.size() - 1)(random)];
      entries.push_back({sd::tree_key{static_cast<std::uint64_t>(run) + 1, 7}, c});
    }
  }
  // The references' indices: shuffled across runs, ascending within each (as the stable sort leaves them).
  std::size_t const valid = entries.size();
  std::vector<std::uint32_t> index(valid);
  for (std::size_t i = 0; i < valid; ++i) { index[i] = static_cast<std::uint32_t>(i); }
  std::shuffle(index.begin(), index.end(), random);
  r.coordinates.resize(valid);
  std::size_t first = 0;
  for (std::size_t i = 0; i <= valid; ++i) {
    if (i == valid || (i > first && entries[i].first.high != entries[first].first.high)) {
      std::sort(index.begin() + static_cast<std::ptrdiff_t>(first), index.begin() + static_cast<std::ptrdiff_t>(i));
      r.bounds.push_back({first, i});
      first = i;
    }
  }
  for (std::size_t i = 0; i < valid; ++i) {
    r.keys.push_back(entries[i].first);
    r.ids.push_back(index[i]);
    r.coordinates[index[i]] = entries[i].second;
  }
  r.add_invalid();
  return r;
}

/// Runs order_tie_runs on the device; returns the ids it leaves and sets `unordered`.
std::vector<std::uint32_t> order_ties(runs const& r, std::uint32_t& unordered)
{
  std::size_t const n = r.keys.size();
  sd::tree_key* keys = nullptr;
  std::uint32_t* ids = nullptr;
  sd::lat_lon* coordinates = nullptr;
  std::uint32_t* flags = nullptr;
  std::uint32_t* long_starts = nullptr;
  STREAMKIT_CUDA_TRY(cudaMalloc(&keys, n * sizeof(sd::tree_key)));
  STREAMKIT_CUDA_TRY(cudaMalloc(&ids, n * sizeof(std::uint32_t)));
  STREAMKIT_CUDA_TRY(cudaMalloc(&coordinates, n * sizeof(sd::lat_lon)));
  STREAMKIT_CUDA_TRY(cudaMalloc(&flags, 2 * sizeof(std::uint32_t)));
  STREAMKIT_CUDA_TRY(cudaMalloc(&long_starts, (n / (sd::tree_tie_run_limit + 1) + 1) * sizeof(std::uint32_t)));
  STREAMKIT_CUDA_TRY(cudaMemcpy(keys, r.keys.data(), n * sizeof(sd::tree_key), cudaMemcpyHostToDevice));
  STREAMKIT_CUDA_TRY(cudaMemcpy(ids, r.ids.data(), n * sizeof(std::uint32_t), cudaMemcpyHostToDevice));
  STREAMKIT_CUDA_TRY(cudaMemcpy(coordinates, r.coordinates.data(), n * sizeof(sd::lat_lon), cudaMemcpyHostToDevice));
  STREAMKIT_CUDA_TRY(cudaMemset(flags, 0, 2 * sizeof(std::uint32_t)));
  sd::order_tie_runs(coordinates, keys, ids, n, flags, long_starts, cudaStream_t{});
  std::vector<std::uint32_t> out(n);
  STREAMKIT_CUDA_TRY(cudaMemcpy(out.data(), ids, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
  STREAMKIT_CUDA_TRY(cudaMemcpy(&unordered, flags, sizeof(std::uint32_t), cudaMemcpyDeviceToHost));
  for (void* p : {static_cast<void*>(keys), static_cast<void*>(ids), static_cast<void*>(coordinates), static_cast<void*>(flags),
                  static_cast<void*>(long_starts)}) {
    STREAMKIT_CUDA_TRY(cudaFree(p));
  }
  return out;
}

/// Checks each run of `r` against the ids `out` left: its indices kept; up to tree_tie_block_limit entries, each vector in
/// one stretch with its indices ascending; a longer run untouched. Returns whether some longer run holds two vectors.
bool check_runs(runs const& r, std::vector<std::uint32_t> const& out)
{
  bool mixed_long = false;
  for (auto const& [first, last] : r.bounds) {
    std::vector<std::uint32_t> before(r.ids.begin() + static_cast<std::ptrdiff_t>(first), r.ids.begin() + static_cast<std::ptrdiff_t>(last));
    std::vector<std::uint32_t> after(out.begin() + static_cast<std::ptrdiff_t>(first), out.begin() + static_cast<std::ptrdiff_t>(last));
    std::vector<std::uint32_t> sorted_after = after;
    std::sort(sorted_after.begin(), sorted_after.end());
    EXPECT_EQ(sorted_after, before) << "run at " << first << ": its indices changed";
    std::map<std::pair<double, double>, int> stretches;
    for (std::size_t e = 0; e < after.size(); ++e) {
      if (e == 0 || r.point(after[e]) != r.point(after[e - 1])) { ++stretches[r.point(after[e])]; }
    }
    if (last - first > static_cast<std::size_t>(sd::tree_tie_block_limit)) {
      EXPECT_EQ(after, before) << "run at " << first << " of " << last - first << " entries: reordered";
      mixed_long = mixed_long || stretches.size() > 1;
      continue;
    }
    for (auto const& [point, count] : stretches) {
      EXPECT_EQ(count, 1) << "run at " << first << ": a vector in " << count << " stretches";
    }
    for (std::size_t e = 1; e < after.size(); ++e) {
      if (r.point(after[e]) == r.point(after[e - 1])) {
        EXPECT_LT(after[e - 1], after[e]) << "run at " << first << ": identical references out of index order";
      }
    }
  }
  for (std::size_t i = r.keys.size() - 3; i < r.keys.size(); ++i) { EXPECT_EQ(out[i], r.ids[i]) << "an invalid reference moved"; }
  return mixed_long;
}

TEST(TreeTies, IdenticalVectorsOfARunOfEqualKeysFormOneStretch)
{
  STREAMKIT_REQUIRE_GPU();
  std::mt19937_64 random(0x7e1e5ull);
  for (int trial = 0; trial < 4; ++trial) {
    // Runs of up to a warp's limit, then of up to a block's: every one is ordered and the tree keeps near-ties.
    for (int longest : {sd::tree_tie_run_limit, sd::tree_tie_block_limit}) {
      runs const r = make_runs(random, longest == sd::tree_tie_run_limit ? 3000 : 300, longest, 1 + trial * 3);
      std::uint32_t unordered = 7;
      std::vector<std::uint32_t> const out = order_ties(r, unordered);
      EXPECT_FALSE(check_runs(r, out));
      EXPECT_EQ(unordered, 0u) << "trial " << trial << ", runs of up to " << longest;
    }
  }
}

/// One run of `length` equal keys whose first entry's vector differs from the others' and orders after them (a larger x),
/// and 3 invalid references.
runs first_differs(int length)
{
  runs r;
  r.keys.assign(static_cast<std::size_t>(length), sd::tree_key{1, 7});
  for (int e = 0; e < length; ++e) {
    r.ids.push_back(static_cast<std::uint32_t>(e));
    r.coordinates.push_back(e == 0 ? sd::lat_lon{0.5, 0.25} : sd::lat_lon{0.5, 0.75});
  }
  r.bounds = {{0, r.keys.size()}};
  r.add_invalid();
  return r;
}

TEST(TreeTies, ALongerRunOfOneVectorKeepsNearTiesAndOfTwoFlagsTheTree)
{
  STREAMKIT_REQUIRE_GPU();
  std::mt19937_64 random(0x10e6ull);
  // Runs of up to 3 × a block's limit, of one vector each: nothing to order, no flag.
  runs const same = make_runs(random, 200, 3 * sd::tree_tie_block_limit, 1);
  std::uint32_t unordered = 7;
  std::vector<std::uint32_t> out = order_ties(same, unordered);
  EXPECT_FALSE(check_runs(same, out));
  EXPECT_EQ(unordered, 0u);
  // Of two vectors or more: some longer run holds two, and the tree is flagged.
  runs const mixed = make_runs(random, 200, 3 * sd::tree_tie_block_limit, 4);
  out = order_ties(mixed, unordered);
  ASSERT_TRUE(check_runs(mixed, out)) << "no longer run of two vectors was made";
  EXPECT_EQ(unordered, 1u);
  // Runs one past a warp's limit and exactly a block's, their second vector first (and so last once ordered): ordered, no
  // flag. One entry past a block's limit: left as it is, flagged (the lane at the run's start cannot see its second vector).
  for (int length : {sd::tree_tie_run_limit + 1, sd::tree_tie_block_limit, sd::tree_tie_block_limit + 1}) {
    runs const edge = first_differs(length);
    out = order_ties(edge, unordered);
    bool const too_long = length > sd::tree_tie_block_limit;
    EXPECT_EQ(check_runs(edge, out), too_long) << length;
    EXPECT_EQ(unordered, too_long ? 1u : 0u) << length;
    if (!too_long) { EXPECT_EQ(out[static_cast<std::size_t>(length) - 1], 0u) << length << ": its first entry's vector not last"; }
  }
}

}  // namespace
