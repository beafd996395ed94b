#!/usr/bin/env bash
# Lesson 10's profiling exercise: where the backward's time goes. One backward (fa-bench --bwd
# --once: O and the LSE from lesson 08's forward, then lesson 10's three kernels) under Nsight
# Compute, non-causal and causal, one row per kernel: its time, how busy the FMA pipe is, the warps
# resident (occupancy), the share of warp time stalled on short-scoreboard waits (shared memory,
# shuffles, exp2), and the DRAM bytes it reads.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
n=4096 heads=16 d=128
echo "fa-bench --bwd takes O and the LSE from lesson 08's forward in $FA_BUILD: if your lesson 08 is"
echo "not done, run FA_BUILD=$root/build/solutions $0 (the course's lessons)."
for causal in 0 1; do
  echo "== ncu, N = $n, $heads heads, head_dim $d, fp16, causal $causal"
  "$root/tools/ncu-profile.sh" lesson10_n${n}_causal$causal \
    gpu__time_duration.sum,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct,dram__bytes_read.sum \
    "row_dot_kernel|dkdv_kernel|dq_kernel" --lessons 10 --bwd --seqlens $n --tokens $n --width $((heads * d)) \
    --head-dims $d --causal $causal --dtypes fp16
done
echo "Read it: kernel 1 computes D, kernel 2 dK and dV (4 of the 7 products), kernel 3 dQ (3 of them)."
echo "Times are in ns; compare each kernel's share with its share of the products, causal with non-causal."
