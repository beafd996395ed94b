#!/usr/bin/env bash
# maintainers/student-lines.sh: the lines of code a student must read, per lesson, and the budgets
# they must stay within (CI runs it; a maintainer after changing a lesson).
#
# A lesson's lines: its own code files under lessons/ (.cu, .cuh, .hpp, .h, .cpp: the README is the
# lesson's text and not counted) plus the course headers (include/fa/...) they include, directly or
# through each other, that no earlier lesson's files included: a header is read once, in the lesson
# that first needs it. An earlier lesson's own header (#include "13_hopper/wgmma.hpp") was read in
# that lesson and is not counted again.
#
# Budgets: every lesson under 1,500 lines; lesson 12's skeleton kernel files (its .cu and .cuh)
# under 600 in all; lesson 13's solution kernel.cu under 400 (met since its seams were cut:
# producer.cuh, consumer.cuh, pipeline.hpp, schedule.hpp). Lesson 12's files fell from one
# 1,443-line kernel.cu (a 1,310-line skeleton, most of it lessons 08 and 11 again) as its seams were
# cut: its forward became lesson 08's kernel over its own query tiles, its dK/dV kernel, preprocess
# and dQ pass lesson 11's over its own tiles, its host side lesson 11's launches and the course's
# scratch pieces, its plan the course's tile map (fa/tile_map.cuh); then comments that restated
# the code were cut, and the dK/dV kernel came to read a KeyTile (lesson 11's dkdv.cuh) instead of a
# dozen accessors each source wrote, and dense batches the tile map like packed ones: 598 lines.
#
# usage: maintainers/student-lines.sh        the table, then the checks; exit 1 if a budget is broken
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || exit 1
cd "$root" || exit 1

limit_lesson=1500
limit_l12_cu=600
limit_l13_kernel=400

# The course headers a file includes, directly or through each other (absolute paths, one a line).
declare -A seen_in_walk
walk() {
  local file=$1 dir inc target
  dir=$(dirname "$file")
  while IFS= read -r inc; do
    target=""
    if [ -f "$dir/$inc" ]; then target=$(realpath "$dir/$inc")
    elif [ -f "include/$inc" ]; then target=$(realpath "include/$inc")
    elif [ -f "lessons/$inc" ]; then target=$(realpath "lessons/$inc")
    fi
    [ -n "$target" ] || continue
    [ -n "${seen_in_walk[$target]:-}" ] && continue
    seen_in_walk[$target]=1
    echo "$target"
    walk "$target"
  done < <(sed -n 's/^[[:space:]]*#include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
}

declare -A introduced  # course header -> the lesson that first included it
fail=0
printf "%-26s %8s %12s %8s %8s\n" lesson "own" "new headers" total budget
for d in lessons/[0-9][0-9]_*/; do
  d=${d%/}
  name=$(basename "$d")
  mapfile -t own < <(find "$d" -maxdepth 1 -type f \( -name '*.cu' -o -name '*.cuh' -o -name '*.hpp' -o -name '*.h' -o -name '*.cpp' \) | sort)
  own_lines=0
  [ ${#own[@]} -gt 0 ] && own_lines=$(cat "${own[@]}" | wc -l)
  unset seen_in_walk
  declare -A seen_in_walk
  new_lines=0
  for f in "${own[@]}"; do
    while IFS= read -r h; do
      case "$h" in "$root"/include/*) ;; *) continue ;; esac
      if [ -z "${introduced[$h]:-}" ]; then
        introduced[$h]=$name
        new_lines=$(( new_lines + $(wc -l < "$h") ))
      fi
    done < <(walk "$(realpath "$f")")
  done
  total=$(( own_lines + new_lines ))
  budget=$limit_lesson
  printf "%-26s %8d %12d %8d %8d\n" "$name" "$own_lines" "$new_lines" "$total" "$budget"
  if [ "$total" -ge "$budget" ]; then echo "student-lines: $name: $total lines to read, over its budget of $budget"; fail=1; fi
done

l12_cu=$(cat lessons/12_*/*.cu lessons/12_*/*.cuh | wc -l)
l13_kernel=$(wc -l < solutions/13_hopper/kernel.cu)
echo "lesson 12's skeleton kernel files (.cu, .cuh): $l12_cu lines (under $limit_l12_cu)"
echo "lesson 13's solution kernel.cu: $l13_kernel lines (under $limit_l13_kernel)"
[ "$l12_cu" -ge "$limit_l12_cu" ] && { echo "student-lines: lesson 12's skeleton kernel files have $l12_cu lines, $limit_l12_cu or more"; fail=1; }
[ "$l13_kernel" -ge "$limit_l13_kernel" ] && { echo "student-lines: lesson 13's kernel.cu has $l13_kernel lines, $limit_l13_kernel or more"; fail=1; }
if [ $fail -ne 0 ]; then echo "student-lines: over budget (maintainers/student-lines.sh says why)"; exit 1; fi
echo "student-lines: every lesson within its budget"
