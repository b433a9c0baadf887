#pragma once
/// @file spatial.cuh
/// streamkit's spatial part: great-circle distance, points and nearest-neighbour search (needs nvcc).

#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/nearest_neighbor.cuh>
#include <streamkit/spatial/points.hpp>
