#!/usr/bin/env bash
# Lesson 00's profiling exercise: CPU time and memory of naive attention as N doubles.
# Runs your lesson 00 (the student build) unless FA_BUILD points at another build folder.
#   lessons/00_reference/profile.sh [max_n]          (default 4096; try 8192 if you have the RAM)
# No Nsight here: lesson 00 runs on the CPU. It first prints your GPU's constants (or "no GPU"),
# which "The memory wall" in the README needs; lesson 01's profile.sh uses ncu.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FA_BUILD:-$root/build/student}
if [ ! -d "$build" ]; then
  (cd "$root" && cmake --preset student > /dev/null)
fi
FA_BUILD=$build "$root/tools/ncu-profile.sh" --gpu-info
echo
cmake --build "$build" --target fa-cpu-profile > /dev/null
"$build/bin/fa-cpu-profile" "${1:-4096}"
echo
echo "Read it: does the time grow ~4x per doubling of N? Does peak memory follow the N*N column?"
echo "Answer the questions in lessons/00_reference/README.md from these numbers."
