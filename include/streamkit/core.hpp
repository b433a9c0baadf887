#pragma once
/// @file core.hpp
/// streamkit's core: errors, devices, streams, events, timers, graphs and the matrix view (plain C++).

#include <streamkit/core/config.hpp>
#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>
#include <streamkit/core/event.hpp>
#include <streamkit/core/graph.hpp>
#include <streamkit/core/matrix.hpp>
#include <streamkit/core/stream.hpp>
#include <streamkit/core/stream_ref.hpp>
#include <streamkit/core/timer.hpp>
