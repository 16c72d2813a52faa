#!/usr/bin/env bash
# tests/cli/convert.sh: `mlxcel convert`: the five quantized fixture families at 4 and 8 bits (group
# size 32) must come out with tensors byte-identical to the -mlx-q4 / -mlx-q8 fixtures (MLX affine
# quantization, MoE experts stacked); sharded output with an index; dtype conversion; bad input
# (missing tensors, a missing expert, bad flags, an existing output) with nothing half-written left.
source "$(dirname "$0")/lib.sh"
BIN=$MLXCEL_BIN
T=$(mktemp -d /tmp/mlxcel-cvt-XXXXXX)
trap 'rm -rf "$T"' EXIT
FX=$MLXCEL_ROOT/tests/fixtures/models

# tensors_equal A B: every tensor of B's safetensors files is in A's with the same dtype, shape and bytes
cat > "$T/cmp.py" <<'EOF'
import json, os, struct, sys
def load(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors") or f.startswith("golden"): continue
        b = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
        for k, v in h.items():
            s, e = v["data_offsets"]
            out[k] = (v["dtype"], v["shape"], b[8 + n + s:8 + n + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
missing = [k for k in b if k not in a]
extra = [k for k in a if k not in b]
diff = [k for k in b if k in a and a[k] != b[k]]
if missing or extra or diff:
    print("missing %s extra %s differ %s" % (missing[:3], extra[:3], diff[:3])); sys.exit(1)
print("%d tensors identical" % len(b))
EOF

for m in llama qwen3 gemma3 qwen3_moe mixtral; do
  for b in 4 8; do
    name=convert_${m}_q$b
    out=$T/$m-q$b
    if ! "$BIN" convert --hf-path "$FX/$m" -o "$out" -q --q-bits $b --q-group-size 32 >"$T/log" 2>&1; then
      fail $name "convert failed: $(tail -2 "$T/log")"; continue; fi
    if ! r=$(python3 "$T/cmp.py" "$out" "$FX/$m-mlx-q$b"); then fail $name "$r"; continue; fi
    if ! python3 -c "import json,sys; q=json.load(open(sys.argv[1]))['quantization']; sys.exit(0 if q=={'group_size':32,'bits':$b} else 1)" "$out/config.json"; then
      fail $name "config.json quantization"; continue; fi
    if ! cmp -s "$out/tokenizer.json" "$FX/$m/tokenizer.json" || ! cmp -s "$out/tokenizer_config.json" "$FX/$m/tokenizer_config.json"; then
      fail $name "tokenizer files not copied"; continue; fi
    [ -e "$out/golden.safetensors" ] && { fail $name "golden copied"; continue; }
    pass $name
  done
done

# progress is shown (plain lines when not a terminal)
grep -q "convert: 100%" "$T/log" && pass convert_progress || fail convert_progress "$(cat "$T/log")"

# the output is itself a valid checkpoint the tools can read
if "$BIN" inspect -m "$T/qwen3_moe-q4" --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['weights_bytes']>0 and d['bits']==4 else 1)"; then
  pass convert_output_loads; else fail convert_output_loads; fi

# sharded output: small shard size gives several files, an index, and the same tensors
if "$BIN" convert --hf-path "$FX/llama" -o "$T/sharded" -q --q-bits 4 --q-group-size 32 --shard-bytes 40000 --quiet 2>"$T/log" \
   && [ -f "$T/sharded/model.safetensors.index.json" ] && [ -f "$T/sharded/model-00001-of-0000"*".safetensors" ] 2>/dev/null; then
  if r=$(python3 "$T/cmp.py" "$T/sharded" "$FX/llama-mlx-q4") && python3 - "$T/sharded" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
wm = idx["weight_map"]
shards = sorted(f for f in os.listdir(d) if f.endswith(".safetensors"))
assert len(shards) >= 3, shards
total = 0
for f in shards:
    b = open(os.path.join(d, f), "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    for k, v in h.items():
        assert wm[k] == f, (k, f)
        total += v["data_offsets"][1] - v["data_offsets"][0]
assert len(wm) == sum(1 for _ in wm) and idx["metadata"]["total_size"] == total
EOF
  then pass convert_sharded; else fail convert_sharded "$r"; fi
else fail convert_sharded "$(tail -2 "$T/log"; ls "$T/sharded" 2>&1)"; fi

# dtype conversion without quantization: f32 output holds the bf16 values exactly
if "$BIN" convert --hf-path "$FX/llama" -o "$T/f32" --dtype f32 --quiet 2>"$T/log" && python3 - "$T/f32" "$FX/llama" <<'EOF'
import json, os, struct, sys
def load(p):
    b = open(os.path.join(p, "model.safetensors"), "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
    return h, b, n
h32, b32, n32 = load(sys.argv[1]); h16, b16, n16 = load(sys.argv[2])
assert set(h32) == set(h16)
for k in h16:
    assert h32[k]["dtype"] == "F32" and h32[k]["shape"] == h16[k]["shape"], k
    s16, e16 = h16[k]["data_offsets"]; s32, e32 = h32[k]["data_offsets"]
    x = b16[8 + n16 + s16:8 + n16 + e16]; y = b32[8 + n32 + s32:8 + n32 + e32]
    for i in range(0, len(x) // 2, 7):
        assert y[4 * i:4 * i + 4] == b"\0\0" + x[2 * i:2 * i + 2], k
EOF
then pass convert_dtype_f32; else fail convert_dtype_f32 "$(tail -2 "$T/log")"; fi

# converting the f32 copy back with --dtype bf16 and quantizing gives the fixture again
if "$BIN" convert --hf-path "$T/f32" -o "$T/f32-q4" -q --q-bits 4 --q-group-size 32 --dtype bf16 --quiet 2>"$T/log" \
   && r=$(python3 "$T/cmp.py" "$T/f32-q4" "$FX/llama-mlx-q4"); then pass convert_roundtrip_bf16; else fail convert_roundtrip_bf16 "$r $(tail -1 "$T/log")"; fi

no_leftovers() { ! ls -d "$1" "$1".partial-* >/dev/null 2>&1; }

# bad input: missing tensors for a layer, a missing expert
cp -r "$FX/llama" "$T/broken"
python3 - "$T/broken/model.safetensors" "model.layers.1." <<'EOF'
import json, struct, sys
p, drop = sys.argv[1], sys.argv[2]
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); meta = h.pop("__metadata__", None)
out, data, off = {}, b"", 0
if meta: out["__metadata__"] = meta
for k in sorted(h):
    if k.startswith(drop) or (drop.startswith("mix") and False): continue
    s, e = h[k]["data_offsets"]; chunk = b[8 + n + s:8 + n + e]
    out[k] = {"dtype": h[k]["dtype"], "shape": h[k]["shape"], "data_offsets": [off, off + len(chunk)]}
    data += chunk; off += len(chunk)
hdr = json.dumps(out, separators=(",", ":")).encode(); hdr += b" " * ((8 - len(hdr) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
EOF
expect_fail convert_missing_layer "no tensors for layer 1" "$BIN" convert --hf-path "$T/broken" -o "$T/out1" -q
no_leftovers "$T/out1" && pass convert_missing_layer_clean || fail convert_missing_layer_clean "$(ls -d "$T"/out1*)"

cp -r "$FX/mixtral" "$T/broken2"
python3 - "$T/broken2/model.safetensors" <<'EOF'
import json, struct, sys
p = sys.argv[1]
b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
out, data, off = {}, b"", 0
for k in sorted(h):
    if k == "model.layers.0.block_sparse_moe.experts.1.w2.weight": continue
    s, e = h[k]["data_offsets"]; chunk = b[8 + n + s:8 + n + e]
    out[k] = {"dtype": h[k]["dtype"], "shape": h[k]["shape"], "data_offsets": [off, off + len(chunk)]}
    data += chunk; off += len(chunk)
hdr = json.dumps(out, separators=(",", ":")).encode(); hdr += b" " * ((8 - len(hdr) % 8) % 8)
open(p, "wb").write(struct.pack("<Q", len(hdr)) + hdr + data)
EOF
expect_fail convert_missing_expert "expert 1 of model.layers.0.block_sparse_moe.switch_mlp.down_proj.weight is missing" \
  "$BIN" convert --hf-path "$T/broken2" -o "$T/out2" -q
no_leftovers "$T/out2" && pass convert_missing_expert_clean || fail convert_missing_expert_clean

# a truncated input file
cp -r "$FX/llama" "$T/trunc"
head -c 200000 "$FX/llama/model.safetensors" > "$T/trunc/model.safetensors"
expect_fail convert_truncated "exceed the file's data section" "$BIN" convert --hf-path "$T/trunc" -o "$T/out3"
no_leftovers "$T/out3" && pass convert_truncated_clean || fail convert_truncated_clean

# flags and outputs
expect_fail convert_bits7 "7 is not supported" "$BIN" convert --hf-path "$FX/llama" -o "$T/out4" -q --q-bits 7
expect_fail convert_bits9 "out of range" "$BIN" convert --hf-path "$FX/llama" -o "$T/out4" -q --q-bits 9
expect_fail convert_group48 "not 32, 64 or 128" "$BIN" convert --hf-path "$FX/llama" -o "$T/out4" -q --q-group-size 48
expect_fail convert_bad_dtype "not bf16, f16 or f32" "$BIN" convert --hf-path "$FX/llama" -o "$T/out4" --dtype f8
expect_fail convert_no_input "no such directory" "$BIN" convert --hf-path "$T/nope" -o "$T/out4"
expect_fail convert_no_out "-o are required" "$BIN" convert --hf-path "$FX/llama"
expect_fail convert_out_exists "exists and is not empty" "$BIN" convert --hf-path "$FX/llama" -o "$T/llama-q4" -q
expect_fail convert_already_quantized "already quantized" "$BIN" convert --hf-path "$FX/llama-mlx-q4" -o "$T/out5" -q
no_leftovers "$T/out4" && no_leftovers "$T/out5" && pass convert_flags_clean || fail convert_flags_clean
# a model whose tokenizer ships as tokenizer.json.xz (as this repo's fixtures do): the converted
# copy keeps it, and generates with it
mkdir -p "$T/xzsrc"
cp "$FX/qwen3/config.json" "$FX/qwen3/model.safetensors" "$FX/qwen3/tokenizer_config.json" "$T/xzsrc/"
xz -c "$FX/qwen3/tokenizer.json" >"$T/xzsrc/tokenizer.json.xz"
if "$BIN" convert --hf-path "$T/xzsrc" -o "$T/xzq4" -q --q-bits 4 --q-group-size 32 >/dev/null 2>"$T/xz.err" &&
   [ -f "$T/xzq4/tokenizer.json.xz" ] && [ ! -f "$T/xzq4/tokenizer.json" ] &&
   "$BIN" generate -m "$T/xzq4" --prompt-ids 1,2,3 -n 4 --temp 0 >"$T/xz.out" 2>>"$T/xz.err"; then
  pass convert_copies_tokenizer_xz
else
  fail convert_copies_tokenizer_xz "$(tail -2 "$T/xz.err")"
fi

t_done
