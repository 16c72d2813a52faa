#!/bin/bash
# scripts/sass.sh REGEX [OUT]: the SASS (sm_90a) of the CUDA kernels whose mangled names match REGEX,
# on a machine without a GPU or cuobjdump (the dev machine): compiles src/backend/cuda/backend_cuda.cu
# to a cubin with the include flags of a configured CUDA build directory (build-cuda-pack, or
# build-cuda), and disassembles it with the cuobjdump of Debian's non-free nvidia-cuda-toolkit
# (11.8), downloaded once into /tmp/mlxcel-sass (not installed). That cuobjdump reads CUDA 13's
# cubins once their ELF header has the older form (ABI version 7, e_flags 0x005a055a for sm_90a);
# the instructions are the hardware's, so it decodes them. Writes OUT (default /tmp/mlxcel.sass),
# prints each matching function's instruction count and ptxas's registers and spills for it.
set -eu
cd "$(dirname "$0")/.."
re=${1:?usage: scripts/sass.sh REGEX [OUT]}
out=${2:-/tmp/mlxcel.sass}
T=/tmp/mlxcel-sass
mkdir -p $T
if [ ! -x $T/x/usr/bin/cuobjdump ]; then
  mkdir -p $T/apt/lists/partial $T/apt/cache
  echo "deb http://deb.debian.org/debian bookworm main contrib non-free" >$T/apt/sources.list
  o=(-o Dir::Etc::sourcelist=$T/apt/sources.list -o Dir::Etc::sourceparts=- -o Dir::State::Lists=$T/apt/lists -o Dir::Cache=$T/apt/cache)
  apt-get "${o[@]}" update >/dev/null
  (cd $T && apt-get "${o[@]}" download nvidia-cuda-toolkit >/dev/null 2>&1)
  dpkg-deb -x $T/nvidia-cuda-toolkit_*.deb $T/x
fi
B=""
for d in build-cuda-pack build-cuda; do [ -f $d/CMakeFiles/mlxcel_cuda.dir/includes_CUDA.rsp ] && { B=$d; break; }; done
[ -n "$B" ] || { echo "sass.sh: configure a CUDA build first (make cuda, or scripts/gpu_check.sh --pack)" >&2; exit 1; }
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
(cd $B && $NVCC -DMLXCEL_HAVE_CUDA=1 --options-file CMakeFiles/mlxcel_cuda.dir/includes_CUDA.rsp -O3 -DNDEBUG -arch=sm_90a \
  -cubin -std=c++17 -Xptxas -v -o $T/k.cubin ../src/backend/cuda/backend_cuda.cu) >$T/ptxas.log 2>&1 ||
  { grep -m5 error $T/ptxas.log >&2; exit 1; }
python3 - $T/k.cubin $T/k7.cubin <<'PY'
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
d[8] = 7
struct.pack_into('<I', d, 48, 0x005a055a)
open(sys.argv[2], 'wb').write(d)
PY
$T/x/usr/bin/cuobjdump -sass $T/k7.cubin | awk -v re="$re" '/Function : /{p = ($0 ~ re)} p' >"$out"
awk '/Function : /{if (f) print n, f; f = $3; n = 0} /^ +\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]\*\//{n++} END{if (f) print n, f}' "$out" | while read -r n f; do
  r=$(grep -A3 "Compiling entry function '$f'" $T/ptxas.log | grep -o -E "Used [0-9]+ registers|[0-9]+ bytes spill stores" | tr '\n' ' ')
  echo "$n instructions  $f  ($r)"
done
echo "SASS: $out"
