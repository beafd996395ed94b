#!/usr/bin/env bash
# Grades a student's lessons folder: builds every lesson from it (a lesson that does not compile
# scores 0 and the others still run), runs the suites with a per-test timeout, and prints a
# per-lesson score table (the rules are in tests/grading.txt, each lesson's points in its fa_add_lesson
# line, both in the build's grading.txt); writes junit.xml and
# summary.json for an LMS, and the instructor's files (the seed, the logs) apart from them.
#
#   tools/grade.sh <student-lessons-folder> [--seed N|random] [--level basic|full] [--perf]
#                  [--out DIR] [--instructor DIR] [--build DIR] [--timeout SECONDS] [--jobs N]
#                  [--only NN,NN,...] [--build-only]
#
#   --seed N      secret inputs (FA_TEST_SEED), 9 to 20 digits; `random` draws one (64 bits) and
#                 records it in the instructor's seed.txt; default: the course's public seed
#   --level full  the larger and odder shapes (FA_TEST_LEVEL=full) on top of the students' set
#   --perf        (GPU) add performance points: fa-bench times the student's kernels and the
#                 solutions' on the same GPU and shapes, and tests/grading.txt's rule scores the ratio
#   --out DIR     what students may see: junit.xml, summary.json (default: <build>/report)
#   --instructor DIR  the seed, the build and test logs, ctest's own JUnit (default: <build>/instructor)
#   --jobs N      tests run at once (default: one per core)
#   --only NN,..  grade these lessons alone (their build and tests only)
#   --build-only  configure and build (with --perf, the solutions' fa-bench too), then stop: a
#                 later grade.sh with the same folder and build only relinks
# Student code runs only as tests, each under a timeout, and is linked without the reference; a
# test counts only with the grader's signed result line (tests/grading_mac.hpp).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,22p' "$0"; exit 2; }
student=$(cd "$1" && pwd)
shift
public_seed=20261121  # runtime/random.cpp's default
seed=${FA_TEST_SEED:-} level=basic perf=0 out="" instr="" build="$root/build/grade" timeout=300 jobs="" only="" build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed=$2; shift 2 ;;
    --level) level=$2; shift 2 ;;
    --perf) perf=1; shift ;;
    --out) out=$2; shift 2 ;;
    --instructor) instr=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
if [ "$seed" = random ]; then
  seed=$(od -An -N8 -tu8 /dev/urandom | tr -d ' \n')
elif [ -n "$seed" ] && [ "$seed" != "$public_seed" ] && ! [[ "$seed" =~ ^[1-9][0-9]{8,19}$ ]]; then
  # The reports show expected values computed from the secret inputs: a short seed could be found
  # by trying them all.
  echo "a secret seed must have 9 to 20 digits (or use --seed random), got '$seed'"; exit 2
fi
jobs=${jobs:-$(nproc)}
mkdir -p "$build"
build=$(cd "$build" && pwd)
out=${out:-$build/report}
instr=${instr:-$build/instructor}
mkdir -p "$out" "$instr"
out=$(cd "$out" && pwd)
instr=$(cd "$instr" && pwd)
rm -f "$out/junit.xml" "$out/summary.json" "$instr"/*.log "$instr"/*.csv "$instr/seed.txt" "$instr/ctest-junit.xml"
start=$SECONDS
stamp() { local s=$((SECONDS - start)); printf '[%d:%02d]' $((s / 60)) $((s % 60)); }
echo "grading $student"
echo "  for students (LMS): $out"
echo "  for the instructor only (seed, logs): $instr"
# On a GPU machine a GPU test must run: a broken driver (or a test that claims there is no GPU)
# fails instead of being skipped.
if [ -z "${FA_REQUIRE_GPU:-}" ] && command -v nvidia-smi > /dev/null && nvidia-smi -L 2> /dev/null | grep -q "^GPU "; then
  export FA_REQUIRE_GPU=1
  echo "  GPU: $(nvidia-smi -L | head -1); FA_REQUIRE_GPU=1 (a GPU test that does not run fails)"
fi

labels=()
if [ -n "$only" ]; then
  IFS=, read -r -a nns <<< "$only"
  for nn in "${nns[@]}"; do labels+=("lesson$nn"); done
fi
echo "$(stamp) configuring $build"
# -s: the executables carry no symbol table, so a lesson cannot look the reference up by name at
# run time (maintainers/cheats/reads_reference.inc) to copy its answer.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTUDENT_DIR="$student" -DFA_GRADE=ON \
      -DFA_BUILD_MUTANTS=OFF -DCMAKE_EXE_LINKER_FLAGS=-s ${CMAKE_ARGS:-} > "$instr/configure.log" 2>&1 || { tail -20 "$instr/configure.log"; exit 1; }
# No stale results: remove the previous grading's lesson libraries, test executables and test lists,
# so a lesson that no longer compiles cannot be graded with its old binaries.
rm -f "$build"/liblesson*.a "$build"/bin/test_lesson*
find "$build" -maxdepth 2 -name 'test_lesson*_tests-*.cmake' -delete 2> /dev/null || true
targets=()
if [ ${#labels[@]} -gt 0 ]; then
  targets=(--target fa-grade)
  for l in "${labels[@]}"; do targets+=("build-$l"); done
fi
# -k 0: keep going past a lesson that does not compile; its tests then fail as NOT_BUILT. A line
# every 10% of the build steps.
echo "$(stamp) building (log: $instr/build.log)"
set +e
cmake --build "$build" ${targets[@]+"${targets[@]}"} -- -k 0 2>&1 | tee "$instr/build.log" | {
  shown=0
  while IFS= read -r line; do
    if [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]]; then
      pct=$(( ${BASH_REMATCH[1]} * 100 / ${BASH_REMATCH[2]} ))
      if [ $((pct / 10)) -gt "$shown" ]; then shown=$((pct / 10)); echo "  $(stamp) build ${pct}% (${BASH_REMATCH[1]}/${BASH_REMATCH[2]} steps)"; fi
    fi
  done
}
set -e
failed_lessons=$(grep -E "^FAILED: " "$instr/build.log" | grep -oE "lesson[0-9][0-9]" | sort -u | tr '\n' ' ' || true)
[ -z "$failed_lessons" ] || echo "  did not compile (their score is 0; see the build log): $failed_lessons"
if [ ! -x "$build/bin/fa-grade" ]; then echo "the course's grader (fa-grade) did not build: see $instr/build.log"; exit 1; fi
perf_args=()
if [ "$perf" = 1 ]; then
  ref="$build-solutions"
  echo "$(stamp) --perf: building the solutions' fa-bench in $ref"
  cmake -S "$root" -B "$ref" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_LESSONS_DIR="$root/solutions" \
        -DFA_BUILD_MUTANTS=OFF ${CMAKE_ARGS:-} > "$instr/configure-solutions.log" 2>&1
  cmake --build "$ref" --target fa-bench > "$instr/build-solutions.log" 2>&1
  cmake --build "$build" --target fa-bench >> "$instr/build.log" 2>&1 || true
fi
if [ "$build_only" = 1 ]; then echo "$(stamp) built (--build-only)"; exit 0; fi
if [ "$perf" = 1 ]; then
  # The lessons with performance points; the backward-only ones (10, 11, 14) are timed with --bwd. Every
  # timed case is validated first; 4001 is no multiple of any tile, so the tails are timed too.
  pick() { awk -v bwd="$1" -v only=",$only," '!/^#/ && NF == 3 && $3 > 0 { n = substr($1, 7); b = (n == "10" || n == "11" || n == "14");
             if (b == bwd && (only == ",," || index(only, "," n ","))) { printf "%s%s", sep, n; sep = "," } }' "$build/grading.txt"; }
  grid=(--seqlens 4096,4001 --head-dims 64,128 --causal 0,1 --reps 10 --max-seconds 4)
  for bwd in 0 1; do
    lessons=$(pick $bwd)
    [ -n "$lessons" ] || continue
    flags=(--lessons "$lessons" "${grid[@]}")
    [ "$bwd" = 1 ] && flags+=(--bwd)
    echo "$(stamp) --perf: timing lessons $lessons$([ "$bwd" = 1 ] && echo " (backward)"), the student's then the solutions'"
    [ -x "$build/bin/fa-bench" ] && "$build/bin/fa-bench" "${flags[@]}" --csv "$instr/bench-student.csv" >> "$instr/bench-student.log" 2>&1 || true
    "$ref/bin/fa-bench" "${flags[@]}" --csv "$instr/bench-solutions.csv" >> "$instr/bench-solutions.log" 2>&1 || true
  done
  touch "$instr/bench-student.csv" "$instr/bench-solutions.csv"
  perf_args=(--perf "$instr/bench-student.csv" "$instr/bench-solutions.csv")
fi
label_args=()
if [ ${#labels[@]} -gt 0 ]; then label_args=(--labels "$(IFS=,; echo "${labels[*]}")"); fi
echo "$(stamp) running the tests, $jobs at a time"
FA_TEST_SEED=$seed FA_TEST_LEVEL=$level "$build/bin/fa-grade" --build "$build" --points "$build/grading.txt" \
  --out "$out" --instructor "$instr" --lessons "$student" --timeout "$timeout" --jobs "$jobs" ${label_args[@]+"${label_args[@]}"} ${perf_args[@]+"${perf_args[@]}"}
echo "$(stamp) graded"
