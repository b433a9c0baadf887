#pragma once
/// @file spatial.cuh
/// streamkit's spatial part: great-circle distance, points and k-nearest-neighbour search (two engines and a front end) (needs nvcc).

#include <streamkit/spatial/brute_force_index.cuh>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/nearest_options.hpp>
#include <streamkit/spatial/nearest_queries.cuh>
#include <streamkit/spatial/points.hpp>
#include <streamkit/spatial/radius.hpp>
#include <streamkit/spatial/radius_queries.cuh>
#include <streamkit/spatial/tree_index.cuh>
