#!/usr/bin/env bash
# Lesson 05's profiling exercise: FP32 and MUFU (special function unit) instructions of lesson 04
# (expf) and lesson 05 (exp2f), counted in the SASS and measured by ncu, per score element.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
cmake --build "$FA_BUILD" --target lesson04 lesson05 > /dev/null
echo "== SASS (static, sm_90 code of the fp16 head_dim 64 kernels): instructions in the kernel body"
for l in 04 05; do
  sass=$(cuobjdump -sass "$FA_BUILD/liblesson$l.a" | awk '/Function : .*kernelI6__halfLi64E/ {on = 1; next} /Function :/ {on = 0} on')
  printf "lesson %s: MUFU.EX2 %3d  FFMA %4d  FADD %3d  FMUL %3d\n" $l "$(grep -c 'MUFU.EX2' <<< "$sass")" \
    "$(grep -c ' FFMA' <<< "$sass")" "$(grep -c ' FADD' <<< "$sass")" "$(grep -c ' FMUL' <<< "$sass")"
done
n=4096
echo "== ncu, N = $n, 8 heads: the scores number 8 x $n x $n = $((8 * n * n))"
"$root/tools/ncu-profile.sh" lesson05_n$n sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_xu.sum,gpu__time_duration.sum "fa2" \
  --lessons 04,05 --seqlens $n --tokens $n --width 512 --head-dims 64 --causal 0
echo "Read it: kernel 1 is lesson 04, kernel 2 lesson 05. Warp instructions x 32 / scores = per score."
