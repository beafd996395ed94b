#!/usr/bin/env bash
# Lesson 12's experiment: a packed varlen batch against the same batch padded to its longest
# sequence. Causal (padding is exact on the real rows only under the mask), fp16, 16 heads of
# head_dim 128 (2048 wide, as fa-bench's grid), two batches of about 16k tokens:
#   geometric  8192 4096 2048 1024 512 256 128 128  (one long sequence and many short ones)
#   spread     3000 2500 2200 2000 1900 1700 1500 1200 384
# Rows: 12 packed (this lesson's varlen path), 12 padded and 08 padded (the dense path of this
# lesson and of lesson 08, the kernel it is built on). Every row counts TFLOP/s from the real
# sequences' visible pairs, so the ratio of two rows is the inverse ratio of their times.
#   usage: experiment.sh [out.csv]     (default $FA_BUILD/lesson12_varlen.csv)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FA_BUILD:-$root/build/student}
csv=${1:-$build/lesson12_varlen.csv}
[ -x "$build/bin/fa-bench" ] || cmake --build "$build" --target fa-bench > /dev/null
for lengths in 8192,4096,2048,1024,512,256,128,128 3000,2500,2200,2000,1900,1700,1500,1200,384; do
  bench=("$build/bin/fa-bench" --varlen "$lengths" --head-dims "${FA_HEAD_DIMS:-128}" --causal 1 --reps "${FA_REPS:-20}" --csv "$csv")
  "${bench[@]}" --lessons 12
  "${bench[@]}" --lessons 08,12 --padded
done
echo "wrote $csv"
