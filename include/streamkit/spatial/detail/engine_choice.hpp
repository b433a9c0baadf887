#pragma once
// The front end's cost model: which engine answers a search of n observations × m references with k
// neighbours faster. Plain C++ (no CUDA call), so that the choice for any shape can be checked on a
// machine without a GPU. The constants come from build + query times of both engines measured on an H100
// (bench_nn_files --uniform N M --k K; docs/results/h100_engine_choice.txt).

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

/// Predicted milliseconds of a brute-force search (preparation included): pairs at the measured rate
/// of each kernel (k = 1 fast 4.1e9 pairs/ms, exact 2.7e9; the k-nearest kernel 6e8 up to K = 16 and
/// 1e8 at K = 32, whose list fills the registers).
[[nodiscard]] inline double brute_force_cost_ms(std::size_t n, std::size_t m, std::size_t k, nn_precision precision) noexcept
{
  double const pairs = static_cast<double>(n) * static_cast<double>(m);
  double pairs_per_ms = precision == nn_precision::exact ? 2.7e9 : 4.1e9;
  if (k > 16) {
    pairs_per_ms = 1.0e8;
  } else if (k > 1) {
    pairs_per_ms = 6.0e8;
  }
  return 0.01 + pairs / pairs_per_ms;
}

/// Predicted milliseconds of a tree build over m references and a query of n observations: the build
/// (a floor of launches and the sort, then linear in m), the latency of one walk down a tree of
/// log2(m / 32) levels (in leaves of 32: the fit was made with them) (what a query of few observations costs), and a cost per observation that
/// grows with the tree as it outgrows the caches and with k (fit to uniform points, 2^10 ≤ n ≤ 2^24,
/// 2^12 ≤ m ≤ 2^20, k = 1 and 16).
[[nodiscard]] inline double tree_cost_ms(std::size_t n, std::size_t m, std::size_t k) noexcept
{
  double const levels = std::log2(std::max(static_cast<double>(m) / 32.0, 1.0));
  double const extra = static_cast<double>(k) - 1.0;
  double const build = 0.10 + 1.7e-7 * static_cast<double>(m);
  double const latency = std::max(0.05, 0.1 + 0.08 * (levels - 7.0)) * (1.0 + 0.075 * extra);
  double const per_observation = 3e-7 * std::pow(static_cast<double>(m) / 16384.0, 0.4) * (1.0 + 0.53 * extra);
  return build + latency + static_cast<double>(n) * per_observation;
}

/// The engine with the lower predicted cost.
[[nodiscard]] inline search_engine choose_engine(std::size_t n, std::size_t m, std::size_t k, nn_precision precision) noexcept
{
  return tree_cost_ms(n, m, k) < brute_force_cost_ms(n, m, k, precision) ? search_engine::tree : search_engine::brute_force;
}

}  // namespace detail
}  // namespace streamkit
