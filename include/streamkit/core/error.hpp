#pragma once
/// @file error.hpp
/// The error model: one exception type for CUDA failures, macros that check CUDA calls and
/// preconditions, and the helper that `noexcept` destructors use to release resources at exit.

#include <cuda_runtime_api.h>

#include <cassert>
#include <new>
#include <stdexcept>
#include <string>

namespace streamkit {

/// Thrown when a CUDA runtime call fails. Carries the error code, its name and text, the call
/// that failed and where it was made.
class cuda_error : public std::runtime_error {
 public:
  /// The failure `error` of `call` (its source text), made at `file`:`line`; the message names all of
  /// them, with the error's name and text.
  cuda_error(cudaError_t error, const char* call, const char* file, int line)
      : std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(error) + " (" +
                           std::to_string(static_cast<int>(error)) + "): " + cudaGetErrorString(error) +
                           "\n  in " + call + "\n  at " + file + ":" + std::to_string(line)),
        error_(error),
        call_(call),
        file_(file),
        line_(line)
  {
  }

  /// The CUDA error code.
  [[nodiscard]] cudaError_t error() const noexcept { return error_; }
  /// The symbolic name of the error, e.g. "cudaErrorMemoryAllocation".
  [[nodiscard]] const char* name() const noexcept { return cudaGetErrorName(error_); }
  /// The runtime's description of the error.
  [[nodiscard]] const char* description() const noexcept { return cudaGetErrorString(error_); }
  /// The source text of the call that failed.
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  /// The source file of the call that failed.
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// The line of the call that failed.
  [[nodiscard]] int line() const noexcept { return line_; }

 private:
  cudaError_t error_;
  std::string call_;
  std::string file_;
  int line_;
};

/// Thrown when memory (device, pinned or from a memory resource) cannot be allocated: a
/// std::bad_alloc, as RMM's, so code that handles allocation failure generically catches it. Carries
/// the CUDA error code (cudaErrorMemoryAllocation when out of memory), the call and where it was made.
class bad_alloc : public std::bad_alloc {
 public:
  /// @param error the code the allocating call returned
  /// @param call its source text
  /// @param file,line where it was made
  bad_alloc(cudaError_t error, const char* call, const char* file, int line)
      : message_(std::string("allocation failed: ") + cudaGetErrorName(error) + " (" + std::to_string(static_cast<int>(error)) +
                 "): " + cudaGetErrorString(error) + "\n  in " + call + "\n  at " + file + ":" + std::to_string(line)),
        error_(error),
        call_(call)
  {
  }
  /// The message: error name, code, text, call and place.
  [[nodiscard]] const char* what() const noexcept override { return message_.c_str(); }
  /// The CUDA error code of the failed allocation.
  [[nodiscard]] cudaError_t error() const noexcept { return error_; }
  /// The source text of the allocating call.
  [[nodiscard]] const std::string& call() const noexcept { return call_; }

 private:
  std::string message_;
  cudaError_t error_;
  std::string call_;
};

namespace detail {

/// Throws bad_alloc for a failed allocating call, after clearing the runtime's non-sticky error state.
[[noreturn]] inline void throw_bad_alloc(cudaError_t error, const char* call, const char* file, int line)
{
  static_cast<void>(cudaGetLastError());
  throw ::streamkit::bad_alloc(error, call, file, line);
}

/// True for the errors a release may meet while the process shuts down (static destruction after
/// the runtime or the context is gone).
[[nodiscard]] constexpr bool is_shutdown_error(cudaError_t error) noexcept
{
  return error == cudaErrorCudartUnloading || error == cudaErrorContextIsDestroyed;
}

/// Throws cuda_error for a failed call. Clears the runtime's non-sticky error state first, so a
/// later cudaPeekAtLastError does not report this failure a second time.
[[noreturn]] inline void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line)
{
  static_cast<void>(cudaGetLastError());
  throw cuda_error(error, call, file, line);
}

/// For `noexcept` destructors: a release that fails because the runtime is shutting down (static
/// destruction order at program exit) is expected and ignored. Any other failure is a bug (a double
/// free, a handle of a destroyed context) or follows a sticky error of the device: debug builds
/// assert, release builds clear it so it does not surface in an unrelated later call.
inline void ignore_release_error(cudaError_t error) noexcept
{
  if (error != cudaSuccess) {
    static_cast<void>(cudaGetLastError());
    assert(is_shutdown_error(error) && "streamkit: releasing a CUDA resource failed");
  }
}

}  // namespace detail
}  // namespace streamkit

/// Evaluates a CUDA runtime call and, unless it returns cudaSuccess, calls
/// `thrower(error, "call", __FILE__, __LINE__)` (which throws). The call's text is taken before
/// macro expansion, by the public macros below.
#define STREAMKIT_DETAIL_CHECK(call, text, thrower)                                           \
  do {                                                                                        \
    cudaError_t const streamkit_status_ = (call);                                             \
    if (streamkit_status_ != cudaSuccess) { thrower(streamkit_status_, text, __FILE__, __LINE__); } \
  } while (0)

/// Evaluates a CUDA runtime call and throws streamkit::cuda_error if it does not return cudaSuccess.
#define STREAMKIT_CUDA_TRY(call) STREAMKIT_DETAIL_CHECK(call, #call, ::streamkit::detail::throw_cuda_error)

/// Evaluates an allocating CUDA call and throws streamkit::bad_alloc if it does not return cudaSuccess.
#define STREAMKIT_CUDA_TRY_ALLOC(call) STREAMKIT_DETAIL_CHECK(call, #call, ::streamkit::detail::throw_bad_alloc)

/// Checks the launch that was just made (bad configuration, missing kernel image, ...).
#define STREAMKIT_CHECK_LAUNCH() STREAMKIT_CUDA_TRY(cudaPeekAtLastError())

/// Throws `exception_type(message)` unless `condition` holds. `message` is only evaluated on failure,
/// so it may build a string that names the argument and its bad value.
#define STREAMKIT_EXPECTS(condition, exception_type, message)                                 \
  do {                                                                                        \
    if (!(condition)) { throw exception_type(std::string(message)); }                         \
  } while (0)
