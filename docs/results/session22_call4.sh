#!/usr/bin/env bash
# Device call 4 (twenty-second session, nvidia-h100-x1): A/B of main's kernels (bh_main, 71e43cd) against the near-tie
# threshold for every k < 32 (bh_va: `K <= 16` instead of `K == 1` in tree_search_one's two walk loops), both built on the
# dev machine with the same nvcc command; tree_index exact, the old binary then the new one on the same data, twice.
set -uo pipefail
cd "$(dirname "$0")/../.."; L=$OUT; start=$SECONDS
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
for r in 1 2; do for v in main va; do
  timeout -s KILL 60 .carry/s22b/bh_$v --n 4194304 --m 4194304 --ks 16 --repeat 3 --sample 50 --budget-seconds 30 --classes uniform,pole_circle_1e-7rad \
    --engines tree_index --precisions exact --max-seconds 1 --out $L/ab_big_${v}_$r.json > $L/ab_big_${v}_$r.log 2>&1; echo "big $v $r: exit $? at $((SECONDS - start)) s"
  timeout -s KILL 40 .carry/s22b/bh_$v --ks 1,16,32 --repeat 5 --sample 100 --budget-seconds 20 --classes uniform,pole_circle_1e-7rad,refs_one_meridian \
    --engines tree_index --precisions exact --max-seconds 1 --out $L/ab_2p20_${v}_$r.json > $L/ab_2p20_${v}_$r.log 2>&1; echo "2p20 $v $r: exit $? at $((SECONDS - start)) s"
done; done
python3 .carry/s22b/ab_table.py $L ab_big main va; python3 .carry/s22b/ab_table.py $L ab_2p20 main va
