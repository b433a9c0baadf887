python3 benchmarks/make_report.py --gpu "NVIDIA H100 80GB HBM3" --date 2026-11-22 \
  --command ".carry/run_final.sh (bench_dispatcher --benchmark_filter='sum_normalize|pcie|nearest_on_gpus/1/' --benchmark_out=h100_dispatcher.json --benchmark_out_format=json; dispatcher and its workloads unchanged since)" \
  --command "bench_minmax --benchmark_min_time=0.2 --benchmark_filter='-host_pinned_gpus/[24]|host_pageable_registered' --benchmark_out=h100_minmax.json --benchmark_out_format=json (.carry/run_fb.sh, fifth session: the fourth session's column chunks and cluster kernel, with device_copy_* references added; host_pinned/STREAMS/CHUNK_MIB, 0 = the default chunk size, 64 = one chunk per array)" \
  --command "bench_nearest_neighbor --benchmark_out=h100_nearest_neighbor.json --benchmark_out_format=json (after the exact-mode change: float32 loop with float64 rescans)" \
  --command ".carry/run_multi.sh h200x2|h200x4 (bench_dispatcher --benchmark_filter=nearest_on_gpus; bench_minmax --benchmark_filter=host_pinned_gpus) on nvidia-h200-x2 and nvidia-h200-x4; h200x2_minmax.json re-measured in the fifth session with .carry/run_x2.sh (bench_minmax --benchmark_filter='host_pinned_gpus/[12]', column chunks), h200x4_minmax.json from before column chunks" \
  docs/results/h100_nearest_neighbor.json docs/results/h100_minmax.json docs/results/h100_dispatcher.json \
  --scaling "NVIDIA H200 x2=docs/results/h200x2_dispatcher.json,docs/results/h200x2_minmax.json" \
  --scaling "NVIDIA H200 x4=docs/results/h200x4_dispatcher.json,docs/results/h200x4_minmax.json"
