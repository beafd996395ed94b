#!/bin/sh
# check-lessonNN (cmake --build --preset student --target check-lessonNN): runs one lesson's tests,
# the quickest and clearest first (its own CPU tests, then its CPU model, then the GPU suites),
# shows each failure, stops before the GPU tests while a CPU test fails (fix that one first), and
# ends with one line: "lessonNN: n of m passed". It returns 0 so that the build tool's own
# "build stopped" message does not bury that line; FA_CHECK_STRICT=1 makes a failure exit 1.
#   tools/check-lesson.sh <build-dir> lessonNN
build=$1
label=$2
cd "$build" || exit 2
# Measured times would reorder the tests (longest first); the order of definition is the lesson's.
rm -f Testing/Temporary/CTestCostData.txt
log=$(mktemp)
status=0
for kind in cpu gpu; do
  if ! ctest -L "^${label}\$" -L "^${kind}\$" --output-on-failure --timeout 900 > "$log.$kind" 2>&1; then status=1; fi
  grep -vE '^(Test project|Constructing a list|Updating test list|Checking test dependency|Total Test time|Label Time Summary|    Start )' "$log.$kind" |
    grep -vE '^ *$|^[a-z0-9_]+ += +[0-9.]+ sec' | grep -vE 'tests passed, [0-9]+ tests failed out of|^Errors while running CTest|^The following tests' |
    grep -vE '^[[:space:]]+[0-9]+ - .*\((Failed|Not Run|Skipped)\)$' |
    grep -vE 'Test +#[0-9]+: .* +Passed +[0-9.]+ sec$'
  cat "$log.$kind" >> "$log"
  [ "$status" -eq 0 ] || break
done
passed=$(grep -cE 'Test +#[0-9]+: .* Passed +[0-9.]+ sec' "$log")
skipped=$(grep -cE 'Test +#[0-9]+: .*(Skipped|Not Run)' "$log")
total=$(ctest -N -L "^${label}\$" | sed -n 's/^Total Tests: //p')
ran=$(grep -cE 'Test +#[0-9]+: ' "$log")
failed=$((ran - passed - skipped))
notrun=$((total - ran))
rm -f "$log" "$log.cpu" "$log.gpu"
line="$label: $passed of $total passed"
[ "$failed" -gt 0 ] && line="$line, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped (they need a GPU)"
[ "$notrun" -gt 0 ] && line="$line, $notrun not run yet (the GPU tests run once the CPU ones pass)"
echo "$line"
if [ "$status" -ne 0 ] && [ "${FA_CHECK_STRICT:-0}" = 1 ]; then exit 1; fi
exit 0
