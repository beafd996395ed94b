#!/bin/sh
# Runs a suite executable against one mutant (FA_MUTANT) and passes only when the suite rejects
# it by a numerical failure: doctest's exit code 1 with a MISMATCH report. "none" is the control:
# the unmutated implementation must pass, or the rejections prove nothing.
# usage: run_mutant.sh <suite-executable> <mutant>
exe=$1
mutant=$2
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
  echo "mutant '$mutant' rejected by a numerical failure"
  exit 0
fi
echo "$out" | tail -40
echo "FAIL: mutant '$mutant' was not rejected by a numerical failure (exit $rc)"
exit 1
