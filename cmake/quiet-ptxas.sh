#!/bin/sh
# The CUDA compiler launcher of the lesson libraries (cmake/FaLesson.cmake): runs the compile
# command it is given, keeps ptxas's per-kernel report (-Xptxas=-v: registers, stack, spills) in
# <object>.ptxas.log beside the object, and prints everything else (errors, warnings), plus one
# line per kernel that spills registers or whose wgmma instructions are serialised. A build stays
# readable, and CI still reads every report.
out=""
prev=""
for a in "$@"; do
  [ "$prev" = "-o" ] && out=$a
  prev=$a
done
log=$(mktemp)
"$@" > "$log" 2>&1
rc=$?
if [ -n "$out" ]; then
  grep -E '^ptxas info|^ *[0-9]+ bytes stack frame' "$log" > "$out.ptxas.log"
fi
grep -vE '^ptxas info|^ *[0-9]+ bytes stack frame' "$log"
grep -B2 -E '[1-9][0-9]* bytes spill (stores|loads)' "$log" | grep -E "Function properties|bytes spill" |
  sed 's/^/spill: /'
# ... and one per kernel whose wgmma ptxas serialised (C7511, C7514, C7520: each wgmma then waits
# for the one before, and the tensor cores idle between them).
grep -E 'wgmma.*serializ' "$log" | sed 's/^ptxas info *: */serialised: /'
rm -f "$log"
exit $rc
