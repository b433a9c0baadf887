#!/usr/bin/env bash
# Device call 5 (twenty-second session, nvidia-h100-x1) on branch near-tie-k16 (959e9bb: the near-tie threshold for every
# k <= 16 past 256 steps): the tests that run a tree k-nearest walk (streamkit_tests of build-rel), then the alone-walk
# binary's k-nearest and hostile tests. No sanitizers (no device time left for them).
set -uo pipefail
cd "$(dirname "$0")/../.."; T=/tmp/bin; mkdir -p $T; L=$OUT; start=$SECONDS
for f in streamkit_tests streamkit_tests_alone_walk; do xz -dc .carry/s22c/$f.xz > $T/$f; chmod +x $T/$f; done
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
F='KNearest.*:NearestNeighbor.*:HostileNearTies.*:HostileExactTies.*:TreeBounds.*:HostileInputs/HostileCellLists.*/pole_circle_1e_7rad:HostileInputs/HostileCellLists.*/cell_3m:HostileInputs/HostileDeepTree.*:HostileInputs/HostileExactness.*:Dispatcher.NearestNeighbour*'
timeout -s KILL 120 $T/streamkit_tests --gtest_filter="$F" > $L/tests.log 2>&1; echo "tests exit $? at $((SECONDS - start)) s"
timeout -s KILL $((215 - SECONDS)) $T/streamkit_tests_alone_walk --gtest_filter='KNearest.*:HostileNearTies.*:HostileExactTies.*:HostileInputs/HostileExactness.*' > $L/tests_alone_walk.log 2>&1
echo "alone exit $? at $((SECONDS - start)) s"
for f in tests tests_alone_walk; do echo "$f: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|tests ran' $L/$f.log | tr '\n' ' ')"; done
grep -h "FAILED  \]" $L/tests*.log | head; grep -h "near-ties\|rows have a tied" $L/tests*.log | head -12
