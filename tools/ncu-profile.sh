#!/usr/bin/env bash
# The one profiling helper behind every lessons/NN/profile.sh: runs fa-bench under Nsight Compute
# with the metrics a lesson is about, keeps the report for the GUI, and prints a compact table.
#   tools/ncu-profile.sh <report-name> <metrics,...> <kernel-regex> <fa-bench args...>
#   tools/ncu-profile.sh --gpu-info      this machine's GPU: name, SMs, L2, bandwidth, shared
#                                        memory, compute capability (tools/gpu_info.cu), or "no GPU"
# Environment: FA_BUILD (the build folder, default build/solutions; the lessons' scripts point it
# at build/student), FA_PROFILE_DIR (where reports go, default $FA_BUILD/profiles).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FA_BUILD:-$root/build/solutions}
case "$build" in /*) ;; *) build=$PWD/$build ;; esac  # FA_BUILD=build/solutions from the checkout

# The presets' folders are configured on first use; any other FA_BUILD must already be.
ensure_configured() {
  [ -f "$build/CMakeCache.txt" ] && return 0
  case "$build" in
    "$root/build/student") (cd "$root" && cmake --preset student > /dev/null) ;;
    "$root/build/solutions") (cd "$root" && cmake --preset solutions > /dev/null) ;;
    *) echo "FA_BUILD=$build is not a configured build folder (configure it with cmake first)" >&2; return 1 ;;
  esac
}

# Builds targets quietly; on a failure, shows the end of the build's output and stops.
build_targets() {
  local log
  if ! log=$(cmake --build "$build" --target "$@" 2>&1); then
    printf '%s\n' "$log" | tail -30
    echo "building $* in $build failed (fa-bench links every lesson of the build: each must compile)"
    exit 1
  fi
}

if [ "${1:-}" = "--gpu-info" ]; then
  echo "== your GPU (tools/gpu_info.cu): the READMEs' answers use the H200's numbers; redo them with these"
  if ensure_configured && cmake --build "$build" --target fa-gpu-info > /dev/null 2>&1; then
    "$build/bin/fa-gpu-info"
  elif command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.memory,clocks.max.sm --format=csv || true
  else
    echo "no GPU information: fa-gpu-info did not build and nvidia-smi is not on PATH"
  fi
  exit 0
fi

name=$1 metrics=$2 kernels=$3
shift 3
if ! command -v ncu > /dev/null; then
  echo "ncu (Nsight Compute) is not on PATH. It ships with the CUDA Toolkit (e.g. /usr/local/cuda/bin/ncu)"
  echo "and needs a GPU. Without it you can still time the lessons: $build/bin/fa-bench $*"
  exit 2
fi
ensure_configured || exit 2
build_targets fa-bench  # always: a fa-bench older than your last edit would profile old code
outdir=${FA_PROFILE_DIR:-$build/profiles}
mkdir -p "$outdir"
report="$outdir/$name"
# --clock-control none: measure the GPU at its normal clocks (and leave its settings alone).
if ! ncu --clock-control none -f -o "$report" --metrics "$metrics" --kernel-name "regex:$kernels" \
    "$build/bin/fa-bench" --once "$@" > "$outdir/$name.log" 2>&1; then
  tail -20 "$outdir/$name.log"
  if grep -q ERR_NVGPUCTRPERM "$outdir/$name.log"; then
    cat << EOF

ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM): the NVIDIA driver keeps them
for administrators by default, on consumer cards too. Either run the profile script as root, e.g.
  sudo -E env "PATH=\$PATH" lessons/NN_name/profile.sh
or allow every user once (needs root and a reboot): put the line
  options nvidia NVreg_RestrictProfilingToAdminUsers=0
in a file under /etc/modprobe.d/, rebuild the initramfs (Debian/Ubuntu: sudo update-initramfs -u)
and reboot. NVIDIA's instructions: https://developer.nvidia.com/ERR_NVGPUCTRPERM
Without ncu, answer from the course's H200 profiles (plots/profiles/).
EOF
  fi
  exit 1
fi
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
