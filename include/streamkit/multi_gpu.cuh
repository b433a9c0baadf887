#pragma once
/// @file multi_gpu.cuh
/// streamkit's multi-GPU part: the dispatcher and its built-in workloads (needs nvcc).

#include <streamkit/multi_gpu/dispatcher.hpp>
#include <streamkit/multi_gpu/minmax_dispatch.cuh>
#include <streamkit/multi_gpu/nearest_neighbor_dispatch.cuh>
