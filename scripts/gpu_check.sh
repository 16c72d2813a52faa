#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU tests and benchmarks in one go, for a machine with an NVIDIA GPU
# and the CUDA 13 toolkit (e.g. one call of the `device` tool). It builds the CUDA backend, runs
# its op tests against the CPU reference (tests/unit/test_backend_cuda.c), then the benchmarks
# (device copy rate, matvec kernels, synthetic decode/prefill steps), and prints a short table
# last. Logs go to OUTDIR (default $OUT, else /tmp/gpu_check).
#
#   bash scripts/gpu_check.sh [OUTDIR]        GPU_CHECK_BENCH=0 skips the benchmarks
#
# When the -dev packages of the full build (scripts/setup.sh) are present it builds everything
# with CMake (build-cuda-gpu/) and also runs the model tests with MLXCEL_DEVICE=gpu; otherwise
# (a bare GPU machine without network) it builds only core + backends + the CUDA test program.
set -u
cd "$(dirname "$0")/.."
OUTD=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUTD"
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
B=build-cuda-gpu
T=$B/tests/test_backend_cuda
ARCHS=${GPU_CHECK_ARCHS:-"90a-real;90-virtual"}
t0=$(date +%s)

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUTD/gpu.txt"
"$NVCC" --version | tail -2

full=1
[ "${GPU_CHECK_MINIMAL:-0}" = 1 ] && full=0
command -v pkg-config >/dev/null || full=0
for p in jansson libpcre2-8 libutf8proc liblzma libmicrohttpd libcurl; do
  if [ $full = 1 ] && ! pkg-config --exists $p 2>/dev/null; then echo "note: $p -dev not found"; full=0; fi
done

build_ok=0
if [ $full = 1 ]; then
  echo "== full CMake build ($B)"
  if cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
       "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" >"$OUTD/build.log" 2>&1 &&
     cmake --build $B -j "$(nproc)" >>"$OUTD/build.log" 2>&1; then build_ok=1; else
    echo "full build failed (tail of build.log):"; tail -15 "$OUTD/build.log"; fi
fi
if [ $build_ok = 0 ]; then
  echo "== minimal build: core + backends + test_backend_cuda ($B)"
  mkdir -p $B/obj $B/tests
  rm -f $B/obj/*.o
  GENC=""
  for a in ${ARCHS//;/ }; do
    n=${a%-*}
    case $a in
      *-virtual) GENC="$GENC -gencode=arch=compute_${n},code=compute_${n}"; DESC="${DESC:+$DESC + }PTX compute_${n}" ;;
      *) GENC="$GENC -gencode=arch=compute_${n},code=sm_${n}"; DESC="${DESC:+$DESC + }sm_${n}" ;;
    esac
  done
  CFL="-O3 -march=native -std=c11 -D_GNU_SOURCE -DMLXCEL_HAVE_CUDA=1 -Iinclude -Isrc -Itests"
  (
    set -e
    for f in src/backend/cuda/*.cu; do
      "$NVCC" -O3 -std=c++17 -lineinfo $GENC "-DMX_CUDA_ARCHS=\"$DESC\"" -Iinclude -Isrc -c "$f" -o "$B/obj/$(basename "$f" .cu).cu.o" &
    done
    for f in src/core/*.c src/backend/*.c src/backend/cpu/*.c; do
      gcc $CFL -c "$f" -o "$B/obj/$(basename "$f" .c).o" &
    done
    wait
    gcc $CFL tests/unit/test_backend_cuda.c $B/obj/*.o -L"$CUDA/lib64" -lcudart_static -lcublas -lstdc++ -lm -lpthread -ldl -lrt -o $T
  ) >"$OUTD/build.log" 2>&1 && build_ok=1 || { echo "minimal build failed:"; tail -30 "$OUTD/build.log"; }
fi
t1=$(date +%s)
echo "build: $((t1 - t0)) s"
[ $build_ok = 1 ] || exit 1

echo "== op tests"
MLXCEL_LOG=info $T 2>&1 | tee "$OUTD/test.log"
pass=$(grep -c '^PASS ' "$OUTD/test.log"); fail=$(grep -c '^FAIL ' "$OUTD/test.log")

models=""
if [ $full = 1 ] && [ -x $B/tests/test_models ]; then
  echo "== model tests with MLXCEL_DEVICE=gpu"
  MLXCEL_ROOT=$(pwd) MLXCEL_DEVICE=gpu $B/tests/test_models 2>&1 | tee "$OUTD/models.log" | grep -E '^(PASS|FAIL)'
  models="model tests (MLXCEL_DEVICE=gpu): $(grep -c '^PASS ' "$OUTD/models.log") passed, $(grep -c '^FAIL ' "$OUTD/models.log") failed"
fi

if [ "${GPU_CHECK_BENCH:-1}" != 0 ]; then
  echo "== benchmarks"
  $T --bench 2>&1 | tee "$OUTD/bench.log"
fi
t2=$(date +%s)
echo
echo "================ summary ================"
head -2 "$OUTD/gpu.txt" | tail -1
grep '^# ' "$OUTD/test.log" | head -2
echo "CUDA op tests: $pass passed, $fail failed   (build $((t1 - t0)) s, total $((t2 - t0)) s)"
grep '^FAIL ' "$OUTD/test.log" | head -10
[ -n "$models" ] && echo "$models"
if [ -f "$OUTD/bench.log" ]; then
  grep -E '^device-to-device' "$OUTD/bench.log"
  grep -E '^BENCH|split' "$OUTD/bench.log" | sed 's/^BENCH //'
fi
[ "$fail" = 0 ]
