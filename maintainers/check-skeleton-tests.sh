#!/usr/bin/env bash
# Checks the student build (the skeletons in lessons/): each lesson's test executables must fail,
# and every failure must be the clear "lesson NN not implemented yet: <TODO>" message, never a
# crash, a wall of numbers, or a pass (a skeleton that passes gives the student nothing to do).
# GPU executables skip on a machine without a GPU (exit 77) and are reported as such.
# usage: maintainers/check-skeleton-tests.sh <student-build-dir>
set -uo pipefail
build=${1:?usage: $0 <student-build-dir>}
status=0
shopt -s nullglob
exes=("$build"/bin/test_lesson*)
[ ${#exes[@]} -gt 0 ] || { echo "no lesson test executables in $build/bin"; exit 1; }
for exe in "${exes[@]}"; do
  out=$("$exe" 2>&1)
  rc=$?
  name=$(basename "$exe")
  if [ $rc -eq 77 ]; then
    echo "skipped  $name (needs a GPU)"
    continue
  fi
  errors=$(printf '%s\n' "$out" | grep "ERROR:")
  other=$(printf '%s\n' "$errors" | grep -v "not implemented yet" | head -3)
  if [ $rc -eq 0 ]; then
    echo "FAIL     $name passes on the skeleton: its TODOs are not TODOs"; status=1
  elif [ $rc -ne 1 ] || [ -z "$errors" ]; then
    printf '%s\n' "$out" | tail -20; echo "FAIL     $name did not fail cleanly (exit $rc)"; status=1
  elif [ -n "$other" ]; then
    printf '%s\n' "$other"; echo "FAIL     $name fails with something other than 'not implemented yet'"; status=1
  else
    echo "ok       $name: $(printf '%s\n' "$errors" | head -1 | sed 's/.*ERROR: //')"
  fi
done
exit $status
