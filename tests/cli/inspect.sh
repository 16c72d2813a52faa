#!/usr/bin/env bash
# tests/cli/inspect.sh: `mlxcel inspect`: weight bytes equal the checkpoint's tensor bytes, the KV
# cache follows layers * kv_heads * head_dim * 2 * 4 bytes * ctx * batch, the JSON keys are present
# and consistent, the budget is the machine's available memory; bad input gives clear errors.
source "$(dirname "$0")/lib.sh"
BIN=$MLXCEL_BIN
T=$(mktemp -d /tmp/mlxcel-insp-XXXXXX)
trap 'rm -rf "$T"' EXIT
FX=$MLXCEL_ROOT/tests/fixtures/models
export MLXCEL_CACHE_DIR=$T/cache HF_HUB_CACHE=$T/hf HF_HUB_OFFLINE=1

check() { # name dir ctx batch
  local name=$1 dir=$2 ctx=$3 batch=$4
  if "$BIN" inspect -m "$dir" -n "$ctx" --batch "$batch" --json > "$T/out.json" 2>"$T/err" && python3 - "$dir" "$ctx" "$batch" "$T/out.json" <<'EOF'
import json, os, struct, sys
d, ctx, batch, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.load(open(sys.argv[4]))
cfg = json.load(open(os.path.join(d, "config.json")))
w = 0
for f in os.listdir(d):
    if f.endswith(".safetensors") and not f.startswith("golden"):
        b = open(os.path.join(d, f), "rb").read(); n = struct.unpack("<Q", b[:8])[0]
        h = json.loads(b[8:8 + n]); h.pop("__metadata__", None)
        w += sum(v["data_offsets"][1] - v["data_offsets"][0] for v in h.values())
hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
kv = cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"]) * hd * 2 * 4 * ctx * batch
for k in ("weights_bytes", "kv_bytes_total", "activation_bytes", "headroom_bytes", "budget_bytes", "total_bytes", "fits"):
    assert k in out, k
assert out["weights_bytes"] == w, (out["weights_bytes"], w)
assert out["kv_bytes_total"] == kv, (out["kv_bytes_total"], kv)
assert out["total_bytes"] == out["weights_bytes"] + out["kv_bytes_total"] + out["activation_bytes"] + out["headroom_bytes"]
assert out["activation_bytes"] > 0 and out["headroom_bytes"] > 0
avail = [int(l.split()[1]) * 1024 for l in open("/proc/meminfo") if l.startswith("MemAvailable:")][0]
assert abs(out["budget_bytes"] - avail) < avail // 10, (out["budget_bytes"], avail)
assert out["fits"] == (out["total_bytes"] <= out["budget_bytes"])
EOF
  then pass "$name"; else fail "$name" "$(tail -3 "$T/err")"; fi
}
check inspect_llama "$FX/llama" 128 1
check inspect_llama_batch "$FX/llama" 1000 3
check inspect_qwen3_moe_q4 "$FX/qwen3_moe-mlx-q4" 64 2
check inspect_gemma3 "$FX/gemma3" 77 1

# the default context is min(max_position_embeddings, 4096)
"$BIN" inspect -m "$FX/llama" --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['ctx']==512 else 1)" \
  && pass inspect_default_ctx || fail inspect_default_ctx

# a context too big for any machine does not fit
"$BIN" inspect -m "$FX/llama" -n 16000000 --batch 65536 --json | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['fits'] is False else 1)" \
  && pass inspect_does_not_fit || fail inspect_does_not_fit

out=$("$BIN" inspect -m "$FX/llama" -n 256)
echo "$out" | grep -q "^fits " && echo "$out" | grep -q "kv cache" && echo "$out" | grep -q "available" \
  && pass inspect_text || fail inspect_text "$out"

expect_fail inspect_no_model "-m MODEL is required" "$BIN" inspect
expect_fail inspect_missing_dir "no such model directory" "$BIN" inspect -m "$T/none/x"
expect_fail inspect_bad_ctx "not an integer" "$BIN" inspect -m "$FX/llama" -n abc
expect_fail inspect_zero_batch "out of range" "$BIN" inspect -m "$FX/llama" --batch 0
mkdir -p "$T/nolayers"; cp "$FX/llama/model.safetensors" "$T/nolayers/"; echo '{"hidden_size": 64}' > "$T/nolayers/config.json"
expect_fail inspect_bad_config "num_hidden_layers" "$BIN" inspect -m "$T/nolayers"
mkdir -p "$T/strlayers"; cp "$FX/llama/model.safetensors" "$T/strlayers/"; echo '{"num_hidden_layers": "3", "hidden_size": 64, "num_attention_heads": 4}' > "$T/strlayers/config.json"
expect_fail inspect_string_config "num_hidden_layers is not a non-negative integer" "$BIN" inspect -m "$T/strlayers"
expect_fail inspect_not_in_store "not in the store" "$BIN" inspect -m some-org/not-here
t_done
