#!/usr/bin/env bash
# tests/run.sh [all|release|asan]: builds and runs the suite. Every test program (build/tests/test_*)
# and script (tests/cli/*.sh) prints one line per case, "PASS name" or "FAIL name: why"; a program
# that exits non-zero or times out without a FAIL line counts as one failure. Last line:
# "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
ROOT=$(pwd)
MODE=${1:-all}
PASS=0
FAIL=0
FAILED_NAMES=()

run_one() { # $1 label, rest: command
  local label=$1; shift
  local out rc
  out=$(timeout 900 "$@" 2>&1); rc=$?
  local p f
  p=$(printf '%s\n' "$out" | grep -c '^PASS ' || true)
  f=$(printf '%s\n' "$out" | grep -c '^FAIL ' || true)
  printf '%s\n' "$out" | grep -E '^(FAIL |PASS )' | sed "s|^|[$label] |"
  if [ "$rc" != 0 ] && [ "$f" = 0 ]; then
    f=1
    echo "[$label] FAIL $label: exit status $rc"
    printf '%s\n' "$out" | tail -n 15 | sed "s|^|[$label]   |"
  elif [ "$f" != 0 ]; then
    printf '%s\n' "$out" | grep -v -E '^(PASS )' | tail -n 30 | sed "s|^|[$label]   |"
  fi
  PASS=$((PASS + p)); FAIL=$((FAIL + f))
  if [ "$f" != 0 ]; then FAILED_NAMES+=("$label"); fi
}

run_suite() { # $1 build dir, $2 tag
  local bdir=$1 tag=$2
  export MLXCEL_ROOT=$ROOT MLXCEL_BUILD=$ROOT/$bdir MLXCEL_BIN=$ROOT/$bdir/mlxcel
  export MLXCEL_SERVER_BIN=$ROOT/$bdir/mlxcel-server MLXCEL_TEST_TAG=$tag
  for t in "$bdir"/tests/test_*; do
    [ -x "$t" ] || continue
    basename "$t" | grep -qE "$FILTER" || continue
    run_one "$tag:$(basename "$t")" "$t"
  done
  for s in tests/cli/*.sh; do
    [ -f "$s" ] || continue
    basename "$s" | grep -qE "$FILTER" || continue
    run_one "$tag:$(basename "$s")" bash "$s"
  done
}

JOBS=$(nproc)
# MLXCEL_BUILD_DIR / MLXCEL_ASAN_BUILD_DIR choose other build folders (helpers working side by side).
BDIR=${MLXCEL_BUILD_DIR:-build}
ADIR=${MLXCEL_ASAN_BUILD_DIR:-build-asan}
# MLXCEL_TEST_FILTER: a grep -E pattern; only test programs/scripts whose name matches run.
FILTER=${MLXCEL_TEST_FILTER:-.}
LOG=$(mktemp)
if [ "$MODE" = all ] || [ "$MODE" = release ]; then
  cmake -S . -B "$BDIR" -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build "$BDIR" -j "$JOBS" >"$LOG" 2>&1 \
    || { tail -40 "$LOG"; echo "0 passed, 1 failed"; exit 1; }
  run_suite "$BDIR" release
fi
# CUDA build (CI has the toolkit but no GPU): when nvcc exists, configure and build build-cuda with
# the CUDA backend; counts as one case, "PASS cuda_build" or "FAIL cuda_build". Then its CUDA test
# programs: without a GPU they check what needs none (the MLXCEL_CUDA_* switches, device choice,
# the refusal to start); with one, every op. The GPU tests with the models and benchmarks run on
# a GPU machine: scripts/gpu_check.sh.
NVCC_BIN=${MLXCEL_NVCC:-/usr/local/cuda/bin/nvcc}
if { [ "$MODE" = all ] || [ "$MODE" = release ]; } && [ -x "$NVCC_BIN" ] && echo cuda_build | grep -qE "$FILTER"; then
  CDIR=${MLXCEL_CUDA_BUILD_DIR:-build-cuda}
  t_cuda=$(date +%s)
  if cmake -S . -B "$CDIR" -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC_BIN" >"$LOG" 2>&1 \
     && cmake --build "$CDIR" -j "$JOBS" >>"$LOG" 2>&1; then
    echo "[release] PASS cuda_build ($(( $(date +%s) - t_cuda )) s)"; PASS=$((PASS + 1))
    for t in "$CDIR"/tests/test_backend_cuda "$CDIR"/tests/test_cuda_topk; do
      [ -x "$t" ] && basename "$t" | grep -qE "$FILTER" && run_one "release:cuda:$(basename "$t")" "$t"
    done
  else
    echo "[release] FAIL cuda_build"; tail -n 30 "$LOG" | sed 's|^|[release]   |'
    FAIL=$((FAIL + 1)); FAILED_NAMES+=("cuda_build")
  fi
fi
if [ "$MODE" = all ] || [ "$MODE" = asan ]; then
  cmake -S . -B "$ADIR" -DCMAKE_BUILD_TYPE=Debug -DMLXCEL_SANITIZE=ON >/dev/null && cmake --build "$ADIR" -j "$JOBS" >"$LOG" 2>&1 \
    || { tail -40 "$LOG"; echo "$PASS passed, $((FAIL + 1)) failed"; exit 1; }
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_suite "$ADIR" asan
fi
rm -f "$LOG"
if [ ${#FAILED_NAMES[@]} -gt 0 ]; then echo "failing: ${FAILED_NAMES[*]}"; fi
echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
