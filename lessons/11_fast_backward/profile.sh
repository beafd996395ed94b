#!/usr/bin/env bash
# Lesson 11's profiling exercise: where the fast backward's time goes, per kernel, for both dQ
# strategies, the lesson's variants (N = 8192, 16 heads x head_dim 128 and 32 x 64, fp16, non-causal):
#   atomic (default): preprocess, dkdv_kernel (dK, dV and dQ's share by fp32 atomics), convert;
#   pass (deterministic): preprocess, dkdv_kernel without dQ, dq_kernel (recomputes S and dP).
# Per kernel: time, the tensor pipe's busy share, shared-memory wavefronts as % of peak (this
# kernel's limit: every warp re-reads the Q and dO tiles), bank conflicts, the atomics' L2 sectors,
# and the main stall reasons (as % of active warp cycles).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,lts__t_sectors_op_red.sum,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct
n=${FA_PROFILE_SEQLEN:-8192}
for dq in atomic pass; do
  echo "== dQ by $dq, N = $n, head_dim 128 then 64 (non-causal, fp16)"
  "$root/tools/ncu-profile.sh" lesson11_${dq}_n$n "$metrics" "preprocess_kernel|dkdv_kernel|convert_kernel|dq_kernel" \
    --bwd --lessons 11 --variant "$dq" --seqlens "$n" --tokens "$n" --head-dims 128,64 --causal 0
done
echo "Read it: the times add up to the backward's; the atomic dkdv_kernel against the pass's dkdv + dq"
echo "is the price of each strategy. A shared-memory pipe near its peak with the tensor pipe well below"
echo "its own says the kernel waits on ldmatrix, not on the tensor cores."
