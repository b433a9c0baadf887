python3 benchmarks/make_report.py --gpu "NVIDIA H100 80GB HBM3" --date 2026-11-23 \
  --command ".carry/run_final.sh (bench_dispatcher --benchmark_filter='sum_normalize|pcie|nearest_on_gpus/1/' --benchmark_out=h100_dispatcher.json --benchmark_out_format=json; 2026-11-22, before the spatial index)" \
  --command "bench_minmax --benchmark_min_time=0.2 --benchmark_filter='-host_pinned_gpus/[24]|host_pageable_registered' --benchmark_out=h100_minmax.json --benchmark_out_format=json (.carry/run_fb.sh, fifth session: the fourth session's column chunks, the cluster kernel with its cluster size picked from the column length, device_copy_* references and column_major_4000x1500_double added; host_pinned/STREAMS/CHUNK_MIB, 0 = the default chunk size, 64 = one chunk per array)" \
  --command "bench_nearest_neighbor --benchmark_out=h100_nearest_neighbor.json --benchmark_out_format=json (.carry2/run_b.sh, 2026-11-23: brute force k = 1 fast and exact, tree_index, the front end nearest_index and the brute force with k > 1)" \
  --command "bench_dispatcher --benchmark_filter='nearest_on_gpus/1/' --benchmark_out=h100_dispatcher_nn.json --benchmark_out_format=json (.carry2/run_b.sh, 2026-11-23: the multi-GPU search on the front end; replaces the 2026-11-22 nearest_on_gpus/1 of h100_dispatcher.json)" \
  --command ".carry/run_multi.sh h200x2|h200x4 (bench_dispatcher --benchmark_filter=nearest_on_gpus; bench_minmax --benchmark_filter=host_pinned_gpus) on nvidia-h200-x2 and nvidia-h200-x4, before the spatial index; h200x2_minmax.json re-measured in the fifth session with .carry/run_x2.sh (bench_minmax --benchmark_filter='host_pinned_gpus/[12]', column chunks), h200x4_minmax.json from before column chunks; h200x2_dispatcher_nn.json: .carry3/run_x2.sh, 2026-11-23 (bench_dispatcher --benchmark_filter='nearest_on_gpus/[12]/', the front end)" \
  --peers docs/results/h100_peers_nearest.json \
  --python-peers docs/results/h100_python_peers.json \
  --python-note "Measured on the tree of commit 3e5e10c (the device's copy had stale git metadata: streamkit_commit below reads c98fb14). Log: docs/results/h100_python_peers.log." \
  --python-peers docs/results/h100_python_overhead.json \
  --python-note "The final tree (commit 0119c74: CUDA torch tensors viewed from their fields instead of torch's __dlpack__), per-call cost and the nearest-neighbour rows of streamkit and the C++ binary again (command: --workloads overhead,nearest --methods streamkit,cpp). Log: docs/results/h100_python_overhead.log." \
  --python-peers docs/results/h100_python_overhead_final.json \
  --python-note "The tree of commit 841ada5 (torch results by Tensor.new_empty, stream and device read without building torch.device objects), per-call cost only (.carry-py/run_all.sh, the session's one device call, which also ran pytest and the MPI tests). Log: docs/results/h100_python_overhead_final.log." \
  docs/results/h100_nearest_neighbor.json docs/results/h100_minmax.json docs/results/h100_dispatcher.json docs/results/h100_dispatcher_nn.json \
  --scaling "NVIDIA H200 x2, front end=docs/results/h200x2_dispatcher_nn.json" \
  --scaling "NVIDIA H200 x2=docs/results/h200x2_dispatcher.json,docs/results/h200x2_minmax.json" \
  --scaling "NVIDIA H200 x4=docs/results/h200x4_dispatcher.json,docs/results/h200x4_minmax.json"
