// Radius queries against the k-nearest query of the same data with k = the radius query's mean row
// count (issue 27's target: a radius query costs at most 1.5x that), on the front end (nearest_index,
// which picks the engine) and on both engines where the brute force is affordable:
//   places: 1M GPS-like observations (within ~20 km of a random place of the shipped GeoNames table)
//           x the 144,563 places, r = 1, 10 and 50 km;
//   uniform: 2^20 x 2^20 uniform points, r giving about 16 neighbours per row on average.
// Times are medians of CUDA-event timings after a warm-up: the offsets pass (count + scan, keeping
// the first entries of each row), the fill into storage allocated beforehand (sorted by one radix
// sort of everything, sorted with the largest row told (the kept rows copied, the others searched
// again and sorted one warp per row when it is at most radius_small_row), unsorted (kept rows
// copied)), and the k-nearest query; the radius total is the offsets pass + the sorted fill the
// blocking form would take (the host's read of the offsets in between is not counted). "searched
// again": the rows longer than the entries the offsets pass keeps of each row.
//
// Usage: bench_radius [path/to/cities1000.csv] [repetitions] [--write-points DIR]   (exits 77 without a GPU)
//   --write-points DIR: first writes the generated points as raw little-endian float32 (lat, lon) degree pairs
//   (the format of bench_nn_files and benchmarks/peers/cubql_cukd_driver.cu) and DIR/cases.tsv, one line per
//   case: name, observations file, references file, r (km, %.17g), sphere radius (km): the data a peer is run
//   on by benchmarks/peers_radius.py (written before the GPU is looked for, so it works without one).
#include "../examples/common/csv.hpp"

#include <streamkit/core/device.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>

#include <algorithm>
#include <fstream>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

struct points {
  std::vector<float> lat, lon;  // degrees
};

points uniform(std::size_t n, std::uint64_t seed)
{
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0), l(-180.0, 180.0);
  points p;
  for (std::size_t i = 0; i < n; ++i) {
    p.lat.push_back(static_cast<float>(std::asin(u(rng)) * 180.0 / streamkit::pi));
    p.lon.push_back(static_cast<float>(l(rng)));
  }
  return p;
}

/// GPS-like observations: a random place, moved by up to ~20 km.
points near(points const& places, std::size_t n, std::uint64_t seed)
{
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> pick(0, places.lat.size() - 1);
  std::normal_distribution<double> jitter(0.0, 0.1);  // degrees (~11 km)
  points p;
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t const j = pick(rng);
    double const la = std::clamp(places.lat[j] + jitter(rng), -90.0, 90.0);
    p.lat.push_back(static_cast<float>(la));
    p.lon.push_back(static_cast<float>(places.lon[j] + jitter(rng)));
  }
  return p;
}

void write_pairs(std::string const& path, points const& p)
{
  std::vector<float> pairs;
  pairs.reserve(2 * p.lat.size());
  for (std::size_t i = 0; i < p.lat.size(); ++i) {
    pairs.push_back(p.lat[i]);
    pairs.push_back(p.lon[i]);
  }
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<char const*>(pairs.data()), static_cast<std::streamsize>(pairs.size() * sizeof(float)));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

template <class F>
double median_ms(streamkit::stream const& s, int repetitions, F&& work)
{
  work();  // warm-up
  s.sync();
  std::vector<double> times;
  for (int r = 0; r < repetitions; ++r) {
    streamkit::timed_event start(s.ref()), stop(s.ref());
    start.record(s);
    work();
    stop.record(s);
    stop.sync();
    times.push_back(static_cast<double>(streamkit::elapsed(start, stop).count()));  // milliseconds
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct device_points {
  streamkit::device_buffer<float> lat, lon;
  streamkit::points_ref<float> ref;
  device_points(points const& p, streamkit::stream const& s)
      : lat(p.lat.size(), s), lon(p.lon.size(), s)
  {
    lat.copy_from_host_async(cuda::std::span<float const>(p.lat.data(), p.lat.size()), s);
    lon.copy_from_host_async(cuda::std::span<float const>(p.lon.data(), p.lon.size()), s);
    ref = streamkit::points_ref<float>::separate(lat.data(), lon.data(), p.lat.size(), streamkit::angle_unit::degrees);
  }
};

template <class Index>
void run_case(char const* name, char const* engine_name, Index& index, streamkit::points_ref<float> obs, double radius_km,
              streamkit::stream const& s, int repetitions)
{
  std::size_t const n = obs.count;
  streamkit::radius_options r;
  r.radius = radius_km;
  streamkit::device_buffer<std::int64_t> offsets(n + 1, s);
  index.radius_offsets_async(obs, r, offsets.data(), s);
  std::int64_t total = 0;
  STREAMKIT_CUDA_TRY(cudaMemcpyAsync(&total, offsets.data() + n, sizeof total, cudaMemcpyDeviceToHost, s.value()));
  s.sync();
  streamkit::device_buffer<std::int64_t> idx(static_cast<std::size_t>(total), s);
  streamkit::device_buffer<float> dist(static_cast<std::size_t>(total), s);
  streamkit::radius_neighbors_ref<std::int64_t, float> view{offsets.data(), idx.data(), dist.data(), n, static_cast<std::size_t>(total),
                                                            nullptr, 0};
  double const count_ms = median_ms(s, repetitions, [&] { index.radius_offsets_async(obs, r, offsets.data(), s); });
  double const fill_ms = median_ms(s, repetitions, [&] { index.radius_fill_async(obs, r, view, s); });
  // The largest row, read from the offsets as a caller (or the blocking form) would: short rows are
  // then sorted one thread each instead of by one radix sort of everything.
  std::vector<std::int64_t> host_offsets(n + 1);
  STREAMKIT_CUDA_TRY(cudaMemcpyAsync(host_offsets.data(), offsets.data(), (n + 1) * sizeof(std::int64_t), cudaMemcpyDeviceToHost, s.value()));
  s.sync();
  streamkit::radius_neighbors_ref<std::int64_t, float> told = view;
  for (std::size_t i = 0; i < n; ++i) {
    told.largest_row = std::max<std::size_t>(told.largest_row, static_cast<std::size_t>(host_offsets[i + 1] - host_offsets[i]));
  }
  double const fill_told_ms = median_ms(s, repetitions, [&] { index.radius_fill_async(obs, r, told, s); });
  streamkit::radius_options unsorted = r;
  unsorted.sorted = false;
  double const fill_unsorted_ms = median_ms(s, repetitions, [&] { index.radius_fill_async(obs, unsorted, view, s); });
  double const mean = static_cast<double>(total) / static_cast<double>(n);
  std::size_t const k = std::clamp<std::size_t>(static_cast<std::size_t>(std::llround(mean)), 1, streamkit::max_neighbors);
  streamkit::device_buffer<std::int64_t> kidx(n * k, s);
  streamkit::device_buffer<float> kdist(n * k, s);
  auto const knn = streamkit::neighbors_ref<std::int64_t, float>::dense(kidx.data(), kdist.data(), n, k);
  double const knn_ms = median_ms(s, repetitions, [&] { index.query_async(obs, knn, s); });
  double const radius_ms = count_ms + (told.largest_row <= streamkit::radius_small_row ? fill_told_ms : fill_ms);
  std::size_t const kept = streamkit::detail::radius_kept_slots(n);
  std::size_t longer = 0;
  for (std::size_t i = 0; i < n; ++i) { longer += static_cast<std::size_t>(host_offsets[i + 1] - host_offsets[i]) > kept ? 1 : 0; }
  std::printf("| %-28s | %-11s | %9.2f | %10.2f | %9zu | %7zu | %9.4f | %9.4f | %9.4f | %9.4f | %9.4f | %9.4f | %5.2f | %5.1f %% of rows (over %zu) |\n",
              name, engine_name, radius_km, mean, told.largest_row, k, count_ms, fill_ms, fill_told_ms, fill_unsorted_ms, radius_ms, knn_ms,
              radius_ms / knn_ms, 100.0 * static_cast<double>(longer) / static_cast<double>(n), kept);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv)
{
  std::vector<std::string> positional;
  std::string write_dir;
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    if (arg == "--write-points" && i + 1 < argc) {
      write_dir = argv[++i];
    } else {
      positional.push_back(arg);
    }
  }
  std::string const path = positional.size() > 0 ? positional[0] : "examples/data/cities1000.csv";
  int const repetitions = positional.size() > 1 ? std::atoi(positional[1].c_str()) : 7;
  std::ifstream file(path);
  if (!file) {
    std::fprintf(stderr, "cannot open %s\n", path.c_str());
    return 1;
  }
  auto const table = streamkit_examples::read_points(file, path);
  points places;
  for (std::size_t i = 0; i < table.lat.size(); ++i) {
    places.lat.push_back(static_cast<float>(table.lat[i]));
    places.lon.push_back(static_cast<float>(table.lon[i]));
  }
  streamkit::nearest_options options;
  options.unit = streamkit::distance_unit::kilometres;
  options.precision = streamkit::nn_precision::exact;
  points const gps = near(places, std::size_t{1} << 20, 1);
  points const uniform_refs = uniform(std::size_t{1} << 20, 2);
  points const uniform_obs = uniform(std::size_t{1} << 20, 3);
  points const uniform_few = uniform(std::size_t{1} << 14, 4);
  std::string const places_name = "1M GPS-like x " + std::to_string(places.lat.size()) + " places";
  // 16 of 2^20 on average: (1 - cos r) / 2 = 16 / 2^20.
  double const angle = std::acos(1.0 - 32.0 / static_cast<double>(std::size_t{1} << 20));
  double const uniform_km = angle * options.sphere_radius_km;
  if (!write_dir.empty()) {
    write_pairs(write_dir + "/places.f32", places);
    write_pairs(write_dir + "/gps_obs_2p20.f32", gps);
    write_pairs(write_dir + "/uniform_refs_2p20.f32", uniform_refs);
    write_pairs(write_dir + "/uniform_obs_2p20.f32", uniform_obs);
    write_pairs(write_dir + "/uniform_obs_2p14.f32", uniform_few);
    std::ofstream cases(write_dir + "/cases.tsv");
    char line[512];
    for (double const km : {1.0, 10.0, 50.0}) {
      std::snprintf(line, sizeof line, "%s\tgps_obs_2p20.f32\tplaces.f32\t%.17g\t%.17g\n", places_name.c_str(), km,
                    options.sphere_radius_km);
      cases << line;
    }
    std::snprintf(line, sizeof line, "2^20 x 2^20 uniform\tuniform_obs_2p20.f32\tuniform_refs_2p20.f32\t%.17g\t%.17g\n",
                  uniform_km, options.sphere_radius_km);
    cases << line;
    std::snprintf(line, sizeof line, "2^14 x 2^20 uniform\tuniform_obs_2p14.f32\tuniform_refs_2p20.f32\t%.17g\t%.17g\n",
                  uniform_km, options.sphere_radius_km);
    cases << line;
    if (!cases) {
      std::fprintf(stderr, "cannot write %s/cases.tsv\n", write_dir.c_str());
      return 1;
    }
  }
  if (streamkit::device_count() == 0) {
    std::puts("no CUDA device visible: benchmark skipped");
    return 77;
  }
  streamkit::stream const s(0);
  std::printf("device: %s; medians of %d; float32 degrees in, km out, exact; times in ms\n", streamkit::device(0).name().c_str(),
              repetitions);
  std::printf("| case | engine | r (km) | mean row | largest row | k | offsets pass | sorted fill (radix) | sorted fill (largest row told) | "
              "unsorted fill | radius (offsets + best sorted fill) | k-nearest | ratio | searched again |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  {
    device_points const refs(places, s);
    device_points const obs(gps, s);
    streamkit::nearest_index<float> front(refs.ref, options, s);
    streamkit::tree_index<float> tree(refs.ref, options, s);
    for (double const km : {1.0, 10.0, 50.0}) {
      run_case(places_name.c_str(), "tree_index", tree, obs.ref, km, s, repetitions);
      run_case(places_name.c_str(), "front end", front, obs.ref, km, s, repetitions);
    }
  }
  {
    device_points const refs(uniform_refs, s);
    device_points const obs(uniform_obs, s);
    streamkit::tree_index<float> tree(refs.ref, options, s);
    run_case("2^20 x 2^20 uniform", "tree_index", tree, obs.ref, uniform_km, s, repetitions);
    device_points const few(uniform_few, s);
    streamkit::brute_force_index<float> brute(refs.ref, options, s);
    run_case("2^14 x 2^20 uniform", "brute_force", brute, few.ref, uniform_km, s, repetitions);
    run_case("2^14 x 2^20 uniform", "tree_index", tree, few.ref, uniform_km, s, repetitions);
  }
  return 0;
}
