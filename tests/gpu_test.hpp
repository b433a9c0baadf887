#pragma once
// Helpers shared by streamkit's tests.

#include <streamkit/core/device.hpp>

#include <gtest/gtest.h>

/// Skips the current test, with the reason, when no CUDA device is visible (as in CI).
#define STREAMKIT_REQUIRE_GPU()                                                                   \
  do {                                                                                            \
    if (::streamkit::device_count() == 0) {                                                       \
      GTEST_SKIP() << "no CUDA device visible (streamkit::device_count() == 0): GPU test skipped"; \
    }                                                                                             \
  } while (0)

/// Expects `statement` to throw `exception_type` whose what() contains `fragment`.
#define STREAMKIT_EXPECT_THROW_WITH(statement, exception_type, fragment)                       \
  do {                                                                                         \
    try {                                                                                      \
      statement;                                                                               \
      ADD_FAILURE() << "expected " #exception_type " from: " #statement;                       \
    } catch (exception_type const& caught) {                                                   \
      EXPECT_NE(std::string(caught.what()).find(fragment), std::string::npos)                  \
        << "message was: " << caught.what();                                                   \
    }                                                                                          \
  } while (0)
