#!/usr/bin/env bash
# A student's progress: builds your lessons/ (the student preset; a lesson that does not compile
# does not stop the others) and prints, per lesson, whether it passes, fails or is not started.
#   tools/progress.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -f build/student/CMakeCache.txt ] || cmake --preset student > /dev/null
cmake --build --preset student -- -k 0 > build/student/progress-build.log 2>&1 ||
  { echo "some lessons do not compile (see build/student/progress-build.log):"; grep -E "error" build/student/progress-build.log | head -5; }
cmake --build --preset student --target fa-grade > /dev/null
build/student/bin/fa-grade --build build/student --progress --points tests/grading.txt --out build/student/progress
