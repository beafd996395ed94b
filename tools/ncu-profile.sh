#!/usr/bin/env bash
# The one profiling helper behind every lessons/NN/profile.sh: runs fa-bench under Nsight Compute
# with the metrics a lesson is about, keeps the report for the GUI, and prints a compact table.
#   tools/ncu-profile.sh <report-name> <metrics,...> <kernel-regex> <fa-bench args...>
# Environment: FA_BUILD (the build folder, default build/solutions; the lessons' scripts point it
# at build/student), FA_PROFILE_DIR (where reports go, default $FA_BUILD/profiles).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FA_BUILD:-$root/build/solutions}
name=$1 metrics=$2 kernels=$3
shift 3
if ! command -v ncu > /dev/null; then
  echo "ncu (Nsight Compute) is not on PATH. It ships with the CUDA Toolkit (e.g. /usr/local/cuda/bin/ncu)"
  echo "and needs a GPU. Without it you can still time the lessons: $build/bin/fa-bench $*"
  exit 2
fi
[ -x "$build/bin/fa-bench" ] || cmake --build "$build" --target fa-bench > /dev/null
outdir=${FA_PROFILE_DIR:-$build/profiles}
mkdir -p "$outdir"
report="$outdir/$name"
# --clock-control none: measure the GPU at its normal clocks (and leave its settings alone).
ncu --clock-control none -f -o "$report" --metrics "$metrics" --kernel-name "regex:$kernels" \
    "$build/bin/fa-bench" --once "$@" > "$outdir/$name.log" 2>&1 || { tail -20 "$outdir/$name.log"; exit 1; }
echo "report: $report.ncu-rep (open it in Nsight Compute); fa-bench said:"
grep -E "ok \(validated|WRONG|ERROR" "$outdir/$name.log" | sed 's/^/  /'
# One row per kernel launch: its name (without template arguments) and each metric.
ncu --import "$report.ncu-rep" --csv --page raw --print-units base --print-kernel-base function --metrics "$metrics" 2> /dev/null | tee "$report.csv" |
  awk -v metrics="$metrics" -F'","' '
    function field(i,   v) { v = $i; gsub(/"/, "", v); return v }
    NR == 1 { for (i = 1; i <= NF; i++) { h = field(i); col[h] = i; if (h ~ /^(Kernel|Function) Name$/) name_col = i }
              n = split(metrics, m, ",");
              printf "%-4s %-28s", "#", "kernel"; for (k = 1; k <= n; k++) printf " %24s", m[k]; printf "\n"; next }
    NR == 2 { next }  # units
    { kn = name_col ? field(name_col) : "?"; sub(/^void /, "", kn); gsub(/\(anonymous namespace\)::/, "", kn);
      sub(/[<(].*/, "", kn); sub(/.*::/, "", kn);
      printf "%-4d %-28s", NR - 2, kn; for (k = 1; k <= n; k++) printf " %24s", field(col[m[k]]); printf "\n" }'
