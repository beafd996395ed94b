#!/usr/bin/env bash
# Lesson 06's profiling exercise: causal TFLOP/s without (lesson 05) and with (lesson 06) the early
# stop, and the non-causal rate beside them, head_dim 64, 16k tokens x 2048 wide. No profiler
# needed: the FLOPs counted are the same (visible pairs only), so the time tells it all.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FA_BUILD:-$root/build/student}
FA_BUILD=$build "$root/tools/ncu-profile.sh" --gpu-info
cmake --build "$build" --target fa-bench > /dev/null
"$build/bin/fa-bench" --lessons 05,06 --causal 1,0 --head-dims 64 --seqlens 512,1024,2048,4096,8192,16384 --reps 10
echo "Read it: lesson 05 causal against lesson 06 causal at each N, and both against non-causal."
