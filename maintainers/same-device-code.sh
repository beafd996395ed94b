#!/usr/bin/env bash
# Does a change leave every kernel as it was? Compares the device code (the SASS of every kernel,
# for every architecture compiled) of each lesson between two builds of the course, for example
# the tree before a refactor and after it, configured alike:
#   git worktree add /tmp/before HEAD~1
#   cmake -S /tmp/before -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_LESSONS_DIR=/tmp/before/solutions -DFA_BUILD_MUTANTS=OFF
#   cmake --build /tmp/before/build --target lesson01 ... lesson14      (and the same for this tree)
#   maintainers/same-device-code.sh /tmp/before/build build/dev
# Prints "same" or "DIFFERENT" per lesson object and exits 1 if any differs or is missing. The
# anonymous namespaces' names (a hash of the source's path) are ignored; everything else of the
# disassembly must match: "same" for every lesson means the change cannot have moved a kernel's
# speed or results, so a host-only refactor needs no new benchmark. It needs cuobjdump and nvdisasm
# (the CUDA Toolkit's bin/, or pip's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm packages; set
# CUOBJDUMP to the binary, with nvdisasm beside it or on PATH).
set -uo pipefail
[ $# -eq 2 ] || { echo "usage: $0 <build-before> <build-after>"; exit 2; }
a=$1 b=$2
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[ -x "$cuobjdump" ] || { echo "no cuobjdump (set CUOBJDUMP; pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm has both)"; exit 2; }
export PATH="$(dirname "$cuobjdump"):$PATH"
command -v nvdisasm > /dev/null || { echo "no nvdisasm beside $cuobjdump or on PATH"; exit 2; }
sass() {
  "$cuobjdump" -sass "$1" | sed -E 's/_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9]+_cu_[0-9a-f]+/ANON/g' |
    grep -v -E '^\s*$|identifier = ' || return 1
}
objects=$(cd "$a" && find CMakeFiles -path '*lesson[0-9][0-9].dir/*' -name '*.cu.o' | sort)
[ -n "$objects" ] || { echo "no lesson objects under $a/CMakeFiles"; exit 2; }
rc=0
for o in $objects; do
  if [ ! -f "$b/$o" ]; then echo "MISSING in $b: $o"; rc=1; continue; fi
  sa=$(sass "$a/$o") || { echo "cannot disassemble $a/$o"; rc=1; continue; }
  sb=$(sass "$b/$o") || { echo "cannot disassemble $b/$o"; rc=1; continue; }
  n=$(grep -c 'Function :' <<< "$sa")
  [ "$n" -gt 0 ] || { echo "no kernels in $a/$o"; rc=1; continue; }
  if [ "$sa" == "$sb" ]; then
    echo "same       $o ($n kernels x architectures)"
  else
    echo "DIFFERENT  $o: $(diff <(echo "$sa") <(echo "$sb") | grep -c '^[<>]') lines differ"; rc=1
  fi
done
exit $rc
