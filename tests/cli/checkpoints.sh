#!/usr/bin/env bash
# tests/cli/checkpoints.sh: checkpoint layouts end to end: a sharded checkpoint (index + shards)
# gives the same logits as the single file; per-layer quantization overrides in config.json are
# honoured (a q4 model with one layer in q8, and one layer left dense with `false`).
. "$(dirname "$0")/lib.sh"
M=$MLXCEL_BIN
FX=$MLXCEL_ROOT/tests/fixtures/models
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
IDS=3,14,15,92,65,35,89,79

same_logits() { # a.safetensors b.safetensors
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    a, b = h['logits']['data_offsets']; return d[a:b]
sys.exit(0 if load(sys.argv[1]) == load(sys.argv[2]) else 1)
PY
}

# --- sharded ---------------------------------------------------------------------------------
mkdir -p "$TMP/sharded"
cp "$FX/qwen3-mlx-q4"/{config.json,tokenizer.json,tokenizer_config.json} "$TMP/sharded/"
python3 - "$FX/qwen3-mlx-q4/model.safetensors" "$TMP/sharded" <<'PY'
import json, struct, sys, os
src, out = sys.argv[1], sys.argv[2]
b = open(src, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n]); d = b[8+n:]
names = sorted(k for k in h if k != '__metadata__')
parts = [names[:len(names)//2], names[len(names)//2:]]
wm = {}
for i, part in enumerate(parts):
    fn = 'model-%05d-of-%05d.safetensors' % (i + 1, len(parts))
    hdr, blob, off = {'__metadata__': {'format': 'mlx'}}, b'', 0
    for k in part:
        a, e = h[k]['data_offsets']; t = d[a:e]
        hdr[k] = {'dtype': h[k]['dtype'], 'shape': h[k]['shape'], 'data_offsets': [off, off + len(t)]}
        blob += t; off += len(t); wm[k] = fn
    hb = json.dumps(hdr).encode(); hb += b' ' * (-len(hb) % 8)
    open(os.path.join(out, fn), 'wb').write(struct.pack('<Q', len(hb)) + hb + blob)
json.dump({'metadata': {}, 'weight_map': wm}, open(os.path.join(out, 'model.safetensors.index.json'), 'w'))
PY
"$M" logits -m "$FX/qwen3-mlx-q4" --ids $IDS -o "$TMP/a.safetensors" 2>/dev/null
if "$M" logits -m "$TMP/sharded" --ids $IDS -o "$TMP/b.safetensors" 2>"$TMP/err" && same_logits "$TMP/a.safetensors" "$TMP/b.safetensors"; then
  pass sharded_same_logits; else fail sharded_same_logits "$(cat "$TMP/err")"; fi
rm "$TMP/sharded/model-00002-of-00002.safetensors"
expect_fail sharded_missing_shard "00002" "$M" logits -m "$TMP/sharded" --ids $IDS -o "$TMP/c.safetensors"

# --- per-layer overrides -----------------------------------------------------------------------
mixed() { # name layer-source-dir override-json
  mkdir -p "$TMP/$1"
  cp "$FX/llama-mlx-q4"/{tokenizer.json,tokenizer_config.json} "$TMP/$1/"
  python3 - "$FX/llama-mlx-q4" "$2" "$TMP/$1" "$3" <<'PY'
import json, struct, sys, os
base, other, out, ov = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
def load(p):
    b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n]); d = b[8+n:]
    return {k: (v['dtype'], v['shape'], d[v['data_offsets'][0]:v['data_offsets'][1]]) for k, v in h.items() if k != '__metadata__'}
t = load(base + '/model.safetensors'); o = load(other + '/model.safetensors')
pre = 'model.layers.1.mlp.down_proj'
for k in [k for k in t if k.startswith(pre + '.')]: del t[k]
for k in o:
    if k.startswith(pre + '.'): t[k] = o[k]
hdr, blob, off = {'__metadata__': {'format': 'mlx'}}, b'', 0
for k in sorted(t):
    dt, sh, data = t[k]; hdr[k] = {'dtype': dt, 'shape': sh, 'data_offsets': [off, off + len(data)]}; blob += data; off += len(data)
hb = json.dumps(hdr).encode(); hb += b' ' * (-len(hb) % 8)
open(out + '/model.safetensors', 'wb').write(struct.pack('<Q', len(hb)) + hb + blob)
c = json.load(open(base + '/config.json'))
if ov is not None:
    c['quantization'][pre] = ov; c['quantization_config'][pre] = ov
json.dump(c, open(out + '/config.json', 'w'))
PY
}
mixed q8layer "$FX/llama-mlx-q8" '{"group_size": 32, "bits": 8}'
"$M" logits -m "$TMP/q8layer" --ids $IDS -o "$TMP/q8.safetensors" 2>"$TMP/err" && pass override_bits || fail override_bits "$(cat "$TMP/err")"
mixed q8noov "$FX/llama-mlx-q8" null
expect_fail override_missing_is_error "shape" "$M" logits -m "$TMP/q8noov" --ids $IDS -o "$TMP/x.safetensors"
mixed denselayer "$FX/llama" 'false'
"$M" logits -m "$TMP/denselayer" --ids $IDS -o "$TMP/d.safetensors" 2>"$TMP/err" && pass override_false_dense || fail override_false_dense "$(cat "$TMP/err")"
# the mixed models differ from pure q4 (the layer really came from elsewhere) but stay close
"$M" logits -m "$FX/llama-mlx-q4" --ids $IDS -o "$TMP/q4.safetensors" 2>/dev/null
if python3 - "$TMP/q4.safetensors" "$TMP/q8.safetensors" "$TMP/d.safetensors" <<'PY'
import json, struct, sys
def load(p):
    f = open(p, 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n)); d = f.read()
    a, b = h['logits']['data_offsets']; return struct.unpack('<%df' % ((b - a) // 4), d[a:b])
q4, q8, dn = (load(p) for p in sys.argv[1:4])
mx = max(abs(v) for v in q4)
for other in (q8, dn):
    diff = max(abs(a - b) for a, b in zip(q4, other))
    assert 0 < diff < 0.5 * mx, (diff, mx)
PY
then pass override_changes_layer; else fail override_changes_layer; fi
t_done
