#!/usr/bin/env bash
# scripts/gpu_check.sh: the GPU tests and benchmarks in one go, for a machine with an NVIDIA GPU
# and the CUDA 13 toolkit (e.g. one call of the `device` tool). Logs go to OUTDIR (default $OUT,
# else /tmp/gpu_check); a short table is printed last.
#
#   bash scripts/gpu_check.sh [OUTDIR]
#
# Stages (GPU_CHECK_STAGES, comma-separated; default "ops,models,bench"):
#   ops     build, then the CUDA op tests against the CPU reference (tests/unit/test_backend_cuda.c
#           and test_cuda_topk when built)
#   models  the model golden tests with MLXCEL_DEVICE=gpu (tests/unit/test_models.c), with the
#           defaults and with each switch variant (GPU_CHECK_MODEL_VARIANTS adds, _ONLY replaces)
#   bench   `mlxcel bench` on random weights of the issue's shapes (bench/configs): Llama-3.1-8B
#           q4/g64 and bf16, Qwen3-0.6B q4/g64; batch 1 (pp512, tg128) and 128 sequences (tg128)
#           and the switches' rows (GPU_CHECK_BENCH_OLD=0 leaves out those of the earlier forms,
#           GPU_CHECK_BENCH_SWITCHES=0 those of the switches: both 0, the issue's rows and the
#           32-sequence ones alone; the whole stage ran past 420 s on an H100, the fortieth session)
#   ckpt    shape-faithful checkpoints: .gpudeps/make_bench_model.py (HF layout, bf16, needs
#           PyTorch + transformers) -> `mlxcel convert -q` (q4/g64) -> generate + bench
#           (GPU_CHECK_CKPT: names, default "qwen3-0.6b")
#   server  mlxcel-server on the GPU (random Qwen3-0.6B q4 weights) under tools/loadtest at
#           concurrency 1..128 (GPU_CHECK_LEVELS; GPU_CHECK_LOAD_REQUESTS requests of 128 tokens a
#           client, default 4: with one, the rows at 32 and 128 lasted 0.3-1 s and moved by 20-25%
#           between calls), and the server's shell tests with MLXCEL_DEVICE=gpu
#   ncu     per-kernel times (Nsight Compute) of the forward passes in GPU_CHECK_NCU (default
#           "qwen3-0.6b qwen3-0.6b:pp": q4 decode and prefill; NAME:bf16 for bf16 decode, NAME:b128
#           for 128 sequences)
#   mv      the matvec table alone (test_backend_cuda --bench-mv)
#   probe   tools/cuda_probe/wgmma_probe.cu: the register / shared-memory layouts of wgmma
#   syncprobe  tools/cuda_probe/sync_probe.cu: a bulk-copy ring's streaming rate, a grid barrier
#           and an L2 round trip alone and while the ring streams (the persistent decode kernel's
#           parts, NOTES.md)
#   chainprobe  tools/cuda_probe/chain_probe.cu: a chain of small dependent kernels (Qwen3-0.6B's
#           batch-1 step as launched, and two plain shapes) handed over in plain stream order,
#           through PDL (griddepcontrol.wait) and through counters polled by the next kernel; eager
#           and as graph replays; us a kernel
#   tlbprobe  tools/cuda_probe/tlb_probe.cu: a dependent load into a KV pool after each "layer" of
#           streamed weights, where the layers' rows lie 0 / 256 KB / 1 MB / 8 MB / 64 MB apart, against
#           a second load in the same page (what the address translation costs the attention's first
#           K/V load; MLXCEL_CUDA_KV_LAYOUT)
#   mvprobe tools/cuda_probe/mv_probe.cu: the batch-1 matvecs' weight reads alone (Llama-8B's q4
#           matrix sizes), loaded into registers as k_mv_i8 does or streamed through shared memory
#   sweep   bench rows listed in the file GPU_CHECK_SWEEP ("LABEL [VAR=VALUE...] -- bench args" a line)
#           (any stage's bench rows: GPU_CHECK_CLOCKS=1 adds each row's SM clock and power, sampled by
#           nvidia-smi every 50 ms while it runs)
#   synth   the op-level benchmarks (test_backend_cuda --bench: matvec table, ring table, synthetic steps)
#   trace   the wait trace of replayed decode steps (the prebuilt's mlxcel-trace, --pack-trace): per
#           kernel of a step, when it could go on and how long until the next could
#           (tools/cuda_trace.py; GPU_CHECK_TRACE: config names, default "qwen3-0.6b llama3.1-8b",
#           q4/g64, NAME:bf16 for bf16; batch 1, the defaults; GPU_CHECK_TRACE_ENV: switches for
#           those runs; GPU_CHECK_TRACE_ARGS: their bench arguments, default "-p 0 -n 48"; with a
#           prompt test, e.g. "-p 512 -n 48", also GPU_CHECK_TRACE_ENV=MLXCEL_CUDA_TRACE_MAX=40000000
#           (the prefill's records fill the default 4M) and GPU_CHECK_TRACE_KERNELS=N, the kernels of
#           a decode step (163 for Llama-8B q4), which the prefill's groups outnumber; the first
#           one's records come back as trace-NAME.bin.xz in logs.tgz)
#   ring    the batch-1 q4 products of Llama-8B and Qwen3-0.6B and Llama-8B's bf16 ones through the
#           register forms and the rings' geometries (test_backend_cuda --bench-ring;
#           MLXCEL_BENCH_RINGS="kb/warps/slot,...", MLXCEL_BENCH_SHAPES=substring, e.g. l8b-)
#
# The full build needs the -dev packages of scripts/setup.sh. A bare GPU machine without network
# can take them from .deb files in .gpudeps/ (fetch them on a Debian machine with
# `scripts/gpu_check.sh --fetch-debs`); without them only core + backends + the CUDA op test
# program are built and only the `ops` and `synth` stages run.
#
# `scripts/gpu_check.sh --pack` (on the development machine, which has the toolkit but no GPU)
# builds the binaries the stages run (mlxcel, mlxcel-server, test_backend_cuda, test_cuda_topk,
# test_models; for any x86-64, MLXCEL_NATIVE=OFF) into build-cuda-pack, with the shared libraries
# they need beside them (found through their RPATH; not the C/C++ runtime, not CUDA's), and packs
# them into .gpudeps/prebuilt.tar.xz (~12 MB), stamped with a hash of the sources. A run that finds
# that file with the stamp of its own sources uses it instead of building (~150 s less a cold
# device call; carry `.gpudeps/prebuilt.tar.xz`, the .deb files are then not needed);
# GPU_CHECK_PREBUILT=0 builds anyway; GPU_CHECK_PREBUILT=force uses the packed binaries whatever
# the sources (a call made while the tree is being edited).
#
# `scripts/gpu_check.sh --pack-ab REV` (here too) builds mlxcel of commit REV the same way and adds
# it to the prebuilt as mlxcel-ab (~1-2 MB more, against ~6.5 MB alone: xz's window spans both
# binaries, whose cubins are mostly the same; with no prebuilt yet it is written alone as
# .gpudeps/ab-mlxcel.xz, which a later --pack takes in). A run that uses the prebuilt finds it
# beside its mlxcel as build-cuda-gpu/mlxcel-ab, and a sweep line that sets M to it runs that row
# with REV's code, e.g. "l8q4-old M=build-cuda-gpu/mlxcel-ab -- --config ..." against
# "l8q4-new -- --config ...": old and new code in one call, on one machine.
set -u
cd "$(dirname "$0")/.."
# the hash of what the binaries are built from
src_hash() {
  # (notes, *.md, are left out: editing them after --pack must not make a call rebuild)
  find src include tests/unit tests/test.h CMakeLists.txt -type f ! -name '*.md' | LC_ALL=C sort | xargs sha1sum | sha1sum | cut -c1-40
}
# the SM clock (MHz: minimum, median, maximum; the samples above 1000 MHz, the card at work), memory
# clock and power (median W) of nvidia-smi's CSV samples in FILE
clock_summary() {
  awk -F', *' '$1 + 0 > 1000 { n++; sm[n] = $1 + 0; mem[n] = $2 + 0; pw[n] = $3 + 0 }
    function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t } return a[int((n + 1) / 2)] }
    END { if (!n) { print "no samples at work"; exit }
          lo = hi = sm[1]; for (i = 1; i <= n; i++) { if (sm[i] < lo) lo = sm[i]; if (sm[i] > hi) hi = sm[i] }
          printf "SM %d / %d / %d MHz (min / median / max of %d samples), memory %d MHz, power %.0f W (median)\n", lo, med(sm, n), hi, n, med(mem, n), med(pw, n) }' "$1"
}
if [ "${1:-}" = --clock-summary ]; then   # (what GPU_CHECK_CLOCKS prints for a row, from a file of samples; tests)
  [ -f "${2:-}" ] || { echo "usage: $0 --clock-summary FILE (nvidia-smi's CSV samples of clocks.sm, clocks.mem, power.draw)" >&2; exit 2; }
  clock_summary "$2"
  exit 0
fi
# configure SRC into BUILD for packing: any x86-64, libraries found beside the binaries (DT_RPATH)
pack_configure() {
  cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON -DMLXCEL_NATIVE=OFF -DCMAKE_CUDA_FLAGS=--compress-mode=none -DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags \
    '-DCMAKE_BUILD_RPATH=$ORIGIN/lib;$ORIGIN/../lib' >/dev/null
}
# the staged directory DIR into .gpudeps/prebuilt.tar.xz: xz -9 with a 512 MiB window, so that it
# spans all the binaries, which share their cubins (13 MB with mlxcel-trace; 20 MB with xz -9's
# 64 MiB window, which with the tracked tree overflowed a device call's 64 MiB)
pack_tar() {
  tar -C "$1" -cf - . | xz -9 -T1 --lzma2=preset=9,dict=512MiB >.gpudeps/prebuilt.tar.xz.tmp && mv .gpudeps/prebuilt.tar.xz.tmp .gpudeps/prebuilt.tar.xz
}
pack_ab_desc() { [ -f "$1/AB-REV" ] && echo "; A/B mlxcel-ab: $(cat "$1/AB-REV")"; }
if [ "${1:-}" = --pack ]; then
  P=build-cuda-pack
  pack_configure . $P &&
    cmake --build $P -j "$(nproc)" --target mlxcel mlxcel-server test_backend_cuda test_models >/dev/null || exit 1
  [ -n "$(cmake --build $P --target help 2>/dev/null | grep -w test_cuda_topk)" ] && { cmake --build $P --target test_cuda_topk >/dev/null || exit 1; }
  st=$(mktemp -d)
  mkdir -p "$st/tests" "$st/lib"
  cp $P/mlxcel $P/mlxcel-server "$st/"
  for t in test_backend_cuda test_cuda_topk test_models; do [ -x $P/tests/$t ] && cp $P/tests/$t "$st/tests/"; done
  # (DT_RPATH, unlike RUNPATH, also serves the libraries' own dependencies)
  ldd "$st"/mlxcel "$st"/mlxcel-server "$st"/tests/* | awk '/=> \//{print $3}' | LC_ALL=C sort -u |
    grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|ld-linux[^/]*|libcublas[^/]*|libcudart[^/]*)\.so' |
    while read -r l; do cp -L "$l" "$st/lib/"; done
  src_hash >"$st/STAMP"
  mkdir -p .gpudeps
  if [ -f .gpudeps/ab-mlxcel.xz ]; then   # an A/B binary packed alone before: taken in
    xz -dc .gpudeps/ab-mlxcel.xz >"$st/mlxcel-ab" && chmod +x "$st/mlxcel-ab" && cp .gpudeps/ab-rev "$st/AB-REV" || exit 1
  fi
  pack_tar "$st" && rm -f .gpudeps/ab-mlxcel.xz .gpudeps/ab-rev || exit 1
  echo "packed: .gpudeps/prebuilt.tar.xz ($(du -h .gpudeps/prebuilt.tar.xz | cut -f1), sources $(src_hash | cut -c1-12)$(pack_ab_desc "$st"))"
  rm -rf "$st"
  exit 0
fi
if [ "${1:-}" = --pack-ab ]; then   # mlxcel of another commit, for A/B rows in the same call
  rev=$(git rev-parse --verify --quiet "${2:-}^{commit}") || { echo "usage: $0 --pack-ab REV (a commit)" >&2; exit 2; }
  W=build-ab-src P=build-ab
  rm -rf $W && mkdir -p $W && git archive "$rev" | tar -x -C $W || exit 1
  pack_configure $W $P && cmake --build $P -j "$(nproc)" --target mlxcel >/dev/null || exit 1
  mkdir -p .gpudeps
  rm -rf $W
  desc=$(git log -1 --format='%h %s' "$rev" | cut -c1-100)
  if [ -f .gpudeps/prebuilt.tar.xz ]; then   # into the prebuilt, beside the mlxcel it shares cubins with
    st=$(mktemp -d)
    tar -C "$st" -xJf .gpudeps/prebuilt.tar.xz && cp $P/mlxcel "$st/mlxcel-ab" && echo "$desc" >"$st/AB-REV" &&
      pack_tar "$st" && rm -f .gpudeps/ab-mlxcel.xz .gpudeps/ab-rev || { rm -rf "$st"; exit 1; }
    echo "packed: .gpudeps/prebuilt.tar.xz ($(du -h .gpudeps/prebuilt.tar.xz | cut -f1), sources $(cat "$st/STAMP" | cut -c1-12)$(pack_ab_desc "$st"))"
    rm -rf "$st"
  else
    xz -T0 -c $P/mlxcel >.gpudeps/ab-mlxcel.xz && echo "$desc" >.gpudeps/ab-rev || exit 1
    echo "packed alone (no prebuilt yet; --pack takes it in): .gpudeps/ab-mlxcel.xz ($(du -h .gpudeps/ab-mlxcel.xz | cut -f1), $desc)"
  fi
  exit 0
fi
if [ "${1:-}" = --pack-trace ]; then   # mlxcel of these sources built with the wait trace, beside the prebuilt
  [ -f .gpudeps/prebuilt.tar.xz ] || { echo "--pack-trace: --pack first" >&2; exit 2; }
  P=build-trace-pack
  pack_configure . $P && cmake -S . -B $P -DMLXCEL_CUDA_TRACE=ON >/dev/null && cmake --build $P -j "$(nproc)" --target mlxcel >/dev/null || exit 1
  st=$(mktemp -d)
  tar -C "$st" -xJf .gpudeps/prebuilt.tar.xz && [ "$(cat "$st/STAMP")" = "$(src_hash)" ] ||
    { echo "--pack-trace: the prebuilt is not of these sources: --pack first" >&2; rm -rf "$st"; exit 1; }
  cp $P/mlxcel "$st/mlxcel-trace" && pack_tar "$st" || { rm -rf "$st"; exit 1; }
  echo "packed: .gpudeps/prebuilt.tar.xz ($(du -h .gpudeps/prebuilt.tar.xz | cut -f1), sources $(cut -c1-12 "$st/STAMP"), with mlxcel-trace$(pack_ab_desc "$st"))"
  rm -rf "$st"
  exit 0
fi
if [ "${1:-}" = --fetch-debs ]; then   # on the Debian 12 development machine (apt, no root needed)
  mkdir -p .gpudeps && cd .gpudeps
  pk="libjansson-dev libpcre2-dev libutf8proc-dev liblzma-dev libmicrohttpd-dev libcurl4-openssl-dev"
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances --no-pre-depends $pk 2>/dev/null | grep '^\w' | sort -u |
    grep -v -E '^(libc6|libc6-dev|libgcc-s1|libstdc\+\+6|gcc-12-base|libcrypt|linux-libc-dev|libnsl|libtirpc|debconf|perl|dpkg|tar|zlib1g$|libselinux1|libzstd1|libc-dev-bin|rpcsvc-proto)' |
    xargs apt-get download
  exit $?
fi
OUTD=${1:-${OUT:-/tmp/gpu_check}}
mkdir -p "$OUTD"
STAGES=",${GPU_CHECK_STAGES:-ops,models,bench},"
has() { case "$STAGES" in *",$1,"*) return 0 ;; esac; return 1; }
CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=${NVCC:-$CUDA/bin/nvcc}
B=build-cuda-gpu
T=$B/tests/test_backend_cuda
ARCHS=${GPU_CHECK_ARCHS:-"90a-real;90-virtual"}
SUMMARY="$OUTD/0summary.txt"
: >"$SUMMARY"
say() { echo "$*" | tee -a "$SUMMARY"; }
t0=$(date +%s)

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1 | tee "$OUTD/gpu.txt"
"$NVCC" --version | tail -2

# -dev packages from .gpudeps/*.deb, unpacked into a private prefix
if ! pkg-config --exists jansson 2>/dev/null && ls .gpudeps/*.deb >/dev/null 2>&1; then
  P=/tmp/gpudeps
  rm -rf $P && mkdir -p $P
  for f in .gpudeps/*.deb; do dpkg-deb -x "$f" $P; done
  # absolute symlinks (liblzma.so -> /lib/...) point into the prefix instead
  find $P -type l | while read -r l; do t=$(readlink "$l"); case $t in /*) ln -sf "$P$t" "$l" ;; esac; done
  export PKG_CONFIG_SYSROOT_DIR=$P
  export PKG_CONFIG_PATH=$P/usr/lib/x86_64-linux-gnu/pkgconfig:$P/usr/share/pkgconfig
  # found at run time through the binaries' RPATH (DT_RPATH, which also serves their libraries'
  # own dependencies), not LD_LIBRARY_PATH, which would hand Debian's libcurl to the system's curl
  export LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu:$P/lib/x86_64-linux-gnu
  RPATH_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath,$LIBRARY_PATH -Wl,-rpath-link,$LIBRARY_PATH"
  echo "using -dev packages from .gpudeps ($(ls .gpudeps/*.deb | wc -l) files)"
fi

full=1
[ "${GPU_CHECK_MINIMAL:-0}" = 1 ] && full=0
command -v pkg-config >/dev/null || full=0
for p in jansson libpcre2-8 libutf8proc liblzma libmicrohttpd libcurl; do
  if [ $full = 1 ] && ! pkg-config --exists $p 2>/dev/null; then echo "note: $p -dev not found"; full=0; fi
done

build_ok=0
PRE=.gpudeps/prebuilt.tar.xz
if [ "${GPU_CHECK_PREBUILT:-1}" != 0 ] && [ -f $PRE ]; then   # binaries packed by --pack for these sources
  rm -rf $B && mkdir -p $B && tar -C $B -xJf $PRE
  # (force: the packed binaries whatever the sources, e.g. while the tree is being edited)
  if { [ "${GPU_CHECK_PREBUILT:-1}" = force ] || [ "$(cat $B/STAMP 2>/dev/null)" = "$(src_hash)" ]; } && $B/mlxcel --version >/dev/null 2>&1; then
    build_ok=1 full=1
    echo "using $PRE (packed from sources $(cut -c1-12 $B/STAMP); these: $(src_hash | cut -c1-12))"
    if [ ! -f $B/mlxcel-ab ] && [ -f .gpudeps/ab-mlxcel.xz ]; then   # --pack-ab packed alone
      xz -dc .gpudeps/ab-mlxcel.xz >$B/mlxcel-ab && chmod +x $B/mlxcel-ab && cp .gpudeps/ab-rev $B/AB-REV 2>/dev/null
    fi
    if [ -f $B/mlxcel-ab ]; then   # --pack-ab: beside the packed mlxcel, the same libraries
      $B/mlxcel-ab --version >/dev/null 2>&1 && echo "A/B binary: $B/mlxcel-ab ($(cat $B/AB-REV 2>/dev/null))" ||
        echo "note: the A/B binary $B/mlxcel-ab does not run here"
    fi
  else
    echo "note: $PRE is not of these sources or does not run here: building"
    rm -rf $B
  fi
fi
if [ $build_ok = 0 ] && [ $full = 1 ]; then
  echo "== full CMake build ($B)"
  if cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DMLXCEL_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC" \
       "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" "-DCMAKE_EXE_LINKER_FLAGS=${RPATH_FLAGS:-}" >"$OUTD/build.log" 2>&1 &&
     cmake --build $B -j "$(nproc)" >>"$OUTD/build.log" 2>&1; then build_ok=1; else
    echo "full build failed (tail of build.log):"; tail -15 "$OUTD/build.log"; full=0; fi
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
say "build: $((t1 - t0)) s ($([ -f $B/STAMP ] && echo prebuilt || { [ $full = 1 ] && echo full || echo minimal; }))"
[ $build_ok = 1 ] || exit 1
M=$B/mlxcel
status=0

if has ops; then
  echo "== op tests"
  # a time limit: a kernel that deadlocks (e.g. a cluster barrier) must fail the stage, not the call
  timeout "${GPU_CHECK_OPS_TIMEOUT:-300}" env MLXCEL_LOG=info $T 2>&1 | tee "$OUTD/test.log"
  [ "${PIPESTATUS[0]}" = 124 ] && { echo "FAIL op tests: timed out after ${GPU_CHECK_OPS_TIMEOUT:-300} s" >>"$OUTD/test.log"; }
  pass=$(grep -c '^PASS ' "$OUTD/test.log"); fail=$(grep -c '^FAIL ' "$OUTD/test.log")
  if [ -x $B/tests/test_cuda_topk ]; then
    $B/tests/test_cuda_topk 2>&1 | tee -a "$OUTD/test.log" | grep -E '^(PASS|FAIL)'
    pass=$(grep -c '^PASS ' "$OUTD/test.log"); fail=$(grep -c '^FAIL ' "$OUTD/test.log")
    # the top-k's two launches against its one-launch form (MLXCEL_CUDA_TOPK_ONE), us a call
    $B/tests/test_cuda_topk --bench 2>&1 | tee "$OUTD/topk_bench.log" | sed 's/^/topk bench: /' | tee -a "$SUMMARY"
  fi
  say "CUDA op tests: $pass passed, $fail failed"
  grep '^FAIL ' "$OUTD/test.log" | head -10 | tee -a "$SUMMARY"
  [ "$fail" = 0 ] || status=1
fi

if has models && [ $full = 1 ]; then
  echo "== model tests with MLXCEL_DEVICE=gpu"
  MLXCEL_ROOT=$(pwd) MLXCEL_DEVICE=gpu $B/tests/test_models 2>&1 | tee "$OUTD/models.log" | grep -E '^(PASS|FAIL)'
  mp=$(grep -c '^PASS ' "$OUTD/models.log"); mf=$(grep -c '^FAIL ' "$OUTD/models.log")
  say "model tests (MLXCEL_DEVICE=gpu): $mp passed, $mf failed"
  grep '^FAIL ' "$OUTD/models.log" | head -20 | tee -a "$SUMMARY"
  [ "$mf" = 0 ] || status=1
  # the other paths (CUDA-core tiled prompt attention; per-(token, head) prompt attention without
  # programmatic dependent launch; the q4 GEMMs on packed weights; PDL without the early release;
  # the decode attention kernel whose lanes split a head's values):
  # the same goldens through them
  # (GPU_CHECK_MODEL_VARIANTS adds variants; GPU_CHECK_MODEL_VARIANTS_ONLY replaces the list: words,
  # the switches of one variant joined by commas)
  variants=(MLXCEL_CUDA_ATTN=tiled "MLXCEL_CUDA_ATTN=pertoken MLXCEL_CUDA_PDL=0" MLXCEL_CUDA_GEMM=mma MLXCEL_CUDA_GEMM=wgmma MLXCEL_CUDA_GEMM=cublas MLXCEL_CUDA_PDL=1 MLXCEL_CUDA_ATTN_DEC=lanes MLXCEL_CUDA_GEMM_PAIR=1 MLXCEL_CUDA_SUM_NORM=0 MLXCEL_CUDA_SUM_QKV=0 MLXCEL_CUDA_ATT_GQ=0 MLXCEL_CUDA_GRAPHS=auto MLXCEL_CUDA_FUSED=1 MLXCEL_CUDA_MV_RING=0 MLXCEL_CUDA_RING_NORM=0 MLXCEL_CUDA_RING_NORM=1 MLXCEL_CUDA_MV_RING_BF16=1 MLXCEL_CUDA_MV_RING_BF16=norm MLXCEL_CUDA_ATTN_PREP=0 MLXCEL_CUDA_ATTN_PREP=1 MLXCEL_CUDA_RING_PAIR=0 MLXCEL_CUDA_RING_ACT=1 MLXCEL_CUDA_ATTN_EARLY=0 MLXCEL_CUDA_ATTN_L2PF=16 MLXCEL_CUDA_MV_DENSE_SHORT=1 "MLXCEL_CUDA_FAST_REPLAY=0 MLXCEL_CUDA_TOPK_ONE=0 MLXCEL_CUDA_GRAPHS=auto" MLXCEL_CUDA_FAST_REPLAY=0 MLXCEL_CUDA_TOPK_ONE=0 MLXCEL_CUDA_RING_EPI=0 "MLXCEL_CUDA_RING_NORM=1 MLXCEL_CUDA_ATTN_PREP=1" MLXCEL_CUDA_EPI_BLOCKS=160 MLXCEL_CUDA_PAIR_HALF=1 MLXCEL_CUDA_PAIR_HALF=0 MLXCEL_CUDA_RING_LONG=0 MLXCEL_CUDA_CHAIN=0 MLXCEL_CUDA_MV_MMA=0 MLXCEL_CUDA_MV_MMA_WIDE=1 MLXCEL_CUDA_GEMM_TMA=1 MLXCEL_CUDA_GEMM_TMA=0 MLXCEL_CUDA_GEMM_TMA=3 MLXCEL_CUDA_KV_LAYOUT=block "MLXCEL_CUDA_KV_LAYOUT=block MLXCEL_CUDA_FUSED=1" MLXCEL_CUDA_ATT_SPLIT=1 "MLXCEL_CUDA_ATT_SPLIT=8 MLXCEL_CUDA_ATT_SPLIT_MIN=16" MLXCEL_CUDA_ATTN_GQA=2 ${GPU_CHECK_MODEL_VARIANTS:-})
  # shellcheck disable=SC2206
  [ -n "${GPU_CHECK_MODEL_VARIANTS_ONLY:-}" ] && variants=($GPU_CHECK_MODEL_VARIANTS_ONLY)
  for v in "${variants[@]}"; do
    # shellcheck disable=SC2086
    log="$OUTD/models_${v//[ ,]/_}.log"   # (the whole variant: two may share a first switch)
    env MLXCEL_ROOT="$(pwd)" MLXCEL_DEVICE=gpu ${v//,/ } $B/tests/test_models >"$log" 2>&1
    say "model tests (MLXCEL_DEVICE=gpu ${v//,/ }): $(grep -c '^PASS ' "$log") passed, $(grep -c '^FAIL ' "$log") failed"
    grep '^FAIL ' "$log" | head -10 | tee -a "$SUMMARY"
  done
fi

bench() {   # label args...: one `mlxcel bench` run on the GPU, its table rows into the summary
  local label=$1; shift
  echo "== bench $label: mlxcel bench $*"
  # GPU_CHECK_CLOCKS=1: the card's SM clock and power sampled every 50 ms while the row runs
  local smi=""
  if [ "${GPU_CHECK_CLOCKS:-0}" = 1 ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv,noheader,nounits -lms 50 >"$OUTD/clocks.txt" 2>/dev/null &
    smi=$!
  fi
  MLXCEL_DEVICE=gpu timeout "${GPU_CHECK_BENCH_TIMEOUT:-180}" $M bench "$@" 2>&1 | tee -a "$OUTD/bench.log" | tee "$OUTD/last.txt"
  local rc=${PIPESTATUS[0]}
  if [ -n "$smi" ]; then
    kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
    say "$label clocks: $(clock_summary "$OUTD/clocks.txt")"
  fi
  # a failed run says so in the summary (its rows would otherwise just be missing)
  if [ "$rc" = 124 ]; then say "$label: timed out"
  elif [ "$rc" != 0 ]; then say "$label: FAILED (exit $rc): $(grep -m1 -iE 'error|fail' "$OUTD/last.txt" | cut -c1-200)"
  fi
  grep -E '^\| ' "$OUTD/last.txt" | grep -v -E 'model|---' | sed "s/^/$label /" >>"$SUMMARY"
  grep -E '^cuda profile:' "$OUTD/last.txt" | head -24 | sed "s/^cuda profile:/$label prof/" >>"$SUMMARY"   # MLXCEL_CUDA_PROFILE=1
  grep -E '^bandwidth ' "$OUTD/last.txt" | sed "s/^/$label /" >>"$SUMMARY"   # --bandwidth
  grep -E '^split ' "$OUTD/last.txt" | sed "s/^/$label /" >>"$SUMMARY"   # --split
}
if has bench && [ $full = 1 ]; then
  : >"$OUTD/bench.log"
  L8=bench/configs/llama3.1-8b.json Q06=bench/configs/qwen3-0.6b.json
  say "copy: $(MLXCEL_DEVICE=gpu $T --bench-copy 2>/dev/null | grep -o '[0-9]* GB/s' | head -1)"
  bench llama8b-q4 --config $L8 --random --q-bits 4 --q-group-size 64 -p 512 -n 128 -r 3 --bandwidth --split
  bench llama8b-q4-b128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -r 2
  bench llama8b-bf16 --config $L8 --random --dtype bf16 -p 512 -n 128 -r 3 --bandwidth --split
  bench qwen06-q4 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 512 -n 128 -r 3 --bandwidth --split
  bench qwen06-q4-b128 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -r 2
  # as llama-batched-bench (128 prompt + 128 generated tokens a sequence): the prompts cached first
  bench llama8b-q4-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
  bench qwen06-q4-b128-d128 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
  # 32 sequences (the GEMM on packed weights by default from 17 rows; k_gemm_wg on sm_90)
  bench llama8b-q4-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
  bench qwen06-q4-b32 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
  if [ "${GPU_CHECK_BENCH_OLD:-1}" = 1 ]; then   # GPU_CHECK_BENCH_OLD=0: without the earlier forms' rows
    # the previous defaults: CUDA-core prompt attention; per-(token, head) attention without PDL;
    # PDL without the early release; q4 above 16 rows always dequantized for cuBLAS
    MLXCEL_CUDA_ATTN=tiled bench llama8b-q4-attn-tiled --config $L8 --random --q-bits 4 --q-group-size 64 -p 512 -n 0 -r 3
    MLXCEL_CUDA_ATTN=pertoken MLXCEL_CUDA_PDL=0 bench llama8b-q4-attn-pertoken-nopdl --config $L8 --random --q-bits 4 --q-group-size 64 -p 512 -n 128 -r 3
    MLXCEL_CUDA_PDL=1 bench llama8b-q4-pdl1 --config $L8 --random --q-bits 4 --q-group-size 64 -p 512 -n 128 -r 3
    MLXCEL_CUDA_PDL=1 bench llama8b-bf16-pdl1 --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    MLXCEL_CUDA_PDL=1 bench qwen06-q4-pdl1 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_GEMM=cublas bench llama8b-q4-cublas-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_GEMM=cublas bench llama8b-q4-cublas-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_GEMM=cublas bench qwen06-q4-cublas-b32 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    # decode attention through k_attn (lanes split a head's values) instead of k_attn_vec
    MLXCEL_CUDA_ATTN_DEC=lanes bench qwen06-q4-attn-lanes-b128-d128 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_ATTN_DEC=lanes bench llama8b-q4-attn-lanes-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    bench qwen06-q4-d1024 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -d 1024 -r 2
    MLXCEL_CUDA_ATTN_DEC=lanes bench qwen06-q4-attn-lanes-d1024 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -d 1024 -r 2
    # the mma.sync form (k_gemm_gq) instead of the wgmma one (k_gemm_wg), also where auto keeps
    # cuBLAS (Qwen3-0.6B's < 4096 columns at 128 rows); k_gemm_wg there
    MLXCEL_CUDA_GEMM=mma bench llama8b-q4-mma-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_GEMM=mma bench llama8b-q4-mma-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_GEMM=mma bench qwen06-q4-mma-b32 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_GEMM=mma bench qwen06-q4-mma-b128-d128 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
  fi
  if [ "${GPU_CHECK_BENCH_SWITCHES:-1}" = 1 ]; then   # GPU_CHECK_BENCH_SWITCHES=0: without the switches' rows
    # experimental: gate/up and act_mul in one launch of the wgmma form (as fast as the two launches,
    # NOTES.md); and the k loop not rotated by block
    MLXCEL_CUDA_GEMM_PAIR=1 bench llama8b-q4-pair-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    # decode steps always as graphs (the default since the twenty-second session; auto: only below 1 GiB)
    MLXCEL_CUDA_GRAPHS=1 bench llama8b-q4-graph --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_GRAPHS=1 bench llama8b-q4-graph-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_GRAPHS=1 bench llama8b-q4-graph-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_GRAPHS=0 bench qwen06-q4-nograph --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_GRAPHS=0 bench qwen06-q4-nograph-b128-d128 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    # the rmsnorm after a split product's add reading its partial sums (default on) switched off
    MLXCEL_CUDA_SUM_NORM=0 bench llama8b-q4-nosumnorm-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_SUM_NORM=0 bench llama8b-q4-nosumnorm-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_SUM_NORM=0 bench qwen06-q4-nosumnorm-b32 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    # the q/k/v product's partial sums read by the attention's q/k preparation (default on) switched off
    MLXCEL_CUDA_SUM_QKV=0 bench llama8b-q4-nosumqkv-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_SUM_QKV=0 bench llama8b-q4-nosumqkv-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_SUM_QKV=0 bench qwen06-q4-nosumqkv-b32 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    # the decode attention writing its output's gq-order form (default on) switched off
    MLXCEL_CUDA_ATT_GQ=0 bench llama8b-q4-noattgq-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_ATT_GQ=0 bench qwen06-q4-noattgq-b32 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_GEMM_PAIR=1 bench llama8b-q4-pair-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    # stream-K in the 64-token form of the wgmma GEMM (default on) switched off
    # the batch-1 q4/q8 matvecs on registers (k_mv_i8) instead of bulk-copied weights (default on)
    MLXCEL_CUDA_MV_RING=0 bench llama8b-q4-noring --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3 --bandwidth
    MLXCEL_CUDA_MV_RING=0 bench qwen06-q4-noring --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_MV_RING=0 bench llama8b-bf16-noring --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3 --bandwidth
    # the batch-1 rmsnorm in the ring products' prologue: for q4/q8 products too (default: bf16 only);
    # off (a kernel of its own); bf16 products through the ring where they do not run the norm too
    MLXCEL_CUDA_RING_NORM=1 bench llama8b-q4-ringnorm --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_RING_NORM=0 bench llama8b-bf16-noringnorm --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    MLXCEL_CUDA_MV_RING_BF16=1 bench llama8b-bf16-ringbf-all --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    MLXCEL_CUDA_MV_RING_BF16=norm bench llama8b-bf16-ringbf-norm --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    # batch-1 decode: the q/k preparation inside the attention after q4 products too (default: after
    # bf16 ones only), and never (a kernel of its own)
    MLXCEL_CUDA_ATTN_PREP=1 bench llama8b-q4-attnprep --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_ATTN_PREP=1 bench qwen06-q4-attnprep --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_ATTN_PREP=0 bench llama8b-bf16-noattnprep --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    MLXCEL_CUDA_RING_PAIR=0 bench llama8b-bf16-nopair --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    # batch-1 q4: the act_mul in the prologue of the ring down product (off by default: measured 8-11% slower)
    MLXCEL_CUDA_RING_ACT=1 bench qwen06-q4-ringact --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_GEMM_SK=0 bench llama8b-q4-nosk-b32 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 32 -r 2
    MLXCEL_CUDA_GEMM_ROT=0 bench llama8b-q4-norot-b128-d128 --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    MLXCEL_CUDA_GEMM=wgmma bench qwen06-q4-wgmma-b128-d128 --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2
    bench llama8b-q4-b128-d128-again --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -b 128 -d 128 -r 2   # drift within the call
    # experimental: the layers and head of a batch-1 decode step in one persistent kernel (decode_layers)
    MLXCEL_CUDA_FUSED=1 bench llama8b-q4-fused --config $L8 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
    MLXCEL_CUDA_FUSED=1 bench llama8b-bf16-fused --config $L8 --random --dtype bf16 -p 0 -n 128 -r 3
    MLXCEL_CUDA_FUSED=1 bench qwen06-q4-fused --config $Q06 --random --q-bits 4 --q-group-size 64 -p 0 -n 128 -r 3
  fi
  for v in ${GPU_CHECK_EXTRA_BENCH:-}; do   # e.g. "llama8b-q4-f32mv" rows with MLXCEL_CUDA_MV=f32
    case $v in
      llama8b-q4-f32mv) MLXCEL_CUDA_MV=f32 bench $v --config $L8 --random --q-bits 4 -p 0 -n 128 -r 3 ;;
      llama8b-q8) bench $v --config $L8 --random --q-bits 8 -p 512 -n 128 -r 3 ;;
      llama8b-q4-b16) bench $v --config $L8 --random --q-bits 4 -p 0 -n 128 -b 16 -r 2 ;;
      qwen06-q4-nograph) MLXCEL_CUDA_GRAPHS=0 bench $v --config $Q06 --random --q-bits 4 -p 0 -n 128 -r 3 ;;
    esac
  done
fi

# sweep: one bench row per line of GPU_CHECK_SWEEP (a file): "LABEL [VAR=VALUE...] -- bench args",
# e.g. "l8-dq16 MLXCEL_CUDA_DQ_MB=16 -- --config bench/configs/llama3.1-8b.json --random --q-bits 4 -p 512 -n 0"
if has sweep && [ $full = 1 ] && [ -f "${GPU_CHECK_SWEEP:-}" ]; then
  while read -r label rest; do
    case $label in ''|'#'*) continue ;; esac
    envs=${rest%%--*} args=${rest#*--}
    # shellcheck disable=SC2086
    ( [ -n "${envs// /}" ] && export $envs; bench "$label" $args ) </dev/null
  done <"$GPU_CHECK_SWEEP"
fi

if has ckpt && [ $full = 1 ]; then
  for name in ${GPU_CHECK_CKPT:-qwen3-0.6b}; do
    case $name in qwen3*) tok=tests/fixtures/tokenizers/qwen3 ;; *) tok=tests/fixtures/tokenizers/llama3_1 ;; esac
    hf=/tmp/ckpt-$name q4=/tmp/ckpt-$name-q4
    echo "== checkpoint $name"
    rm -rf "$hf" "$q4"
    if python3 .gpudeps/make_bench_model.py "$name" "$hf" "$tok" 2>&1 | tail -2 &&
       /usr/bin/time -f "convert: %e s, %M KiB max RSS" $M convert --hf-path "$hf" -o "$q4" -q --q-bits 4 --q-group-size 64 2>&1 | tail -2; then
      MLXCEL_DEVICE=gpu $M generate -m "$q4" -p "The capital of France is" -n 24 --temp 0 2>&1 | tail -3 | tee -a "$SUMMARY"
      bench "ckpt-$name-q4" -m "$q4" -p 512 -n 128 -r 3 --bandwidth
      bench "ckpt-$name-q4-b128-d128" -m "$q4" -p 0 -n 128 -b 128 -d 128 -r 2
      [ "${GPU_CHECK_CKPT_BF16:-1}" = 1 ] && bench "ckpt-$name-bf16" -m "$hf" -p 512 -n 128 -r 2
    else
      say "checkpoint $name: could not be made"
      status=1
    fi
  done
fi

if has server && [ $full = 1 ]; then
  echo "== server on the GPU"
  PORTF=$OUTD/server.out
  MLXCEL_DEVICE=gpu timeout 300 $B/mlxcel-server --port 0 -np 128 -c 1024 --random-config bench/configs/qwen3-0.6b.json --q-bits 4 \
    -m tests/fixtures/tokenizers/qwen3 >"$PORTF" 2>"$OUTD/server.err" &
  SPID=$!
  url=
  ok=0
  for _ in $(seq 1 300); do
    url=$(sed -n 's/^listening on \(http:.*\)$/\1/p' "$PORTF" | head -1)
    [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && { ok=1; break; }
    kill -0 $SPID 2>/dev/null || break
    sleep 0.2
  done
  [ $ok = 1 ] || { say "server did not start: $(tail -2 "$OUTD/server.err")"; status=1; }
  grep -i "device" "$OUTD/server.err" | head -2 | tee -a "$SUMMARY"
  [ $ok = 1 ] && timeout 200 python3 tools/loadtest/loadtest.py --url "$url" --concurrency ${GPU_CHECK_LEVELS:-1,8,32,128} --max-tokens 128 --requests ${GPU_CHECK_LOAD_REQUESTS:-4} --time-limit 30 \
    2>&1 | tee "$OUTD/server_load.txt" | tail -8 | sed 's/^/server /' | tee -a "$SUMMARY"
  kill $SPID; wait $SPID 2>/dev/null
  for t in ${GPU_CHECK_SERVER_TESTS:-server_concurrency}; do
    [ -f tests/cli/$t.sh ] || continue
    MLXCEL_DEVICE=gpu MLXCEL_BIN=$M MLXCEL_SERVER_BIN=$B/mlxcel-server timeout 100 bash tests/cli/$t.sh >"$OUTD/$t.log" 2>&1
    say "tests/cli/$t.sh on the GPU: $(grep -c '^PASS' "$OUTD/$t.log") passed, $(grep -c '^FAIL' "$OUTD/$t.log") failed"
    grep -E '^FAIL|^PASS concurrent_32_same_greedy_text' "$OUTD/$t.log" | head -5 | tee -a "$SUMMARY"
  done
fi

if has ncu && [ $full = 1 ] && command -v ncu >/dev/null; then
  # NAME (q4 decode), NAME:pp (q4 prefill 512), NAME:bf16 (bf16 decode) or NAME:b128 (q4 decode of
  # 128 sequences from empty contexts: the 128 prompts of -d 128 made ncu run past its time limit,
  # and the GEMMs, which are most of the step, do not depend on the depth), e.g. llama3.1-8b:bf16
  for spec in ${GPU_CHECK_NCU:-qwen3-0.6b qwen3-0.6b:pp}; do
  cfgname=${spec%%:*} what="-p 0 -n 3" fmt="--q-bits 4"
  case $spec in *:pp) what="-p 512 -n 0" ;; *:bf16) fmt="--dtype bf16" ;; *:b128) what="-p 0 -n 2 -b 128 -d 0" ;; esac
  echo "== per-kernel times (ncu), $spec ($fmt $what)"
  # shellcheck disable=SC2086
  MLXCEL_DEVICE=gpu timeout 240 ncu --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$OUTD/ncu-${spec/:/-}.csv" \
    $M bench --config bench/configs/$cfgname.json --random $fmt $what -r 1 >/dev/null 2>&1
  echo "ncu $spec ($what, the last forward pass):" >>"$SUMMARY"
  python3 - "$OUTD/ncu-${spec/:/-}.csv" <<'PY' | tee -a "$SUMMARY"
import csv, sys, re, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; rows = rows[1:]
ki, vi = hdr.index("Kernel Name"), hdr.index("Metric Value")
names = [re.sub(r"^void ", "", re.sub(r"[<(].*", "", r[ki])) for r in rows]
vals = [float(r[vi].replace(",", "")) for r in rows]
# the last forward pass: from the last embedding lookup on
starts = [i for i, nm in enumerate(names) if nm.startswith("k_embed")]
tail = slice(starts[-1] if starts else 0, len(vals))
agg = collections.defaultdict(lambda: [0, 0.0])
for nm, v in zip(names[tail], vals[tail]):
    agg[nm][0] += 1; agg[nm][1] += v
tot = sum(a[1] for a in agg.values())
print(f"ncu: {tot/1e3:.1f} us of kernels, {sum(a[0] for a in agg.values())} launches")
for nm, (c, v) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:12]:
    print(f"ncu   {nm:28s} {c:4d} x  {v/1e3/c:8.2f} us = {v/1e3:9.1f} us ({100*v/tot:4.1f}%)")
PY
  done
fi

# a probe of tools/cuda_probe: built for sm_90a and run; its lines matching PATTERN into the summary
probe_run() {   # label source log timeout pattern
  local label=$1 src=$2 log=$OUTD/$3 bin=$OUTD/$(basename "$2" .cu)
  if "$NVCC" -O2 -gencode arch=compute_90a,code=sm_90a -o "$bin" "$src" >"$log" 2>&1; then
    timeout "$4" "$bin" 2>&1 | tee -a "$log" | grep -E "$5" | sed "s/^/$label /" | tee -a "$SUMMARY"
  else
    say "$label: build failed ($(tail -1 "$log"))"
  fi
  rm -f "$bin"
}
if has syncprobe; then   # what the persistent decode kernel rests on (tools/cuda_probe/sync_probe.cu)
  echo "== sync probe"
  probe_run syncprobe tools/cuda_probe/sync_probe.cu syncprobe.log 120 '^(PROBE|FAIL)'
fi
if has chainprobe; then   # what a hand-off between dependent kernels costs (tools/cuda_probe/chain_probe.cu)
  echo "== chain probe"
  probe_run chainprobe tools/cuda_probe/chain_probe.cu chainprobe.log 120 '^(PROBE|FAIL)'
fi
if has mvprobe; then   # the batch-1 matvecs' weight reads alone, into registers or through shared memory
  echo "== matvec read probe"
  probe_run mvprobe tools/cuda_probe/mv_probe.cu mvprobe.log 120 '^(PROBE|FAIL)'
fi
if has tlbprobe; then   # a dependent load's cost where the KV pool puts a layer's rows (tools/cuda_probe/tlb_probe.cu)
  echo "== address translation probe"
  probe_run tlbprobe tools/cuda_probe/tlb_probe.cu tlbprobe.log 120 '^(PROBE|FAIL)'
fi
if has probe; then   # layout facts for a wgmma GEMM (tools/cuda_probe/wgmma_probe.cu)
  echo "== wgmma layout probe"
  probe_run probe tools/cuda_probe/wgmma_probe.cu probe.log 60 '^(PASS|FAIL|PROBE|     D|needs)'
fi

if has mv; then
  echo "== matvec benchmarks"
  $T --bench-mv 2>&1 | tee "$OUTD/mv.log" | grep -E '^(device|format|q4|q8|bf16 )' | tee -a "$SUMMARY"
fi

if has trace; then   # the wait trace of replayed batch-1 steps (a build with -DMLXCEL_CUDA_TRACE=ON)
  if [ -x $B/mlxcel-trace ]; then
    names=${GPU_CHECK_TRACE:-qwen3-0.6b llama3.1-8b}
    first=${names%% *}
    for item in $names; do
      name=${item%%:*}
      fmt="--q-bits 4 --q-group-size 64"; fdesc=q4/g64
      [ "$item" != "${item%:bf16}" ] && fmt="--dtype bf16" && fdesc=bf16
      tag=${item/:/-}
      echo "== wait trace, $name $fdesc batch 1 ${GPU_CHECK_TRACE_ENV:-}"
      # shellcheck disable=SC2086
      env MLXCEL_DEVICE=gpu MLXCEL_CUDA_TRACE="$OUTD/trace-$tag.bin" ${GPU_CHECK_TRACE_ENV:-} timeout 300 $B/mlxcel-trace bench \
        --config bench/configs/$name.json --random $fmt ${GPU_CHECK_TRACE_ARGS:--p 0 -n 48} -r 1 >"$OUTD/trace-$tag.log" 2>&1
      python3 tools/cuda_trace.py "$OUTD/trace-$tag.bin" --steps 8 ${GPU_CHECK_TRACE_KERNELS:+--kernels $GPU_CHECK_TRACE_KERNELS} >"$OUTD/trace-$tag.txt" 2>&1
      # the first model's records come back too (xz; ~16 MB raw for Qwen3-0.6B q4), to be read again here
      [ "$item" = "$first" ] && xz -T0 -3 -f "$OUTD/trace-$tag.bin"
      rm -f "$OUTD/trace-$tag.bin"
      { echo "trace $tag: $(grep -E 'tg48' "$OUTD/trace-$tag.log" | tail -1)"; sed "s/^/trace $tag /" "$OUTD/trace-$tag.txt" | grep -v -E '^trace [^ ]+ +[0-9]+ +[0-9.]+ +[0-9.]+ ' | head -8
        grep -E '^ +[0-9]+ ' "$OUTD/trace-$tag.txt" | sort -b -k2,2 -g -r | head -12 | sed "s/^/trace $tag longest /"; } | tee -a "$SUMMARY"
    done
  else
    say "trace: no $B/mlxcel-trace (scripts/gpu_check.sh --pack-trace after --pack)"
  fi
fi
if has ring; then
  echo "== batch-1 q4 products by ring geometry"
  $T --bench-ring 2>&1 | tee "$OUTD/ring.log" | grep -E '^(device|shape|RING)' | tee -a "$SUMMARY"
fi
if has synth; then
  echo "== op benchmarks"
  $T --bench 2>&1 | tee "$OUTD/synth.log" | grep -E '^(device|format|q4|q8|bf16 )' | tee -a "$SUMMARY"
fi

t2=$(date +%s)
echo
echo "================ summary ($((t2 - t0)) s) ================"
head -2 "$OUTD/gpu.txt" | tail -1
cat "$SUMMARY"
# everything but the summary in one archive (the device tool brings back at most 8 files)
if [ "${GPU_CHECK_PACK:-1}" = 1 ]; then
  ( cd "$OUTD" && ls | grep -v -E '^(0summary.txt|logs.tgz|1log.txt)$' >/tmp/gpu_check_files &&
    tar czf logs.tgz -T /tmp/gpu_check_files && xargs rm -f </tmp/gpu_check_files ) 2>/dev/null
fi
exit $status
