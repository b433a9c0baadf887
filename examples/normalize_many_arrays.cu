// Normalise many arrays: 18 arrays of 60 x 98450 doubles, column min-max, host to host, one stream
// per array, spread over every GPU by the dispatcher; verified against a CPU reference.
#include "common/example_support.hpp"

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/memory/pinned_buffer.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main()
{
  streamkit_examples::require_gpu("normalize_many_arrays");
  constexpr std::size_t arrays = 18, rows = 60, cols = 98450, count = rows * cols;
  std::vector<streamkit::pinned_buffer<double>> in, out;
  std::vector<streamkit::matrix_ref<double const>> inputs;
  std::vector<streamkit::matrix_ref<double>> outputs;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(10.0, 4.0);
  for (std::size_t k = 0; k < arrays; ++k) {
    in.emplace_back(count);
    out.emplace_back(count);
    for (auto& x : in.back()) { x = normal(rng); }
    inputs.push_back(streamkit::matrix_ref<double const>::dense(in.back().data(), rows, cols));
    outputs.push_back(streamkit::matrix_ref<double>::dense(out.back().data(), rows, cols));
  }
  streamkit::dispatcher workers;  // every visible GPU, streams per GPU from its copy engines
  streamkit::dispatch_minmax_normalize(workers, inputs, outputs);  // warm-up: allocates the buffers once
  auto const begin = std::chrono::steady_clock::now();
  streamkit::dispatch_minmax_normalize(workers, inputs, outputs);
  double const ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();

  double worst = 0.0;
  for (std::size_t k = 0; k < arrays; ++k) {
    for (std::size_t j = 0; j < cols; ++j) {
      double mn = in[k][j], mx = in[k][j];
      for (std::size_t i = 1; i < rows; ++i) {
        mn = std::min(mn, in[k][i * cols + j]);
        mx = std::max(mx, in[k][i * cols + j]);
      }
      for (std::size_t i = 0; i < rows; ++i) {
        double const want = (in[k][i * cols + j] - mn) / (mx - mn);
        worst = std::max(worst, std::abs(out[k][i * cols + j] - want));
      }
    }
  }
  double const gb = 2.0 * arrays * count * sizeof(double) / 1e9;
  std::printf("%zu arrays of %zu x %zu doubles, host to host from pinned memory on %zu GPU(s) (%s), %zu streams in all\n",
              arrays, rows, cols, workers.devices().size(), streamkit::device(0).name().c_str(), workers.worker_count());
  std::printf("time %.2f ms, %.1f GB/s (bytes in + out)\n", ms, gb / ms * 1e3);
  std::printf("largest difference from the CPU reference: %.2e\n", worst);
  return worst < 1e-12 ? 0 : 1;
}
