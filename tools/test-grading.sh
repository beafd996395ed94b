#!/usr/bin/env bash
# CI's test of the grading path (no GPU needed): grade the skeletons (every lesson not started,
# score 0, nothing crashes), then the lesson 04 solution placed as student code (full marks on its
# CPU parts), then a mutant of it (it must lose points). Exits 1 on any surprise.
#   tools/test-grading.sh [work-dir]        (default: build/test-grading)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$root/build/test-grading}
rm -rf "$work/student"
mkdir -p "$work/student"
cp -r "$root"/lessons/* "$work/student/"
grade() { "$root/tools/grade.sh" "$work/student" --build "$work/build" --out "$work/report" | tee "$work/grade.log"; }
lesson_line() { grep "\"lesson\": \"$1\"" "$work/report/summary.json"; }
fail() { echo "FAIL (grading test): $*"; exit 1; }

echo "== 1. the skeletons: every lesson not started, nothing scores"
grade
grep -q '"total": 0,' "$work/report/summary.json" || fail "the skeletons scored points"
for l in lesson00 lesson02 lesson03 lesson04; do
  lesson_line $l | grep -q '"status": "not started"' || fail "$l should be 'not started': $(lesson_line $l)"
done

echo "== 2. the lesson 04 solution (kernel and CPU model) as student code: full marks on its CPU parts"
cp "$root"/solutions/04_fa2/*.cu "$root"/solutions/04_fa2/*.cpp "$work/student/04_fa2/"
grade
lesson_line lesson04 | grep -q '"score": 15,' || fail "lesson 04 should score 15/15: $(lesson_line lesson04)"
lesson_line lesson04 | grep -Eq '"status": "passing' || fail "lesson 04 should pass: $(lesson_line lesson04)"

echo "== 3. a mutant of it (the accumulator not rescaled) as student code: it loses points"
"$work/build/bin/fa-mutate" "$root/tests/mutants/cpu_04_missing_rescale.mutant" "$root/solutions" "$work/student/04_fa2/model.cpp"
grade
lesson_line lesson04 | grep -q '"status": "failing"' || fail "the mutant should fail: $(lesson_line lesson04)"
lesson_line lesson04 | grep -q '"score": 15,' && fail "the mutant kept full marks"

echo "== 4. a lesson that does not compile scores 0 and the others still run"
echo "this is not C++" >> "$work/student/04_fa2/model.cpp"
grade
lesson_line lesson04 | grep -q '"status": "broken: does not compile"' || fail "lesson 04 should be broken: $(lesson_line lesson04)"
lesson_line lesson00 | grep -q '"status": "not started"' || fail "lesson 00 should still be graded: $(lesson_line lesson00)"
echo "grading test passed"
