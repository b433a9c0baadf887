#pragma once
/// @file streamkit.hpp
/// All of streamkit's host-side RAII layer (usable from plain C++ translation units).

#include <streamkit/device.hpp>
#include <streamkit/device_buffer.hpp>
#include <streamkit/error.hpp>
#include <streamkit/event.hpp>
#include <streamkit/graph.hpp>
#include <streamkit/pinned_buffer.hpp>
#include <streamkit/stream.hpp>
#include <streamkit/stream_ref.hpp>
#include <streamkit/timer.hpp>
