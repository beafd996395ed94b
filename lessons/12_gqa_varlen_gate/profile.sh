#!/usr/bin/env bash
# Lesson 12's profiling exercise: the bytes GQA saves. The forward at 16k tokens (one sequence),
# 16 query heads of head_dim 128, fp16, causal, with 16 K/V heads (MHA), 2 (GQA, 8 query heads
# per K/V head) and 1 (MQA). Per kernel: time, DRAM bytes read and written, L2 bytes. Predict the
# DRAM reads first (README, "How to profile"): Q once, K and V once per K/V head if every re-read
# hits in L2, O written once.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
for g in 1 8 16; do
  echo "== heads_q / heads_kv = $g (16 query heads, $((16 / g)) K/V heads; seqlen 16384, causal, head_dim 128, fp16)"
  "$root/tools/ncu-profile.sh" lesson12_gqa$g "$metrics" "forward_kernel" \
    --lessons 12 --gqa "$g" --seqlens 16384 --head-dims 128 --causal 1
done
echo "Read it: forward_kernel's DRAM reads against the prediction (Q + K + V + the map), and its"
echo "time: fewer bytes only save time if the kernel was waiting on them."
