#pragma once
// The front end's cost model: which engine answers a search of n observations × m references with k
// neighbours faster. The costs are measured ones (detail/engine_costs.hpp, written by
// benchmarks/engine_table.py from a sweep of both engines on an H100), interpolated; plain C++ (no CUDA
// call), so that the choice for any shape can be checked on a machine without a GPU.

#include <streamkit/spatial/detail/engine_costs.hpp>
#include <streamkit/spatial/nearest_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace streamkit {

/// The engines behind the front end (nearest_index, nearest_neighbor).
enum class search_engine {
  brute_force,  ///< brute_force_index: every pair
  tree,         ///< tree_index: a spatial index
};

namespace detail {

/// Predicted log(milliseconds) of one engine's build + query from its table: linear interpolation of
/// the log-times in log2 n, log2 m and log4 k (k = 1, 4, 16 measured; 32 extrapolated from 4 and 16).
/// Past the largest measured n or m, the edge value grows as the engine's time does there: the brute
/// force's with the pairs, the tree's with n and with the square root of m. Below the smallest, the
/// edge value (launch latency dominates both).
[[nodiscard]] inline double predicted_log_ms(float const (&table)[cost_table_ks][cost_table_ns][cost_table_ms], std::size_t n,
                                             std::size_t m, std::size_t k, bool pairs_scaling) noexcept
{
  double const x = std::log2(static_cast<double>(std::max<std::size_t>(n, 1))) - cost_table_first_log2_n;
  double const y = std::log2(static_cast<double>(std::max<std::size_t>(m, 1))) - cost_table_first_log2_m;
  double const z = std::log2(static_cast<double>(std::max<std::size_t>(k, 1))) / 2.0;
  auto const cell = [](double at, int count, int& low) {
    double const clamped = std::clamp(at, 0.0, static_cast<double>(count - 1));
    low = std::min(static_cast<int>(clamped), count - 2);
    return clamped - low;
  };
  int i = 0, j = 0;
  double const fx = cell(x, cost_table_ns, i);
  double const fy = cell(y, cost_table_ms, j);
  int const l = std::min(static_cast<int>(std::max(z, 0.0)), cost_table_ks - 2);
  double const fz = std::max(z, 0.0) - l;  // past 1 beyond k = 16
  double value = 0.0;
  for (int a = 0; a < 2; ++a) {
    for (int b = 0; b < 2; ++b) {
      for (int c = 0; c < 2; ++c) {
        double const weight = (a ? fz : 1.0 - fz) * (b ? fx : 1.0 - fx) * (c ? fy : 1.0 - fy);
        value += weight * std::log(static_cast<double>(table[l + a][i + b][j + c]));
      }
    }
  }
  double const excess_n = std::max(x - (cost_table_ns - 1), 0.0);
  double const excess_m = std::max(y - (cost_table_ms - 1), 0.0);
  return value + (excess_n + (pairs_scaling ? 1.0 : 0.5) * excess_m) * std::log(2.0);
}

/// The engine predicted to be faster. The tables were measured in fast precision; exact k = 1 on the
/// brute force takes about 1.5 times as long (101 against 67 ms for 2^24 × 2^14 on the H100), every
/// other search ranks in float64 in both modes.
[[nodiscard]] inline search_engine choose_engine(std::size_t n, std::size_t m, std::size_t k, nn_precision precision) noexcept
{
  double brute_force = predicted_log_ms(brute_force_cost_table, n, m, k, true);
  if (k == 1 && precision == nn_precision::exact) { brute_force += std::log(1.5); }
  double const tree = predicted_log_ms(tree_cost_table, n, m, k, false);
  return tree < brute_force ? search_engine::tree : search_engine::brute_force;
}

}  // namespace detail
}  // namespace streamkit
