#!/usr/bin/env bash
# A/B timing of this tree against an earlier commit, old and new built from their own trees and
# timed alternately in one call (what a refactor's "within 2%" needs, and a step table's rows).
#
#   maintainers/ab-bench.sh prepare <rev>
#       (here, with git) writes the tree of <rev> to .ab/base/ (ignored by git: carry .ab to the
#       GPU machine, and .deps for Eigen and doctest: tools/gpu-run.sh --fetch-deps)
#   maintainers/ab-bench.sh run [rounds] -- <fa-bench args, with --lessons>
#       (on the GPU machine) builds fa-bench in .ab/base and in this tree with each tree's
#       tools/gpu-run.sh (only the lessons named by --lessons, and 08 for --bwd's forward), then runs base, new, base, new, ... `rounds`
#       times (default 2) with the same arguments, each into .ab/out/base.csv or new.csv, and
#       prints per case the median TFLOP/s of each and new / base. Exit 1 if a run fails.
#
# Example: maintainers/ab-bench.sh prepare 3602ccd, then on the GPU machine
#   maintainers/ab-bench.sh run 2 -- --lessons 13 --seqlens 4096,8192,16384 --dtypes fp16,bf16
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
die() { echo "ab-bench: $*" >&2; exit 1; }
grep -qx '/.ab/' .git/info/exclude 2>/dev/null || { [ -d .git ] && mkdir -p .git/info && echo '/.ab/' >> .git/info/exclude; } || true

case "${1:-}" in
  prepare)
    [ $# -eq 2 ] || die "usage: $0 prepare <rev>"
    command -v git > /dev/null && [ -d .git ] || die "prepare needs the git checkout"
    rev=$(git rev-parse --short "$2") || die "no commit $2"
    rm -rf .ab/base && mkdir -p .ab/base
    git archive "$rev" | tar -x -C .ab/base
    echo "$rev" > .ab/base/.ab-rev
    echo "ab-bench: .ab/base holds $rev ($(du -sh .ab/base | cut -f1)); carry .ab and run: $0 run [rounds] -- <fa-bench args>"
    ;;
  run)
    shift
    rounds=2
    if [ $# -gt 0 ] && [ "$1" != "--" ]; then rounds=$1; shift; fi
    [[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "rounds must be a whole number >= 1"
    [ "${1:-}" = "--" ] || die "usage: $0 run [rounds] -- <fa-bench args>"
    shift
    args=("$@")
    [ -f .ab/base/.ab-rev ] || die "no .ab/base: run '$0 prepare <rev>' where git is, and carry .ab"
    lessons=""
    for ((i = 0; i < ${#args[@]}; ++i)); do [ "${args[$i]}" = "--lessons" ] && lessons=${args[$((i + 1))]:-}; done
    [ -n "$lessons" ] && [ "$lessons" != all ] || die "give --lessons NN[,NN] (only those are built)"
    bench_lessons=${lessons//,/;}
    [[ " ${args[*]} " == *" --bwd "* ]] && [[ ";$bench_lessons;" != *";08;"* ]] && bench_lessons="$bench_lessons;08"
    # Each tree builds its fa-bench with its own tools/gpu-run.sh (which finds Eigen and doctest in
    # the system or in .deps/, from tools/gpu-run.sh --fetch-deps): the base tree gets this tree's .deps.
    [ -d .deps ] && { rm -rf .ab/base/.deps; cp -r .deps .ab/base/.deps; }
    for side in base new; do
      src=$root
      [ $side = base ] && src=$root/.ab/base
      echo "ab-bench: building $side ($([ $side = base ] && cat .ab/base/.ab-rev || echo this tree)) fa-bench for lessons $bench_lessons"
      BUILD_DIR="$root/.ab/build-$side" OUT="$root/.ab/logs-$side" TARGETS=fa-bench \
        CMAKE_ARGS="-DFA_BUILD_MUTANTS=OFF -DFA_BENCH_LESSONS=$bench_lessons" "$src/tools/gpu-run.sh" -- true > "$root/.ab/build-$side.log" 2>&1 ||
        { tail -20 "$root/.ab/build-$side.log"; die "building $side failed (tools/gpu-run.sh's logs: .ab/logs-$side)"; }
    done
    mkdir -p .ab/out
    rm -f .ab/out/base.csv .ab/out/new.csv
    for ((r = 1; r <= rounds; ++r)); do
      for side in base new; do
        echo "ab-bench: round $r of $rounds, $side"
        .ab/build-$side/bin/fa-bench "${args[@]}" --csv ".ab/out/$side.csv" > ".ab/out/$side-round$r.log" 2>&1 ||
          { tail -5 ".ab/out/$side-round$r.log"; die "fa-bench ($side, round $r) failed"; }
      done
    done
    python3 - .ab/out/base.csv .ab/out/new.csv <<'PY'
import csv, statistics, sys
def read(path):
    runs = {}
    for r in csv.DictReader(open(path)):
        if r["status"] != "ok":
            continue
        key = (r["lesson"], r["dtype"], r["head_dim"], r["causal"], r["seqlen"])
        runs.setdefault(key, []).append(float(r["tflops"]))
    return runs
base, new = read(sys.argv[1]), read(sys.argv[2])
print(f"{'lesson':<28} {'dtype':<5} {'d':>4} {'causal':>6} {'N':>6} {'base':>8} {'new':>8} {'new/base':>9}")
for key in sorted(base):
    if key in new:
        b, n = statistics.median(base[key]), statistics.median(new[key])
        print(f"{key[0]:<28} {key[1]:<5} {key[2]:>4} {key[3]:>6} {key[4]:>6} {b:8.1f} {n:8.1f} {n / b:9.3f}")
PY
    ;;
  *) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
