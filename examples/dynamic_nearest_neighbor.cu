// Dynamic nearest neighbour: every time step the reference points move and new observations arrive;
// the exact nearest reference of each observation is recomputed on every GPU (the dispatcher spreads
// the observations over all devices; multi_gpu_nearest_neighbor keeps each GPU's references and
// scratch, and update() prepares the moved references on every GPU once per step). Prints
// per-step time (host in, host out) and pairs/s, and checks a sample of each step against the CPU.
#include "common/example_support.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

int main()
{
  streamkit_examples::require_gpu("dynamic_nearest_neighbor");
  constexpr std::size_t observations = std::size_t{1} << 22, references = std::size_t{1} << 14, steps = 5;
  streamkit::dispatcher workers;  // every visible GPU
  std::mt19937_64 rng(4);
  std::vector<float> ref_lat, ref_lon, obs_lat, obs_lon;
  streamkit_examples::random_points(references, rng, ref_lat, ref_lon);
  std::vector<std::int32_t> index(observations);
  std::normal_distribution<float> drift(0.0F, 0.05F);
  std::size_t wrong = 0;
  auto const moving = streamkit::points_ref<float>::separate(ref_lat.data(), ref_lon.data(), references, streamkit::angle_unit::degrees);
  streamkit::multi_gpu_nearest_neighbor<float> search(workers, moving, {});
  for (std::size_t step = 0; step <= steps; ++step) {
    for (std::size_t j = 0; j < references; ++j) {  // references drift and stay on the sphere
      ref_lat[j] = std::clamp(ref_lat[j] + drift(rng), -90.0F, 90.0F);
      ref_lon[j] = std::remainder(ref_lon[j] + drift(rng), 360.0F);
    }
    streamkit_examples::random_points(observations, rng, obs_lat, obs_lon);
    auto const begin = std::chrono::steady_clock::now();
    search.update(moving);
    search.query(streamkit::points_ref<float>::separate(obs_lat.data(), obs_lon.data(), observations, streamkit::angle_unit::degrees),
                 streamkit::neighbors_ref<std::int32_t, float>::dense(index.data(), nullptr, observations));
    double const ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    auto const rad = [](float d) { return streamkit::radians_from_degrees(static_cast<double>(d)); };
    for (std::size_t i = 0; i < observations; i += observations / 200) {
      double best = std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < references; ++j) {
        best = std::min(best, streamkit::haversine(rad(obs_lat[i]), rad(obs_lon[i]), rad(ref_lat[j]), rad(ref_lon[j])));
      }
      auto const j = static_cast<std::size_t>(index[i]);
      if (streamkit::haversine(rad(obs_lat[i]), rad(obs_lon[i]), rad(ref_lat[j]), rad(ref_lon[j])) > best + 2e-7) { ++wrong; }
    }
    if (step > 0) {  // step 0 warms up
      std::printf("step %zu: %.3f ms (upload, prepare, search, download), %.2f T pairs/s\n", step, ms,
                  static_cast<double>(observations) * references / (ms * 1e-3) / 1e12);
    }
  }
  std::printf("%zu observations x %zu references per step on %zu GPU(s) (%s), %zu streams; %zu sampled answers wrong\n",
              observations, references, workers.devices().size(), streamkit::device(0).name().c_str(), workers.worker_count(), wrong);
  return wrong == 0 ? 0 : 1;
}
