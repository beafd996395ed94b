#!/usr/bin/env bash
# Lesson 01's profiling exercise: the HBM bytes of the three kernels as N doubles (one head,
# head_dim 64). Uses your lessons (build/student) unless FA_BUILD names another build.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info
for n in 1024 2048 4096; do
  echo "== N = $n: S and P are $((n * n * 4 / 1024)) KiB each"
  "$root/tools/ncu-profile.sh" lesson01_n$n dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum "scores|softmax|pv" \
    --lessons 01 --seqlens $n --tokens $n --width 64 --head-dims 64 --causal 0
done
echo "Read it: which kernel's bytes grow 4x per doubling of N, and how close are they to N*N*4?"
