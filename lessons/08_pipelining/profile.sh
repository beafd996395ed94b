#!/usr/bin/env bash
# Lesson 08's profiling exercise: lesson 07 (plain loads, unswizzled tiles, 16 rows per warp)
# against lesson 08 (cp.async ring, swizzled tiles, 32 rows per warp) on the same problem: bank
# conflicts, what the warps wait on (stall reasons, as % of active warp cycles), occupancy, and
# the tensor pipe's busy share.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
n=4096 heads=8 d=128
echo "== ncu, N = $n, $heads heads, head_dim $d, fp16"
"$root/tools/ncu-profile.sh" lesson08_n$n \
  gpu__time_duration.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct \
  "tensor_core_kernel|pipelined_kernel" --lessons 07,08 --seqlens $n --tokens $n --width $((heads * d)) --head-dims $d --causal 0
echo "Read it: kernel 1 is lesson 07, kernel 2 lesson 08. Bank conflicts (loads, stores) against the"
echo "wavefronts; barrier and long-scoreboard stalls are waits for loads; occupancy is warps resident."
