#!/usr/bin/env bash
# tools/gpu-run.sh: configure, build and test the course on a machine with an NVIDIA GPU.
#
# usage (from anywhere in the checkout):
#   tools/gpu-run.sh                    configure, build with every core, run the whole test suite
#   tools/gpu-run.sh --part K/N         the same, but run only the K-th of N parts of the suite:
#                                       --part 1/2 then --part 2/2 run every test once between them
#   tools/gpu-run.sh -- <command...>    configure and build, then run <command> instead of the tests
#   tools/gpu-run.sh --fetch-deps       on a machine with apt: download the Debian packages of the
#                                       header-only dependencies (Eigen 3, doctest) into .deps/, to
#                                       copy along to a GPU machine that has no package registry
#   tools/gpu-run.sh --help             this text
#
# The GPU machine needs the CUDA Toolkit (nvcc), CMake >= 3.25, Ninja and a C++ compiler. Eigen 3
# and doctest are taken from the system when installed there (libeigen3-dev, doctest-dev), else
# from the .deb files in .deps/, unpacked into a prefix inside the build directory.
#
# Environment:
#   BUILD_DIR     the build directory (default build/gpu)
#   OUT           where the logs and JUnit files go (default $BUILD_DIR/logs)
#   ARCH          CUDA architectures to build for (default: the GPU present, as CMake's `native`).
#                 Lesson 13 needs sm_90a: on a GPU other than Hopper, or with an ARCH list without
#                 90a, its tests are skipped and the run fails; add CTEST_ARGS="-LE lesson13" there.
#   CMAKE_ARGS    extra configure arguments, e.g. "-DFA_BUILD_MUTANTS=OFF"
#   TARGETS       build only these targets (e.g. "build-lesson14"), not everything
#   CTEST_ARGS    extra ctest arguments, e.g. "-L lesson04" or "-R forward" (narrows the run)
#   CTEST_J       tests run at once (default: the number of cores)
#   TEST_TIMEOUT  seconds one test may take before it fails (default 300)
#
# FA_REQUIRE_GPU=1 is exported, so a GPU test that finds no usable GPU fails instead of being
# skipped, and the run fails if ctest reports any test as not run or skipped: a GPU run is green
# only when every selected test ran and passed.
set -uo pipefail

usage() { sed -n '2,/^set -uo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-run: $*" >&2; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd) || die "cannot find the repository root"
cd "$root" || die "cannot enter $root"

debs_dir=.deps
dep_packages=(libeigen3-dev doctest-dev)

fetch_deps() {
  command -v apt-get >/dev/null || die "--fetch-deps needs apt-get (Debian or Ubuntu)"
  mkdir -p "$debs_dir" || die "cannot create $debs_dir"
  rm -f "$debs_dir"/*.deb  # no older versions left beside the new ones
  if ! (cd "$debs_dir" && apt-get download "${dep_packages[@]}"); then
    echo "gpu-run: apt-get download failed; refreshing the package lists (needs root) and trying again" >&2
    if [ "$(id -u)" -eq 0 ]; then apt-get update >/dev/null || die "apt-get update failed"
    else sudo apt-get update >/dev/null || die "apt-get update failed"; fi
    (cd "$debs_dir" && apt-get download "${dep_packages[@]}") || die "apt-get download ${dep_packages[*]} failed"
  fi
  echo "gpu-run: downloaded into $root/$debs_dir:"
  ls -l "$debs_dir"/*.deb
  echo "gpu-run: copy the checkout with $debs_dir/ to the GPU machine and run tools/gpu-run.sh there"
}

# Does the system hold the CMake package file $1 where find_package looks by default?
system_has() {
  local f
  for f in /usr/share/*/cmake/"$1" /usr/lib/cmake/*/"$1" /usr/lib/*/cmake/*/"$1" \
           /usr/local/share/*/cmake/"$1" /usr/local/lib/cmake/*/"$1" /usr/local/lib/*/cmake/*/"$1"; do
    [ -f "$f" ] && return 0
  done
  return 1
}

part=""
mode="tests"
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --fetch-deps) fetch_deps; exit 0 ;;
    --part)
      [ $# -ge 2 ] || die "--part needs K/N, e.g. --part 1/2"
      part=$2; shift 2 ;;
    --part=*) part=${1#--part=}; shift ;;
    --) shift; mode="command"; break ;;
    *) die "unknown argument '$1' (try --help; a command to run goes after --)" ;;
  esac
done
if [ "$mode" = command ] && [ $# -eq 0 ]; then die "nothing to run after --"; fi
if [ "$mode" = command ] && [ -n "$part" ]; then die "--part selects tests; it does not go with -- <command>"; fi

part_k="" part_n=""
if [ -n "$part" ]; then
  [[ "$part" =~ ^([0-9]+)/([0-9]+)$ ]] || die "--part wants K/N with whole numbers, got '$part'"
  part_k=$((10#${BASH_REMATCH[1]})) part_n=$((10#${BASH_REMATCH[2]}))
  { [ "$part_n" -ge 1 ] && [ "$part_k" -ge 1 ] && [ "$part_k" -le "$part_n" ]; } ||
    die "--part K/N needs 1 <= K <= N, got '$part'"
fi

build=${BUILD_DIR:-build/gpu}
out=${OUT:-$build/logs}
mkdir -p "$out" || die "cannot create the log directory $out"
out=$(cd "$out" && pwd) || die "cannot enter $out"
jobs=$(nproc 2>/dev/null || echo 4)
suffix=""
[ -n "$part" ] && suffix="-part${part_k}of${part_n}"
echo "gpu-run: build directory $build, logs in $out"

export FA_REQUIRE_GPU=1

# 1. The GPU.
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>/dev/null ||
    nvidia-smi -L || echo "gpu-run: nvidia-smi failed: the GPU tests will fail (FA_REQUIRE_GPU=1)"
else
  echo "gpu-run: no nvidia-smi on PATH: no GPU driver? The GPU tests will fail (FA_REQUIRE_GPU=1)"
fi

# 2. Eigen 3 and doctest: from the system, else from .deps/*.deb.
prefix_args=()
if system_has Eigen3Config.cmake && system_has doctestConfig.cmake; then
  echo "gpu-run: Eigen 3 and doctest from the system"
elif compgen -G "$debs_dir/*.deb" >/dev/null; then
  deps_root=$build/deps
  mkdir -p "$deps_root" || die "cannot create $deps_root"
  for f in "$debs_dir"/*.deb; do
    dpkg -x "$f" "$deps_root" || die "dpkg -x $f failed"
  done
  deps_prefix=$(cd "$deps_root/usr" && pwd) || die "$debs_dir/*.deb held no usr/ tree"
  prefix_args=(-DCMAKE_PREFIX_PATH="$deps_prefix")
  echo "gpu-run: Eigen 3 and doctest unpacked from $debs_dir/ into $deps_prefix"
elif [ -n "${CMAKE_PREFIX_PATH:-}" ]; then
  echo "gpu-run: Eigen 3 or doctest not in the system paths; trying CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH"
else
  die "Eigen 3 and doctest not found. Install them (sudo apt-get install libeigen3-dev doctest-dev), or
run tools/gpu-run.sh --fetch-deps on a machine with apt and copy .deps/ to this checkout."
fi

# 3. Configure. Without ARCH the project picks the architectures itself (cmake/Architectures.cmake):
# `native` when it finds a GPU, and lesson 13 alone for sm_90a on a Hopper GPU. Passing `native`
# here would not do the same: an explicit list makes lesson 13 skip unless it names 90a.
arch_args=(-UCMAKE_CUDA_ARCHITECTURES)
[ -n "${ARCH:-}" ] && arch_args=(-DCMAKE_CUDA_ARCHITECTURES="$ARCH")
read -ra extra_cmake <<< "${CMAKE_ARGS:-}"
echo "gpu-run: configuring (log: $out/configure.log)"
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${arch_args[@]}" "${prefix_args[@]}" \
       "${extra_cmake[@]}" > "$out/configure.log" 2>&1; then
  tail -n 40 "$out/configure.log"
  die "configure failed (full log: $out/configure.log)"
fi
archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")
echo "gpu-run: CUDA architectures: ${archs:-?}"

# 4. Build with every core.
echo "gpu-run: building with $jobs jobs (log: $out/build.log)"
read -ra targets <<< "${TARGETS:-}"
target_args=()
[ ${#targets[@]} -gt 0 ] && target_args=(--target "${targets[@]}")
if ! cmake --build "$build" -j "$jobs" "${target_args[@]}" > "$out/build.log" 2>&1; then
  grep -E "error|Error|FAILED" "$out/build.log" | head -n 40
  die "build failed (full log: $out/build.log)"
fi
echo "gpu-run: build ok"

# 5a. A command instead of the tests.
if [ "$mode" = command ]; then
  echo "gpu-run: running $* (log: $out/command.log)"
  "$@" 2>&1 | tee "$out/command.log"
  exit "${PIPESTATUS[0]}"
fi

# 5b. The tests, or part K of N: ctest's -I K,,N runs tests K, K + N, K + 2N, ... of the list.
read -ra extra_ctest <<< "${CTEST_ARGS:-}"
part_args=()
[ -n "$part" ] && part_args=(-I "$part_k,,$part_n")
log=$out/ctest$suffix.log
junit=$out/junit$suffix.xml
echo "gpu-run: ctest -j ${CTEST_J:-$jobs}${part:+, part $part} (log: $log, JUnit: $junit)"
ctest --test-dir "$build" --output-on-failure --timeout "${TEST_TIMEOUT:-300}" -j "${CTEST_J:-$jobs}" \
      --output-junit "$junit" "${part_args[@]}" "${extra_ctest[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
summary=$(grep -E "tests passed.* out of [0-9]+" "$log" | tail -n 1)
if grep -q "No tests were found" "$log"; then
  echo "gpu-run: FAIL: no test matched (CTEST_ARGS='${CTEST_ARGS:-}'${part:+, part $part})"
  exit 1
fi
if grep -Eq "\*\*\*Not Run|\*\*\*Skipped|tests did not run" "$log"; then
  echo "gpu-run: FAIL: tests were not run or skipped on the GPU machine (see 'did not run' above)"
  exit 1
fi
echo "gpu-run: ${part:+part $part: }${summary:-no ctest summary line} (exit $rc)"
exit "$rc"
