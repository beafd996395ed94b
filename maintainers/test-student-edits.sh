#!/usr/bin/env bash
# CI's proof that a student's work is never lost: edits three files of lessons/ as a student would,
# runs every command of the README that a student runs and that writes files (on the builds CI
# already made, so it costs little), and fails if any edit is gone. The regeneration of lessons/
# (the maintainers' `skeletons` target) must refuse to touch them; `fa-skeleton write --force` on
# a copy must replace them and keep the student's version beside. The edits are undone at the end.
# (tools/grade.sh is left out: it only reads the folder it grades, into a build of its own.)
#   maintainers/test-student-edits.sh        (after `cmake --workflow --preset solutions` and the student build)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
files=(lessons/00_reference/attention.cpp lessons/02_online_softmax/model.cpp lessons/04_fa2/kernel.cu)
work=$(mktemp -d)
fail=0
for f in "${files[@]}"; do
  cp "$f" "$work/$(echo "$f" | tr / _).orig"
  printf '\n// my notes: a student wrote this line (%s)\n' "$f" >> "$f"
  cp "$f" "$work/$(echo "$f" | tr / _).mine"
done
restore() { for f in "${files[@]}"; do cp "$work/$(echo "$f" | tr / _).orig" "$f"; done; rm -rf "$work"; }
trap restore EXIT
survived() {  # $1: the command just run
  for f in "${files[@]}"; do
    if ! cmp -s "$f" "$work/$(echo "$f" | tr / _).mine"; then echo "FAIL: '$1' changed the student's $f"; fail=1; fi
  done
  echo "ok: the edits survive '$1'"
}
run() {  # a README command; its own success does not matter here, only the files it leaves
  "$@" > "$work/log" 2>&1 || true
  survived "$*"
}
run cmake --preset student
run cmake --build --preset student --target check-lesson00
run cmake --build --preset student --target check-lesson04
run tools/progress.sh
run cmake --build --preset solutions --target skeletons
if cmake --build --preset solutions --target skeletons > "$work/log" 2>&1; then
  echo "FAIL: regenerating lessons/ over edited files reported success"; fail=1
elif ! grep -q "kept lessons/04_fa2/kernel.cu" "$work/log" && ! grep -q "kept .*lessons/04_fa2/kernel.cu" "$work/log"; then
  cat "$work/log"; echo "FAIL: the regeneration did not say it kept the edited files"; fail=1
else
  echo "ok: the skeletons target keeps edited files and says so"
fi
run cmake --workflow --preset tour
run cmake --preset solutions
run cmake --build --preset solutions
run ctest --preset solutions -L lesson04
# --force on a copy: fresh skeletons, the student's version kept beside each one it replaced.
copy=$work/lessons
cp -r lessons "$copy"
if build/solutions/bin/fa-skeleton write --force solutions "$copy" > "$work/log" 2>&1; then
  for f in "${files[@]}"; do
    rel=${f#lessons/}
    backup=$(ls "$copy/$rel".mine-* 2> /dev/null | head -1)
    if [ -z "$backup" ] || ! cmp -s "$backup" "$work/$(echo "$f" | tr / _).mine"; then
      echo "FAIL: --force did not keep the student's $rel beside the fresh one"; fail=1
    elif ! cmp -s "$copy/$rel" "$work/$(echo "$f" | tr / _).orig"; then
      echo "FAIL: --force did not write a fresh skeleton of $rel"; fail=1
    fi
  done
  [ "$fail" = 0 ] && echo "ok: --force writes fresh skeletons and keeps the student's versions beside them"
else
  cat "$work/log"; echo "FAIL: fa-skeleton write --force failed"; fail=1
fi
[ "$fail" = 0 ] && echo "a student's edits survive every command" || echo "FAIL: a command lost a student's work"
exit $fail
