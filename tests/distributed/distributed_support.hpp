#pragma once
// What the distributed tests share: the ranks' data (the same on every rank that asks for rank r's
// part, so that each rank can rebuild the concatenation), and the CPU search and extrema the
// distributed results are compared with.
#include <streamkit/distributed/communicator.hpp>
#include <streamkit/distributed/detail/space_partition.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <utility>
#include <vector>

namespace dist = streamkit::distributed;

namespace distributed_test {

inline MPI_Comm const world = MPI_COMM_WORLD;

/// Calls of the global operator new so far in this process, on every thread (test_distributed.cpp
/// replaces it with a counting one): a loop of steps that allocates on the host moves it.
std::size_t host_allocations() noexcept;

inline dist::rank_info me() { return dist::describe(world); }

/// Rank r's rows of a `columns`-wide table, the same on every rank that asks (seeded by r): NaN
/// entries, a column all NaN everywhere (1), a column NaN on every rank but the last (2), ±inf in
/// column 3 on rank 0, and a rank with no row when there are 3 ranks.
template <class T>
std::vector<T> rows_of(int rank, int size, std::size_t columns)
{
  std::size_t const rows = size == 3 && rank == 1 ? 0 : 7 + 5 * static_cast<std::size_t>(rank);
  std::mt19937_64 rng(1234 + static_cast<unsigned>(rank));
  std::normal_distribution<double> normal(3.0, 10.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<T> x(rows * columns);
  T const nan = std::numeric_limits<T>::quiet_NaN();
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < columns; ++j) {
      T value = static_cast<T>(normal(rng));
      if (unit(rng) < 0.1 || j == 1 || (j == 2 && rank != size - 1)) { value = nan; }
      if (j == 3 && rank == 0 && i < 2) { value = (i == 0 ? 1 : -1) * std::numeric_limits<T>::infinity(); }
      x[i * columns + j] = value;
    }
  }
  return x;
}

/// The concatenation of every rank's rows (as rows_of gives them), in rank order.
template <class T>
std::vector<T> all_rows(int size, std::size_t columns)
{
  std::vector<T> all;
  for (int r = 0; r < size; ++r) {
    auto const rows = rows_of<T>(r, size, columns);
    all.insert(all.end(), rows.begin(), rows.end());
  }
  return all;
}

/// Per-column NaN-ignoring min and max of a row-major table (NaN when a column has no other value).
template <class T>
void extrema(std::vector<T> const& x, std::size_t columns, std::vector<T>& min, std::vector<T>& max)
{
  for (std::size_t k = 0; k < x.size(); ++k) {
    std::size_t const j = k % columns;
    if (std::isnan(x[k])) { continue; }
    if (std::isnan(min[j]) || x[k] < min[j]) { min[j] = x[k]; }
    if (std::isnan(max[j]) || x[k] > max[j]) { max[j] = x[k]; }
  }
}

/// The CPU search the host tests plug in: float64 haversine, ties to the smaller index, invalid
/// references never returned (a rank's own search in the distributed runs, and the single search
/// over the concatenation they must equal).
struct cpu_search {
  std::vector<double> latitude, longitude;
  std::vector<std::pair<double, std::int64_t>> all;  // kept: a loop of searches allocates nothing
  std::size_t searches = 0;

  void prepare(double const* lat, double const* lon, std::size_t count)
  {
    latitude.assign(lat, lat + count);
    longitude.assign(lon, lon + count);
  }
  void search(double const* lat, double const* lon, std::size_t count, std::size_t k, std::int64_t* index, double* angle)
  {
    ++searches;
    all.resize(latitude.size());
    for (std::size_t i = 0; i < count; ++i) {
      bool const valid = std::isfinite(lat[i]) && std::isfinite(lon[i]) && std::abs(lat[i]) <= M_PI / 2;
      for (std::size_t r = 0; valid && r < latitude.size(); ++r) {
        if (!std::isfinite(latitude[r]) || !std::isfinite(longitude[r]) || std::abs(latitude[r]) > M_PI / 2) {  // never a neighbour
          all[r] = {HUGE_VAL, static_cast<std::int64_t>(r)};
          continue;
        }
        double const s1 = std::sin((latitude[r] - lat[i]) / 2), s2 = std::sin((longitude[r] - lon[i]) / 2);
        double const h = s1 * s1 + std::cos(lat[i]) * std::cos(latitude[r]) * s2 * s2;
        all[r] = {2 * std::asin(std::sqrt(std::min(1.0, h))), static_cast<std::int64_t>(r)};
      }
      std::size_t kept = valid ? std::min(k, all.size()) : 0;
      std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kept), all.end());
      while (kept > 0 && all[kept - 1].first == HUGE_VAL) { --kept; }
      for (std::size_t j = 0; j < k; ++j) {
        index[i * k + j] = j < kept ? all[j].second : -1;
        angle[i * k + j] = j < kept ? all[j].first : std::numeric_limits<double>::quiet_NaN();
      }
    }
  }
};

/// The splitters of `samples` (a copy: choose_splitters() sorts its samples in place).
inline std::vector<dist::detail::keyed_id> splitters_of(std::vector<dist::detail::key_sample> samples, std::size_t ranks)
{
  std::vector<dist::detail::keyed_id> splitters;
  dist::detail::choose_splitters(samples, ranks, splitters);
  return splitters;
}

struct point_set {
  std::vector<double> latitude, longitude;
};

/// Rank r's points (radians), the same on every rank that asks: uniform, or clustered around a
/// centre per rank (so that sharded shards are compact), with duplicates of other ranks' points and
/// an invalid observation.
inline point_set points_of(int rank, int size, std::size_t count, bool clustered, unsigned salt)
{
  std::mt19937_64 rng(977 * salt + static_cast<unsigned>(rank));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> spread(0.0, 0.05);
  point_set p;
  double const centre_lat = -0.8 + 1.6 * rank / std::max(1, size - 1), centre_lon = -2.5 + 1.7 * rank;
  for (std::size_t i = 0; i < count; ++i) {
    double lat, lon;
    if (clustered) {
      lat = std::clamp(centre_lat + spread(rng), -M_PI / 2, M_PI / 2);
      lon = centre_lon + spread(rng);
    } else {
      lat = std::asin(2 * unit(rng) - 1);
      lon = M_PI * (2 * unit(rng) - 1);
    }
    p.latitude.push_back(lat);
    p.longitude.push_back(lon);
  }
  if (count > 3) {  // a point every rank also has (ties broken by the global id) and ...
    p.latitude[1] = 0.3, p.longitude[1] = 0.4;
  }
  return p;
}

/// The concatenation of every rank's points (as points_of gives them), in rank order.
template <class CountOf>
point_set all_points(int size, CountOf count_of, bool clustered, unsigned salt)
{
  point_set all;
  for (int r = 0; r < size; ++r) {
    point_set const part = points_of(r, size, count_of(r), clustered, salt);
    all.latitude.insert(all.latitude.end(), part.latitude.begin(), part.latitude.end());
    all.longitude.insert(all.longitude.end(), part.longitude.begin(), part.longitude.end());
  }
  return all;
}

}  // namespace distributed_test
