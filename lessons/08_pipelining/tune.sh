#!/usr/bin/env bash
# Lesson 08's tile search: every configuration of tiles.hpp for a head dim, over the FlashAttention
# grid at 4k, 8k and 16k, causal and not (fa-bench --variant config<index> forcing the choice).
#   lessons/08_pipelining/tune.sh [head_dim ...]      (default: 64 128)
# The README's table "Choosing the tiles" is this script's output on an H200.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FA_BUILD:-$root/build/student}
cmake --build "$build" --target fa-bench > /dev/null
dir=$(cd "$(dirname "$0")" && pwd)
configs=$(sed -n 's|^ *{\([0-9]*\), *\([0-9]*\), *\([0-9]*\), *\([0-9]*\), *\([0-9]*\), *\([0-9]*\), *\([0-9]*\)}, *// \([0-9]*\)$|\8 \1 \2x\3 sub\4 w\5 s\6 b\7|p' "$dir/tiles.hpp")
[ -n "$configs" ] || { echo "no configurations found in $dir/tiles.hpp"; exit 1; }
printf "%-6s %-24s %s\n" "config" "rows x keys, sub, warps, stages, blocks" "TFLOP/s: N=4k 8k 16k | causal 4k 8k 16k"
for d in ${*:-64 128}; do
  while read -r idx hd shape sub w s b; do
    [ "$hd" = "$d" ] || continue
    out=$("$build/bin/fa-bench" --lessons 08 --variant "config$idx" --head-dims "$d" --seqlens 4096,8192,16384 --causal 0,1 --reps 10)
    rates=$(awk '$1 == "08_pipelining" && $2 == "config'"$idx"'" && $NF == "ok" {printf "%s ", $9}' <<< "$out")
    printf "%-6s d%-3s %-20s %s\n" "$idx" "$hd" "$shape $sub $w $s $b" "$rates"
  done <<< "$configs"
done
