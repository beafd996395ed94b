#!/usr/bin/env bash
# Lesson 03's profiling exercise: the HBM writes of FA1 (O, m, l written back once per K/V tile)
# against FA2 (O written once), 8 heads of head_dim 64, N = 1024 and 4096.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
export FA_BUILD=${FA_BUILD:-$root/build/student}
for n in 1024 4096; do
  echo "== N = $n, 8 heads: O is $((8 * n * 64 * 2 / 1024)) KiB in fp16, $((8 * n * 64 * 4 / 1024)) KiB in the fp32 workspace"
  "$root/tools/ncu-profile.sh" lesson03_n$n dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum "fa1_kernel|fa2_kernel" \
    --lessons 03,04 --seqlens $n --tokens $n --width 512 --head-dims 64 --causal 0
done
echo "Read it: kernel 1 is FA1 (lesson 03), kernel 2 FA2 (lesson 04). How many times is O written?"
