#!/usr/bin/env bash
# Lesson 09's profiling exercise: where RoPE's cost goes on each path, at a short and a long
# sequence (causal, head_dim 128, fp16, 16k tokens x 2048 wide as in fa-bench's grid).
#   rotate-outside: rope_kernel reads Q and K and writes them rotated (DRAM bytes), then the
#                   attention kernel reads the rotated copies;
#   fused:          no extra kernel, but every query tile re-reads the tables for its K tiles (L2
#                   bytes) and re-rotates them (instructions, and time before the barrier).
# Per kernel: time, DRAM bytes read and written, L2 bytes, instructions, the tensor pipe's share
# and the barrier stall.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,smsp__inst_executed.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct
for n in ${FA_PROFILE_SEQLENS:-1024 16384}; do
  for path in outside fused; do
    echo "== $path, N = $n (causal, head_dim 128, fp16)"
    "$root/tools/ncu-profile.sh" lesson09_${path}_n$n "$metrics" "rope_kernel|pipelined_kernel" \
      --lessons 09 --rope --variant "$path" --seqlens "$n" --head-dims 128 --causal 1
  done
done
echo "Read it: outside's bytes are rope_kernel's DRAM traffic (about 2 x (Q + K)); fused's are the"
echo "attention kernel's extra L2 bytes (the tables, once per query tile) and extra instructions."
echo "Which one costs more time depends on N: compare the kernels' times at both lengths."
