#!/usr/bin/env bash
# CI's test of the grading path (no GPU needed; issues 29 and 30). Exits 1 on any surprise.
#   1. the skeletons (CI's student build, graded as it is): every lesson not started, nothing scores
#   2. the README's points table is generated from the fa_add_lesson lines' POINTS, and every
#      shared-suite and tile-count test of the build's manifest belongs to a feature of tests/grading.txt
#   3. lesson 00 solved, lesson 02's CPU model alone (its kernel untouched), lesson 04 with a CPU
#      model that fails one feature, graded with a random secret seed: 00 full marks; 02 and 04
#      "CPU parts only" with the share they cover (02 no longer 10/10), 04 loses exactly that
#      feature; the seed is in the instructor's file and in no report a student sees; JUnit suites
#      named by lesson, each failure with its case, what is wrong and the hint
#   4. submissions that fake a pass, whose tests ctest itself counts as passed: lesson 00 exits 0
#      before main with doctest's success line, lesson 02 prints a fake summary and result line at
#      exit; and lesson 04 with a wrong CPU model (it got 4.7/15 from tests a wrong model passes):
#      all score 0
#   5. lesson 00 that copies its answer from the reference, looked up at run time (no fa::ref
#      symbol for the links_without_reference gate to see): 0; lesson 04 that does not compile: 0,
#      and the others are still graded
# Only the lessons a step needs are built (grade.sh --only), in a build of its own.
#   maintainers/test-grading.sh [work-dir] [skeleton-build]
#     work-dir        default build/test-grading
#     skeleton-build  a build of the untouched lessons/ to grade in step 1 (default build/student,
#                     which CI has built); "none" grades a copy of lessons 00, 02, 04 instead
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$root/build/test-grading}
skel=${2:-$root/build/student}
mkdir -p "$work"
work=$(cd "$work" && pwd)
report=$work/report
instr=$work/instructor
start=$SECONDS
fail() { echo "FAIL (grading test): $*"; exit 1; }
ok() { echo "ok: $*"; }
lesson_line() { grep "\"lesson\": \"$1\"" "$report/summary.json" || true; }
num() { lesson_line "$1" | sed -n "s/.*\"$2\": \([-0-9.e+]*\)[,}].*/\1/p"; }
status_of() { lesson_line "$1" | sed -n 's/.*"status": "\([^"]*\)".*/\1/p'; }
feature() { lesson_line "$1" | grep -o "{\"part\": \"$2\", \"feature\": \"$3\"[^}]*}" || true; }
near() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(d < 1e-3 && d > -1e-3) }'; }
# A fresh copy of the skeletons, as a student's folder. Only files whose text changed are written
# (put), so the build recompiles only what a step changed.
put() { cmp -s "$1" "$2" || cp "$1" "$2"; }
fresh() {
  mkdir -p "$work/student"
  (cd "$root/lessons" && find . -type f) | while IFS= read -r f; do
    mkdir -p "$work/student/$(dirname "$f")"
    put "$root/lessons/$f" "$work/student/$f"
  done
  (cd "$work/student" && find . -type f) | while IFS= read -r f; do [ -e "$root/lessons/$f" ] || rm -f "$work/student/$f"; done
}
# Writes stdin to a student file, only if its text changed.
put_text() { cat > "$work/put.tmp"; put "$work/put.tmp" "$1"; }
grade() { "$root/tools/grade.sh" "$work/student" --build "$work/build" --out "$report" --instructor "$instr" "$@" > "$work/grade.log" 2>&1 ||
            { cat "$work/grade.log"; fail "tools/grade.sh failed"; }
          sed -n '/^lesson /,/^total/p' "$work/grade.log"; }
raw_status_count() {  # how many of a lesson's tests ctest itself reported with this status
  grep -o "<testcase name=\"$1/[^\"]*\"[^>]*status=\"$2\"" "$instr/ctest-junit.xml" | wc -l; }

echo "== 1. the skeletons: every lesson not started, nothing scores"
if [ "$skel" != none ] && [ -x "$skel/bin/fa-grade" ]; then
  "$skel/bin/fa-grade" --build "$skel" --points "$skel/grading.txt" --out "$report" --instructor "$instr" \
    --lessons "$root/lessons" > "$work/grade.log" 2>&1 ||
    { cat "$work/grade.log"; fail "fa-grade failed on the skeletons"; }
  sed -n '/^lesson /,/^total/p' "$work/grade.log"
  mutate=$skel/bin/fa-mutate
  grade_tool=$skel/bin/fa-grade
  points=$skel/grading.txt
else
  fresh
  grade --only 00,02,04
  cmake --build "$work/build" --target fa-mutate > /dev/null
  mutate=$work/build/bin/fa-mutate
  grade_tool=$work/build/bin/fa-grade
  points=$work/build/grading.txt
fi
grep -q '"total": 0,' "$report/summary.json" || fail "the skeletons scored points"
for l in $(grep -o '"lesson": "lesson[0-9][0-9]"' "$report/summary.json" | grep -o 'lesson[0-9][0-9]'); do
  [ "$(status_of $l)" = "not started" ] || fail "$l should be 'not started': $(lesson_line $l)"
done
[ "$(grep -c '"status": "not started"' "$report/summary.json")" -ge 3 ] || fail "no lesson graded"
ok "the skeletons score 0, each lesson 'not started'"

echo "== 2. the README's points table (the fa_add_lesson lines' POINTS) and tests/grading.txt's features"
# The build's grading.txt: tests/grading.txt and each lesson's POINTS (cmake/FaLesson.cmake, fa_write_grading).
[ -f "$points" ] || fail "$points was not generated"
"$grade_tool" --points "$points" --check-manifest "$(dirname "$points")/manifest.txt" || fail "a shared-suite test has no feature in tests/grading.txt"
"$grade_tool" --points "$points" --points-table > "$work/points-table.md"
sed -n '/<!-- grading-points -->/,/<!-- \/grading-points -->/p' "$root/README.md" | sed '1d;$d' > "$work/readme-table.md"
if ! diff -u "$work/readme-table.md" "$work/points-table.md"; then
  fail "README.md's points table (between <!-- grading-points --> and <!-- /grading-points -->) is not fa-grade --points-table's output"
fi
ok "README.md's points table is generated from the fa_add_lesson lines' POINTS"

echo "== 3. lesson 00 solved, lesson 02's CPU model alone, lesson 04's model failing one feature; a secret seed"
fresh
put "$root/solutions/00_reference/attention.cpp" "$work/student/00_reference/attention.cpp"
for f in model.cpp online_softmax.hpp; do put "$root/solutions/02_online_softmax/$f" "$work/student/02_online_softmax/$f"; done
put "$root/solutions/04_fa2/kernel.cu" "$work/student/04_fa2/kernel.cu"
"$mutate" "$root/maintainers/mutants/cpu_04_max_starts_at_zero.mutant" "$root/solutions" "$work/mutant.cpp" > /dev/null
put "$work/mutant.cpp" "$work/student/04_fa2/model.cpp"
grade --only 00,02,04 --seed random
[ "$(status_of lesson00)" = passing ] && near "$(num lesson00 score)" 5 || fail "lesson 00 (solved) should score 5/5: $(lesson_line lesson00)"
for l in lesson02 lesson04; do
  case "$(status_of $l)" in "CPU parts only ("*) ;; *) fail "$l should be 'CPU parts only (N%)': $(lesson_line $l)" ;; esac
  share=$(num $l graded_share)
  awk -v s="$share" 'BEGIN { exit !(s > 0.2 && s < 0.8) }' || fail "$l: the CPU parts should cover part of the lesson, not $share"
done
near "$(num lesson02 score)" "$(awk -v s="$(num lesson02 graded_share)" 'BEGIN { print 10 * s }')" ||
  fail "lesson 02's CPU parts all pass: it should score 10 x their share, not 10/10: $(lesson_line lesson02)"
feature lesson04 model adversarial-inputs | grep -q '"state": "failed", "counted": false' || fail "lesson 04's model should fail adversarial-inputs: $(lesson_line lesson04)"
for f in lengths seqlen_q-ne-seqlen_k heads-and-layouts deterministic; do
  feature lesson04 model $f | grep -q '"counted": true' || fail "lesson 04's model feature $f should score: $(lesson_line lesson04)"
done
counted=$(lesson_line lesson04 | grep -o '"counted": true' | wc -l)
total=$(lesson_line lesson04 | grep -o '"counted": ' | wc -l)
near "$(num lesson04 score)" "$(awk -v c="$counted" -v t="$total" 'BEGIN { print 15 * c / t }')" ||
  fail "lesson 04 should score 15 x $counted / $total features: $(lesson_line lesson04)"
ok "full marks for lesson 00; CPU parts only, with their share, for 02 and 04; 04 loses the one feature its model fails"
seed=$(sed -n 's/^FA_TEST_SEED=//p' "$instr/seed.txt")
[[ "$seed" =~ ^[0-9]{9,20}$ ]] || fail "the instructor's seed.txt should hold the random seed: $(cat "$instr/seed.txt")"
grep -q "seed=$seed" "$instr/ctest-junit.xml" || fail "the tests' own output should show the seed (else this check proves nothing)"
if grep -rl "$seed" "$report"; then fail "the secret seed is in a report students see"; fi
grep -q 'seed=(secret)' "$report/junit.xml" || fail "the failures' case descriptions should say seed=(secret)"
grep -q '"seed": "secret"' "$report/summary.json" || fail "summary.json should say the seed is secret"
ok "the secret seed is in $instr/seed.txt and in no file of $report"
grep -q '<testsuite name="lesson00"' "$report/junit.xml" && grep -q '<testsuite name="lesson04"' "$report/junit.xml" ||
  fail "JUnit suites should be named by lesson"
if grep -q '(empty)' "$report/junit.xml"; then fail "a JUnit suite is named (empty)"; fi
msg=$(grep -A1 'classname="lesson04.model" name="forward: large negative logits"' "$report/junit.xml" | grep -o '<failure message="[^"]*"' || true)
echo "$msg" | grep -q 'seqlen_q=' && echo "$msg" | grep -q 'MISMATCH' && echo "$msg" | grep -q 'hint \[' ||
  fail "the failure's message should give its case, what is wrong and the hint: $msg"
ok "JUnit: one suite per lesson; a failure says: ${msg:0:160}..."

echo "== 4. faked passes: lesson 00 exits 0 before main, lesson 02 forges a summary at exit; lesson 04's model is wrong"
fresh
cat "$root/lessons/00_reference/attention.cpp" "$root/maintainers/cheats/exit0_static_init.cpp" | put_text "$work/student/00_reference/attention.cpp"
cat "$root/lessons/02_online_softmax/model.cpp" "$root/maintainers/cheats/fake_summary_at_exit.cpp" | put_text "$work/student/02_online_softmax/model.cpp"
put "$root/solutions/04_fa2/kernel.cu" "$work/student/04_fa2/kernel.cu"
"$mutate" "$root/maintainers/mutants/cpu_04_missing_rescale.mutant" "$root/solutions" "$work/mutant.cpp" > /dev/null
put "$work/mutant.cpp" "$work/student/04_fa2/model.cpp"
grade --only 00,02,04
for l in lesson00 lesson02; do
  fooled=$(raw_status_count $l run)
  [ "$fooled" -ge 15 ] || fail "$l's cheat should fool ctest (tests it counts as passed: $fooled); else this step proves nothing"
  near "$(num $l score)" 0 || fail "$l fakes its passes and must score 0: $(lesson_line $l)"
  [ "$(num $l unsigned_results)" -ge 15 ] || fail "$l: its tests should be reported without a valid result line: $(lesson_line $l)"
  echo "ok: $l scores 0, though ctest counted $fooled of its tests as passed"
done
near "$(num lesson04 score)" 0 || fail "lesson 04's wrong model (it fails the core, lengths) must score 0: $(lesson_line lesson04)"
ok "a wrong CPU model scores 0 from the tests a wrong model passes (rejections, determinism, all-equal scores)"

echo "== 5. lesson 00 copies the reference's answer; lesson 04 does not compile; lesson 02's model still graded"
fresh
{ echo "#include \"$root/maintainers/cheats/reads_reference.inc\""
  sed 's/naive_attention(Q, K, V, p.scale, p.causal, O, lse);/answer_from_reference(Q, K, V, p.scale, p.causal, O, lse);/' \
      "$root/solutions/00_reference/attention.cpp"; } | put_text "$work/student/00_reference/attention.cpp"
grep -q answer_from_reference "$work/student/00_reference/attention.cpp" || fail "the reads-reference cheat was not applied"
for f in model.cpp online_softmax.hpp; do put "$root/solutions/02_online_softmax/$f" "$work/student/02_online_softmax/$f"; done
{ cat "$root/lessons/04_fa2/model.cpp"; echo "this is not C++"; } | put_text "$work/student/04_fa2/model.cpp"
grade --only 00,02,04
if nm -C --undefined-only "$work/build/liblesson00.a" | grep -q "fa::ref::"; then
  fail "the cheat should not name the reference (the links_without_reference gate would catch it, proving nothing new)"
fi
near "$(num lesson00 score)" 0 || fail "lesson 00 that copies the reference's answer must score 0: $(lesson_line lesson00)"
grep -q "reference's symbol is not in this executable" "$instr/ctest-junit.xml" || fail "lesson 00's cheat should find no reference to copy"
ok "lesson 00 that looks the reference up at run time scores 0 (the grade build's executables have no symbol table)"
[ "$(status_of lesson04)" = "broken: does not compile" ] || fail "lesson 04 should be broken: $(lesson_line lesson04)"
case "$(status_of lesson02)" in "CPU parts only ("*) ;; *) fail "lesson 02 should still be graded: $(lesson_line lesson02)" ;; esac
ok "a lesson that does not compile scores 0 and the others are still graded"
echo "grading test passed ($((SECONDS - start)) s)"
