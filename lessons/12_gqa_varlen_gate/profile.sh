#!/usr/bin/env bash
# Lesson 12's profiling exercises.
# Part 1, the bytes GQA saves. The forward at 16k tokens (one sequence), 16 query heads of
# head_dim 128, fp16, causal, with 16 K/V heads (MHA), 2 (GQA, 8 query heads per K/V head) and 1
# (MQA). Per kernel: time, DRAM bytes read and written, L2 bytes. Predict the DRAM reads first
# (README, "How to profile"): Q once, K and V once per K/V head if every re-read hits in L2, O
# written once.
# Part 2, the small kernels (README, question 7): every kernel this lesson launches, with its time,
# for one gated, packed, GQA forward and backward (fa-bench --once --bwd: the lesson's own forward,
# then its backward), on a 16k-token batch of mixed lengths and on a short one.
#   usage: profile.sh [1|2]     (default: both parts)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info  # your GPU's SMs, L2, bandwidth: the terms of the README's questions
part=${1:-all}
case "$part" in 1|2|all) ;; *) echo "usage: $0 [1|2]   (1: the bytes GQA saves; 2: the small kernels' times; default both)"; exit 2 ;; esac

if [ "$part" != 2 ]; then
  metrics=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
  for g in 1 8 16; do
    echo "== heads_q / heads_kv = $g (16 query heads, $((16 / g)) K/V heads; seqlen 16384, causal, head_dim 128, fp16)"
    "$root/tools/ncu-profile.sh" lesson12_gqa$g "$metrics" "pipelined_kernel" \
      --lessons 12 --gqa "$g" --seqlens 16384 --head-dims 128 --causal 1
  done
  echo "Read it: the forward (lesson 08's pipelined_kernel over PackedTiles): its DRAM reads against the prediction (Q + K + V + the map), and its"
  echo "time: fewer bytes only save time if the kernel was waiting on them."
fi

if [ "$part" != 1 ]; then
  # Every kernel of kernel.cu, in launch order (memsets are not kernels: ncu does not list them).
  kernels="plan_kernel|scan_kernel|pipelined_kernel|preprocess_kernel|dkdv_kernel|convert_kernel|dq_kernel"
  for batch in long:8192,4096,2048,1024,512,256,128,128 short:512,256,128,64; do
    name=${batch%%:*} lengths=${batch#*:}
    for mode in atomic deterministic; do
      if [ "$mode" = deterministic ]; then flag=--deterministic; else flag=""; fi
      echo "== $name batch (lengths $lengths), causal, gate, 16 query heads on 4 K/V heads, head_dim 128, fp16; dQ: $mode"
      "$root/tools/ncu-profile.sh" "lesson12_small_${name}_$mode" gpu__time_duration.sum "$kernels" \
        --lessons 12 --varlen "$lengths" --gqa 4 --gate --bwd $flag --head-dims 128 --causal 1
    done
  done
  echo "Read it (times in ns): the forward is scan_kernel (G), plan_kernel (the query-tile map) and"
  echo "pipelined_kernel (lesson 08's, over PackedTiles); the backward is scan_kernel (G), two plan_kernels (query and key tiles),"
  echo "preprocess_kernel, dkdv_kernel, then convert_kernel (atomic dQ) or dq_kernel (deterministic),"
  echo "and scan_kernel again (dg, backwards). How much of each pass are the small ones?"
fi
