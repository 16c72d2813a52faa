#!/usr/bin/env bash
# tests/cli/generate.sh: `mlxcel generate`, `logits`, `bench`, `arch`, `--help`/`--version` end to
# end, and every kind of bad input the issue lists: a one-line error naming the problem and a
# non-zero exit, never a crash.
. "$(dirname "$0")/lib.sh"
M=$MLXCEL_BIN
R=$MLXCEL_ROOT
DEMO=$R/models/fortune-6m-mlx-q4
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# --- happy paths ------------------------------------------------------------------------------
out=$("$M" --version) && [[ "$out" == mlxcel\ * ]] && pass version || fail version "$out"
out=$("$M" --help) && echo "$out" | grep -q generate && pass help || fail help "$out"
out=$("$M" generate --help) && echo "$out" | grep -q -- "--prompt-ids" && pass generate_help || fail generate_help

# the demo prompt's greedy text equals the golden (python reads golden.json)
want=$(python3 -c "import json,sys; print(json.load(open('$DEMO/golden.json'))['prompts'][0]['greedy_text'].replace('<|endoftext|>',''), end='')")
got=$("$M" generate -m "$DEMO" -p "A wise man once said" -n 32 --temp 0 --no-chat-template --ignore-eos --no-stats 2>"$TMP/err")
if [ "$got" = "$want" ]; then pass demo_greedy_text; else fail demo_greedy_text "got [$got] want [$want] $(cat "$TMP/err")"; fi

# --json has the documented keys and the golden ids
j=$("$M" generate -m "$DEMO" -p "The computer" -n 32 --temp 0 --no-chat-template --ignore-eos --json 2>"$TMP/err")
if python3 - "$j" <<'PY'
import json, sys
o = json.loads(sys.argv[1])
for k in ("tokens", "text", "prompt_tokens", "prompt_tps", "decode_tps"):
    assert k in o, k
assert len(o["tokens"]) == 32 and o["decode_tps"] > 0 and o["prompt_tokens"] == 2, o
PY
then pass generate_json; else fail generate_json "$j $(cat "$TMP/err")"; fi

# --prompt-ids and seeds: same seed, same output; different seed, (almost surely) different
a=$("$M" generate -m "$DEMO" --prompt-ids 1,2,3 -n 24 --temp 1.0 --seed 7 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
b=$("$M" generate -m "$DEMO" --prompt-ids 1,2,3 -n 24 --temp 1.0 --seed 7 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
c=$("$M" generate -m "$DEMO" --prompt-ids 1,2,3 -n 24 --temp 1.0 --seed 8 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['tokens'])")
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ]; then pass seed_reproducible; else fail seed_reproducible "$a / $b / $c"; fi

# sampling flags all accepted together
"$M" generate -m "$DEMO" -p "hello" -n 8 --temp 0.7 --top-k 20 --top-p 0.9 --min-p 0.1 --repeat-penalty 1.1 --seed 1 --no-stats >/dev/null 2>&1 && pass sampling_flags || fail sampling_flags

# chat template path: the prompt goes through the template (prompt_tokens grows)
n_plain=$("$M" generate -m "$DEMO" -p "Tell me something." -n 1 --no-chat-template --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['prompt_tokens'])")
n_chat=$("$M" generate -m "$DEMO" -p "Tell me something." -n 1 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['prompt_ids'])")
want_chat=$(python3 -c "
import json,struct
f=open('$DEMO/golden.safetensors','rb'); n=struct.unpack('<Q',f.read(8))[0]; h=json.loads(f.read(n)); d=f.read()
t=h['prompt2_ids']; a,b=t['data_offsets']; print(list(struct.unpack('<%di'%((b-a)//4), d[a:b])))")
if [ "$n_chat" = "$want_chat" ]; then pass chat_template_prompt; else fail chat_template_prompt "$n_chat vs $want_chat"; fi

# logits: F32 [n, vocab]
if "$M" logits -m "$DEMO" --ids 5,6,7,8 -o "$TMP/l.safetensors" 2>/dev/null && python3 - "$TMP/l.safetensors" <<'PY'
import json, struct, sys
f = open(sys.argv[1], 'rb'); n = struct.unpack('<Q', f.read(8))[0]; h = json.loads(f.read(n))
assert h['logits']['dtype'] == 'F32' and h['logits']['shape'] == [4, 4096], h
PY
then pass logits_file; else fail logits_file; fi

# bench: on the demo and on a random shape
out=$("$M" bench -m "$DEMO" -p 16 -n 4 -r 1 --json 2>&1) && echo "$out" | python3 -c "import json,sys; o=json.load(sys.stdin); assert [r['test'] for r in o['results']]==['pp16','tg4'] and all(r['tps']>0 for r in o['results'])" && pass bench_model || fail bench_model "$out"
out=$("$M" bench --config "$R/tests/fixtures/models/qwen3/config.json" --random --q-bits 4 --q-group-size 32 -p 8 -n 4 -r 1 2>&1) && echo "$out" | grep -q "tg4" && pass bench_random || fail bench_random "$out"
out=$("$M" bench --config "$R/tests/fixtures/models/llama/config.json" --random -p 8 -n 4 -b 3 -r 1 --json 2>&1) && echo "$out" | grep -q '"tg4 x3"' && pass bench_batch || fail bench_batch "$out"
# --bandwidth: a decode step's weight bytes (the model size) x steps a second (tok/s / batch)
out=$("$M" bench -m "$DEMO" -p 8 -n 4 -b 2 -r 1 --bandwidth --json 2>&1) && echo "$out" | python3 -c "
import json,sys; o=json.load(sys.stdin); pp,tg=o['results']
assert 'weight_gbps' not in pp and tg['test']=='tg4 x2'
assert abs(tg['weight_gb_per_step']-o['size_mib']*1048576/1e9) < 1e-9
assert abs(tg['weight_gbps']-tg['weight_gb_per_step']*tg['tps']/2) <= 1e-9*tg['weight_gbps']" && pass bench_bandwidth_json || fail bench_bandwidth_json "$out"
out=$("$M" bench -m "$DEMO" -p 0 -n 4 -r 1 --bandwidth 2>&1) && echo "$out" | grep -qE '^bandwidth tg4: [0-9.]+ GB of weights a step x [0-9.]+ steps/s = [0-9]+ GB/s' && pass bench_bandwidth_text || fail bench_bandwidth_text "$out"
# --split: the step split is a GPU measure; on the CPU each tg test says it was not measured, and
# the JSON has no step figures (test_backend_cuda checks the figures on a GPU)
out=$("$M" bench -m "$DEMO" -p 8 -n 4 -r 1 --split 2>&1) && echo "$out" | grep -qx 'split tg4: not measured (the step split is measured on the GPU backend)' &&
  ! echo "$out" | grep -q '^split pp' && pass bench_split_cpu || fail bench_split_cpu "$out"
out=$("$M" bench -m "$DEMO" -p 0 -n 4 -r 1 --split --json 2>&1) && echo "$out" | python3 -c "
import json,sys; o=json.load(sys.stdin); (tg,)=o['results']
assert tg['test']=='tg4' and tg['tps']>0 and not any(k.startswith('step') for k in tg)" && pass bench_split_json_cpu || fail bench_split_json_cpu "$out"
# -d: tests after D tokens already in each sequence's cache (llama-bench -d)
out=$("$M" bench -m "$DEMO" -p 8 -n 4 -b 2 -d 20 -r 1 --json 2>&1) && echo "$out" | python3 -c "import json,sys; o=json.load(sys.stdin); assert o['depth']==20 and [r['test'] for r in o['results']]==['pp8 @ d20','tg4 x2 @ d20'] and all(r['tps']>0 for r in o['results'])" && pass bench_depth || fail bench_depth "$out"
expect_fail bad_bench_depth "past the model" "$M" bench -m "$DEMO" -p 8 -n 4 -d 65536
# -c: the cache sized for more positions than the tests need (a server's pool); the label says so
out=$("$M" bench -m "$DEMO" -p 8 -n 4 -c 200 -r 1 --json 2>&1) && echo "$out" | python3 -c "import json,sys; o=json.load(sys.stdin); assert o['ctx']==200 and [r['test'] for r in o['results']]==['pp8 c200','tg4 c200'] and all(r['tps']>0 for r in o['results'])" && pass bench_ctx || fail bench_ctx "$out"
out=$("$M" bench -m "$DEMO" -p 8 -n 4 -r 1 --json 2>&1) && echo "$out" | python3 -c "import json,sys; o=json.load(sys.stdin); assert o['ctx']==8" && pass bench_ctx_default || fail bench_ctx_default "$out"
expect_fail bad_bench_ctx "past the model" "$M" bench -m "$DEMO" -p 8 -n 4 -c 1000000
expect_fail bad_bench_ctx_zero "out of range" "$M" bench -m "$DEMO" -p 8 -n 4 -c 0

out=$("$M" arch) && echo "$out" | grep -q qwen3 && echo "$out" | grep -q mistral && pass arch || fail arch "$out"
"$M" arch --json | python3 -c "import json,sys; a=json.load(sys.stdin); assert {x['model_type'] for x in a} >= {'llama','qwen2','qwen3','mistral'}" && pass arch_json || fail arch_json

# --- bad input -------------------------------------------------------------------------------
expect_fail bad_no_model "required" "$M" generate -p hi
expect_fail bad_unknown_flag "unknown option" "$M" generate -m "$DEMO" -p hi --bogus
expect_fail bad_n_negative "out of range" "$M" generate -m "$DEMO" -p hi -n -5
expect_fail bad_n_absurd "out of range" "$M" generate -m "$DEMO" -p hi -n 99999999999
expect_fail bad_n_over_context "context" "$M" generate -m "$DEMO" -p hi -n 100000
expect_fail bad_n_text "not an integer" "$M" generate -m "$DEMO" -p hi -n abc
expect_fail bad_temp "not a number|out of range" "$M" generate -m "$DEMO" -p hi --temp nan
expect_fail bad_prompt_ids "token id" "$M" generate -m "$DEMO" --prompt-ids 1,x,3
expect_fail bad_prompt_id_range "outside the vocabulary" "$M" generate -m "$DEMO" --prompt-ids 1,99999
expect_fail bad_missing_dir "no-such-dir" "$M" generate -m "$TMP/no-such-dir" -p hi
expect_fail bad_unknown_command "unknown command" "$M" frobnicate

mk() { rm -rf "$TMP/$1"; mkdir -p "$TMP/$1"; cp "$DEMO"/* "$TMP/$1/"; chmod -R u+w "$TMP/$1"; }
mk no_config; rm "$TMP/no_config/config.json"
expect_fail bad_missing_config "config.json" "$M" generate -m "$TMP/no_config" -p hi
mk no_weights; rm "$TMP/no_weights/model.safetensors"
expect_fail bad_missing_weights "safetensors" "$M" generate -m "$TMP/no_weights" -p hi
mk no_tok; rm "$TMP/no_tok/tokenizer.json"
expect_fail bad_missing_tokenizer "tokenizer" "$M" generate -m "$TMP/no_tok" -p hi
mk unreadable_tok; echo '{"model": {"type": "BPE", "vocab": {' > "$TMP/unreadable_tok/tokenizer.json"
expect_fail bad_tokenizer_json "tokenizer" "$M" generate -m "$TMP/unreadable_tok" -p hi
mk arch; python3 - "$TMP/arch/config.json" <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); c['model_type'] = 'frobnet'; json.dump(c, open(sys.argv[1], 'w'))
PY
expect_fail bad_model_type "frobnet.*(supported|llama)" "$M" generate -m "$TMP/arch" -p hi
mk badcfg; echo '{"model_type": "qwen3", "hidden_size": ' > "$TMP/badcfg/config.json"
expect_fail bad_config_json "config.json" "$M" generate -m "$TMP/badcfg" -p hi
mk cfgtype; python3 - "$TMP/cfgtype/config.json" <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); c['num_hidden_layers'] = "six"; json.dump(c, open(sys.argv[1], 'w'))
PY
expect_fail bad_config_type "num_hidden_layers" "$M" generate -m "$TMP/cfgtype" -p hi
mk bits; python3 - "$TMP/bits/config.json" <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); c['quantization'] = {'bits': 7, 'group_size': 64}; json.dump(c, open(sys.argv[1], 'w'))
PY
expect_fail bad_q_bits "bits" "$M" generate -m "$TMP/bits" -p hi
mk gs; python3 - "$TMP/gs/config.json" <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); c['quantization'] = {'bits': 4, 'group_size': 48}; json.dump(c, open(sys.argv[1], 'w'))
PY
expect_fail bad_q_group "group" "$M" generate -m "$TMP/gs" -p hi
mk shape; python3 - "$TMP/shape/config.json" <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); c['intermediate_size'] = 512; json.dump(c, open(sys.argv[1], 'w'))
PY
expect_fail bad_tensor_shape "shape" "$M" generate -m "$TMP/shape" -p hi
mk layers; python3 - "$TMP/layers/config.json" <<'PY'
import json, sys; c = json.load(open(sys.argv[1])); c['num_hidden_layers'] = 7; json.dump(c, open(sys.argv[1], 'w'))
PY
expect_fail bad_missing_tensor "missing tensor" "$M" generate -m "$TMP/layers" -p hi

# safetensors corruptions (python rewrites the file)
st_corrupt() { # name mode
  mk "$1"; python3 - "$TMP/$1/model.safetensors" "$2" <<'PY'
import json, struct, sys
p, mode = sys.argv[1], sys.argv[2]
b = open(p, 'rb').read(); n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8+n]); d = b[8+n:]
def write(h, d, hl=None):
    hb = json.dumps(h).encode(); hb += b' ' * (-len(hb) % 8)
    open(p, 'wb').write(struct.pack('<Q', hl if hl is not None else len(hb)) + hb + d)
k = sorted(x for x in h if x != '__metadata__')[0]
if mode == 'hdrlen': write(h, d, hl=1 << 40)
elif mode == 'json': open(p, 'wb').write(struct.pack('<Q', 16) + b'{"a": [1, 2,,, ' + d)
elif mode == 'dtype': h[k]['dtype'] = 'Q7'; write(h, d)
elif mode == 'range': h[k]['data_offsets'] = [0, len(d) + 1000]; write(h, d)
elif mode == 'overlap':
    ks = sorted((x for x in h if x != '__metadata__'), key=lambda x: h[x]['data_offsets'][0])
    a, b2 = ks[0], ks[1]
    la = h[a]['data_offsets'][1] - h[a]['data_offsets'][0]; lb = h[b2]['data_offsets'][1] - h[b2]['data_offsets'][0]
    if la == lb: h[b2]['data_offsets'] = list(h[a]['data_offsets'])
    else: h[b2]['data_offsets'] = [h[a]['data_offsets'][0], h[a]['data_offsets'][0] + lb]
    write(h, d)
elif mode == 'truncate': open(p, 'wb').write(b[:len(b) // 2])
PY
}
st_corrupt hdrlen hdrlen;   expect_fail bad_st_header_length "header" "$M" generate -m "$TMP/hdrlen" -p hi
st_corrupt stjson json;     expect_fail bad_st_header_json "JSON|json" "$M" generate -m "$TMP/stjson" -p hi
st_corrupt stdtype dtype;   expect_fail bad_st_dtype "dtype|Q7" "$M" generate -m "$TMP/stdtype" -p hi
st_corrupt strange range;   expect_fail bad_st_offsets "offset|range|exceed" "$M" generate -m "$TMP/strange" -p hi
st_corrupt stover overlap;  expect_fail bad_st_overlap "overlap" "$M" generate -m "$TMP/stover" -p hi
st_corrupt sttrunc truncate; expect_fail bad_st_truncated "truncated|exceed|short|offset" "$M" generate -m "$TMP/sttrunc" -p hi

expect_fail bad_bench_args "give -m" "$M" bench
expect_fail bad_bench_qbits "out of range" "$M" bench --config "$R/tests/fixtures/models/qwen3/config.json" --random --q-bits 9
expect_fail bad_bench_group "not supported" "$M" bench --config "$R/tests/fixtures/models/qwen3/config.json" --random --q-bits 4 --q-group-size 48
expect_fail bad_logits_ids "token id" "$M" logits -m "$DEMO" --ids 1,,2 -o "$TMP/x.safetensors"
t_done
