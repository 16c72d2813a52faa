#!/usr/bin/env bash
# tests/cli/server_flags.sh: mlxcel-server / mlxcel serve flags and environment: API keys
# (--api-key repeatable, --api-key-file, LLAMA_API_KEY; /health stays open), the Unix socket,
# LLAMA_ARG_* variables, unknown and bad flags, and the missing-demo-model error.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/server_lib.inc"

expect_fail unknown_flag "unknown flag '--frobnicate'" "$MLXCEL_SERVER_BIN" --frobnicate
expect_fail bad_port "--port: 'abc' is not an integer" "$MLXCEL_SERVER_BIN" --port abc
expect_fail port_range "--port: 70000 is out of range" "$MLXCEL_SERVER_BIN" --port 70000
expect_fail missing_value "--ctx-size needs a value" "$MLXCEL_SERVER_BIN" --ctx-size
expect_fail serve_unknown_flag "unknown flag '-x'" "$MLXCEL_BIN" serve -x
expect_fail bad_model_dir "nonexistent" "$MLXCEL_SERVER_BIN" --port 0 -m "$SRV_TMP/nonexistent"
expect_fail bad_key_file "cannot read" "$MLXCEL_SERVER_BIN" --api-key-file "$SRV_TMP/nokeys"
out=$("$MLXCEL_SERVER_BIN" --help); echo "$out" | grep -q -- "--api-key-file" && echo "$out" | grep -q LLAMA_ARG_CTX_SIZE && pass help || fail help "$out"
# without -m and without the bundled model next to the binary or under MLXCEL_ROOT: a clear error
mkdir -p "$SRV_TMP/bin"; cp "$MLXCEL_SERVER_BIN" "$SRV_TMP/bin/"
MLXCEL_ROOT=$SRV_TMP expect_fail no_demo_model "demo model .*not found" "$SRV_TMP/bin/mlxcel-server" --port 0

# ---- API keys ----
printf 'file-key-1\n\nfile-key-2\n' >"$SRV_TMP/keys"
srv_start keys --api-key k1 --api-key k2 --api-key-file "$SRV_TMP/keys" || { fail server_start "see above"; t_done; }
c=$(get /health); [ "$c" = 200 ] && pass auth_health_open || fail auth_health_open "HTTP $c"
c=$(post /completion '{"prompt":"x","n_predict":1}'); expect_error auth_missing 401 "$c" authentication_error
c=$(post /completion '{"prompt":"x","n_predict":1}' -H 'Authorization: Bearer nope'); expect_error auth_wrong 401 "$c" authentication_error
c=$(get /props -H 'Authorization: Bearer k'); expect_error auth_prefix_of_key 401 "$c" authentication_error
ok=1
for k in k1 k2 file-key-1 file-key-2; do
  c=$(post /completion '{"prompt":"x","n_predict":1}' -H "Authorization: Bearer $k"); [ "$c" = 200 ] || ok=0
done
c=$(get /props -H 'X-Api-Key: file-key-2'); [ "$c" = 200 ] || ok=0
[ $ok = 1 ] && pass auth_keys_accepted || fail auth_keys_accepted "a valid key was refused"
srv_stop "$SRV_PID"

# ---- environment variables ----
LLAMA_API_KEY=envkey LLAMA_ARG_N_PARALLEL=3 LLAMA_ARG_CTX_SIZE=256 LLAMA_ARG_ENDPOINT_METRICS=1 srv_start env \
  || { fail server_start_env "see above"; t_done; }
c=$(get /props -H 'Authorization: Bearer envkey')
[ "$c" = 200 ] && [ "$(jget "'%s|%s' % (j['total_slots'], j['default_generation_settings']['n_ctx'])")" = "3|256" ] \
  && pass env_vars || fail env_vars "$c $(body | head -c 300)"
c=$(get /metrics -H 'Authorization: Bearer envkey'); [ "$c" = 200 ] && pass env_metrics || fail env_metrics "HTTP $c"
srv_stop "$SRV_PID"

# ---- Unix socket, through `mlxcel serve` ----
SOCK=$SRV_TMP/mlxcel.sock
"$MLXCEL_BIN" serve --host "$SOCK" >"$SRV_TMP/unix.out" 2>&1 &
UPID=$!; SRV_PIDS+=("$UPID")
for i in $(seq 1 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' --unix-socket "$SOCK" http://x/health)" = 200 ] && break; sleep 0.1
done
c=$(curl -s -o "$SRV_TMP/body" -w '%{http_code}' --unix-socket "$SOCK" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"temperature":0}' http://x/v1/chat/completions)
[ "$c" = 200 ] && [ "$(jget "j['usage']['completion_tokens'] > 0")" = True ] && pass unix_socket || fail unix_socket "HTTP $c $(tail -2 "$SRV_TMP/unix.out")"
srv_stop "$UPID"
[ ! -e "$SOCK" ] && pass unix_socket_removed || fail unix_socket_removed "socket file left behind"
# ---- /health is 503 while the model loads (test hook delays the load) ----
MLXCEL_TEST_LOAD_DELAY_MS=2500 "$MLXCEL_SERVER_BIN" --port 0 >"$SRV_TMP/slow.out" 2>"$SRV_TMP/slow.log" &
SPID=$!; SRV_PIDS+=("$SPID")
for i in $(seq 1 100); do SRV_URL=$(sed -n 's/^listening on \(http:.*\)$/\1/p' "$SRV_TMP/slow.out"); [ -n "$SRV_URL" ] && break; sleep 0.05; done
c=$(get /health); expect_error health_503_while_loading 503 "$c" unavailable_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}]}'); expect_error chat_503_while_loading 503 "$c" unavailable_error
for i in $(seq 1 200); do [ "$(get /health)" = 200 ] && break; sleep 0.1; done
c=$(get /health); [ "$c" = 200 ] && pass health_200_after_loading || fail health_200_after_loading "HTTP $c"
srv_stop "$SPID"

# ---- --chat-template-file: Qwen3's real template renders every golden conversation (tools,
# tool calls, kwargs) byte-exact through /apply-template ----
python3 -c "import json,sys; open(sys.argv[2],'w').write(json.load(open(sys.argv[1]))['chat_template'])" \
  "$MLXCEL_ROOT/tests/fixtures/tokenizers/qwen3/tokenizer_config.json" "$SRV_TMP/qwen3.jinja"
srv_start tmpl --chat-template-file "$SRV_TMP/qwen3.jinja" --timeout 2 || { fail server_start_tmpl "see above"; t_done; }
python3 - "$SRV_URL" "$MLXCEL_ROOT/tests/fixtures/goldens/chat/qwen3.json" <<'PY'
import json, sys, urllib.request
g = json.load(open(sys.argv[2]))
for c in g["cases"]:
    body = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
    if c["tools"]: body["tools"] = c["tools"]
    if c["kwargs"]: body["chat_template_kwargs"] = c["kwargs"]
    req = urllib.request.Request(sys.argv[1] + "/apply-template", json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        got = json.load(urllib.request.urlopen(req, timeout=60))["prompt"]
    except Exception as e:
        got = f"error {e}"
    name = "template_file_golden_" + c["name"]
    print(f"PASS {name}" if got == c["prompt"] else f"FAIL {name}: got {got[:200]!r}")
PY
c=$(post /apply-template '{"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"tool_choice":"none"}')
[ "$c" = 200 ] && ! jget "j['prompt']" | grep -q 'get_weather' && pass tool_choice_none || fail tool_choice_none "$c $(body | head -c 300)"
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Weather?"},{"role":"assistant","content":null,"tool_calls":[{"id":"1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},{"role":"tool","tool_call_id":"1","content":"sunny"}],"tools":[{"type":"function","function":{"name":"get_weather"}}],"max_tokens":3}')
[ "$c" = 200 ] && pass chat_tool_roles_template || fail chat_tool_roles_template "$c $(body | head -c 300)"
# --timeout: an idle half-sent request is dropped after about 2 s
python3 - "$SRV_URL" <<'PY'
import socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port)); s.settimeout(15)
s.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
t0 = time.time()
try: data = s.recv(100)
except Exception: data = b"?"
dt = time.time() - t0
print("PASS timeout_drops_idle" if data == b"" and 1 <= dt <= 10 else f"FAIL timeout_drops_idle: recv {data!r} after {dt:.1f} s")
PY
srv_stop "$SRV_PID"

# ---- the model generating bytes that are not UTF-8: the answer stays valid JSON and UTF-8 ----
srv_start bytes || { fail server_start_bytes "see above"; t_done; }
ID80=$(python3 - "$MLXCEL_ROOT/models/fortune-6m-mlx-q4/tokenizer.json" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs = bs[:]; n = 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
ch = chr(cs[bs.index(0x80)])            # the byte-level symbol of a lone continuation byte 0x80
print(json.load(open(sys.argv[1]))["model"]["vocab"][ch])
PY
)
for mode in false true; do
  code=$(curl -s -m 60 -H 'Content-Type: application/json' -o "$SRV_TMP/bytes" -w '%{http_code}' \
    -d "{\"prompt\":\"The computer\",\"n_predict\":3,\"temperature\":0,\"logit_bias\":[[$ID80,100]],\"stream\":$mode}" "$SRV_URL/completion")
  ok=$(python3 - "$SRV_TMP/bytes" "$ID80" <<'PY'
import json, sys
raw = open(sys.argv[1], "rb").read().decode("utf-8")       # raises if not UTF-8
evs = [json.loads(l[6:]) for l in raw.splitlines() if l.startswith("data: ")] or [json.loads(raw)]
txt = "".join(e["content"] for e in evs)
toks = [t for e in evs for t in e["tokens"]]
print(toks == [int(sys.argv[2])] * 3 and txt == "\ufffd" * 3)
PY
)
  [ "$code" = 200 ] && [ "$ok" = True ] && pass "invalid_utf8_output_stream_$mode" || fail "invalid_utf8_output_stream_$mode" "HTTP $code ok=$ok $(head -c 300 "$SRV_TMP/bytes")"
done
srv_stop "$SRV_PID"
# no metrics endpoint without --metrics: 501
srv_start nometrics --no-slots || { fail server_start_nometrics "see above"; t_done; }
c=$(get /metrics); expect_error metrics_off_501 501 "$c" not_supported_error
c=$(get /slots); expect_error slots_off_501 501 "$c" not_supported_error
# llama-server's n_probs on /completion: per-token probabilities with top alternatives
c=$(post /completion '{"prompt":"The computer","n_predict":3,"temperature":0,"n_probs":2}')
[ "$c" = 200 ] && [ "$(jget "len(j['completion_probabilities']) == 3 and all(len(p['top_logprobs']) == 2 and p['id'] == p['top_logprobs'][0]['id'] for p in j['completion_probabilities'])")" = True ] \
  && pass completion_n_probs || fail completion_n_probs "$c $(body | head -c 300)"
t_done
