// Reverse-geocode GPS points: for each observation, the k nearest places of a CSV of places (the
// shipped GeoNames cities1000 table by default) and their distances in km, written to a CSV.
//
//   reverse_geocode [--k K] [places.csv] [observations.csv | --random N] [output.csv]
//
// Defaults: k = 1, the shipped cities table, 1,000,000 random observations, reverse_geocode_out.csv.
// The front end (nearest_index) picks the engine; the example prints which, the time of a search,
// and checks 2,000 of the answers against a float64 CPU brute force.
#include "common/csv.hpp"
#include "common/example_support.hpp"

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/core/stream.hpp>
#include <streamkit/core/timer.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace streamkit_examples;

std::vector<float> as_float(std::vector<double> const& values) { return {values.begin(), values.end()}; }

streamkit::device_buffer<float> upload(std::vector<float> const& host, streamkit::stream const& s)
{
  streamkit::device_buffer<float> buffer(host.size(), s);
  buffer.copy_from_host_async(cuda::std::span<float const>(host.data(), host.size()), s);
  return buffer;
}

int run(int argc, char** argv)
{
  std::size_t k = 1;
  std::vector<char*> positional{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--k" && i + 1 < argc) {
      k = std::stoul(argv[++i]);
    } else {
      positional.push_back(argv[i]);
    }
  }
  argc = static_cast<int>(positional.size());
  argv = positional.data();
  std::string const places_path = argc > 1 ? argv[1] : STREAMKIT_EXAMPLES_DATA_DIR "/cities1000.csv";
  std::string const observations_arg = argc > 2 ? argv[2] : "--random";
  std::string const output_path = argc > 4 ? argv[4] : (argc > 3 && observations_arg != "--random" ? argv[3] : "reverse_geocode_out.csv");

  std::ifstream places_file(places_path);
  if (!places_file) { throw std::runtime_error(places_path + ": cannot open the places file"); }
  point_table const places = read_points(places_file, places_path);
  if (places.names.empty()) { throw std::runtime_error(places_path + ": the header must name a 'name' column"); }

  point_table observations;
  if (observations_arg == "--random") {
    std::size_t const count = argc > 3 ? std::stoul(argv[3]) : 1000000;
    std::mt19937_64 rng(2026);
    std::vector<float> lat, lon;
    random_points(count, rng, lat, lon);
    observations.lat.assign(lat.begin(), lat.end());
    observations.lon.assign(lon.begin(), lon.end());
  } else {
    std::ifstream file(observations_arg);
    if (!file) { throw std::runtime_error(observations_arg + ": cannot open the observations file"); }
    observations = read_points(file, observations_arg);
  }
  std::printf("places: %zu from %s\nobservations: %zu\n", places.lat.size(), places_path.c_str(), observations.lat.size());

  require_gpu("reverse_geocode");
  streamkit::stream const s(0);
  auto const place_lat = as_float(places.lat), place_lon = as_float(places.lon);
  auto const obs_lat = as_float(observations.lat), obs_lon = as_float(observations.lon);
  auto const d_place_lat = upload(place_lat, s), d_place_lon = upload(place_lon, s);
  auto const d_obs_lat = upload(obs_lat, s), d_obs_lon = upload(obs_lon, s);
  std::size_t const n = obs_lat.size();
  streamkit::device_buffer<std::int32_t> d_index(n * k, s);
  streamkit::device_buffer<float> d_km(n * k, s);

  streamkit::nearest_options options;
  options.unit = streamkit::distance_unit::kilometres;
  auto const references = streamkit::points_ref<float>::separate(d_place_lat.data(), d_place_lon.data(), place_lat.size(),
                                                                  streamkit::angle_unit::degrees);
  auto const queries = streamkit::points_ref<float>::separate(d_obs_lat.data(), d_obs_lon.data(), n, streamkit::angle_unit::degrees);
  streamkit::nearest_index<float> index(references, options, s);
  auto const result = streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), d_km.data(), n, k);
  index.query(queries, result, s);  // warm-up (and the check of every point)
  streamkit::gpu_duration elapsed{};
  {
    streamkit::scoped_timer timer(s, elapsed);
    index.query_async(queries, result, s);
  }
  std::vector<std::int32_t> nearest(n * k);
  std::vector<float> km(n * k);
  d_index.copy_to_host_async(cuda::std::span<std::int32_t>(nearest.data(), n * k), s);
  d_km.copy_to_host_async(cuda::std::span<float>(km.data(), n * k), s);
  s.sync();
  bool const tree = index.engine_for(n, k) == streamkit::search_engine::tree;
  std::printf("GPU search (k = %zu, %s engine): %.3f ms on %s\n", k, tree ? "tree" : "brute-force", elapsed.count(),
              streamkit::device(0).name().c_str());

  // Check a sample against a float64 brute force over the same (float) coordinates: the j-th
  // neighbour's distance must be the j-th smallest (up to float32 ranking of the fast mode).
  auto const rad = [](float degrees) { return streamkit::radians_from_degrees(static_cast<double>(degrees)); };
  std::size_t const step = std::max<std::size_t>(n / 2000, 1);
  std::size_t const m = place_lat.size();
  std::size_t checked = 0, wrong = 0;
  std::vector<double> all(m);
  for (std::size_t i = 0; i < n; i += step, ++checked) {
    for (std::size_t j = 0; j < m; ++j) {
      all[j] = streamkit::haversine(rad(obs_lat[i]), rad(obs_lon[i]), rad(place_lat[j]), rad(place_lon[j]));
    }
    std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(k, m)), all.end());
    for (std::size_t c = 0; c < k; ++c) {
      std::int32_t const j = nearest[i * k + c];
      if (c >= m) {
        wrong += j == -1 ? 0 : 1;
        continue;
      }
      if (j < 0) {
        ++wrong;
        continue;
      }
      auto const ju = static_cast<std::size_t>(j);
      double const got = streamkit::haversine(rad(obs_lat[i]), rad(obs_lon[i]), rad(place_lat[ju]), rad(place_lon[ju]));
      if (std::abs(got - all[c]) > 2.5e-7 || std::abs(km[i * k + c] - got * streamkit::earth_radius_km) > 2e-3) { ++wrong; }
    }
  }
  std::printf("checked %zu rows of %zu neighbours against the CPU: %zu wrong\n", checked, k, wrong);

  std::ofstream out(output_path);
  out << "lat,lon";
  for (std::size_t c = 1; c <= k; ++c) { out << ",place_" << c << ",distance_km_" << c; }
  out << '\n';
  for (std::size_t i = 0; i < n; ++i) {
    out << observations.lat[i] << ',' << observations.lon[i];
    for (std::size_t c = 0; c < k; ++c) {
      std::int32_t const j = nearest[i * k + c];
      out << ',' << (j < 0 ? std::string() : csv_field(places.names[static_cast<std::size_t>(j)])) << ',' << km[i * k + c];
    }
    out << '\n';
  }
  std::printf("wrote %s\n", output_path.c_str());
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
  try {
    return run(argc, argv);
  } catch (std::exception const& error) {
    std::fprintf(stderr, "reverse_geocode: %s\n", error.what());
    return 2;
  }
}
