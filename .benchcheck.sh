#!/usr/bin/env bash
# (scratch, not committed) fa-bench's validation across its options, --once
W=/tmp/bc; mkdir -p $W; B=build/gpu/bin/fa-bench
run() { echo "== $*" >> $W/all.log; timeout 120 $B --once "$@" >> $W/all.log 2>&1; echo "rc=$?" >> $W/all.log; }
run --lessons all --seqlens 1024 --head-dims 64,128 --causal 0,1 --dtypes fp16,bf16
run --lessons all --bwd --seqlens 1024 --head-dims 64,128 --causal 0,1 --dtypes fp16
run --lessons all --rope --seqlens 2048 --head-dims 128 --causal 1
run --lessons all --gqa 4 --bwd --seqlens 2048 --head-dims 64,128 --causal 1
run --lessons all --varlen 300,1,1000,517 --causal 0,1 --head-dims 64
run --lessons all --varlen 300,1,1000,517 --bwd --causal 1 --head-dims 128 --dtypes bf16
run --lessons all --varlen 300,1000 --padded --causal 1 --head-dims 64
run --lessons all --gate --causal 1 --seqlens 1024 --head-dims 64,128
run --lessons all --gate --bwd --causal 1 --seqlens 1024 --head-dims 64
run --lessons 14 --bwd --deterministic --variant writers,stages2,stages3,one-dq-buffer,kv-in-smem,dq-by-columns --seqlens 4096 --head-dims 64,128 --causal 0,1
grep -E "WRONG|ERROR" $W/all.log > $W/bad.txt
echo "ok rows: $(grep -c ' ok' $W/all.log); WRONG/ERROR rows: $(wc -l < $W/bad.txt)"; grep "^rc=" $W/all.log | sort | uniq -c
tar czf $OUT/bc.tgz -C $W .
