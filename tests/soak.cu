// Soak: many iterations mixing device min-max normalisation, nearest neighbour (a reused index and
// the one-shot call) and dispatched host-to-host work over a dispatcher; every iteration's results
// are checked, and device memory, pinned memory and workspace allocations are measured after a
// warm-up and at the end: they must be flat.
//
//   streamkit_soak [iterations]     (default 10000; exits 77, "skipped", without a GPU)
#include "device_memory.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/preprocessing/minmax.cuh>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
#include <streamkit/memory/pinned_buffer.hpp>
#include <streamkit/core/stream.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

struct memory_use {
  std::size_t device_free;
  std::size_t pinned;
  std::size_t workspace_allocations;
};

memory_use measure(streamkit::dispatcher const& workers)
{
  return {streamkit_test::settled_free_memory(), streamkit::pinned_bytes_in_use(), workers.workspace_allocations()};
}

/// Index of the nearest reference by the double-precision haversine distance.
std::size_t nearest_on_cpu(float lat, float lon, std::vector<float> const& ref_lat, std::vector<float> const& ref_lon)
{
  std::size_t best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (std::size_t j = 0; j < ref_lat.size(); ++j) {
    double const d = streamkit::haversine(double(lat), double(lon), double(ref_lat[j]), double(ref_lon[j]));
    if (d < best_distance) {
      best_distance = d;
      best = j;
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv)
{
  if (streamkit::device_count() == 0) {
    std::printf("streamkit_soak: no CUDA device is visible; skipped\n");
    return 77;
  }
  long const iterations = argc > 1 ? std::stol(argv[1]) : 10000;
  long const warm_up = 10;
  std::mt19937_64 rng(12345);
  std::uniform_real_distribution<float> unit(0.0F, 1.0F);
  auto const random_points = [&](std::vector<float>& lat, std::vector<float>& lon, std::size_t count) {
    lat.resize(count);
    lon.resize(count);
    for (std::size_t i = 0; i < count; ++i) {
      lat[i] = std::asin(2.0F * unit(rng) - 1.0F);
      lon[i] = 6.2831853F * unit(rng) - 3.1415926F;
    }
  };

  streamkit::dispatcher workers({{0, 0}, 2});
  streamkit::stream const s(0);
  constexpr std::size_t rows = 64, cols = 37, n = 3000, m = 257;
  std::vector<float> matrix(rows * cols), scaled(rows * cols);
  streamkit::device_buffer<float> d_matrix(rows * cols, s), d_scaled(rows * cols, s);
  std::vector<float> obs_lat, obs_lon, ref_lat, ref_lon;
  std::vector<std::int32_t> index(n);
  std::vector<float> distance(n);
  streamkit::device_buffer<float> d_obs_lat(n, s), d_obs_lon(n, s), d_ref_lat(m, s), d_ref_lon(m, s);
  streamkit::device_buffer<std::int32_t> d_index(n, s);
  std::unique_ptr<streamkit::brute_force_index<float>> prepared;

  memory_use after_warm_up{};
  long failures = 0;
  auto const begin = std::chrono::steady_clock::now();
  for (long iteration = 0; iteration < iterations; ++iteration) {
    if (iteration == warm_up) { after_warm_up = measure(workers); }
    for (auto& x : matrix) { x = 100.0F * unit(rng) - 50.0F; }
    random_points(obs_lat, obs_lon, n);
    random_points(ref_lat, ref_lon, m);

    switch (iteration % 3) {
      case 0: {  // device-resident min-max, then dispatched host-to-host min-max: the same answer
        d_matrix.copy_from_host_async(cuda::std::span<float const>(matrix.data(), matrix.size()), s);
        auto const in = streamkit::matrix_ref<float const>::dense(d_matrix.data(), rows, cols);
        streamkit::minmax_normalize_async(in, streamkit::matrix_ref<float>::dense(d_scaled.data(), rows, cols), {}, s);
        std::vector<float> on_device(rows * cols);
        d_scaled.copy_to_host_async(cuda::std::span<float>(on_device.data(), on_device.size()), s);
        s.sync();
        std::fill(scaled.begin(), scaled.end(), std::nanf(""));
        streamkit::dispatch_minmax_normalize<float>(workers, {streamkit::matrix_ref<float const>::dense(matrix.data(), rows, cols)},
                                                    {streamkit::matrix_ref<float>::dense(scaled.data(), rows, cols)});
        failures += on_device != scaled ? 1 : 0;
        failures += *std::min_element(scaled.begin(), scaled.end()) != 0.0F || *std::max_element(scaled.begin(), scaled.end()) != 1.0F;
        break;
      }
      case 1: {  // a reused index on a stream, updated with new references
        d_obs_lat.copy_from_host_async(cuda::std::span<float const>(obs_lat.data(), n), s);
        d_obs_lon.copy_from_host_async(cuda::std::span<float const>(obs_lon.data(), n), s);
        d_ref_lat.copy_from_host_async(cuda::std::span<float const>(ref_lat.data(), m), s);
        d_ref_lon.copy_from_host_async(cuda::std::span<float const>(ref_lon.data(), m), s);
        auto const refs = streamkit::points_ref<float>::separate(d_ref_lat.data(), d_ref_lon.data(), m);
        if (!prepared) {
          prepared = std::make_unique<streamkit::brute_force_index<float>>(refs, streamkit::nearest_options{}, s);
        } else {
          prepared->update(refs, s);
        }
        std::fill(index.begin(), index.end(), -1);
        d_index.copy_from_host_async(cuda::std::span<std::int32_t const>(index.data(), n), s);
        prepared->query_async(streamkit::points_ref<float>::separate(d_obs_lat.data(), d_obs_lon.data(), n),
                              streamkit::neighbors_ref<std::int32_t, float>::dense(d_index.data(), nullptr, n), s);
        d_index.copy_to_host_async(cuda::std::span<std::int32_t>(index.data(), n), s);
        s.sync();
        break;
      }
      default: {  // dispatched over the workers, host in and out
        std::fill(index.begin(), index.end(), -1);
        streamkit::dispatch_nearest_neighbor(workers, streamkit::points_ref<float>::separate(obs_lat.data(), obs_lon.data(), n),
                                             streamkit::points_ref<float>::separate(ref_lat.data(), ref_lon.data(), m),
                                             streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), distance.data(), n), {}, 700);
        break;
      }
    }
    if (iteration % 3 != 0) {  // a sample of the answers against the CPU, within float rounding of a tie
      for (std::size_t i = iteration % 97; i < n; i += 97) {
        auto const want = nearest_on_cpu(obs_lat[i], obs_lon[i], ref_lat, ref_lon);
        auto const got = static_cast<std::size_t>(index[i]);
        if (got >= m) {
          ++failures;
          continue;
        }
        double const d_want = streamkit::haversine(double(obs_lat[i]), double(obs_lon[i]), double(ref_lat[want]), double(ref_lon[want]));
        double const d_got = streamkit::haversine(double(obs_lat[i]), double(obs_lon[i]), double(ref_lat[got]), double(ref_lon[got]));
        failures += d_got > d_want + 2e-7 ? 1 : 0;
      }
    }
  }
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  s.sync();
  memory_use const at_end = measure(workers);
  bool const flat = iterations <= warm_up || (at_end.device_free == after_warm_up.device_free && at_end.pinned == after_warm_up.pinned &&
                                              at_end.workspace_allocations == after_warm_up.workspace_allocations);
  std::printf("soak: %ld iterations in %.1f s on %s, %ld wrong results\n", iterations, seconds, streamkit::device(0).name().c_str(),
              failures);
  std::printf("device free memory after warm-up %zu B, at end %zu B\n", after_warm_up.device_free, at_end.device_free);
  std::printf("pinned bytes in use after warm-up %zu, at end %zu; workspace allocations %zu, at end %zu\n", after_warm_up.pinned,
              at_end.pinned, after_warm_up.workspace_allocations, at_end.workspace_allocations);
  std::printf("memory %s\n", flat ? "flat" : "NOT flat");
  return failures == 0 && flat ? 0 : 1;
}
