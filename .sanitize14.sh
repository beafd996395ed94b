#!/usr/bin/env bash
# (scratch, not committed) compute-sanitizer over lesson 14's small cases, every build
W=/tmp/s; mkdir -p $W
B=build/gpu/bin/fa-bench
V=writers,stages2,stages3,one-dq-buffer,kv-in-smem,dq-by-columns
cases="--bwd --once --lessons 14 --seqlens 200,300,700 --tokens 700 --width 256 --head-dims 64,128 --causal 0,1 --dtypes fp16,bf16"
for tool in memcheck synccheck; do
  for det in "" "--deterministic"; do
    timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $B $cases --variant $V $det > $W/${tool}${det}.log 2>&1; echo "$tool $det rc=$?" >> $W/summary.txt
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $W/${tool}${det}.log >> $W/summary.txt
  done
done
for v in writers one-dq-buffer; do
  timeout 150 compute-sanitizer --tool racecheck $B $cases --variant $v > $W/racecheck_$v.log 2>&1; echo "racecheck $v rc=$?" >> $W/summary.txt
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY" $W/racecheck_$v.log >> $W/summary.txt
done
L="4096,16384"
for g in 4 8; do
  $B --bwd --lessons 14 --gqa $g --seqlens $L --head-dims 64 --causal 0,1 --dtypes fp16 --csv $W/gqa.csv > $W/gqa$g.log 2>&1
  python3 plots/peers.py --bwd --gqa $g --backends cudnn,flash --seqlens $L --head-dims 64 --dtypes fp16 --csv $W/gqa_peers$g.csv > $W/gqa_peers$g.log 2>&1
  $B --bwd --lessons 14 --gqa $g --seqlens $L --head-dims 64 --causal 0,1 --dtypes fp16 --csv $W/gqa_r2.csv > $W/gqa${g}_r2.log 2>&1
done
tar czf $OUT/san.tgz -C $W .
cat $W/summary.txt
