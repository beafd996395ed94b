#!/usr/bin/env bash
# Does a change leave every kernel as it was? Compares the device code (the SASS of every kernel,
# for every architecture compiled) of each lesson between two builds of the course, for example
# the tree before a refactor and after it, configured alike:
#   git worktree add /tmp/before HEAD~1
#   cmake -S /tmp/before -B /tmp/before/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_LESSONS_DIR=/tmp/before/solutions -DFA_BUILD_MUTANTS=OFF
#   cmake --build /tmp/before/build --target lesson01 ... lesson14      (and the same for this tree)
#   maintainers/same-device-code.sh /tmp/before/build build/dev
#   maintainers/same-device-code.sh --by-body /tmp/before/build build/dev
# Per lesson, the kernels of all its objects are compared by name, so a kernel moved to another
# file of the lesson still compares with itself. With --by-body, by their instructions alone,
# names aside: for a change that renames kernels or their template arguments (a kernel moved into
# a namespace, a template parameter that became a type), "same" means every kernel body of one
# build is a body of the other, per architecture; how many kernels share a body may differ (two
# instantiations that became one type), and the line says so. Prints "same" or "DIFFERENT" (with the kernels
# that differ) per lesson, and exits 1 if any differs or is missing. The anonymous namespaces'
# names (a hash of the source file's name) are ignored; everything else of the disassembly must
# match: "same" for every lesson means the change cannot have moved a kernel's speed or results,
# so a host-only refactor needs no new benchmark. It needs cuobjdump and nvdisasm (the CUDA
# Toolkit's bin/, or pip's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm packages; set CUOBJDUMP
# to the binary, with nvdisasm beside it or on PATH).
set -uo pipefail
by_body=0
if [ "${1:-}" = --by-body ]; then by_body=1; shift; fi
[ $# -eq 2 ] || { echo "usage: $0 [--by-body] <build-before> <build-after>"; exit 2; }
a=$1 b=$2
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)}
[ -x "$cuobjdump" ] || { echo "no cuobjdump (set CUOBJDUMP; pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm has both)"; exit 2; }
export PATH="$(dirname "$cuobjdump"):$PATH"
command -v nvdisasm > /dev/null || { echo "no nvdisasm beside $cuobjdump or on PATH"; exit 2; }
# The SASS of a lesson's objects (build $1, lesson directory $2), one file: each kernel's
# instructions under its name (anonymous namespaces folded), addresses and encodings dropped.
sass() {
  local objs
  objs=$(find "$1/CMakeFiles/$2" -name '*.cu.o' 2> /dev/null | sort)
  [ -n "$objs" ] || return 3  # a CPU lesson (00): no device code
  for o in $objs; do "$cuobjdump" -sass "$o" || return 1; done |
    sed -E 's/_GLOBAL__N__[0-9a-f]+_[0-9]+_[A-Za-z0-9]+_cu_[0-9a-f]+/ANON/g; s/_ZN[0-9]+ANON/_ZNANON/g' > "$3"
}
rc=0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lessons=$(cd "$a/CMakeFiles" && ls -d lesson[0-9][0-9].dir 2> /dev/null)
[ -n "$lessons" ] || { echo "no lesson objects under $a/CMakeFiles"; exit 2; }
for l in $lessons; do
  sass "$a" "$l" "$work/a"
  case $? in
    0) ;;
    3) continue ;;
    *) echo "cannot disassemble $a's $l"; rc=1; continue ;;
  esac
  sass "$b" "$l" "$work/b" || { echo "MISSING or cannot disassemble in $b: $l"; rc=1; continue; }
  verdict=$(python3 - "$work/a" "$work/b" "$by_body" <<'PY'
import collections, re, sys
def kernels(path):
    out, cur, arch = {}, None, ""
    for line in open(path):
        if "code for sm_" in line:
            arch = line.strip()
        if line.startswith("Fatbin") or re.match(r"\s*(identifier|arch|code version|host|compile_size|ptxasOptions) =|\s*compressed|=+$", line):
            cur = None  # the object's header: its source path differs between trees
            continue
        m = re.search(r"Function : (\S+)", line)
        if m:
            cur = (arch, m.group(1))
            out[cur] = []
        elif cur and line.strip():
            text = re.sub(r"/\*[0-9a-f]{4,}\*/|/\* 0x[0-9a-f]+ \*/", "", line).strip()
            if text:
                out[cur].append(text)
    return out
a, b = kernels(sys.argv[1]), kernels(sys.argv[2])
if not a:
    print("NOKERNELS")
    sys.exit()
if sys.argv[3] == "1":
    # By body: per architecture, the set of kernel bodies, each with the names that have it.
    def bodies(ks):
        out = collections.defaultdict(list)
        for (arch, name), body in ks.items():
            out[(arch, tuple(body))].append(name)
        return out
    ba, bb = bodies(a), bodies(b)
    only = [(w, key) for w, x, y in (("before", ba, bb), ("after", bb, ba)) for key in x if key not in y]
    merged = sum(1 for key in ba if key in bb and len(ba[key]) != len(bb[key]))
    note = f"({merged} bodies shared by a different number of kernels)" if merged else ""
    print(f"{len(a)} {len(only)} " + (" ".join(f"only-{w}:{key[0].split()[-1]}:{ba.get(key, bb.get(key))[0]}" for w, key in only[:8]) or note))
    sys.exit()
diff = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
print(f"{len(a)} {len(diff)} " + " ".join(f"{k[0].split()[-1]}:{k[1]}" for k in diff[:8]))
PY
)
  set -- $verdict
  if [ "$1" = NOKERNELS ]; then echo "no kernels in $a's $l"; rc=1; continue; fi
  n=$1 nd=$2; shift 2
  how=""
  [ $by_body = 1 ] && how=", compared by body"
  if [ "$nd" = 0 ]; then
    echo "same       ${l%.dir} ($n kernels x architectures$how) $*"
  else
    if [ $by_body = 1 ]; then echo "DIFFERENT  ${l%.dir}: $nd kernel bodies x architectures are in one build only: $*"
    else echo "DIFFERENT  ${l%.dir}: $nd of $n kernels x architectures differ: $*"; fi
    rc=1
  fi
done
exit $rc
