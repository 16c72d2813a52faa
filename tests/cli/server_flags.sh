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
# no metrics endpoint without --metrics: 501
srv_start nometrics || { fail server_start_nometrics "see above"; t_done; }
c=$(get /metrics); expect_error metrics_off_501 501 "$c" not_supported_error
t_done
