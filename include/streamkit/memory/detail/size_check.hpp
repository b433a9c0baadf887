#pragma once

#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>

namespace streamkit::detail {

/// count * sizeof(T), or std::invalid_argument naming `argument` if that overflows.
template <class T>
[[nodiscard]] std::size_t checked_bytes(std::size_t count, char const* argument)
{
  if (count > std::numeric_limits<std::size_t>::max() / sizeof(T)) {
    throw std::invalid_argument(std::string(argument) + ": " + std::to_string(count) + " elements of " +
                                std::to_string(sizeof(T)) + " bytes overflow the address space");
  }
  return count * sizeof(T);
}

}  // namespace streamkit::detail
