#pragma once
// The front end's cost model: which engine answers a search of n observations × m references with k
// neighbours faster. Plain C++ (no CUDA call), so that the choice for any shape can be checked on a
// machine without a GPU. The constants were measured on an H100 (docs/results/h100_engine_choice.txt).

#include <streamkit/spatial/nearest_options.hpp>

#include <cstddef>

namespace streamkit {

/// The engines behind the front end (nearest_index, nearest_neighbor).
enum class search_engine {
  brute_force,  ///< brute_force_index: every pair
  tree,         ///< tree_index: a spatial index
};

namespace detail {

/// Predicted microseconds of a brute-force search (preparation included).
[[nodiscard]] inline double brute_force_cost_us(std::size_t n, std::size_t m, std::size_t k, nn_precision precision) noexcept
{
  double const pairs = static_cast<double>(n) * static_cast<double>(m);
  double pairs_per_us = 4.1e6;  // k = 1, fast
  if (k > 1) {
    pairs_per_us = 1.0e6;
  } else if (precision == nn_precision::exact) {
    pairs_per_us = 2.7e6;
  }
  return 10.0 + pairs / pairs_per_us;
}

/// Predicted microseconds of a tree build over m references and a query of n observations.
[[nodiscard]] inline double tree_cost_us(std::size_t n, std::size_t m, std::size_t k) noexcept
{
  double const build = 40.0 + static_cast<double>(m) * 1.0e-3;
  double const query = 20.0 + static_cast<double>(n) * (2.0e-4 + 2.0e-5 * static_cast<double>(k));
  return build + query;
}

/// The engine with the lower predicted cost.
[[nodiscard]] inline search_engine choose_engine(std::size_t n, std::size_t m, std::size_t k, nn_precision precision) noexcept
{
  return tree_cost_us(n, m, k) < brute_force_cost_us(n, m, k, precision) ? search_engine::tree : search_engine::brute_force;
}

}  // namespace detail
}  // namespace streamkit
