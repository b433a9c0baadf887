#pragma once
/// @file preprocessing.cuh
/// streamkit's preprocessing: column min-max scaling on the device (needs nvcc).

#include <streamkit/preprocessing/minmax.cuh>
