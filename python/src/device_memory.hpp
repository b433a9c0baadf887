#pragma once
// What the package does at the first use of each device, before any of its work runs there.

namespace streamkit_python {

/// Once per device (later calls return at once): (1) checks that this build runs on it
/// (device_support.hpp): a device it has neither machine code nor PTX for raises unsupported_device,
/// which names the device's compute capability and the build's architectures, before any kernel
/// could fail with a bare missing-image error; (2) keeps the memory that streamkit's default
/// resource (the device's current cudaMallocAsync pool) frees, instead of handing it back to the
/// driver at every synchronisation (a release threshold of 0, CUDA's default), as CuPy's and
/// PyTorch's caching allocators keep theirs: a one-shot search allocates its scratch in every call,
/// and remapping it each time cost 7 % of a 2^24 × 2^14 search on the H100. Raises only a threshold
/// still at 0, so a caller's own setting stays.
void prepare_device(int device);

}  // namespace streamkit_python
