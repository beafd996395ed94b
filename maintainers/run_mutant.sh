#!/bin/sh
# Runs a suite executable against one mutant (FA_MUTANT) and passes only when the suite rejects
# it by a numerical failure: doctest's exit code 1 with a MISMATCH report. "none" is the control:
# the unmutated implementation must pass, or the rejections prove nothing.
# With a third argument, the hint the rejection must give (tests/hints.hpp): its id, or "none".
# Every hint the report gives must be that one: a hint that names another bug fails the test, and
# so does a missing one.
# usage: run_mutant.sh <suite-executable> <mutant> [<hint id>|none]
exe=$1
mutant=$2
expect=${3:-}
# A mutant is rejected at its first failed check (--abort-after=1); the control runs everything.
if [ "$mutant" = none ]; then stop=""; else stop="--abort-after=1"; fi
out=$(FA_MUTANT="$mutant" "$exe" $stop 2>&1)
rc=$?
if [ "$rc" -eq 77 ]; then echo "$out"; exit 77; fi
if [ "$mutant" = none ]; then
  if [ "$rc" -eq 0 ]; then echo "control passed: the unmutated implementation passes the suite"; exit 0; fi
  echo "$out" | tail -40; echo "FAIL: the control (no mutation) does not pass the suite (exit $rc)"; exit 1
fi
if [ "$rc" -eq 1 ] && printf '%s\n' "$out" | grep -q "MISMATCH"; then
  printf '%s\n' "$out" | grep -m 3 "MISMATCH"
  hints=$(printf '%s\n' "$out" | sed -n 's/.*hint \[\([a-z0-9-]*\)\]:.*/\1/p' | sort -u)
  printf '%s\n' "$out" | grep "hint \[" | sort -u
  echo "mutant '$mutant' rejected by a numerical failure; hints given: [$(echo $hints)]"
  [ -n "$expect" ] || exit 0
  for h in $hints; do
    if [ "$h" != "$expect" ]; then
      echo "FAIL: the report hints [$h], but this mutant's bug is [$expect]: a hint must never point at another bug"
      exit 1
    fi
  done
  if [ "$expect" != none ] && [ -z "$hints" ]; then
    echo "FAIL: no hint; this mutant's bug should get [$expect] (tests/hints.cpp)"
    exit 1
  fi
  exit 0
fi
echo "$out" | tail -40
echo "FAIL: mutant '$mutant' was not rejected by a numerical failure (exit $rc)"
exit 1
