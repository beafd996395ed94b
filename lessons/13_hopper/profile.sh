#!/usr/bin/env bash
# Lesson 13's profiling exercise: where the Hopper forward's time goes, step by step, against
# lesson 08 at the same shape (batch 4, 16 heads, seqlen 4096, head_dim 128, fp16, non-causal and
# causal). Per kernel: time, the tensor pipe's busy fraction (mma.sync's HMMA for lesson 08,
# wgmma's HGMMA for lesson 13: the same counter covers both), instructions issued, and the stall
# reasons that matter here. The variant (fa-bench --variant step1 .. step4) picks the step of the
# schedule (README, "The step table"). Predict first (README, "How to profile").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
metrics=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_type_hmma_hgmma_qgmma_cycles_active.avg.pct_of_peak_sustained_active
metrics=$metrics,smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_gmma.sum,sm__inst_executed_pipe_tensor_op_hmma.sum
metrics=$metrics,smsp__warp_issue_stalled_gmma_per_warp_active.pct,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct
metrics=$metrics,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct
metrics=$metrics,smsp__warp_issue_stalled_math_pipe_throttle_per_warp_active.pct,smsp__issue_active.avg.pct_of_peak_sustained_active
shape="--seqlens 4096 --head-dims 128 --causal 0,1"
echo "== lesson 08 (mma.sync)"
"$root/tools/ncu-profile.sh" lesson13_vs_08 "$metrics" "pipelined_kernel" --lessons 08 $shape
for step in 1 2 3 4; do
  echo "== lesson 13, step $step"
  "$root/tools/ncu-profile.sh" lesson13_step$step "$metrics" "hopper_kernel" --lessons 13 --variant "step$step" $shape
done
echo "Read it: the tensor pipe's busy fraction is the ceiling's share each kernel reaches; what is"
echo "left is in the stalls. Step 2 lets a warpgroup's softmax run while its P V is on the tensor"
echo "cores; step 3 lets the two warpgroups take turns."
