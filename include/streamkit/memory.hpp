#pragma once
/// @file memory.hpp
/// streamkit's memory: stream-ordered device buffers, pinned host buffers and host registration (plain C++).

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
