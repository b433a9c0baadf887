#pragma once
// Hostile input classes for the nearest-neighbour search (issue 26): generated observations and
// references that have made the spatial search fall off a cliff, or could: many identical references,
// points that float32 collapses near a pole, points within centimetres, degenerate meridians, grids.
//
// Plain C++17, no test framework and no CUDA: shared by the GPU tests (tests/spatial/test_hostile.cu)
// and the benchmark (benchmarks/bench_hostile.cu). Everything is deterministic from a seed (splitmix64
// by position, no <random> distributions, whose output differs between standard libraries).
//
// Points are (latitude, longitude) in degrees as double: latitude in [-90, 90], longitude in
// [-180, 180]. Observations are uniform on the sphere unless a class says otherwise. Which
// references are special (at the shared point, in a group, ...) is spread over random positions, so
// that ties between identical references go to indices that are not simply the first ones.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace streamkit_hostile {

inline constexpr double pi = 3.14159265358979323846;
/// Mean Earth radius in metres (streamkit::earth_radius_km × 1000), for the classes sized in metres.
inline constexpr double earth_radius_m = 6371008.8;

/// Points in degrees.
struct point_list {
  std::vector<double> lat, lon;
  [[nodiscard]] std::size_t size() const { return lat.size(); }
  void add(double la, double lo)
  {
    lat.push_back(la);
    lon.push_back(lo);
  }
  void reserve(std::size_t count)
  {
    lat.reserve(count);
    lon.reserve(count);
  }
};

/// One generated problem: `observations` (N) and `references` (M) of a class.
struct problem {
  std::string name;
  point_list observations, references;
};

/// splitmix64's finaliser.
inline std::uint64_t mix(std::uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// A 64-bit hash of a string (FNV-1a), to give every class its own stream of the seed.
inline std::uint64_t hash_name(std::string_view name)
{
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char const c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// A deterministic random stream (splitmix64 over a counter).
class random_stream {
 public:
  explicit random_stream(std::uint64_t seed) : state_(mix(seed)) {}
  std::uint64_t next() { return mix(state_++); }
  /// Uniform in [0, 1).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [a, b).
  double uniform(double a, double b) { return a + (b - a) * uniform(); }
  /// Uniform integer in [0, n), n > 0 (the bias of the modulo is below 2^-40 for the sizes used here).
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

/// Longitude wrapped into [-180, 180].
inline double wrap_longitude(double lon)
{
  while (lon > 180.0) { lon -= 360.0; }
  while (lon < -180.0) { lon += 360.0; }
  return lon;
}

/// A point uniform on the sphere.
inline void uniform_point(random_stream& rng, double& lat, double& lon)
{
  lat = std::asin(2.0 * rng.uniform() - 1.0) * 180.0 / pi;
  lon = rng.uniform(-180.0, 180.0);
}

inline point_list uniform_points(std::size_t count, random_stream& rng)
{
  point_list points;
  points.lat.resize(count);
  points.lon.resize(count);
  for (std::size_t i = 0; i < count; ++i) { uniform_point(rng, points.lat[i], points.lon[i]); }
  return points;
}

/// A point uniform in the disc of `radius_m` metres around (lat, lon) (offsets on the tangent plane:
/// for radii of metres they are exact far below the disc's size).
inline void point_in_disc(random_stream& rng, double lat, double lon, double radius_m, double& out_lat, double& out_lon)
{
  double const r = radius_m * std::sqrt(rng.uniform()) / earth_radius_m;  // radians
  double const theta = rng.uniform(0.0, 2.0 * pi);
  out_lat = lat + r * std::cos(theta) * 180.0 / pi;
  out_lon = wrap_longitude(lon + r * std::sin(theta) * 180.0 / pi / std::cos(lat * pi / 180.0));
}

/// Exactly `count` of [0, size) chosen at random (a partial Fisher-Yates shuffle), as a mask.
inline std::vector<char> chosen_positions(std::size_t size, std::size_t count, random_stream& rng)
{
  count = std::min(count, size);
  std::vector<std::size_t> order(size);
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = 0; i < count; ++i) { std::swap(order[i], order[i + rng.below(size - i)]); }
  std::vector<char> mask(size, 0);
  for (std::size_t i = 0; i < count; ++i) { mask[order[i]] = 1; }
  return mask;
}

/// The positions of `points` in a random order (Fisher-Yates).
inline void shuffle(point_list& points, random_stream& rng)
{
  for (std::size_t i = points.size(); i > 1; --i) {
    std::size_t const j = rng.below(i);
    std::swap(points.lat[i - 1], points.lat[j]);
    std::swap(points.lon[i - 1], points.lon[j]);
  }
}

/// The share p of `size` as a count (rounded to nearest).
inline std::size_t share(double p, std::size_t size) { return static_cast<std::size_t>(std::llround(p * static_cast<double>(size))); }

/// Places exactly share(p, points.size()) of `points`, at random positions, at (lat, lon).
inline void put_fraction_at(point_list& points, double p, double lat, double lon, random_stream& rng)
{
  std::vector<char> const at = chosen_positions(points.size(), share(p, points.size()), rng);
  for (std::size_t j = 0; j < points.size(); ++j) {
    if (at[j]) {
      points.lat[j] = lat;
      points.lon[j] = lon;
    }
  }
}

// ---- the classes ---------------------------------------------------------------------------------

/// Depots of the "depots" class: a third of the references in at most 2,000 depots of about 170
/// identical references each (fewer depots for small M, so that the groups keep their size).
inline std::size_t depot_count(std::size_t m)
{
  double const third = static_cast<double>(m) / 3.0;
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(third / 170.0)), 1, 2000);
}

/// The radius of the "pole_circle_1e-7rad" class. In float32 degrees every latitude 90° − 1e-7 rad
/// rounds to the same float, 90° − 2^-17° (1.33e-7 rad from the pole): one latitude, longitudes
/// distinct, every point within 2.7e-7 rad (1.7 m) of every other.
inline constexpr double pole_circle_radius = 1e-7;
/// The radius of the "pole_circle_5e-8rad" class: below half a float32 step of latitude at 90°
/// (2^-18° = 6.66e-8 rad), so that in float32 degrees every latitude rounds to exactly −90: one point
/// (the south pole) under many longitudes. In float64 the points stay distinct.
inline constexpr double pole_collapse_radius = 5e-8;

/// A hostile input class: a name, what it is, and its generator.
struct input_class {
  char const* name;
  char const* description;
  void (*make)(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs);
};

namespace detail {

inline void uniform(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
}

inline void refs_one_point(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  double lat = 0, lon = 0;
  uniform_point(rng, lat, lon);
  refs.lat.assign(m, lat);
  refs.lon.assign(m, lon);
}

template <int PerMille>
void refs_fraction_at_one_point(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
  double lat = 0, lon = 0;
  uniform_point(rng, lat, lon);
  put_fraction_at(refs, PerMille / 1000.0, lat, lon, rng);
}

inline void depots(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
  std::size_t const count = depot_count(m);
  point_list const centres = uniform_points(count, rng);
  std::vector<char> const in_depot = chosen_positions(m, share(1.0 / 3.0, m), rng);
  std::size_t next = 0;
  for (std::size_t j = 0; j < m; ++j) {
    if (in_depot[j]) {
      refs.lat[j] = centres.lat[next % count];
      refs.lon[j] = centres.lon[next % count];
      ++next;
    }
  }
}

inline void groups_2_to_64(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = point_list{};
  refs.reserve(m);
  while (refs.size() < m) {
    std::size_t const left = m - refs.size();
    std::size_t size = std::min<std::size_t>(2 + rng.below(63), left);
    if (left - size == 1) {  // no group of one at the end (unless M = 1)
      if (size < 64) {
        ++size;
      } else {
        --size;
      }
    }
    double lat = 0, lon = 0;
    uniform_point(rng, lat, lon);
    for (std::size_t j = 0; j < size; ++j) { refs.add(lat, lon); }
  }
  shuffle(refs, rng);
}

inline void pole_circle(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = point_list{};
  refs.reserve(m);
  for (std::size_t j = 0; j < m; ++j) { refs.add(90.0 - pole_circle_radius * 180.0 / pi, rng.uniform(-180.0, 180.0)); }
}

inline void pole_collapse(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = point_list{};
  refs.reserve(m);
  for (std::size_t j = 0; j < m; ++j) { refs.add(-90.0 + pole_collapse_radius * 180.0 / pi, rng.uniform(-180.0, 180.0)); }
}

inline void poles_exact(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = point_list{};
  refs.reserve(m);
  for (std::size_t j = 0; j < m; ++j) { refs.add((rng.next() & 1U) != 0 ? 90.0 : -90.0, rng.uniform(-180.0, 180.0)); }
}

template <int Centimetres, int CentreMicroDegreesLat, int CentreMicroDegreesLon>
void tiny_disc(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = point_list{};
  refs.lat.resize(m);
  refs.lon.resize(m);
  for (std::size_t j = 0; j < m; ++j) {
    point_in_disc(rng, CentreMicroDegreesLat * 1e-6, CentreMicroDegreesLon * 1e-6, Centimetres * 0.01, refs.lat[j], refs.lon[j]);
  }
}

/// `count` points on the meridian of longitude 0, latitudes uniform in [-90, 90].
inline point_list meridian_points(std::size_t count, random_stream& rng)
{
  point_list points;
  points.reserve(count);
  for (std::size_t i = 0; i < count; ++i) { points.add(rng.uniform(-90.0, 90.0), 0.0); }
  return points;
}

inline void one_meridian(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = meridian_points(n, rng);
  refs = meridian_points(m, rng);
}

/// References on the meridian of longitude 0 (one great circle, ~19 m apart at M = 2^20), observations uniform: a
/// node's box around a piece of the curve reaches towards an observation by up to the piece's length (89.5 times the
/// uniform step at 2^20, k = 1, before thin nodes, tree_kernels.cuh), and the references near the nearest one lie
/// within the float32 filter's margin of it along some 1e-3 rad, hundreds of them.
inline void refs_one_meridian(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = meridian_points(m, rng);
}

inline void antimeridian(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = point_list{};
  refs = point_list{};
  obs.reserve(n);
  refs.reserve(m);
  for (std::size_t i = 0; i < n; ++i) { obs.add(rng.uniform(-90.0, 90.0), (rng.next() & 1U) != 0 ? 180.0 : -180.0); }
  for (std::size_t j = 0; j < m; ++j) { refs.add(rng.uniform(-90.0, 90.0), (rng.next() & 1U) != 0 ? 180.0 : -180.0); }
}

/// Observations on the edges of the cells of every cube map of up to 1024 cells a side (a face
/// coordinate a multiple of 2^-9; one in 16 on a face's edge, some on its corners), where a cell found
/// from float32 values and one found from float64 values differ; references uniform.
inline void cube_cell_edges(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = point_list{};
  obs.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const face = rng.below(6), axis = face / 2;
    double const sign = face % 2 == 0 ? 1.0 : -1.0;
    double u = static_cast<double>(rng.below(1025)) / 512.0 - 1.0;
    double v = rng.below(16) == 0 ? (rng.below(2) == 0 ? 1.0 : -1.0) : rng.uniform(-1.0, 1.0);
    if (rng.below(2) == 0) { std::swap(u, v); }
    double const x = axis == 0 ? sign : u, y = axis == 1 ? sign : (axis == 0 ? u : v), z = axis == 2 ? sign : v;
    obs.add(std::atan2(z, std::hypot(x, y)) * 180.0 / pi, std::atan2(y, x) * 180.0 / pi);
  }
  refs = uniform_points(m, rng);
}

inline void antipodal_pairs(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
  for (std::size_t j = 0; j + 1 < m; j += 2) {
    refs.lat[j + 1] = -refs.lat[j];
    refs.lon[j + 1] = refs.lon[j] <= 0.0 ? refs.lon[j] + 180.0 : refs.lon[j] - 180.0;
  }
}

inline void obs_all_identical(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  double lat = 0, lon = 0;
  uniform_point(rng, lat, lon);
  obs.lat.assign(n, lat);
  obs.lon.assign(n, lon);
  refs = uniform_points(m, rng);
}

inline double rounded_to(double x, double step) { return std::round(x / step) * step; }

inline void grid_1deg(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
  for (std::size_t j = 0; j < m; ++j) {
    refs.lat[j] = rounded_to(refs.lat[j], 1.0);
    refs.lon[j] = rounded_to(refs.lon[j], 1.0);
  }
}

inline void grid_region(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  std::vector<char> const local = chosen_positions(n, share(0.5, n), rng);
  for (std::size_t i = 0; i < n; ++i) {
    if (local[i]) {
      obs.lat[i] = rng.uniform(40.0, 41.0);
      obs.lon[i] = rng.uniform(-74.0, -73.0);
    }
  }
  refs = point_list{};
  refs.reserve(m);
  for (std::size_t j = 0; j < m; ++j) {
    // Integer hundredths, divided: the same grid point is the same double every time.
    refs.add(std::round(rng.uniform(40.0, 41.0) * 100.0) / 100.0, std::round(rng.uniform(-74.0, -73.0) * 100.0) / 100.0);
  }
}

inline void null_island(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
  put_fraction_at(refs, 0.1, 0.0, 0.0, rng);
  put_fraction_at(obs, 0.1, 0.0, 0.0, rng);
}

/// The most turns wrapped_longitudes adds to a longitude, either way.
inline constexpr int wrapped_turns = 3;

/// Observations and references uniform, each longitude shifted by a whole number of turns, from
/// −wrapped_turns to +wrapped_turns: the same points, written as some data sources do.
inline void wrapped_longitudes(std::size_t n, std::size_t m, random_stream& rng, point_list& obs, point_list& refs)
{
  obs = uniform_points(n, rng);
  refs = uniform_points(m, rng);
  for (point_list* points : {&obs, &refs}) {
    for (double& lon : points->lon) {
      lon += 360.0 * std::floor(rng.uniform(-wrapped_turns, wrapped_turns + 1.0));
    }
  }
}

}  // namespace detail

/// Every class, the baseline ("uniform") first.
inline std::vector<input_class> const& input_classes()
{
  static std::vector<input_class> const classes{
    {"uniform", "observations and references uniform on the sphere (the baseline)", detail::uniform},
    {"refs_one_point", "every reference at one point", detail::refs_one_point},
    {"refs_one_point_p0.01", "1% of the references at one point, the rest uniform", detail::refs_fraction_at_one_point<10>},
    {"refs_one_point_p0.1", "10% of the references at one point, the rest uniform", detail::refs_fraction_at_one_point<100>},
    {"refs_one_point_p0.5", "50% of the references at one point, the rest uniform", detail::refs_fraction_at_one_point<500>},
    {"refs_one_point_p0.9", "90% of the references at one point, the rest uniform", detail::refs_fraction_at_one_point<900>},
    {"depots",
     "a third of the references in depots of ~170 identical points (2,000 depots at M = 2^20; fewer for smaller M), the rest uniform",
     detail::depots},
    {"groups_2_to_64",
     "every reference in a group of 2 to 64 identical points (uniform sizes and centres), groups spread over random indices",
     detail::groups_2_to_64},
    {"pole_circle_1e-7rad",
     "references on a circle of 1e-7 rad round the north pole, random longitudes: float32 degrees round every latitude to 90 - 2^-17 deg "
     "(one latitude, all within 1.7 m)",
     detail::pole_circle},
    {"pole_circle_5e-8rad",
     "references on a circle of 5e-8 rad round the south pole: float32 degrees round every latitude to exactly -90 (one point under many "
     "longitudes); distinct in float64",
     detail::pole_collapse},
    {"poles_exact", "references exactly at a pole (latitude +90 or -90 at random) with random longitudes", detail::poles_exact},
    {"cell_3m", "references uniform in a disc of 3 m in Paris (one or a few 6 m Morton cells); float32 degrees put them on a lattice "
                "of ~0.42 m x 0.026 m, so many are identical in float32",
     detail::tiny_disc<300, 48856600, 2352200>},
    {"cell_3m_distinct", "references uniform in a disc of 3 m near (0.0001, 0.0002) deg, where float32 keeps them distinct",
     detail::tiny_disc<300, 100, 200>},
    {"cell_1cm_distinct",
     "references uniform in a disc of 1 cm near (0.00001, 0.00002) deg, where float32 keeps them (nearly all) distinct",
     detail::tiny_disc<1, 10, 20>},
    {"one_meridian", "observations and references on the meridian of longitude 0, latitudes uniform in [-90, 90]", detail::one_meridian},
    {"refs_one_meridian", "references on the meridian of longitude 0, latitudes uniform in [-90, 90]; observations uniform",
     detail::refs_one_meridian},
    {"antimeridian", "observations and references on longitude +180 or -180 (random, the same meridian), latitudes uniform in [-90, 90]",
     detail::antimeridian},
    {"cube_cell_edges",
     "observations on the cell edges of every cube map up to 1024 cells a side (face coordinates multiples of 2^-9, face edges and "
     "corners), references uniform",
     detail::cube_cell_edges},
    {"antipodal_pairs", "references in antipodal pairs (2j uniform, 2j+1 its antipode)", detail::antipodal_pairs},
    {"obs_all_identical", "every observation at one point, references uniform", detail::obs_all_identical},
    {"grid_1deg", "references uniform, rounded to a 1 degree grid (about 16 identical per grid point at M = 2^20)", detail::grid_1deg},
    {"grid_0.01deg_region",
     "references uniform in a 1 x 1 degree region, rounded to 0.01 degree (10,201 grid points); half of the observations uniform in the "
     "region, half on the sphere",
     detail::grid_region},
    {"null_island_10pct", "10% of the references and 10% of the observations at (0, 0), the rest uniform", detail::null_island},
    {"wrapped_longitudes",
     "observations and references uniform, each longitude shifted by -3 to +3 whole turns (up to 22 rad, where a float32 longitude in "
     "radians is off by up to 6 m, and beyond 3 pi, where the k = 1 scan takes the float64 vector)",
     detail::wrapped_longitudes},
  };
  return classes;
}

/// The class named `name`; throws std::invalid_argument naming the classes otherwise.
inline input_class const& find_class(std::string_view name)
{
  for (auto const& c : input_classes()) {
    if (name == c.name) { return c; }
  }
  std::string known;
  for (auto const& c : input_classes()) { known += std::string(known.empty() ? "" : ", ") + c.name; }
  throw std::invalid_argument("unknown hostile input class \"" + std::string(name) + "\" (known: " + known + ")");
}

/// The class's N observations and M references, deterministic from `seed` (each class draws from its own
/// stream of the seed).
inline problem generate(input_class const& c, std::size_t n, std::size_t m, std::uint64_t seed)
{
  random_stream rng(seed ^ hash_name(c.name));
  problem p;
  p.name = c.name;
  c.make(n, m, rng, p.observations, p.references);
  if (p.observations.size() != n || p.references.size() != m) {
    throw std::logic_error(std::string("hostile class ") + c.name + " generated a wrong number of points");
  }
  return p;
}

inline problem generate(std::string_view name, std::size_t n, std::size_t m, std::uint64_t seed)
{
  return generate(find_class(name), n, m, seed);
}

/// The values of `degrees` converted to T.
template <class T>
std::vector<T> as(std::vector<double> const& degrees)
{
  return std::vector<T>(degrees.begin(), degrees.end());
}

// ---- identical points ----------------------------------------------------------------------------

/// Groups of points with identical coordinates (as T values: latitude == latitude and longitude ==
/// longitude; float32 inputs group what float32 rounding made identical).
struct identical_groups {
  /// Per point: the next smaller index with the same coordinates, or -1 (the smallest of its group,
  /// or alone).
  std::vector<std::int64_t> previous;
  std::size_t distinct = 0;   ///< number of distinct points
  std::size_t largest = 0;    ///< size of the largest group (1 when all are distinct, 0 when empty)
  std::size_t in_groups = 0;  ///< points that share their coordinates with another
};

template <class T>
identical_groups find_identical(std::vector<T> const& lat, std::vector<T> const& lon)
{
  std::size_t const m = lat.size();
  std::vector<std::size_t> order(m);
  std::iota(order.begin(), order.end(), std::size_t{0});
  // -0 and +0 compare equal (their distances to anything are the same): sort by value, then index.
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (lat[a] != lat[b]) { return lat[a] < lat[b]; }
    if (lon[a] != lon[b]) { return lon[a] < lon[b]; }
    return a < b;
  });
  identical_groups g;
  g.previous.assign(m, -1);
  std::size_t run = 0;
  for (std::size_t s = 0; s < m; ++s) {
    bool const same = s > 0 && lat[order[s]] == lat[order[s - 1]] && lon[order[s]] == lon[order[s - 1]];
    if (same) {
      g.previous[order[s]] = static_cast<std::int64_t>(order[s - 1]);
      ++run;
    } else {
      if (run > 1) { g.in_groups += run; }
      run = 1;
      ++g.distinct;
    }
    g.largest = std::max(g.largest, run);
  }
  if (run > 1) { g.in_groups += run; }
  return g;
}

/// Whether a row of k neighbour indices breaks the tie rule among identical references: identical
/// references are at the same distance from every observation, so a row that holds one of them must
/// hold every smaller index of its group, in an earlier slot. Returns the first slot that breaks it,
/// or -1. Indices outside [0, previous.size()) are ignored (they are another check's business).
template <class Index>
long first_tie_order_problem(identical_groups const& groups, Index const* row, std::size_t k)
{
  for (std::size_t s = 0; s < k; ++s) {
    auto const g = static_cast<std::int64_t>(row[s]);
    if (g < 0 || static_cast<std::size_t>(g) >= groups.previous.size()) { continue; }
    std::int64_t const before = groups.previous[static_cast<std::size_t>(g)];
    if (before < 0) { continue; }
    bool found = false;
    for (std::size_t t = 0; t < s && !found; ++t) { found = static_cast<std::int64_t>(row[t]) == before; }
    if (!found) { return static_cast<long>(s); }
  }
  return -1;
}

}  // namespace streamkit_hostile
