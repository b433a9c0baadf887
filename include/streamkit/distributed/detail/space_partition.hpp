#pragma once
// The spatial partition of the sharded layout (host): a point's key on a space-filling curve, the
// splitters that cut the keys into one contiguous range per rank, and which ranks' ranges a
// neighbourhood of a point can reach.
//
// Keys. Latitude and longitude are each quantised to 31 bits (cells of π / 2^31 rad, about 1 cm on
// the Earth) and interleaved into a 62-bit Morton (Z-order) key, latitude bits above longitude bits:
// no trigonometry per point, and a run of consecutive keys is a union of nested latitude-longitude
// cells, so that a rank's key range is a compact region away from the poles. A point a search calls
// invalid (a non-finite coordinate or |latitude| > π/2) gets the key `nowhere`, after every other.
//
// Ranges. Rank r holds the references whose (key, global id) lies in [splitter[r - 1], splitter[r]):
// the global id breaks ties between equal keys, so that even references all at one point split
// evenly. The neighbourhood of a point within angle d is held inside a latitude-longitude box
// (one or two boxes where it crosses ±π; all longitudes near a pole), and every reference in it has a
// key inside the keys of the cells the box meets: reachable_ranks() walks those cells from the
// smallest one holding the whole box, down where a cell's keys span several ranks, and reports every
// rank whose range meets a cell that meets the box. Every step rounds outwards (the margins below),
// so it may report one rank more than needed, never one less.
//
// What runs once per row (a key, its owner, the test whether a neighbourhood leaves the owner's
// range) is STREAMKIT_HOST_DEVICE: the host loops and the GPU kernels of the sharded query
// (sharded_rows.hpp) call these same functions, and their double arithmetic is the same on both
// (no contraction into fused multiply-adds on the GPU: product()), so that both route alike.

#include <streamkit/core/config.hpp>
#include <streamkit/distributed/detail/parallel_ranges.hpp>
#include <streamkit/spatial/haversine.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace streamkit::distributed::detail {

/// Bits per coordinate of a key.
inline constexpr unsigned cell_bits = 31;
inline constexpr std::uint32_t last_cell = (std::uint32_t{1} << cell_bits) - 1;
/// The key of an invalid point.
inline constexpr std::uint64_t nowhere = std::numeric_limits<std::uint64_t>::max();
/// Widening of every neighbourhood, in radians: covers the rounding of the quantisation, of the
/// longitude's reduction to [−π, π] and of the searcher's angles (a few 1e-16 rad) with room to spare;
/// wider only costs a visit.
inline constexpr double reach_margin = 1e-9;

/// a × b rounded once: never fused with an addition that follows (nvcc fuses by default in device
/// code, the host compiler does not), so that host and device compute the same bits.
STREAMKIT_HOST_DEVICE inline double product(double a, double b)
{
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
/// std::min and std::max (the same comparisons), for host and device.
STREAMKIT_HOST_DEVICE inline double smaller(double a, double b) { return b < a ? b : a; }
STREAMKIT_HOST_DEVICE inline double larger(double a, double b) { return a < b ? b : a; }

/// Whether a search takes the point (finite, |latitude| ≤ π/2): invalid observations are answered
/// "none" where they are, invalid references are never a neighbour.
STREAMKIT_HOST_DEVICE inline bool valid_point(double latitude, double longitude)
{
#if defined(__CUDA_ARCH__)
  return isfinite(latitude) && isfinite(longitude) && fabs(latitude) <= pi / 2;
#else
  return std::isfinite(latitude) && std::isfinite(longitude) && std::abs(latitude) <= pi / 2;
#endif
}

/// The longitude in [−π, π] (the IEEE remainder is exact).
STREAMKIT_HOST_DEVICE inline double reduced_longitude(double longitude)
{
  return fabs(longitude) <= pi ? longitude : remainder(longitude, 2 * pi);
}

/// The quantised cell of a latitude in [−π/2, π/2] and of a longitude in [−π, π] (clamped; monotone,
/// so a value between two others gets a cell between theirs). The conversion truncates, which is the
/// floor for the positive values it sees.
STREAMKIT_HOST_DEVICE inline std::uint32_t latitude_cell(double latitude)
{
  double const scaled = (latitude + pi / 2) * (static_cast<double>(std::uint64_t{1} << cell_bits) / pi);
  return scaled <= 0 ? 0 : scaled >= last_cell ? last_cell : static_cast<std::uint32_t>(scaled);
}
STREAMKIT_HOST_DEVICE inline std::uint32_t longitude_cell(double longitude)
{
  double const scaled = (longitude + pi) * (static_cast<double>(std::uint64_t{1} << cell_bits) / (2 * pi));
  return scaled <= 0 ? 0 : scaled >= last_cell ? last_cell : static_cast<std::uint32_t>(scaled);
}

/// A lower bound of cos(angle) for an angle in [0, π/2]: sin(π/2 − angle) by its Taylor series cut
/// after a negative term (t − t³/3! + t⁵/5! − t⁷/7!, below the sine for t in [0, π/2], at most 1.6e-4
/// relatively), a few multiplications where std::cos costs a third of the routing of an observation.
STREAMKIT_HOST_DEVICE inline double cos_lower_bound(double angle)
{
  double const t = pi / 2 - angle, t2 = t * t;
  return t * (1 - product(t2 / 6, 1 - product(t2 / 20, 1 - t2 / 42)));
}

/// The 31 bits of `v` moved to the even bit positions 0, 2, …, 60.
STREAMKIT_HOST_DEVICE inline std::uint64_t spread_bits(std::uint32_t v)
{
  std::uint64_t x = v;
  x = (x | (x << 16)) & 0x0000ffff0000ffffULL;
  x = (x | (x << 8)) & 0x00ff00ff00ff00ffULL;
  x = (x | (x << 4)) & 0x0f0f0f0f0f0f0f0fULL;
  x = (x | (x << 2)) & 0x3333333333333333ULL;
  x = (x | (x << 1)) & 0x5555555555555555ULL;
  return x;
}

/// The Morton key of a cell: latitude bits at the odd positions, longitude bits at the even ones.
STREAMKIT_HOST_DEVICE inline std::uint64_t cell_key(std::uint32_t latitude, std::uint32_t longitude) { return spread_bits(latitude) << 1 | spread_bits(longitude); }

/// The key of a point (radians); `nowhere` for an invalid one.
STREAMKIT_HOST_DEVICE inline std::uint64_t space_key(double latitude, double longitude)
{
  if (!valid_point(latitude, longitude)) { return nowhere; }
  return cell_key(latitude_cell(latitude), longitude_cell(reduced_longitude(longitude)));
}

/// A reference's place in the total order of the partition: key, then global id.
struct keyed_id {
  std::uint64_t key;
  std::uint64_t id;
};
STREAMKIT_HOST_DEVICE inline bool operator<(keyed_id const& a, keyed_id const& b) { return a.key < b.key || (a.key == b.key && a.id < b.id); }

/// The rank holding (key, id) under the `count` = ranks − 1 splitters (ascending): how many are ≤ it
/// (a binary search, as std::upper_bound).
STREAMKIT_HOST_DEVICE inline std::size_t rank_of(keyed_id const* splitters, std::size_t count, keyed_id const& item)
{
  std::size_t low = 0, high = count;
  while (low < high) {
    std::size_t const middle = low + (high - low) / 2;
    if (item < splitters[middle]) {
      high = middle;
    } else {
      low = middle + 1;
    }
  }
  return low;
}
inline std::size_t rank_of(std::vector<keyed_id> const& splitters, keyed_id const& item)
{
  return rank_of(splitters.data(), splitters.size(), item);
}

/// The ranks whose ranges may hold a key in [low, high]: [first, last] (every id of those keys).
inline void ranks_of_keys(std::vector<keyed_id> const& splitters, std::uint64_t low, std::uint64_t high, std::size_t& first, std::size_t& last)
{
  auto const below = [](keyed_id const& s, std::uint64_t key) { return s.key < key; };
  first = static_cast<std::size_t>(std::lower_bound(splitters.begin(), splitters.end(), low, below) - splitters.begin());
  auto const above = [](std::uint64_t key, keyed_id const& s) { return key < s.key; };
  last = static_cast<std::size_t>(std::upper_bound(splitters.begin(), splitters.end(), high, above) - splitters.begin());
}

/// One sample of the splitter choice: a point's key (with its global id for references) and the
/// number of items it stands for.
struct key_sample {
  std::uint64_t key;
  std::uint64_t id;
  double weight;
  std::uint64_t reference;  // 1: a reference's (splitters are placed only at these), 0: an observation's
};

/// Samples per rank and kind: at ranks × this many samples per range the ranges' weights are even
/// to a few per cent.
inline constexpr std::size_t samples_per_rank = 1024;

/// How many of `count` keys are sampled: up to samples_per_rank, evenly spaced.
inline std::size_t sample_count(std::size_t count) { return std::min(count, samples_per_rank); }
/// The row of sample s of the sample_count(count) samples of `count` keys.
STREAMKIT_HOST_DEVICE inline std::size_t sample_row(std::size_t s, std::size_t count)
{
  std::size_t const taken = count < samples_per_rank ? count : samples_per_rank;
  return s * count / taken;
}

/// The sample_count(count) samples of `count` keys: sample s (at row sample_row(s, count)) is
/// (key_of(s), id_of(s)), each weighing count / samples.
template <class KeyOf, class IdOf>
void sample_keys(std::size_t count, bool reference, KeyOf const& key_of, IdOf const& id_of, std::vector<key_sample>& samples)
{
  std::size_t const taken = sample_count(count);
  for (std::size_t s = 0; s < taken; ++s) {
    samples.push_back({key_of(s), id_of(s), static_cast<double>(count) / static_cast<double>(taken), reference ? 1u : 0u});
  }
}

/// How much the observations of the last query weigh, together, against all references: a rank's
/// step is its searcher's build over its references plus its search of the observations it owns,
/// and on a GPU a search of one observation (a tree walk) costs several times a reference's share of
/// the build. Weighing them more makes a hot spot of observations split into more ranges.
inline constexpr double observations_weight = 4.0;

/// The ranks − 1 splitters from every rank's samples (the same on every rank) into `splitters`: the
/// samples in key order, cut where their running weight passes each j / ranks of the total, each cut
/// moved to the next reference sample (so that every range that gets observations' weight also gets
/// references). The observation samples are scaled to weigh observations_weight times the references
/// together. Past the last reference sample the splitters are `nowhere`: those ranges stay empty.
/// Sorts and rescales `samples` in place, and allocates only where `splitters` has less room than
/// ranks − 1 (the caller keeps both between updates).
inline void choose_splitters(std::vector<key_sample>& samples, std::size_t ranks, std::vector<keyed_id>& splitters)
{
  std::sort(samples.begin(), samples.end(), [](key_sample const& a, key_sample const& b) {
    return keyed_id{a.key, a.id} < keyed_id{b.key, b.id} || (a.key == b.key && a.id == b.id && a.reference > b.reference);
  });
  double references = 0, observations = 0;
  for (auto const& s : samples) { (s.reference != 0 ? references : observations) += s.weight; }
  if (observations > 0) {
    double const scale = observations_weight * references / observations;
    for (auto& s : samples) {
      if (s.reference == 0) { s.weight *= scale; }
    }
  }
  double total = 0;
  for (auto const& s : samples) { total += s.weight; }
  splitters.clear();
  double running = 0;
  std::size_t next = 0;
  for (std::size_t j = 1; j < ranks; ++j) {
    double const target = total * static_cast<double>(j) / static_cast<double>(ranks);
    while (next < samples.size() && (running + samples[next].weight <= target || samples[next].reference == 0)) {
      running += samples[next++].weight;
    }
    if (next < samples.size()) {
      splitters.push_back({samples[next].key, samples[next].id});
      running += samples[next++].weight;
    } else {
      splitters.push_back({nowhere, std::numeric_limits<std::uint64_t>::max()});
    }
  }
}

/// A latitude-longitude box of cells, bounds included.
struct cell_box {
  std::uint32_t latitude_low, latitude_high, longitude_low, longitude_high;
};

/// The one or two boxes holding every point within angle `reach` (≥ 0, +inf allowed) of (latitude,
/// longitude) (a valid point). Returns how many. The latitudes of such points differ by at most the
/// angle; their longitudes, where the box stays off the poles, by at most 2 asin(sin(reach/2) /
/// cos(largest |latitude|)) (haversine), bounded above by 2 x / sqrt(1 − x²) with x ≥ the sine ratio.
STREAMKIT_HOST_DEVICE inline int neighbourhood_boxes(double latitude, double longitude, double reach, cell_box* boxes)
{
  double const d = reach + reach_margin;
  double const low = latitude - d, high = latitude + d;
  cell_box box{latitude_cell(larger(low, -pi / 2)), latitude_cell(smaller(high, pi / 2)), 0, last_cell};
  double const polar = larger(fabs(low), fabs(high));
  if (!(polar < pi / 2) || !(d < pi)) {
    boxes[0] = box;
    return 1;
  }
  // x ≥ sin(d/2) / cos(polar): a lower bound of the cosine, less the rounding of π/2 − polar (relative
  // 2e-10 while the bound exceeds 1e-6)
  double const cos_polar = cos_lower_bound(polar);
  double const x = cos_polar > 1e-6 ? (d / 2) / (cos_polar * (1 - 1e-9)) : 1.0;
  if (!(x < 0.5)) {  // within 1e-6 of a pole, or a half-width beyond ~1.15 rad: all longitudes
    boxes[0] = box;
    return 1;
  }
  double const half = product(2 * x / sqrt(1 - product(x, x)), 1 + 1e-12) + reach_margin;
  double const centre = reduced_longitude(longitude);
  double const west = centre - half, east = centre + half;
  if (west < -pi) {  // wraps past −π: [−π, east] and [west + 2π, π]
    boxes[0] = {box.latitude_low, box.latitude_high, 0, longitude_cell(east)};
    boxes[1] = {box.latitude_low, box.latitude_high, longitude_cell(west + 2 * pi), last_cell};
    return 2;
  }
  if (east > pi) {
    boxes[0] = {box.latitude_low, box.latitude_high, longitude_cell(west), last_cell};
    boxes[1] = {box.latitude_low, box.latitude_high, 0, longitude_cell(east - 2 * pi)};
    return 2;
  }
  boxes[0] = {box.latitude_low, box.latitude_high, longitude_cell(west), longitude_cell(east)};
  return 1;
}

/// Keys [low, high], both included (empty when low > high).
struct key_span {
  std::uint64_t low, high;
};

/// The keys of the cell at `level` (0: the whole sphere, cell_bits: one quantised cell) that holds the
/// quantised cell (latitude, longitude).
STREAMKIT_HOST_DEVICE inline key_span cell_keys(std::uint32_t latitude, std::uint32_t longitude, unsigned level)
{
  unsigned const below = cell_bits - level;
  std::uint64_t const first = cell_key(latitude >> below << below, longitude >> below << below);
  return {first, below == 0 ? first : first + ((std::uint64_t{1} << (2 * below)) - 1)};
}

/// The leading bits of the 31 that `a` and `b` share.
STREAMKIT_HOST_DEVICE inline unsigned common_bits(std::uint32_t a, std::uint32_t b)
{
  std::uint32_t const differ = a ^ b;
  if (differ == 0) { return cell_bits; }
#if defined(__CUDA_ARCH__)
  return static_cast<unsigned>(__clz(differ)) - (32 - cell_bits);
#else
  return static_cast<unsigned>(__builtin_clz(differ)) - (32 - cell_bits);
#endif
}

/// The level of the smallest cell holding `box`: the leading bits its bounds share in both coordinates.
STREAMKIT_HOST_DEVICE inline unsigned enclosing_level(cell_box const& box)
{
  unsigned const latitude = common_bits(box.latitude_low, box.latitude_high), longitude = common_bits(box.longitude_low, box.longitude_high);
  return latitude < longitude ? latitude : longitude;
}

/// The keys whose every (key, id) lies in rank `rank`'s range under `splitters`: those strictly
/// between its two splitters' keys (a key equal to a splitter's may have ids on both sides of it).
inline key_span keys_held_alone(std::vector<keyed_id> const& splitters, std::size_t rank)
{
  key_span const none{1, 0};
  key_span span{0, nowhere};
  if (rank > 0) {
    if (splitters[rank - 1].key == nowhere) { return none; }  // a range past the last reference: empty
    span.low = splitters[rank - 1].key + 1;
  }
  if (rank < splitters.size()) {
    if (splitters[rank].key == 0) { return none; }
    span.high = splitters[rank].key - 1;
  }
  return span;
}

/// Whether every key of the smallest cell holding `box` is in `span` (then no other rank's range
/// meets the box: the cheap test before reachable_ranks()).
STREAMKIT_HOST_DEVICE inline bool cell_within(cell_box const& box, key_span const& span)
{
  key_span const keys = cell_keys(box.latitude_low, box.longitude_low, enclosing_level(box));
  return span.low <= keys.low && keys.high <= span.high;
}

/// Whether a rank whose range holds alone the keys `alone` (keys_held_alone()) must look beyond it
/// for the points within angle `reach` of (latitude, longitude) (a valid point): whether a box of
/// neighbourhood_boxes() leaves the smallest cell inside `alone`. Where it says no, no other rank's
/// range meets the neighbourhood; where it says yes, reachable_ranks() finds which do.
STREAMKIT_HOST_DEVICE inline bool reaches_beyond(double latitude, double longitude, double reach, key_span const& alone)
{
  cell_box boxes[2];
  int const count = neighbourhood_boxes(latitude, longitude, reach, boxes);
  for (int b = 0; b < count; ++b) {
    if (!cell_within(boxes[b], alone)) { return true; }
  }
  return false;
}

/// Calls `reach(rank)` for every rank whose key range meets a cell that meets `box` (a rank may be
/// reported more than once). Starts at the smallest cell holding the box and splits a cell into its
/// four children only while its keys span several ranks, at most `depth` levels below it (then every
/// rank of the cell's keys is reported).
template <class Reach>
void reachable_ranks(std::vector<keyed_id> const& splitters, cell_box const& box, Reach const& reach, unsigned depth = 12)
{
  unsigned const top = enclosing_level(box);
  struct cell {
    std::uint32_t latitude, longitude;  // the cell's index at its level
    unsigned level;
  };
  cell stack[4 * 16 + 4];
  std::size_t size = 0;
  stack[size++] = {box.latitude_low >> (cell_bits - top), box.longitude_low >> (cell_bits - top), top};
  unsigned const deepest = std::min(cell_bits, top + depth);
  while (size > 0) {
    cell const c = stack[--size];
    unsigned const below = cell_bits - c.level;
    key_span const keys = cell_keys(c.latitude << below, c.longitude << below, c.level);
    std::size_t first = 0, last = 0;
    ranks_of_keys(splitters, keys.low, keys.high, first, last);
    if (first == last || c.level == deepest) {
      for (std::size_t r = first; r <= last; ++r) { reach(r); }
      continue;
    }
    for (std::uint32_t a = 0; a < 2; ++a) {
      for (std::uint32_t o = 0; o < 2; ++o) {
        cell const child{c.latitude << 1 | a, c.longitude << 1 | o, c.level + 1};
        unsigned const child_below = below - 1;
        std::uint32_t const lat0 = child.latitude << child_below, lat1 = lat0 + ((std::uint32_t{1} << child_below) - 1);
        std::uint32_t const lon0 = child.longitude << child_below, lon1 = lon0 + ((std::uint32_t{1} << child_below) - 1);
        if (lat1 < box.latitude_low || lat0 > box.latitude_high || lon1 < box.longitude_low || lon0 > box.longitude_high) { continue; }
        stack[size++] = child;
      }
    }
  }
}

}  // namespace streamkit::distributed::detail
