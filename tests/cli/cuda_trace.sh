#!/usr/bin/env bash
# tests/cli/cuda_trace.sh: tools/cuda_trace.py, the reader of the CUDA wait trace (a build with
# -DMLXCEL_CUDA_TRACE=ON writes it on the GPU), on a made-up trace of known shape: four steps of
# three kernels (two blocks each), the kernels' times known, so every figure it prints is known;
# then files that are not traces.
source "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/mlxcel-trace-XXXXXX)
trap 'rm -rf "$T"' EXIT
PY="python3 $MLXCEL_ROOT/tools/cuda_trace.py"
# mk OUT FORM SPACING_NS GRIDS "start,go,last,t2a,t2b ..." [T0 NSTEPS] (ns into a step; t2 after go and
# after last): four steps (NSTEPS) SPACING apart from 1 ms (T0), each kernel two blocks (block 0 let
# go at go, block 1 at last); GRIDS "new" gives every launch its own grid id, "reuse" the first
# step's ids to every step (a graph)
cat >"$T/mk.py" <<'PY'
import struct, sys
out, form, spacing, grids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
kern = [tuple(int(v) for v in k.split(",")) for k in sys.argv[5].split()]
# (optional: the first step's time, ns, and how many steps; default 1 ms, 4)
t0, nst = (int(sys.argv[6]), int(sys.argv[7])) if len(sys.argv) > 7 else (1_000_000, 4)
recs, grid = [], 100
for s in range(nst):
    base = t0 + s * spacing
    for i, (start, go, last, ta, tb) in enumerate(kern):
        grid = grid + 1 if grids == "new" else 101 + i
        recs.append((grid, base + start, base + go, base + go + ta, 3, 0))
        recs.append((grid, base + start + 100, base + last, base + last + tb, 7, 1))
with open(out, "wb") as f:
    f.write(b"MXTRACE%d" % form + struct.pack("<Q", len(recs)))
    for g, t0, t1, t2, sm, b in recs:
        f.write(struct.pack("<QQQQII", g, t0, t1, t2, sm, b) if form == 2 else struct.pack("<QQQII", g, t0, t1, sm, b))
PY
MK="python3 $T/mk.py"
# a step every 100 us; kernels go 1, 5, 12 us into it
$MK "$T/t.bin" 1 100000 new "0,1000,1200,0,0 500,5000,5500,0,0 4000,12000,13000,0,0"
out=$($PY "$T/t.bin" --steps 2 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$out" | grep -q "^24 records, 12 kernels, 4 steps" && echo "$out" | grep -q "the most common, 3, 4 steps"; then
  pass trace_steps; else fail trace_steps "rc $rc: $out"; fi
# per kernel: next (go to the next go), lead (go - first arrival), spread (last go - first go)
if echo "$out" | grep -qE "^ +0 +4\.00 +1\.00 +0\.20 +2" && echo "$out" | grep -qE "^ +1 +7\.00 +4\.50 +0\.50 +2" &&
   echo "$out" | grep -qE "^ +2 +89\.00 +8\.00 +1\.00 +2"; then pass trace_kernels; else fail trace_kernels "$out"; fi
echo "$out" | grep -q "step span (first go to the next step's) 100.0, 100.0 us" && pass trace_span || fail trace_span "$out"
printf 'norm\nproduct\nattention\n' >"$T/labels"
out=$($PY "$T/t.bin" --labels "$T/labels" 2>&1)
echo "$out" | grep -qE "^ +1 +7\.00 .* product$" && echo "$out" | grep -q "by kind: attention: 1 x 89.00" && pass trace_labels ||
  fail trace_labels "$out"
# not traces
printf 'NOTATRACEFILE...' >"$T/bad.bin"
expect_fail trace_bad_header "not a trace file" $PY "$T/bad.bin"
head -c 50 "$T/t.bin" >"$T/short.bin"
expect_fail trace_truncated "announced" $PY "$T/short.bin"
expect_fail trace_missing "none.bin: No such file" $PY "$T/none.bin"
expect_fail trace_no_args "usage|cuda_trace" $PY
expect_fail trace_bad_steps "whole number" $PY "$T/t.bin" --steps two
# a graph's replays launch each node under the same grid id: the same steps 200 us apart, the three
# grid ids of the first step reused by every step, read as the 12 launches they are; in the second
# form (MXTRACE2: t2, when a load issued at t1 came back; 0.3 and 0.9 us: a mean of 0.60, the `load`)
$MK "$T/g.bin" 2 200000 reuse "0,1000,1200,300,900 500,5000,5500,300,900 4000,12000,13000,300,900"
out=$($PY "$T/g.bin" --steps 2 2>&1)
if echo "$out" | grep -q "^24 records, 12 kernels, 4 steps" && echo "$out" | grep -qE "^ +2 +189\.00 +8\.00 +1\.00 +2 +0\.60"; then
  pass trace_graph_ids; else fail trace_graph_ids "$out"; fi
# the first form has no t2: a load of 0
$PY "$T/t.bin" 2>&1 | grep -qE "^ +0 +4\.00 +1\.00 +0\.20 +2 +0\.00" && pass trace_v1_no_load || fail trace_v1_no_load "$($PY "$T/t.bin" 2>&1)"
head -c 60 "$T/g.bin" >"$T/short2.bin"
expect_fail trace_truncated_v2 "24 records announced, 1 present" $PY "$T/short2.bin"
# with a cut longer than a step, each grid's four launches read as one
$PY "$T/g.bin" --split 300 2>&1 | grep -q "^24 records, 3 kernels" && pass trace_split || fail trace_split "$($PY "$T/g.bin" --split 300 2>&1)"
# long kernels (dense bf16): the next one's blocks start 30 us after the one before let its last go,
# steps 1 ms apart; without --gap the reader takes the gap whose steps are longest (here 50 us:
# 4 steps of 3); --gap 8 cuts after every kernel
$MK "$T/l.bin" 2 1000000 reuse "0,1000,1500,400,400 31500,40000,40500,400,400 70500,80000,80500,400,400"
out=$($PY "$T/l.bin" 2>&1)
echo "$out" | grep -q "^24 records, 12 kernels, 4 steps (a new step where a kernel starts >50 us" &&
  echo "$out" | grep -q "the most common, 3, 4 steps" && pass trace_gap_auto || fail trace_gap_auto "$out"
$PY "$T/l.bin" --gap 8 2>&1 | grep -q "^24 records, 12 kernels, 12 steps" && pass trace_gap_given ||
  fail trace_gap_given "$($PY "$T/l.bin" --gap 8 2>&1)"
# --kernels: a prompt test's short groups before the decode steps (here ten steps of one kernel, then
# the four of three from t.bin): the most common length is 1, --kernels 3 reads the four steps
$MK "$T/p1.bin" 1 100000 new "0,1000,1200,0,0" 100000 10
$MK "$T/p3.bin" 1 100000 new "0,1000,1200,0,0 500,5000,5500,0,0 4000,12000,13000,0,0" 2000000 4
python3 - "$T/p1.bin" "$T/p3.bin" "$T/p.bin" <<'MERGE'
import struct, sys
a, b = (open(f, "rb").read() for f in sys.argv[1:3])
n = struct.unpack("<Q", a[8:16])[0] + struct.unpack("<Q", b[8:16])[0]
open(sys.argv[3], "wb").write(a[:8] + struct.pack("<Q", n) + a[16:] + b[16:])
MERGE
out=$($PY "$T/p.bin" --steps 2 --gap 50 2>&1)
echo "$out" | grep -q "the most common, 1, 10 steps" && ! echo "$out" | grep -qE "^ +1 +[0-9]" &&
  pass trace_kernels_default || fail trace_kernels_default "$out"
out=$($PY "$T/p.bin" --steps 2 --kernels 3 2>&1)
if echo "$out" | grep -q "read: the steps of 3 kernels (4)" && echo "$out" | grep -qE "^ +1 +7\.00 +4\.50 +0\.50 +2" &&
   echo "$out" | grep -qE "^ +2 +89\.00 "; then pass trace_kernels_given; else fail trace_kernels_given "$out"; fi
expect_fail trace_kernels_none "no complete step" $PY "$T/p.bin" --kernels 7
expect_fail trace_bad_kernels "whole number" $PY "$T/t.bin" --kernels three
expect_fail trace_zero_kernels "must be positive" $PY "$T/t.bin" --kernels 0
expect_fail trace_bad_split "must be positive" $PY "$T/t.bin" --split 0
expect_fail trace_bad_gap "a number of us" $PY "$T/t.bin" --gap 8us
expect_fail trace_zero_gap "must be positive" $PY "$T/t.bin" --gap 0
expect_fail trace_zero_steps "must be positive" $PY "$T/t.bin" --steps 0
expect_fail trace_missing_labels "nolabels: No such file" $PY "$T/t.bin" --labels "$T/nolabels"
t_done
