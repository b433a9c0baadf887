#pragma once
/// @file config.hpp
/// Macros shared by streamkit's headers.

/// Marks a function callable from host and device code when compiled by nvcc, host-only otherwise.
#if defined(__CUDACC__)
#define STREAMKIT_HOST_DEVICE __host__ __device__
#else
#define STREAMKIT_HOST_DEVICE
#endif
