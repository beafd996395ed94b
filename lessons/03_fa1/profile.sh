#!/usr/bin/env bash
# Lesson 03's profiling exercise: the memory traffic of FA1 (O, m, l written back once per K/V
# tile) against FA2 (O written once), head_dim 64, at a size that fits the L2 and one that does not.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
"$root/tools/ncu-profile.sh" --gpu-info
# N = 1024, 8 heads: the fp32 workspace (2 MiB) fits in the L2 (the H200's is 60 MB; profile.sh
# prints yours). N = 16384, 32 heads: it is 128 MiB, more than the H200's L2, so every round trip
# of O goes to DRAM.
for shape in "1024 512" "16384 2048"; do
  set -- $shape
  n=$1 width=$2 heads=$(($2 / 64))
  echo "== N = $n, $heads heads: the fp32 O workspace is $((heads * n * 64 * 4 / 1048576)) MiB; FA1 rewrites it $((n / 32)) times"
  "$root/tools/ncu-profile.sh" lesson03_n$n dram__bytes_write.sum,dram__bytes_read.sum,lts__t_bytes.sum,gpu__time_duration.sum \
    "fa1_kernel|fa2_kernel" --lessons 03,04 --seqlens $n --tokens $n --width $width --head-dims 64 --causal 0
done
echo "Read it: kernel 1 is FA1 (lesson 03), kernel 2 FA2 (lesson 04). How many times is O written?"
