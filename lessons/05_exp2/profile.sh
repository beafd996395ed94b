#!/usr/bin/env bash
# Lesson 05's profiling exercise: FP32 and MUFU (special function unit) instructions of lesson 04
# (expf) and lesson 05 (exp2f), counted in the SASS and measured by ncu, per score element.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info
cmake --build "$FA_BUILD" --target lesson04 lesson05 > /dev/null
# The SASS of one architecture: the build may hold several (without a GPU at configure time the
# course builds sm_80 and sm_90). Take the GPU's own if the build has it, else the highest.
if ! command -v cuobjdump > /dev/null; then
  echo "cuobjdump is not on PATH (it ships with the CUDA Toolkit, beside nvcc): no SASS counts"
else
  built=$(cuobjdump --list-elf "$FA_BUILD/liblesson05.a" | grep -o 'sm_[0-9]*a\?' | sort -u -V || true)
  arch=$(tail -n 1 <<< "$built")
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2> /dev/null | head -n 1 | tr -d ' .' || true)
  if [ -n "$cap" ] && grep -q "^sm_${cap}a\?$" <<< "$built"; then arch=$(grep "^sm_${cap}a\?$" <<< "$built" | tail -n 1); fi
  echo "== SASS (static, ${arch:-?} code of the fp16 head_dim 64 kernels; this build has $(echo $built)): instructions in the kernel body"
  for l in 04 05; do
    sass=$(cuobjdump -sass ${arch:+-arch "$arch"} "$FA_BUILD/liblesson$l.a" | awk '/Function : .*kernelI6__halfLi64E/ {on = 1; next} /Function :/ {on = 0} on')
    printf "lesson %s: MUFU.EX2 %3d  FFMA %4d  FADD %3d  FMUL %3d\n" $l "$(grep -c 'MUFU.EX2' <<< "$sass")" \
      "$(grep -c ' FFMA' <<< "$sass")" "$(grep -c ' FADD' <<< "$sass")" "$(grep -c ' FMUL' <<< "$sass")"
  done
fi
n=4096
echo "== ncu, N = $n, 8 heads: the scores number 8 x $n x $n = $((8 * n * n))"
"$root/tools/ncu-profile.sh" lesson05_n$n sm__inst_executed_pipe_fma.sum,sm__inst_executed_pipe_xu.sum,gpu__time_duration.sum "fa2" \
  --lessons 04,05 --seqlens $n --tokens $n --width 512 --head-dims 64 --causal 0
echo "Read it: kernel 1 is lesson 04, kernel 2 lesson 05. Warp instructions x 32 / scores = per score."
