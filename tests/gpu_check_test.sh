#!/usr/bin/env bash
# Host-side test of tests/gpu_check.sh (CTest: streamkit_gpu_check_script; no GPU, no compute-sanitizer):
# runs it with a stand-in test binary and a stand-in sanitizer, and checks that with
# STREAMKIT_SANITIZER_JOBS > 1 the sanitizer processes take the GPUs of STREAMKIT_GPU_CHECK_DEVICES in
# turn, that a single process keeps every GPU, and that a reported error or hazard fails the script.
set -uo pipefail
script=$(cd "$(dirname "$0")" && pwd)/gpu_check.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAILED: $*"; failures=$((failures + 1)); }

# The stand-in binary: six tests in three suites, gtest's listing, filter (a list or '*' or '-…'),
# sharding and result lines; each test prints the GPUs it was given.
cat >"$work/tests" <<'BINARY'
#!/usr/bin/env bash
all="A.One A.Two B.Three B.Four C.Five C.Six"
filter="*" list=0
for a in "$@"; do
  case $a in --gtest_list_tests) list=1 ;; --gtest_filter=*) filter=${a#--gtest_filter=} ;; esac
done
if [ $list -eq 1 ]; then printf 'A.\n  One\n  Two\nB.\n  Three\n  Four\nC.\n  Five\n  Six\n'; exit 0; fi
selected=()
for t in $all; do
  if [ "$filter" = "*" ] || [[ $filter == -* ]] || [[ ":$filter:" == *":$t:"* ]]; then selected+=("$t"); fi
done
i=0 n=0
for t in "${selected[@]}"; do
  if [ $((i % ${GTEST_TOTAL_SHARDS:-1})) -eq "${GTEST_SHARD_INDEX:-0}" ]; then
    printf '[ RUN      ] %s\ngpus: %s\n[       OK ] %s (1 ms)\n' "$t" "${CUDA_VISIBLE_DEVICES:-every}" "$t"
    n=$((n + 1))
  fi
  i=$((i + 1))
done
echo "[  PASSED  ] $n tests."
BINARY
# The stand-in sanitizer: runs the binary and prints the tool's summary, with $FINDINGS errors or hazards.
cat >"$work/sanitizer" <<'SANITIZER'
#!/usr/bin/env bash
tool=""
while [ $# -gt 0 ]; do
  case $1 in --tool) tool=$2; shift 2 ;; --leak-check | --report-api-errors | --error-exitcode) shift 2 ;; *) break ;; esac
done
"$@"
code=$?
found=${FINDINGS:-0}
if [ "$tool" = racecheck ]; then
  echo "========= RACECHECK SUMMARY: $found hazards displayed ($found errors, 0 warnings)"
else
  echo "========= ERROR SUMMARY: $found errors"
fi
[ "$found" -ne 0 ] && exit 99
exit $code
SANITIZER
chmod +x "$work/tests" "$work/sanitizer"

run() {  # run LOGS JOBS DEVICES [FINDINGS]: gpu_check.sh's memcheck and racecheck; prints its summary
  rm -rf "$work/$1"
  FINDINGS=${4:-0} COMPUTE_SANITIZER="$work/sanitizer" STREAMKIT_TEST_BINARY="$work/tests" STREAMKIT_ALONE_WALK_BINARY=/nonexistent \
    STREAMKIT_LOG_DIR="$work/$1" STREAMKIT_GPU_CHECK_STEPS="memcheck racecheck" STREAMKIT_SANITIZER_JOBS=$2 \
    STREAMKIT_GPU_CHECK_DEVICES=$3 bash "$script" "$work/build" >"$work/$1.out" 2>&1
}

# Three processes over GPUs 0 and 1: memcheck's shards 0, 1, 2 on GPUs 0, 1, 0 (two tests each); racecheck's
# tests in turn.
run spread 3 0,1
code=$?
[ $code -eq 0 ] || fail "three processes on two GPUs: exit $code"
grep -q 'memcheck: *ERROR SUMMARY: 0 errors in 3 of 3 processes; tests: 6 passed' "$work/spread.out" || fail "memcheck summary: $(cat "$work/spread.out")"
grep -q 'racecheck: *6 tests .* 0 hazards, 0 failed' "$work/spread.out" || fail "racecheck summary: $(cat "$work/spread.out")"
for shard in 0 1 2; do
  want=$((shard % 2))
  got=$(grep -h '^gpus:' "$work/spread/memcheck.log.$shard" | sort -u | paste -sd' ')
  [ "$got" = "gpus: $want" ] || fail "memcheck shard $shard ran on '$got', not GPU $want"
done
race_gpus=$(grep -h '^gpus:' "$work"/spread/racecheck/*.log | sort | uniq -c | awk '{ print $1 "x" $3 }' | paste -sd' ')
[ "$race_gpus" = "3x0 3x1" ] || fail "racecheck's six tests on GPUs: $race_gpus (want three on each)"

# One process keeps every GPU (the tests that need two still run under the sanitizer).
run single 1 0,1
[ $? -eq 0 ] || fail "one process: exit nonzero"
[ "$(grep -h '^gpus:' "$work/single/memcheck.log" | sort -u)" = "gpus: every" ] || fail "one process was given a GPU"

# A finding fails the script and is counted in the summary.
run findings 2 0,1 1
code=$?
[ $code -ne 0 ] || fail "errors and hazards reported, yet exit 0"
grep -q 'memcheck: *ERROR SUMMARY: 2 errors in 2 of 2 processes' "$work/findings.out" || fail "memcheck errors not counted: $(cat "$work/findings.out")"
grep -q 'racecheck: *6 tests .* 6 hazards' "$work/findings.out" || fail "racecheck hazards not counted: $(cat "$work/findings.out")"

[ $failures -eq 0 ] && echo "gpu_check.sh: every check passed"
exit $((failures > 0))
