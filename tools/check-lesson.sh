#!/bin/sh
# check-lessonNN (cmake --build --preset student --target check-lessonNN): runs one lesson's tests,
# the quickest and clearest first (its own CPU tests, then its CPU model, then the GPU suites),
# shows each failure once, stops before the GPU tests while a CPU test fails (fix that one first),
# and ends with one line: "lessonNN: n of m passed". It returns 0 so that the build tool's own
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
  # Each failed test's output once, without doctest's banners; a test that stops at "not
  # implemented yet" is counted, and the first such message printed once at the end.
  awk '
    function flush() {
      if (name == "") return
      if (block ~ /not implemented yet/) { todo++; if (msg == "") msg = first_todo }
      else printf "\n---- %s\n%s", name, block
      name = ""; block = ""; first_todo = ""
    }
    /^ *[0-9]+\/[0-9]+ Test +#[0-9]+: / {
      flush()
      if ($0 ~ /\*\*\*(Failed|Timeout|Exception)|\*\*\*/ && $0 !~ /Skipped|Not Run/) { name = $0; sub(/^ *[0-9]+\/[0-9]+ Test +#[0-9]+: /, "", name); sub(/ \.+.*$/, "", name) }
      next
    }
    /^ +Start +[0-9]+: / { flush(); next }
    /tests passed|tests failed out of|^Total Test time|^The following tests|^Errors while running CTest|^Label Time Summary|^Test project|^[a-z0-9_.]+ += / { flush(); name = ""; next }
    name == "" { next }
    /^\[doctest\] |^FA_TEST_SEED=|^=+$|^ *$/ { next }
    /hint \[[a-z0-9-]+\]:/ {  # each hint once per run
      id = $0; sub(/^.*hint \[/, "", id); sub(/\].*$/, "", id)
      if (seen[id]++) { block = block "  hint [" id "]: as above\n"; next }
    }
    { if (first_todo == "" && $0 ~ /not implemented yet/) { first_todo = $0; sub(/^.*ERROR: /, "", first_todo) }
      block = block $0 "\n" }
    END {
      flush()
      if (todo > 0) printf "\n%d test(s) stop at: %s\n", todo, msg
    }' "$log.$kind"
  cat "$log.$kind" >> "$log"
  [ "$status" -eq 0 ] || break
done
passed=$(grep -cE 'Test +#[0-9]+: .* Passed +[0-9.]+ sec' "$log")
skipped=$(grep -cE 'Test +#[0-9]+: .*(Skipped|Not Run)' "$log")
total=$(ctest -N -L "^${label}\$" | sed -n 's/^Total Tests: //p')
ran=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: ' "$log")
failed=$((ran - passed - skipped))
notrun=$((total - ran))
rm -f "$log" "$log.cpu" "$log.gpu"
line="$label: $passed of $total passed"
[ "$failed" -gt 0 ] && line="$line, $failed failed"
[ "$skipped" -gt 0 ] && line="$line, $skipped skipped (they need a GPU)"
[ "$notrun" -gt 0 ] && line="$line, $notrun not run yet (the GPU tests run once the CPU ones pass)"
echo
echo "$line"
if [ "$status" -ne 0 ] && [ "${FA_CHECK_STRICT:-0}" = 1 ]; then exit 1; fi
exit 0
