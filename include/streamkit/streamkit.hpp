#pragma once
/// @file streamkit.hpp
/// Every host-only header of streamkit (usable from plain C++ translation units): core, memory, the
/// dispatcher, the haversine distance and the point views. The kernels' headers need nvcc: preprocessing.cuh,
/// spatial.cuh, multi_gpu.cuh.

#include <streamkit/core.hpp>
#include <streamkit/memory.hpp>
#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/spatial/haversine.hpp>
#include <streamkit/spatial/points.hpp>
