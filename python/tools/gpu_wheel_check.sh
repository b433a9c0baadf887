#!/usr/bin/env bash
# The binary wheel on a GPU machine, as docs/results/h200_wheel_check.txt was made (issue 30): (1) the
# wheel installed with pip --no-deps into a virtual environment whose PATH holds no CUDA toolkit
# (nvcc, cmake), its full pytest there, with RMM's Python package from wheels; (2) the RMM C++ test
# (tests/rmm) built elsewhere; (3) benchmarks/python_peers.py --methods streamkit from the wheel,
# from a source build made on the machine, and from the wheel again.
#
# Run from the repository root (for benchmarks/), as `bash KIT/gpu_wheel_check.sh` with OUT set to a
# folder for the logs, where KIT is a folder holding this script and compare_peers.py
# and:
#   wheel/streamkit-*.whl          python/build_wheel.sh's output for the machine's Python
#   whl/*.whl                      rmm-cu13, librmm-cu13 25.10.0 and rapids-logger 0.1.x wheels
#   bin/streamkit_rmm_tests        tests/rmm built against that librmm
#   src/                           CMakeLists.txt, cmake/, include/ and python/ of the same commit
#   python/tests, python/tools     the package's tests and tools
# The machine's python3 must have torch, CuPy, NumPy, scikit-learn, pytest, scikit-build-core and
# nanobind (the source build uses nvcc from /usr/local/cuda/bin).
set -u
C=$(cd "$(dirname "$0")" && pwd)
REPO=$(pwd)
T0=$SECONDS
say() { echo "[$((SECONDS - T0))s] $*" | tee -a "$OUT/summary.txt"; }
PY=$(command -v python3)
TORCH_SITE=$($PY -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
LDP=$(echo "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v '/usr/local/cuda' | paste -sd: -)
{ nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv; ldd --version | head -1; $PY --version
  echo "torch env: $TORCH_SITE"; echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-} -> $LDP"; } > "$OUT/setup.log" 2>&1
say "$(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader)"

# The source build for the comparison, in the background (the toolkit on its PATH only).
( export PATH=/usr/local/cuda/bin:$PATH CMAKE_BUILD_PARALLEL_LEVEL=12
  time $PY -m pip install --no-deps --no-build-isolation --target /tmp/srcsite "$C/src/python" -C build-dir=/tmp/srcbuild ) \
  > /tmp/srcbuild.log 2>&1 &
BUILD=$!

# The environment without the toolkit.
$PY -m venv --without-pip /tmp/wv >> "$OUT/setup.log" 2>&1
WSITE=$(/tmp/wv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "import site; site.addsitedir('$TORCH_SITE')" > "$WSITE/zz_torch_env.pth"
NOTK=(env PATH=/tmp/wv/bin:/usr/bin:/bin LD_LIBRARY_PATH="$LDP" PYTHONUNBUFFERED=1 STREAMKIT_EXPECT_ARCHITECTURES="75-real;80-real;86-real;89-real;90-real;100-real;120")
"${NOTK[@]}" /tmp/wv/bin/python -m pip install --no-deps --no-index --ignore-installed "$C"/wheel/streamkit-*.whl "$C"/whl/*.whl >> "$OUT/setup.log" 2>&1 \
  || say "pip install FAILED"
{ echo "which nvcc: $("${NOTK[@]}" sh -c 'command -v nvcc || echo none')"; echo "which cmake: $("${NOTK[@]}" sh -c 'command -v cmake || echo none')"
  ldd "$WSITE"/streamkit/_streamkit*.so
  "${NOTK[@]}" /tmp/wv/bin/python -c 'import streamkit, rmm; print(streamkit.__file__, rmm.__version__); print(streamkit.build_info())'; } >> "$OUT/setup.log" 2>&1
say "nvcc on the test PATH: $("${NOTK[@]}" sh -c 'command -v nvcc || echo none'); libcudart needed: $(ldd "$WSITE"/streamkit/_streamkit*.so | grep -c cudart)"

cd "$C"
timeout 240 "${NOTK[@]}" /tmp/wv/bin/python -m pytest -rs -p no:cacheprovider python/tests > "$OUT/pytest.log" 2>&1
say "pytest (wheel, no toolkit) rc=$?: $(tail -1 "$OUT/pytest.log")"

timeout 90 env LD_LIBRARY_PATH="$WSITE/librmm/lib64:$WSITE/rapids_logger/lib64:$LDP" "$C/bin/streamkit_rmm_tests" > "$OUT/rmm_cpp.log" 2>&1
say "RMM C++ test rc=$?: $(grep -E '^\[  (PASSED|FAILED)' "$OUT/rmm_cpp.log" | tr '\n' ' ')"

wait $BUILD; say "source build rc=$?: $(grep real /tmp/srcbuild.log)"
cd "$REPO"
# Wheel, source build, wheel again (the first two runs put one or the other first).
timeout 150 "${NOTK[@]}" /tmp/wv/bin/python benchmarks/python_peers.py --methods streamkit --out "$OUT/peers_wheel.json" > "$OUT/peers.log" 2>&1
say "peers (wheel) rc=$?"
timeout 150 env PYTHONPATH=/tmp/srcsite PYTHONUNBUFFERED=1 $PY benchmarks/python_peers.py --methods streamkit --out "$OUT/peers_source.json" >> "$OUT/peers.log" 2>&1
say "peers (source) rc=$?"
timeout 150 "${NOTK[@]}" /tmp/wv/bin/python benchmarks/python_peers.py --methods streamkit --out "$OUT/peers_wheel2.json" >> "$OUT/peers.log" 2>&1
say "peers (wheel, again) rc=$?"
$PY "$C/compare_peers.py" "$OUT/peers_wheel.json" "$OUT/peers_source.json" 2>&1 | tee -a "$OUT/summary.txt"
$PY "$C/compare_peers.py" "$OUT/peers_wheel2.json" "$OUT/peers_source.json" 2>&1 | tee -a "$OUT/summary.txt"
