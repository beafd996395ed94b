#!/usr/bin/env bash
# A student's progress: builds each lesson of lessons/ on its own (one that does not compile does
# not stop the others, and its old binaries are never run), runs the tests of those that built,
# and prints one status per lesson:
#   not started                       its files are as the course gave them
#   does not compile                  (the first error is printed, the log named)
#   TODOs left: TODO(3), TODO(4) ...  still listed in the file's kTodosLeft
#   failing (n of m tests)
#   CPU parts passing, GPU not run    no GPU here: its GPU tests were skipped
#   passing
#   tools/progress.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -f build/student/CMakeCache.txt ] || cmake --preset student > /dev/null
logs=build/student/progress
mkdir -p "$logs"
if ! cmake --build --preset student --target fa-grade > "$logs/tools.log" 2>&1; then
  echo "the course's own tools do not build (see $logs/tools.log):"; grep -m 5 -E "error" "$logs/tools.log"; exit 1
fi
not_built=""
for dir in lessons/[0-9][0-9]_*/; do
  label=lesson$(basename "$dir" | cut -c1-2)
  # A lesson this build skips (it needs another GPU architecture) has no build target.
  grep -q "^build build-$label:" build/student/build.ninja || continue
  if ! cmake --build --preset student --target "build-$label" > "$logs/build-$label.log" 2>&1; then
    not_built="$not_built,$label"
    echo "$label does not compile: $(grep -m 1 -E "error" "$logs/build-$label.log" | cut -c1-200) (log: $logs/build-$label.log)"
  fi
done
build/student/bin/fa-grade --build build/student --progress --points build/student/grading.txt --lessons lessons \
  --not-built "${not_built#,}" --out "$logs"
