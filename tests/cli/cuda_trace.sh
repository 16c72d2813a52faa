#!/usr/bin/env bash
# tests/cli/cuda_trace.sh: tools/cuda_trace.py, the reader of the CUDA wait trace (a build with
# -DMLXCEL_CUDA_TRACE=ON writes it on the GPU), on a made-up trace of known shape: four steps of
# three kernels (two blocks each), the kernels' times known, so every figure it prints is known;
# then files that are not traces.
source "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/mlxcel-trace-XXXXXX)
trap 'rm -rf "$T"' EXIT
PY="python3 $MLXCEL_ROOT/tools/cuda_trace.py"
python3 - "$T/t.bin" <<'PY'
import struct, sys
recs = []
grid = 100
for s in range(4):
    base = 1_000_000 + s * 100_000   # ns; a step every 100 us
    # (start, go, last) of each kernel: go 1, 5, 12 us into the step
    for start, go, last in ((0, 1000, 1200), (500, 5000, 5500), (4000, 12000, 13000)):
        grid += 1
        recs.append((grid, base + start, base + go, 3, 0))
        recs.append((grid, base + start + 100, base + last, 7, 1))
with open(sys.argv[1], "wb") as f:
    f.write(b"MXTRACE1" + struct.pack("<Q", len(recs)))
    for r in recs:
        f.write(struct.pack("<QQQII", *r))
PY
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
python3 - "$T/g.bin" <<'PY'
import struct, sys
recs = []
for s in range(4):
    base = 1_000_000 + s * 200_000
    for grid, (start, go, last) in enumerate(((0, 1000, 1200), (500, 5000, 5500), (4000, 12000, 13000)), 101):
        recs.append((grid, base + start, base + go, base + go + 300, 3, 0))
        recs.append((grid, base + start + 100, base + last, base + last + 900, 7, 1))
with open(sys.argv[1], "wb") as f:
    f.write(b"MXTRACE2" + struct.pack("<Q", len(recs)))
    for r in recs:
        f.write(struct.pack("<QQQQII", *r))
PY
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
python3 - "$T/l.bin" <<'PY'
import struct, sys
recs = []
for s in range(4):
    base = 1_000_000 + s * 1_000_000
    for grid, (start, go, last) in enumerate(((0, 1000, 1500), (31500, 40000, 40500), (70500, 80000, 80500)), 201):
        recs.append((grid, base + start, base + go, base + go + 400, 3, 0))
        recs.append((grid, base + start + 100, base + last, base + last + 400, 7, 1))
with open(sys.argv[1], "wb") as f:
    f.write(b"MXTRACE2" + struct.pack("<Q", len(recs)))
    for r in recs:
        f.write(struct.pack("<QQQQII", *r))
PY
out=$($PY "$T/l.bin" 2>&1)
echo "$out" | grep -q "^24 records, 12 kernels, 4 steps (a new step where a kernel starts >50 us" &&
  echo "$out" | grep -q "the most common, 3, 4 steps" && pass trace_gap_auto || fail trace_gap_auto "$out"
$PY "$T/l.bin" --gap 8 2>&1 | grep -q "^24 records, 12 kernels, 12 steps" && pass trace_gap_given ||
  fail trace_gap_given "$($PY "$T/l.bin" --gap 8 2>&1)"
expect_fail trace_bad_split "must be positive" $PY "$T/t.bin" --split 0
expect_fail trace_zero_steps "must be positive" $PY "$T/t.bin" --steps 0
expect_fail trace_missing_labels "nolabels: No such file" $PY "$T/t.bin" --labels "$T/nolabels"
t_done
