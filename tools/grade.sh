#!/usr/bin/env bash
# Grades a student's lessons folder: builds every lesson from it (a lesson that does not compile
# scores 0 and the others still run), runs the suites with a per-test timeout, and prints a
# per-lesson score table (points in tests/grading.txt); writes junit.xml and summary.json.
#
#   tools/grade.sh <student-lessons-folder> [--seed N] [--level basic|full] [--perf] [--out DIR]
#                  [--build DIR] [--timeout SECONDS]
#
#   --seed N      secret inputs (FA_TEST_SEED); default: the course's public seed
#   --level full  the larger and odder shapes (FA_TEST_LEVEL=full) on top of the students' set
#   --perf        (GPU) add performance points: fa-bench times the student's kernels and the
#                 solutions' on the same GPU and shapes, and tests/grading.txt's rule scores the ratio
# Student code runs only as tests, each under a timeout, and is linked without the reference.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { sed -n '2,15p' "$0"; exit 2; }
student=$(cd "$1" && pwd)
shift
seed=${FA_TEST_SEED:-} level=basic perf=0 out="" build="$root/build/grade" timeout=300
while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed=$2; shift 2 ;;
    --level) level=$2; shift 2 ;;
    --perf) perf=1; shift ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    *) echo "unknown option $1"; exit 2 ;;
  esac
done
out=${out:-$build/report}
mkdir -p "$out"
out=$(cd "$out" && pwd)
echo "grading $student (build: $build, report: $out)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTUDENT_DIR="$student" -DFA_GRADE=ON \
      -DFA_BUILD_MUTANTS=OFF ${CMAKE_ARGS:-} > "$out/configure.log" 2>&1 || { tail -20 "$out/configure.log"; exit 1; }
# No stale results: remove the previous grading's lesson libraries, test executables and test lists,
# so a lesson that no longer compiles cannot be graded with its old binaries.
rm -f "$build"/liblesson*.a "$build"/bin/test_lesson*
find "$build" -maxdepth 2 -name 'test_lesson*_tests-*.cmake' -delete 2> /dev/null || true
# -k 0: keep going past a lesson that does not compile; its tests then fail as NOT_BUILT.
if ! cmake --build "$build" -- -k 0 > "$out/build.log" 2>&1; then
  echo "some targets did not build (their lessons score 0):"
  grep -E "^FAILED: " "$out/build.log" | sed 's/^/  /' | head -20
fi
cmake --build "$build" --target fa-grade > /dev/null
perf_args=()
if [ "$perf" = 1 ]; then
  ref="$build-solutions"
  cmake -S "$root" -B "$ref" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFA_LESSONS_DIR="$root/solutions" \
        -DFA_BUILD_MUTANTS=OFF ${CMAKE_ARGS:-} > "$out/configure-solutions.log" 2>&1
  cmake --build "$ref" --target fa-bench > "$out/build-solutions.log" 2>&1
  # The lessons with performance points; the backward ones (10, 11) are timed with --bwd.
  pick() { awk -v bwd="$1" '!/^#/ && NF == 3 && $3 > 0 { n = substr($1, 7); b = (n == "10" || n == "11");
             if (b == bwd) { printf "%s%s", sep, n; sep = "," } }' "$root/tests/grading.txt"; }
  grid=(--seqlens 4096 --head-dims 64,128 --causal 0,1 --reps 10 --max-seconds 4)
  rm -f "$out/bench-student.csv" "$out/bench-solutions.csv"
  for bwd in 0 1; do
    lessons=$(pick $bwd)
    [ -n "$lessons" ] || continue
    flags=(--lessons "$lessons" "${grid[@]}")
    [ "$bwd" = 1 ] && flags+=(--bwd)
    "$build/bin/fa-bench" "${flags[@]}" --csv "$out/bench-student.csv" >> "$out/bench-student.log" 2>&1 || true
    "$ref/bin/fa-bench" "${flags[@]}" --csv "$out/bench-solutions.csv" >> "$out/bench-solutions.log" 2>&1 || true
  done
  perf_args=(--perf "$out/bench-student.csv" "$out/bench-solutions.csv")
fi
FA_TEST_SEED=$seed FA_TEST_LEVEL=$level "$build/bin/fa-grade" --build "$build" --points "$root/tests/grading.txt" \
  --out "$out" --timeout "$timeout" "${perf_args[@]}"
