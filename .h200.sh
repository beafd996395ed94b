#!/usr/bin/env bash
# (scratch, not committed) lesson 14's grid with the peers, only on an H200
W=/tmp/h; mkdir -p $W
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu" > $W/gpu.txt
case "$gpu" in *H200*) ;; *) echo "not an H200: $gpu"; tar czf $OUT/h200.tgz -C $W .; exit 0;; esac
B=build/gpu/bin/fa-bench; L="1024,2048,4096,8192,16384"
$B --lessons 14 --bwd --seqlens $L --head-dims 64,128 --causal 0,1 --dtypes fp16,bf16 --csv $W/l14_run1.csv > $W/l14_run1.log 2>&1
python3 plots/peers.py --bwd --backends cudnn,flash --seqlens $L --head-dims 64,128 --dtypes fp16,bf16 --csv $W/peers.csv > $W/peers.log 2>&1
$B --lessons 14 --bwd --seqlens $L --head-dims 64,128 --causal 0,1 --dtypes fp16,bf16 --csv $W/l14_run2.csv > $W/l14_run2.log 2>&1
tar czf $OUT/h200.tgz -C $W .
