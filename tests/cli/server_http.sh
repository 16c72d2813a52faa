#!/usr/bin/env bash
# tests/cli/server_http.sh: the real mlxcel-server binary on a free loopback port, driven with
# curl: health/models/props/slots/metrics, tokenize/detokenize/apply-template, generation on
# the three generating endpoints (whole and streamed), stop strings, sampling fields, and every
# error case (400 bad JSON / types / ranges / invalid UTF-8 / context, 404, 405, 413, 501).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/server_lib.inc"

srv_start main --metrics --max-body 65536 || { fail server_start "see above"; t_done; }
U=$SRV_URL

# ---- simple endpoints ----
c=$(get /health); [ "$c" = 200 ] && [ "$(jget "j['status']")" = ok ] && pass health || fail health "$c $(body)"
c=$(get /v1/models)
[ "$c" = 200 ] && [ "$(jget "j['object'] + ':' + j['data'][0]['id'] + ':' + j['data'][0]['object']")" = "list:fortune-6m-mlx-q4:model" ] \
  && pass models_v1 || fail models_v1 "$c $(body)"
c=$(get /models); [ "$c" = 200 ] && [ "$(jget "j['data'][0]['id']")" = fortune-6m-mlx-q4 ] && pass models_plain || fail models_plain "$c"
c=$(get /props)
[ "$c" = 200 ] && [ "$(jget "j['total_slots']")" = 4 ] && [ "$(jget "j['default_generation_settings']['n_ctx']")" = 1024 ] \
  && jget "j['chat_template']" | grep -q im_start && pass props || fail props "$c $(body | head -c 300)"
# the device the server runs on: MLXCEL_DEVICE's choice when set, else the automatic one
dev=$(jget "j['device']")
case "${MLXCEL_DEVICE:-}" in
  cpu|gpu) [ "$dev" = "$MLXCEL_DEVICE" ] && pass props_device || fail props_device "device '$dev' under MLXCEL_DEVICE=$MLXCEL_DEVICE" ;;
  *) { [ "$dev" = cpu ] || [ "$dev" = gpu ]; } && pass props_device || fail props_device "device '$dev'" ;;
esac
c=$(get /slots); [ "$c" = 200 ] && [ "$(jget "len(j)")" = 4 ] && [ "$(jget "j[0]['is_processing']")" = False ] && pass slots || fail slots "$c $(body)"

# ---- tokenizer endpoints ----
c=$(post /tokenize '{"content":"A wise man once said"}')
toks=$(jget "j['tokens']")
[ "$c" = 200 ] && [ -n "$toks" ] && [ "$(jget "len(j['tokens']) > 2")" = True ] && pass tokenize || fail tokenize "$c $(body)"
c=$(post /detokenize "{\"tokens\":$toks}")
[ "$c" = 200 ] && [ "$(jget "j['content']")" = "A wise man once said" ] && pass detokenize_roundtrip || fail detokenize_roundtrip "$c $(body)"
c=$(post /tokenize '{"content":"hello world","with_pieces":true}')
[ "$c" = 200 ] && [ "$(jget "''.join(p['piece'] for p in j['tokens'])")" = "hello world" ] && pass tokenize_pieces || fail tokenize_pieces "$c $(body)"
c=$(post /apply-template '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}')
[ "$c" = 200 ] && [ "$(jget "j['prompt'] == '<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n'")" = True ] && pass apply_template || fail apply_template "$c $(body)"
c=$(post /apply-template '{"messages":[{"role":"user","content":[{"type":"text","text":"He"},{"type":"text","text":"llo"}]}]}')
[ "$c" = 200 ] && jget "j['prompt']" | grep -q '^Hello<|im_end|>' && pass apply_template_parts || fail apply_template_parts "$c $(body)"

# ---- generation: native /completion, greedy, against the demo model's golden text ----
c=$(post /completion '{"prompt":"A wise man once said","n_predict":32,"temperature":0}')
want=" the company is a beautiful world.
		-- Lady Berkeley"
got=$(jget "j['content']")
[ "$c" = 200 ] && [ "$got" = "$want" ] && pass completion_greedy_golden || fail completion_greedy_golden "$c got '$got'"
[ "$(jget "'%s|%s|%s' % (j['stop'], j['stop_type'], j['tokens_evaluated'] > 0)")" = "True|eos|True" ] \
  && [ "$(jget "sorted(j['timings'].keys()) == sorted(['cache_n','prompt_n','prompt_ms','prompt_per_token_ms','prompt_per_second','predicted_n','predicted_ms','predicted_per_token_ms','predicted_per_second'])")" = True ] \
  && pass completion_shape || fail completion_shape "$(body | head -c 400)"

# n_predict limit and ignore_eos
c=$(post /completion '{"prompt":"The computer","n_predict":7,"temperature":0,"ignore_eos":true}')
[ "$c" = 200 ] && [ "$(jget "'%s|%s|%s' % (j['tokens_predicted'], j['stop_type'], len(j['tokens']))")" = "7|limit|7" ] \
  && pass completion_n_predict || fail completion_n_predict "$c $(body | head -c 300)"

# prompt as token ids gives the same as the text
c=$(post /completion "{\"prompt\":$toks,\"n_predict\":32,\"temperature\":0}")
[ "$c" = 200 ] && [ "$(jget "j['content']")" = "$want" ] && pass completion_token_prompt || fail completion_token_prompt "$c $(body | head -c 300)"

# prompt cache: the same prompt again reuses the slot's KV (all but the last prompt token), same text
P='{"prompt":"Fortune cookies and the very long sentence of the prompt cache test","n_predict":12,"temperature":0,"ignore_eos":true'
post /completion "$P,\"cache_prompt\":false}" >/dev/null; t0=$(jget "j['content']"); n0=$(jget "j['tokens_evaluated']")
post /completion "$P}" >/dev/null
post /completion "$P}" >/dev/null; t1=$(jget "j['content']"); c1=$(jget "j['timings']['cache_n']"); p1=$(jget "j['timings']['prompt_n']")
post /completion "$P,\"cache_prompt\":false}" >/dev/null; c2=$(jget "j['timings']['cache_n']")
[ "$t0" = "$t1" ] && [ "$c1" = $((n0 - 1)) ] && [ "$p1" = 1 ] && [ "$c2" = 0 ] && pass prompt_cache \
  || fail prompt_cache "no-cache '$t0' vs cached '$t1'; cache_n $c1 prompt_n $p1 (prompt $n0), cache off: $c2"
# native streaming: events until stop:true, concatenation equals the whole answer
curl -s -m 60 -N -H 'Content-Type: application/json' -d '{"prompt":"A wise man once said","n_predict":32,"temperature":0,"stream":true}' \
  "$U/completion" >"$SRV_TMP/stream"
got=$(python3 - "$SRV_TMP/stream" <<'PY'
import json,sys
txt=""; last=None
for line in open(sys.argv[1]):
    line=line.strip()
    if not line: continue
    assert line.startswith("data: "), line
    ev=json.loads(line[6:]); txt+=ev["content"]; last=ev
assert last["stop"] is True and "timings" in last
print(txt)
PY
)
[ "$got" = "$want" ] && ! grep -q '\[DONE\]' "$SRV_TMP/stream" && pass completion_stream || fail completion_stream "got '$got'"

# ---- OpenAI chat ----
CHAT='{"messages":[{"role":"user","content":"Tell me something."}],"temperature":0,"max_tokens":24}'
c=$(post /v1/chat/completions "$CHAT")
chat_text=$(jget "j['choices'][0]['message']['content']")
[ "$c" = 200 ] && [ "$(jget "'%s|%s|%s' % (j['object'], j['choices'][0]['message']['role'], j['choices'][0]['finish_reason'] in ('stop','length'))")" = "chat.completion|assistant|True" ] \
  && [ -n "$chat_text" ] && pass chat_whole || fail chat_whole "$c $(body | head -c 300)"
[ "$(jget "j['usage']['prompt_tokens'] > 5 and j['usage']['total_tokens'] == j['usage']['prompt_tokens'] + j['usage']['completion_tokens'] and j['usage']['completion_tokens'] <= 24")" = True ] \
  && pass chat_usage || fail chat_usage "$(jget "j['usage']")"
# the chat prompt is the template's rendering: same as /completion on the rendered text
c=$(post /completion '{"prompt":"<|im_start|>user\nTell me something.<|im_end|>\n<|im_start|>assistant\n","n_predict":24,"temperature":0}')
[ "$(jget "j['content']")" = "$chat_text" ] && pass chat_equals_rendered_completion || fail chat_equals_rendered_completion "'$(jget "j['content']")' vs '$chat_text'"

curl -s -m 60 -N -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Tell me something."}],"temperature":0,"max_tokens":24,"stream":true,"stream_options":{"include_usage":true}}' \
  "$U/v1/chat/completions" >"$SRV_TMP/stream"
got=$(python3 - "$SRV_TMP/stream" <<'PY'
import json,sys
lines=[l.strip() for l in open(sys.argv[1]) if l.strip()]
assert lines[-1]=="data: [DONE]", lines[-1]
txt=""; fin=None; usage=None; role=None
for l in lines[:-1]:
    ev=json.loads(l[6:])
    assert ev["object"]=="chat.completion.chunk"
    if ev.get("usage"): usage=ev["usage"]; assert ev["choices"]==[]; continue
    ch=ev["choices"][0]; d=ch["delta"]
    role=role or d.get("role")
    txt+=d.get("content") or ""
    if ch["finish_reason"]: fin=ch["finish_reason"]
assert role=="assistant" and fin in ("stop","length") and usage and usage["completion_tokens"]>0
print(txt)
PY
)
[ "$got" = "$chat_text" ] && pass chat_stream_same_text || fail chat_stream_same_text "'$got' vs '$chat_text'"

# finish_reason length
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_completion_tokens":3,"temperature":0,"ignore_eos":true}')
[ "$c" = 200 ] && [ "$(jget "'%s|%s' % (j['choices'][0]['finish_reason'], j['usage']['completion_tokens'])")" = "length|3" ] \
  && pass chat_finish_length || fail chat_finish_length "$c $(body | head -c 300)"

# ---- stop strings: cut at the first occurrence, never leak a partial stop (whole and streamed) ----
c=$(post /v1/completions '{"prompt":"The computer","max_tokens":40,"temperature":0,"ignore_eos":true}')
full=$(jget "j['choices'][0]['text']")
# (tab-separated: the JSON strings may hold spaces, never a raw tab)
IFS=$'\t' read -r STOP_JSON PREFIX_JSON < <(python3 - "$full" <<'PY'
import json,sys
t=sys.argv[1]
# a stop string of 2-5 characters starting in the middle of the text, likely spanning tokens
s=t[len(t)//2:len(t)//2+4]
print(json.dumps(s) + "\t" + json.dumps(t[:t.index(s)]))
PY
)
for mode in false true; do
  curl -s -m 60 -N -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"The computer\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true,\"stop\":[\"zzzq\",$STOP_JSON],\"stream\":$mode}" \
    "$U/v1/completions" >"$SRV_TMP/stop"
  ok=$(python3 - "$SRV_TMP/stop" "$mode" "$PREFIX_JSON" "$STOP_JSON" <<'PY'
import json,sys
raw=open(sys.argv[1]).read(); want=json.loads(sys.argv[3]); stop=json.loads(sys.argv[4])
if sys.argv[2]=="true":
    txt=""; fin=None; parts=[]
    for l in raw.splitlines():
        if not l.strip() or l.strip()=="data: [DONE]": continue
        ch=json.loads(l[6:])["choices"][0]; txt+=ch["text"]; parts.append(ch["text"])
        fin=ch["finish_reason"] or fin
        # no chunk ends with a proper prefix of the stop string... unless later text shows it was not a stop
    print(txt==want and fin=="stop" and stop not in txt)
else:
    j=json.loads(raw); print(j["choices"][0]["text"]==want and j["choices"][0]["finish_reason"]=="stop")
PY
)
  [ "$ok" = True ] && pass "stop_string_stream_$mode" || fail "stop_string_stream_$mode" "stop $STOP_JSON want $PREFIX_JSON: $(head -c 400 "$SRV_TMP/stop")"
done

# ---- sampling fields ----
S='{"prompt":"The computer","max_tokens":16,"temperature":1.0,"top_k":50,"top_p":0.9,"min_p":0.02,"seed":42,"presence_penalty":0.5,"frequency_penalty":0.3,"repeat_penalty":1.1,"ignore_eos":true}'
post /v1/completions "$S" >/dev/null; a=$(jget "j['choices'][0]['text']")
post /v1/completions "$S" >/dev/null; b=$(jget "j['choices'][0]['text']")
[ -n "$a" ] && [ "$a" = "$b" ] && pass seed_reproducible || fail seed_reproducible "'$a' vs '$b'"
# logit_bias: +100 on one token makes greedy pick it every time
c=$(post /tokenize '{"content":" cat"}'); cat_id=$(jget "j['tokens'][-1]")
c=$(post /completion "{\"prompt\":\"The computer\",\"n_predict\":4,\"temperature\":0,\"logit_bias\":[[$cat_id,100]]}")
[ "$c" = 200 ] && [ "$(jget "j['tokens'] == [$cat_id] * 4")" = True ] && pass logit_bias_native || fail logit_bias_native "$c $(body | head -c 300)"
c=$(post /v1/completions "{\"prompt\":\"The computer\",\"max_tokens\":4,\"temperature\":0,\"logit_bias\":{\"$cat_id\":100},\"logprobs\":2}")
[ "$c" = 200 ] && [ "$(jget "j['choices'][0]['text'] == ' cat' * 4 and j['choices'][0]['logprobs']['tokens'] == [' cat'] * 4 and len(j['choices'][0]['logprobs']['top_logprobs'][0]) == 2")" = True ] \
  && pass logit_bias_openai || fail logit_bias_openai "$c $(body | head -c 400)"
# an end-of-turn token (<|im_end|>, id 2, special; not config.json's EOS) ends generation too
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":0,"logit_bias":{"2":100}}')
[ "$c" = 200 ] && [ "$(jget "'%s|%s|%s' % (j['choices'][0]['finish_reason'], j['usage']['completion_tokens'], j['choices'][0]['message']['content'])")" = "stop|1|" ] \
  && pass end_of_turn_token_stops || fail end_of_turn_token_stops "$c $(body | head -c 300)"
# chat logprobs / top_logprobs
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":3,"temperature":0,"logprobs":true,"top_logprobs":3}')
[ "$c" = 200 ] && [ "$(jget "all(len(e['top_logprobs'])==3 and e['logprob']<=0 and e['top_logprobs'][0]['logprob']>=e['top_logprobs'][1]['logprob'] and e['token']==e['top_logprobs'][0]['token'] for e in j['choices'][0]['logprobs']['content']) and len(j['choices'][0]['logprobs']['content'])>0")" = True ] \
  && pass chat_logprobs || fail chat_logprobs "$c $(body | head -c 400)"
# tools render through the template (chatml ignores them but the request is accepted)
c=$(post /v1/chat/completions '{"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","max_tokens":2}')
[ "$c" = 200 ] && pass chat_tools_roles || fail chat_tools_roles "$c $(body | head -c 300)"

# ---- errors ----
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}'); expect_error bad_json 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '[1,2]'); expect_error json_not_object 400 "$c" invalid_request_error
printf '{"prompt":"caf\xe9 \xff","n_predict":2}' >"$SRV_TMP/bad_utf8"
c=$(curl -s -o "$SRV_TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$SRV_TMP/bad_utf8" "$U/completion")
expect_error invalid_utf8 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}'); expect_error wrong_type_temperature 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":"hello"}'); expect_error wrong_type_messages 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"wizard","content":"x"}]}'); expect_error bad_role 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":-5}'); expect_error range_max_tokens 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_p":1.5}'); expect_error range_top_p 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_logprobs":50,"logprobs":true}'); expect_error range_top_logprobs 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"logit_bias":{"999999":5}}'); expect_error range_logit_bias 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"stop":[1]}'); expect_error wrong_type_stop 400 "$c" invalid_request_error
c=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"n":3}'); expect_error n_not_one 400 "$c" invalid_request_error
c=$(post /v1/completions '{"max_tokens":3}'); expect_error missing_prompt 400 "$c" invalid_request_error
c=$(post /completion '{"prompt":[1,2,99999]}'); expect_error prompt_bad_token 400 "$c" invalid_request_error
long=$(python3 -c "print(' '.join(['fortune cookie wisdom'] * 700))")
c=$(post /v1/completions "{\"prompt\":\"$long\",\"max_tokens\":2}"); expect_error prompt_too_long 400 "$c" exceed_context_size_error
c=$(post /tokenize '{"content":5}'); expect_error tokenize_wrong_type 400 "$c" invalid_request_error
c=$(post /detokenize '{"tokens":["a"]}'); expect_error detokenize_wrong_type 400 "$c" invalid_request_error
c=$(get /no/such/route); expect_error not_found 404 "$c" not_found_error
c=$(post /v1/embeddings '{"input":"x"}'); expect_error embeddings_501 501 "$c" not_supported_error
c=$(get /v1/chat/completions); [ "$c" = 405 ] && pass wrong_method || fail wrong_method "HTTP $c"
python3 -c "import json; print(json.dumps({'prompt': 'x' * 100000}))" >"$SRV_TMP/big"
c=$(curl -s -o "$SRV_TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' --data-binary @"$SRV_TMP/big" "$U/completion")
expect_error body_too_large 413 "$c" invalid_request_error
c=$(curl -s -o "$SRV_TMP/body" -w '%{http_code}' -H 'Content-Type: application/json' -H 'Transfer-Encoding: chunked' --data-binary @"$SRV_TMP/big" "$U/completion")
expect_error body_too_large_chunked 413 "$c" invalid_request_error
# mutated request bodies (random bytes, truncations, wrong types in every field): only 200/400
python3 - "$U" <<'PY'
import json, random, sys, http.client, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
rng = random.Random(1234)
base = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "temperature": 0.5, "top_p": 0.9,
        "top_k": 5, "min_p": 0.1, "seed": 3, "stop": ["x"], "logit_bias": {"5": 1}, "logprobs": True,
        "top_logprobs": 2, "presence_penalty": 0.1, "stream": False, "n_predict": 2, "prompt": "Hi"}
odd = [None, True, -1, 1e308, -1e308, 2**63, "", "\u0000", [], {}, [1, "a"], {"a": None}, 0.5, "x" * 300]
bad = []
for i in range(150):
    b = dict(base)
    k = rng.choice(list(base)); b[k] = rng.choice(odd)
    if rng.random() < 0.3:
        k2 = rng.choice(list(base)); b[k2] = rng.choice(odd)
    raw = json.dumps(b).encode()
    r = rng.random()
    if r < 0.15: raw = raw[: rng.randrange(len(raw))]
    elif r < 0.3:
        raw = bytearray(raw); raw[rng.randrange(len(raw))] = rng.randrange(256); raw = bytes(raw)
    path = rng.choice(["/v1/chat/completions", "/v1/completions", "/completion", "/tokenize", "/apply-template"])
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request("POST", path, raw, {"Content-Type": "application/json"})
    resp = c.getresponse(); data = resp.read(); c.close()
    if resp.status not in (200, 400): bad.append((resp.status, path, raw[:120], data[:120]))
    elif resp.status == 400 and "error" not in json.loads(data): bad.append((400, path, raw[:120], data[:120]))
print("PASS mutated_requests_only_200_or_400" if not bad else f"FAIL mutated_requests_only_200_or_400: {len(bad)} bad, first {bad[0]}")
PY
# the server is still fine after all that
c=$(post /completion '{"prompt":"A wise man once said","n_predict":32,"temperature":0}')
[ "$c" = 200 ] && [ "$(jget "j['content']")" = "$want" ] && pass alive_after_errors || fail alive_after_errors "$c"

# ---- metrics ----
c=$(get /metrics)
if [ "$c" = 200 ]; then
  ok=1
  for m in prompt_tokens_total tokens_predicted_total prompt_tokens_seconds predicted_tokens_seconds requests_processing requests_deferred n_decode_total; do
    grep -q "^llamacpp:$m [0-9]" "$SRV_TMP/body" || { ok=0; fail metrics "missing llamacpp:$m"; }
  done
  [ $ok = 1 ] && [ "$(sed -n 's/^llamacpp:tokens_predicted_total //p' "$SRV_TMP/body")" -gt 50 ] && pass metrics
else fail metrics "HTTP $c"; fi
t_done
