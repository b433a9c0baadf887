#pragma once
/// @file memory.hpp
/// streamkit's memory: memory resources, stream-ordered device buffers, pinned host buffers and host registration (plain C++).

#include <streamkit/memory/device_buffer.hpp>
#include <streamkit/memory/resource.hpp>
#include <streamkit/memory/pinned_buffer.hpp>
