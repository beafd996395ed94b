#!/usr/bin/env bash
# Lesson 07's profiling exercise: where the FLOPs are computed. Lesson 06 (CUDA cores) and lesson
# 07 (tensor cores) on the same problem: FP32-pipe and tensor-pipe instructions, the share of
# cycles the tensor pipe was busy, and the shared-memory bank conflicts lesson 08 removes.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
n=4096 heads=8 d=128
echo "== ncu, N = $n, $heads heads, head_dim $d, fp16: $((4 * heads * n * n * d / 1000000)) MFLOP of attention"
echo "   one mma.sync m16n8k16 is 2 x 16 x 8 x 16 = 4096 FLOPs; one FFMA instruction (32 lanes) 64"
"$root/tools/ncu-profile.sh" lesson07_n$n \
  gpu__time_duration.sum,sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_tensor_op_hmma.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum \
  "causal_kernel|tensor_core_kernel" --lessons 06,07 --seqlens $n --tokens $n --width $((heads * d)) --head-dims $d --causal 0
echo "Read it: kernel 1 is lesson 06, kernel 2 lesson 07. HMMA instructions x 4096 against the MFLOP above;"
echo "the tensor pipe's busy share; and how many of lesson 07's shared-memory wavefronts are bank conflicts."
