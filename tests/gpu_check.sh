#!/usr/bin/env bash
# One command for a machine with a GPU: build the tests in Release with -lineinfo, run the whole
# suite, then run it under compute-sanitizer memcheck (with leak checking), racecheck, synccheck and
# initcheck, and print one summary line per tool.
#
#   tests/gpu_check.sh [build-dir]        (default build-gpu-check)
#   STREAMKIT_TEST_BINARY=path tests/gpu_check.sh   reuse an already built test binary
#
# Tests that measure overlap, copy speed or how long a call keeps the host are left out under the sanitizers, which serialise
# kernels and slow copies; they run in the plain pass. racecheck, synccheck and initcheck also leave
# out the host-to-host, stress and many-thread tests (thousands of launches of the kernels that the
# other tests cover), which take too long under them; memcheck runs them. Tests that make a CUDA call
# fail on purpose (a bad device id) are expected, so API errors are not reported: a real one throws
# and fails its test.
# The shape fuzz (test_shape_fuzz.cu) runs under every tool with STREAMKIT_SANITIZER_FUZZ_SHAPES random
# shapes per family (default 20) and without its giant shapes; racecheck, which instruments every
# shared-memory access, also without its fixed extreme shapes (the plain pass and the other tools run them).
# STREAMKIT_GPU_CHECK_STEPS picks the steps (default "tests memcheck synccheck initcheck racecheck");
# STREAMKIT_RACECHECK_SHARD=i/n runs racecheck over every n-th test only (see below), and
# STREAMKIT_RACECHECK_TESTS (a gtest filter, default every test) over those it selects.
# STREAMKIT_SANITIZER_JOBS=J (default 1) runs each tool as J processes at once: memcheck, synccheck and
# initcheck as J gtest shards (GTEST_TOTAL_SHARDS), racecheck J tests at a time. The sanitizers' host-side
# work spreads over the cores, and with J > 1 the processes spread over the GPUs in turn, one GPU each
# (CUDA_VISIBLE_DEVICES): STREAMKIT_GPU_CHECK_DEVICES (comma-separated ids), else CUDA_VISIBLE_DEVICES,
# else every GPU nvidia-smi lists. A single process sees every GPU, so the tests that need two run.
# Each memcheck, synccheck and initcheck run is limited to STREAMKIT_SANITIZER_TIMEOUT seconds (default
# 300; the whole suite takes under 60 s per tool on an H100) and a run that goes over is killed and
# reported as a failure naming the test it was in. racecheck runs each test in a process of its own,
# limited to STREAMKIT_RACECHECK_TEST_TIMEOUT seconds (default 120), and runs a test again, twice at
# most, when it was killed: on the H100 (compute-sanitizer 2025.3.1, driver 580.159.04) racecheck now and
# then hangs in multi-stream tests, the host stuck inside the sanitizer's own callback in
# cuStreamSynchronize, while the same tests pass hundreds of times in a row without a sanitizer and
# under the other tools. A hang is not a finding, but it hides the test's result, so every test must
# finish once; the summary names the tests that were run again.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-gpu-check}
logs=${STREAMKIT_LOG_DIR:-$build/gpu-check-logs}
mkdir -p "$logs"

binary=${STREAMKIT_TEST_BINARY:-}
if [ -z "$binary" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo \
    -DSTREAMKIT_BUILD_BENCHMARKS=OFF -DSTREAMKIT_BUILD_EXAMPLES=OFF >"$logs/configure.log" 2>&1 &&
    cmake --build "$build" --target streamkit_tests streamkit_tests_alone_walk >"$logs/build.log" 2>&1 || { echo "build failed: see $logs"; exit 1; }
  binary=$build/tests/streamkit_tests
fi
# The k-nearest and hostile-input tests with every tree search walking alone (tests/CMakeLists.txt), in the plain pass.
alone_binary=${STREAMKIT_ALONE_WALK_BINARY:-$(dirname "$binary")/streamkit_tests_alone_walk}

steps=" ${STREAMKIT_GPU_CHECK_STEPS:-tests memcheck synccheck initcheck racecheck} "
summary=()
status=0
if [[ $steps == *" tests "* ]]; then
  "$binary" >"$logs/tests.log" 2>&1
  status=$?
  summary+=("tests:      $(grep -E '^\[  PASSED  \]' "$logs/tests.log" | head -1) $(grep -E '^\[  FAILED  \] [0-9]+ test' "$logs/tests.log" | head -1) (exit $status)")
  if [ -x "$alone_binary" ]; then
    "$alone_binary" >"$logs/tests_alone_walk.log" 2>&1
    alone_status=$?
    [ $alone_status -ne 0 ] && status=$alone_status
    summary+=("alone walk: $(grep -E '^\[  PASSED  \]' "$logs/tests_alone_walk.log" | head -1) $(grep -E '^\[  FAILED  \] [0-9]+ test' "$logs/tests_alone_walk.log" | head -1) (exit $alone_status)")
  else
    summary+=("alone walk: no binary at $alone_binary (build streamkit_tests_alone_walk, or set STREAMKIT_ALONE_WALK_BINARY)")
  fi
fi

# The cell-list tests (2^21 observations each, ~40 s apiece under a sanitizer) run under the
# sanitizers for two classes: uniform (the lists) and antimeridian (cells without a list: the queue and
# the walk); the plain pass runs every class.
filter='-*Overlap*:*Faster*:*NeverWait*:*WorkerThreads*:*HostileCellLists*32/*_*:*HostileCellLists*32/depots'
slow_filter='-*Overlap*:*Faster*:*NeverWait*:*WorkerThreads*:*HostToHost*:*Stress*:*ManyThreads*:*HostileCellLists*32/*_*:*HostileCellLists*32/depots'
# racecheck also leaves out the brute force's instances of the two largest tests: the many-rows radius
# test (2^17 rows against 20,470 references, five passes) and the deep-tree hostile classes (2^14 rows
# against 2^16 references, 6 searches); each reads ~10^9 and more references through shared-memory tiles
# and none finished in ten minutes under racecheck. The same kernels, with the same tiles and paths,
# run under racecheck in every other radius and hostile-input test.
race_filter="$slow_filter:*RadiusManyRows*/brute_force_index:*HostileDeepTree*_brute_force_index"
sanitizer=${COMPUTE_SANITIZER:-compute-sanitizer}
limit=${STREAMKIT_SANITIZER_TIMEOUT:-300}
test_limit=${STREAMKIT_RACECHECK_TEST_TIMEOUT:-120}
# The shape fuzz under the sanitizers: its extreme shapes and this many random ones, without the
# shapes of 2^31 elements (the plain pass runs them all).
fuzz_shapes=${STREAMKIT_SANITIZER_FUZZ_SHAPES:-20}
failed=$status

jobs=${STREAMKIT_SANITIZER_JOBS:-1}
# The GPUs the sanitizer processes take in turn when there are several (jobs > 1).
if [ -n "${STREAMKIT_GPU_CHECK_DEVICES:-}" ]; then
  IFS=, read -r -a devices <<<"$STREAMKIT_GPU_CHECK_DEVICES"
elif [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
  IFS=, read -r -a devices <<<"$CUDA_VISIBLE_DEVICES"
else
  mapfile -t devices < <(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null)
fi
[ ${#devices[@]} -eq 0 ] && devices=("")
# The device process number `slot` runs on: empty (every GPU the script sees) for one process.
device_for() {
  if [ "$jobs" -le 1 ] || [ -z "${devices[0]}" ]; then echo ""; else echo "${devices[$(($1 % ${#devices[@]}))]}"; fi
}

# Runs the sanitizer `tool` over the tests that `filter` selects, killed after `seconds`, on GPU
# $device (every GPU when empty); sets $code. The environment of the run carries a mark of its own, so
# that a child the killed sanitizer left behind is found by it, never another run's (with
# STREAMKIT_SANITIZER_JOBS > 1 several run at once; a test that measures free device memory reads it too).
device=""
sanitize() {
  local tool=$1 filter=$2 seconds=$3 log=$4 extremes=1
  shift 4
  [ "$tool" = racecheck ] && extremes=0
  local mark="$BASHPID.$RANDOM.$SECONDS"
  local visible=()
  [ -n "$device" ] && visible=(env CUDA_VISIBLE_DEVICES="$device")
  STREAMKIT_SANITIZE_RUN=$mark STREAMKIT_FUZZ_SHAPES=$fuzz_shapes STREAMKIT_FUZZ_GIANT=0 STREAMKIT_FUZZ_EXTREMES=$extremes \
    "${visible[@]}" timeout -s KILL "$seconds" "$sanitizer" --tool "$tool" "$@" --report-api-errors no --error-exitcode 99 "$binary" \
    --gtest_filter="$filter" >"$log" 2>&1
  code=$?
  if [ $code -eq 137 ]; then
    local environ
    for environ in /proc/[0-9]*/environ; do
      if { tr '\0' '\n' <"$environ"; } 2>/dev/null | grep -qx "STREAMKIT_SANITIZE_RUN=$mark"; then
        environ=${environ#/proc/}
        kill -KILL "${environ%/environ}" 2>/dev/null
      fi
    done
  fi
  return 0
}

# sanitize over `jobs` gtest shards at once (logs <log>.<shard> and, for one job, <log>); sets $code
# and $killed (the test each killed shard was in). A test that fails beside the other processes runs
# again alone (log <log>.alone), and only its result alone counts: tests that measure the device's free
# memory, or take much of it, fail beside others for reasons that are not findings; $rerun names them.
sanitize_sharded() {
  local tool=$1 filter=$2 seconds=$3 log=$4
  shift 4
  killed=()
  rerun=""
  if [ "$jobs" -le 1 ]; then
    sanitize "$tool" "$filter" "$seconds" "$log" "$@"
    [ $code -eq 137 ] && killed+=("$(grep -E '^\[ RUN' "$log" | tail -1 | cut -c14-)")
    return 0
  fi
  local shard pids=()
  for ((shard = 0; shard < jobs; ++shard)); do
    (export GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$shard
     device=$(device_for "$shard")
     sanitize "$tool" "$filter" "$seconds" "$log.$shard" "$@"
     exit $code) &
    pids+=($!)
  done
  code=0
  local shard_code
  for ((shard = 0; shard < jobs; ++shard)); do
    wait "${pids[$shard]}"
    shard_code=$?
    # 99: the sanitizer found errors; 137: killed; another exit: failed tests, run again alone below.
    [ $shard_code -eq 99 ] && code=99
    [ $shard_code -eq 137 ] && killed+=("$(grep -E '^\[ RUN' "$log.$shard" | tail -1 | cut -c14-)")
  done
  [ ${#killed[@]} -ne 0 ] && [ $code -eq 0 ] && code=137
  local verdict=$code
  rerun=$(grep -hE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log".[0-9]* | sed -E 's/^\[  FAILED  \] ([^ ,]+).*/\1/' | sort -u | paste -sd: -)
  rm -f "$log.alone"
  if [ -n "$rerun" ]; then
    sanitize "$tool" "$rerun" "$seconds" "$log.alone" "$@"
    [ $verdict -eq 0 ] && verdict=$code
  fi
  code=$verdict
  cat "$log".[0-9]* >"$log"
  return 0
}

for tool in memcheck synccheck initcheck; do
  [[ $steps == *" $tool "* ]] || continue
  extra=()
  tool_filter=$slow_filter
  if [ "$tool" = memcheck ]; then
    extra=(--leak-check full)
    tool_filter=$filter
  fi
  sanitize_sharded "$tool" "$tool_filter" "$limit" "$logs/$tool.log" "${extra[@]}"
  [ $code -ne 0 ] && failed=1
  # Every process's summary line, errors added up (a killed process has none); passed tests of the
  # shards, failed ones of the run alone when there was one.
  finished=$(grep -cE 'ERROR SUMMARY' "$logs/$tool.log")
  passed=$(grep -cE '^\[       OK \]' "$logs/$tool.log")
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$logs/$tool.log")
  failed_tests=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$logs/$tool.log")
  if [ -n "$rerun" ]; then
    cat "$logs/$tool.log.alone" >>"$logs/$tool.log"
    failed_tests=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$logs/$tool.log.alone")
  fi
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+ error' "$logs/$tool.log" | awk '{ sum += $3 } END { print sum + 0 }')
  result="ERROR SUMMARY: $errors errors in $finished of $jobs processes"
  [ -n "$rerun" ] && result+=" and in the run alone of the tests that failed beside them (${rerun//:/ })"
  [ ${#killed[@]} -ne 0 ] && result+="; killed after ${limit} s in: ${killed[*]}"
  result+="; tests: $passed passed, $skipped skipped, $failed_tests failed"
  summary+=("$(printf '%-11s' "$tool:") $result (exit $code)")
done

if [[ $steps == *" racecheck "* ]]; then
  # racecheck: one process per test, each run again after a hang, twice at most.
  mkdir -p "$logs/racecheck"
  race_tests=$("$binary" --gtest_list_tests --gtest_filter="${STREAMKIT_RACECHECK_TESTS:-*}$race_filter" |
    awk '/^[^ ].*\.( |$)/ { suite = $1; next } /^  [^ ]/ { print suite $1 }')
  # STREAMKIT_RACECHECK_SHARD=i/n: only every n-th test from the i-th (0-based), to spread racecheck
  # over several runs of this script.
  if [ -n "${STREAMKIT_RACECHECK_SHARD:-}" ]; then
    race_tests=$(printf '%s\n' $race_tests | awk -v shard="${STREAMKIT_RACECHECK_SHARD%/*}" -v shards="${STREAMKIT_RACECHECK_SHARD#*/}" '(NR - 1) % shards == shard')
  fi
  # One test under racecheck, run again after a hang (twice at most); leaves "<exit> <kills>" in <log>.status.
  race_one() {
    local name=$1 log="$logs/racecheck/${1//\//_}.log" kills=0 attempt
    for attempt in 1 2 3; do
      sanitize racecheck "$name" "$test_limit" "$log"
      [ $code -ne 137 ] && break
      kills=$((kills + 1))
    done
    echo "$code $kills" >"$log.status"
  }
  running=0
  launched=0
  for name in $race_tests; do
    (device=$(device_for "$launched")
     race_one "$name") &
    launched=$((launched + 1))
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then
      wait -n
      running=$((running - 1))
    fi
  done
  wait
  # A test that failed beside the others runs again alone (see sanitize_sharded).
  race_alone=()
  if [ "$jobs" -gt 1 ]; then
    for name in $race_tests; do
      log="$logs/racecheck/${name//\//_}.log"
      read -r code kills <"$log.status"
      if [ "$code" -ne 0 ] && ! grep -q 'terminated before first instrumented API call' "$log"; then
        race_alone+=("$name")
        race_one "$name"
      fi
    done
  fi
  race_count=0
  race_hazards=0
  race_skipped=0
  race_host=0
  race_failed=()
  race_killed=()
  for name in $race_tests; do
    race_count=$((race_count + 1))
    log="$logs/racecheck/${name//\//_}.log"
    read -r code kills <"$log.status"
    [ "$kills" -gt 0 ] && race_killed+=("$name")
    hazards=$(grep -oE 'RACECHECK SUMMARY: [0-9]+ hazard' "$log" | grep -oE '[0-9]+' | tail -1)
    race_hazards=$((race_hazards + ${hazards:-0}))
    if grep -qE '^\[  SKIPPED \] 1 test' "$log"; then race_skipped=$((race_skipped + 1)); fi
    # A host-side test makes no CUDA call, which the sanitizer reports as an error (exit 255).
    if grep -q 'terminated before first instrumented API call' "$log"; then
      race_host=$((race_host + 1))
      code=0
    fi
    if [ "$code" -ne 0 ] || ! grep -qE '^\[  (PASSED  |SKIPPED )\] 1 test' "$log"; then race_failed+=("$name (exit $code)"); fi
  done
  [ ${#race_failed[@]} -ne 0 ] && failed=1
  result="$race_count tests ($race_host without CUDA calls, $race_skipped skipped), one process each: $race_hazards hazards, ${#race_failed[@]} failed${race_failed[*]:+: ${race_failed[*]}}"
  result+="; runs killed after ${test_limit} s (each test then run again): ${#race_killed[@]}${race_killed[*]:+ (${race_killed[*]})}"
  [ ${#race_alone[@]} -ne 0 ] && result+="; failed beside the other processes and run again alone: ${race_alone[*]}"
  summary+=("$(printf '%-11s' "racecheck:") $result (exit $([ ${#race_failed[@]} -eq 0 ] && echo 0 || echo 1))")
fi

printf '%s\n' "${summary[@]}"
exit $failed
