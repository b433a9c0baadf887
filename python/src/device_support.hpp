#pragma once
// Whether this build of the extension runs on a device (plain C++: the binding code calls it too).

#include "architectures.hpp"

#include <string>

namespace streamkit_python {

/// The architectures this build carries (from the generated streamkit_build_info.hpp).
build_architectures const& this_build();

/// How `build` runs on `device` ("sm_90 machine code", ...).
/// @throws unsupported_device when nothing in it runs there, naming the device, its compute
///         capability and the build's architectures. For this build (the default) the driver is
///         also asked, by loading a probe kernel compiled with the same architectures, so a
///         missing kernel image never surfaces later as a bare CUDA error.
std::string require_supported(int device, build_architectures const& build = this_build());

}  // namespace streamkit_python
