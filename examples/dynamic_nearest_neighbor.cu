// Dynamic nearest neighbour: every time step the reference points move and new observations arrive;
// the exact nearest reference of each observation is recomputed (update + query on one stream).
// Prints per-step time and pairs/s, and checks a sample of each step against the CPU.
// Runs on device 0; spreading steps over several GPUs waits for the multi-GPU dispatcher.
#include "common/example_support.hpp"

#include <streamkit/device_buffer.hpp>
#include <streamkit/nearest_neighbor.cuh>
#include <streamkit/stream.hpp>
#include <streamkit/timer.hpp>

#include <cstdio>
#include <limits>
#include <random>
#include <vector>

int main()
{
  streamkit_examples::require_gpu("dynamic_nearest_neighbor");
  constexpr std::size_t observations = std::size_t{1} << 22, references = std::size_t{1} << 14, steps = 5;
  streamkit::stream const s(0);
  std::mt19937_64 rng(4);
  std::vector<float> ref_lat, ref_lon, obs_lat, obs_lon;
  streamkit_examples::random_points(references, rng, ref_lat, ref_lon);
  streamkit::device_buffer<float> d_ref_lat(references, s), d_ref_lon(references, s), d_obs_lat(observations, s),
    d_obs_lon(observations, s);
  streamkit::device_buffer<std::int32_t> d_index(observations, s);
  std::vector<std::int32_t> index(observations);
  auto const refs = streamkit::points_ref<float>::separate(d_ref_lat.data(), d_ref_lon.data(), references, streamkit::angle_unit::degrees);
  auto const obs = streamkit::points_ref<float>::separate(d_obs_lat.data(), d_obs_lon.data(), observations, streamkit::angle_unit::degrees);
  std::normal_distribution<float> drift(0.0F, 0.05F);
  std::size_t wrong = 0;
  std::unique_ptr<streamkit::haversine_index<float>> prepared;
  for (std::size_t step = 0; step <= steps; ++step) {
    for (std::size_t j = 0; j < references; ++j) {  // references drift and stay on the sphere
      ref_lat[j] = std::clamp(ref_lat[j] + drift(rng), -90.0F, 90.0F);
      ref_lon[j] = std::remainder(ref_lon[j] + drift(rng), 360.0F);
    }
    streamkit_examples::random_points(observations, rng, obs_lat, obs_lon);
    d_ref_lat.copy_from_host_async(cuda::std::span<float const>(ref_lat.data(), references), s);
    d_ref_lon.copy_from_host_async(cuda::std::span<float const>(ref_lon.data(), references), s);
    d_obs_lat.copy_from_host_async(cuda::std::span<float const>(obs_lat.data(), observations), s);
    d_obs_lon.copy_from_host_async(cuda::std::span<float const>(obs_lon.data(), observations), s);
    streamkit::gpu_duration elapsed{};
    {
      streamkit::scoped_timer timer(s, elapsed);
      if (!prepared) {
        prepared = std::make_unique<streamkit::haversine_index<float>>(refs, streamkit::nearest_options{}, s);
      } else {
        prepared->update(refs, s);
      }
      prepared->query_async(obs, streamkit::nearest_result_ref<std::int32_t, float>{d_index.data(), nullptr}, s);
    }
    d_index.copy_to_host_async(cuda::std::span<std::int32_t>(index.data(), observations), s);
    s.sync();
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
      std::printf("step %zu: %.3f ms (update + search), %.2f T pairs/s\n", step, elapsed.count(),
                  static_cast<double>(observations) * references / (elapsed.count() * 1e-3) / 1e12);
    }
  }
  std::printf("%zu observations x %zu references per step on %s; %zu sampled answers wrong\n", observations, references,
              streamkit::device(0).name().c_str(), wrong);
  return wrong == 0 ? 0 : 1;
}
