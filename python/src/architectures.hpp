#pragma once
// Which GPUs a build of the extension runs on, decided from a device's compute capability and the
// architectures the build carries (machine code, SASS, and PTX), with no CUDA call: the tests check
// it on machines without a GPU (python/tests/test_build_info.py). device_support.cu applies it at
// the first use of each device.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace streamkit_python {

/// An architecture as CMake's CUDA_ARCHITECTURES spells it without its -real/-virtual suffix:
/// "75", "120", "90a" (arch-specific: that exact chip only), "100f" (family-specific).
struct architecture {
  int major = 0;
  int minor = 0;
  char variant = 0;  // 0, 'a' or 'f'

  /// "75" -> 7.5, "120" -> 12.0, "90a" -> 9.0 'a'; nullopt for anything else.
  static std::optional<architecture> parse(std::string const& text)
  {
    std::size_t digits = 0;
    while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') { ++digits; }
    if (digits < 2 || digits > 3) { return std::nullopt; }
    architecture a;
    a.variant = digits < text.size() ? text[digits] : 0;
    if (digits + (a.variant ? 1 : 0) != text.size() || (a.variant != 0 && a.variant != 'a' && a.variant != 'f')) {
      return std::nullopt;
    }
    int const number = std::stoi(text.substr(0, digits));
    a.major = number / 10;
    a.minor = number % 10;
    return a;
  }

  [[nodiscard]] std::string name() const
  {
    return std::to_string(major * 10 + minor) + (variant ? std::string(1, variant) : std::string());
  }

  /// Machine code for this architecture runs on compute capability major.minor: the same major
  /// revision and no older minor one; arch-specific code ('a') on that exact capability only.
  [[nodiscard]] bool sass_runs_on(int device_major, int device_minor) const noexcept
  {
    if (variant == 'a') { return device_major == major && device_minor == minor; }
    return device_major == major && device_minor >= minor;
  }

  /// PTX for this architecture is compiled by the driver for any newer capability (plain PTX), or,
  /// for arch- and family-specific PTX, only where its machine code would run.
  [[nodiscard]] bool ptx_runs_on(int device_major, int device_minor) const noexcept
  {
    if (variant != 0) { return sass_runs_on(device_major, device_minor); }
    return device_major > major || (device_major == major && device_minor >= minor);
  }
};

/// What a build carries: the architectures with machine code and those with PTX.
struct build_architectures {
  std::vector<std::string> sass;
  std::vector<std::string> ptx;
};

/// "sm_75, sm_80 and sm_90" / "none".
inline std::string list_text(std::vector<std::string> const& names, char const* prefix)
{
  if (names.empty()) { return "none"; }
  std::string text;
  for (std::size_t i = 0; i < names.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + std::string(prefix) + names[i];
  }
  return text;
}

/// How a build runs on compute capability major.minor: "sm_86 machine code", "compute_120 PTX,
/// compiled by the driver", or nullopt when nothing in it runs there. Machine code is preferred, the
/// newest that runs (as the driver picks it).
inline std::optional<std::string> how_it_runs(int major, int minor, build_architectures const& build)
{
  std::optional<architecture> best;
  for (auto const& name : build.sass) {
    auto const a = architecture::parse(name);
    if (a && a->sass_runs_on(major, minor) && (!best || a->minor > best->minor)) { best = a; }
  }
  if (best) { return "sm_" + best->name() + " machine code"; }
  for (auto const& name : build.ptx) {
    auto const a = architecture::parse(name);
    if (a && a->ptx_runs_on(major, minor) && (!best || a->major * 10 + a->minor > best->major * 10 + best->minor)) { best = a; }
  }
  if (best) { return "compute_" + best->name() + " PTX, compiled by the driver at first use"; }
  return std::nullopt;
}

/// Thrown at the first use of a device that the build has neither machine code nor PTX for; the
/// Python module raises it as streamkit.CudaError (cudaErrorNoKernelImageForDevice).
class unsupported_device : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The message of unsupported_device: the device, its compute capability, and the build's
/// architectures (what the driver would otherwise report as a missing kernel image).
inline std::string unsupported_message(std::string const& device, int major, int minor, build_architectures const& build)
{
  std::string const capability = std::to_string(major) + "." + std::to_string(minor);
  std::string text = "streamkit cannot run on " + device + ": its compute capability is " + capability +
                     ", and this build of streamkit carries machine code for " + list_text(build.sass, "sm_") +
                     " and PTX for " + list_text(build.ptx, "compute_") + ", none of which runs on compute capability " +
                     capability + " (streamkit.build_info() lists the build).";
  if (major * 10 + minor < 75) {
    text += " CUDA 13, which streamkit is built with, supports compute capability 7.5 and newer only.";
  } else {
    text += " Install a build for this GPU, or build from source for it: pip install ./python -C "
            "cmake.define.CMAKE_CUDA_ARCHITECTURES=native";
  }
  return text;
}

}  // namespace streamkit_python
