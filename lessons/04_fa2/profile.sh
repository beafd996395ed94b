#!/usr/bin/env bash
# Lesson 04's profiling exercise: DRAM bytes against L2 bytes of the FA2 kernel, 32 heads of
# head_dim 64 (batch 1). Each of the N / 32 query blocks of a head reads all of K and V.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info
for n in 1024 4096 16384; do
  echo "== N = $n: Q, K, V, O are $((32 * n * 64 * 2 / 1048576)) MiB each; K and V are read $((n / 32)) times"
  "$root/tools/ncu-profile.sh" lesson04_n$n dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum "fa2_kernel" \
    --lessons 04 --seqlens $n --tokens $n --width 2048 --head-dims 64 --causal 0
done
echo "Read it: DRAM reads against the size of Q + K + V, and L2 bytes against (N / 32) x (K + V)."
