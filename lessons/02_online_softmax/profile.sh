#!/usr/bin/env bash
# Lesson 02's profiling exercise: the 3-pass softmax of lesson 01 against the 2-pass online
# softmax of lesson 02, one head, head_dim 64: DRAM bytes and L2 bytes of the softmax kernels.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info
for n in 4096 16384; do
  echo "== N = $n: S is $((n * n * 4 / 1048576)) MiB; a row is $((n * 4 / 1024)) KiB"
  "$root/tools/ncu-profile.sh" lesson02_n$n dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum "softmax" \
    --lessons 01,02 --seqlens $n --tokens $n --width 64 --head-dims 64 --causal 0
done
echo "Read it: kernel 1 is lesson 01's softmax (3 passes), kernel 2 lesson 02's (2 passes)."
echo "Compare their DRAM reads with 3 and 2 times the size of S, and their L2 bytes."
