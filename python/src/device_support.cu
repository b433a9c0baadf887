// The check at the first use of each device: the build's architectures against the device's
// compute capability (architectures.hpp), then the driver's own answer for a probe kernel.

#include "device_support.hpp"

#include <streamkit_build_info.hpp>

#include <streamkit/core/device.hpp>
#include <streamkit/core/error.hpp>

#include <cuda_runtime_api.h>

#include <sstream>

namespace streamkit_python {

namespace {

/// Compiled for the same architectures as every other kernel of the extension.
__global__ void probe() {}

std::vector<std::string> split(char const* list)
{
  std::vector<std::string> items;
  std::stringstream stream(list);
  for (std::string item; std::getline(stream, item, ';');) {
    if (!item.empty()) { items.push_back(item); }
  }
  return items;
}

}  // namespace

build_architectures const& this_build()
{
  static build_architectures const architectures{split(build::sass), split(build::ptx)};
  return architectures;
}

std::string require_supported(int device, build_architectures const& build)
{
  streamkit::device_guard const guard(device);
  cudaDeviceProp properties{};
  STREAMKIT_CUDA_TRY(cudaGetDeviceProperties(&properties, device));
  std::string const label = "CUDA device " + std::to_string(device) + " (" + properties.name + ")";
  auto const how = how_it_runs(properties.major, properties.minor, build);
  if (!how) { throw unsupported_device(unsupported_message(label, properties.major, properties.minor, build)); }
  if (&build != &this_build()) { return *how; }
  cudaFuncAttributes attributes{};
  cudaError_t const loaded = cudaFuncGetAttributes(&attributes, probe);
  if (loaded == cudaErrorNoKernelImageForDevice || loaded == cudaErrorInvalidDeviceFunction) {
    static_cast<void>(cudaGetLastError());
    throw unsupported_device(unsupported_message(label, properties.major, properties.minor, build) +
                             " (The driver found no kernel image for it either: " + cudaGetErrorName(loaded) + ".)");
  }
  if (loaded == cudaErrorUnsupportedPtxVersion) {
    static_cast<void>(cudaGetLastError());
    throw unsupported_device("streamkit cannot run on " + label + ": it needs this build's PTX (" + *how +
                             "), which is newer than the NVIDIA driver can compile (" + cudaGetErrorName(loaded) +
                             "). Update the driver, or install a build with machine code for compute capability " +
                             std::to_string(properties.major) + "." + std::to_string(properties.minor) + ".");
  }
  STREAMKIT_CUDA_TRY(loaded);
  return *how + " (the driver loaded sm_" + std::to_string(attributes.binaryVersion) + " code compiled from compute_" +
         std::to_string(attributes.ptxVersion) + ")";
}

}  // namespace streamkit_python
