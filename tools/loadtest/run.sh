#!/usr/bin/env bash
# tools/loadtest/run.sh [BUILD_DIR]: the server benchmark. For the demo model and a Qwen3-0.6B-shaped
# checkpoint with random 4-bit weights (bench/configs/qwen3-0.6b.json), it times `mlxcel bench`
# decode (tg, batch 1) and then mlxcel-server under tools/loadtest/loadtest.py at concurrency
# 1, 4, 16 and 32 on loopback. Prints both; bounded in requests and time. Not a test.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build}
LEVELS=${LEVELS:-1,4,16,32}
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

serve_and_load() { # name max_tokens requests server-args...
  local name=$1 mt=$2 req=$3; shift 3
  "$B/mlxcel-server" --port 0 -np 32 "$@" >"$TMP/out" 2>"$TMP/err" &
  PID=$!
  local url=
  for _ in $(seq 1 600); do
    url=$(sed -n 's/^listening on \(http:.*\)$/\1/p' "$TMP/out" | head -1)
    [ -n "$url" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/health")" = 200 ] && break
    sleep 0.2
  done
  echo "== $name: mlxcel-server $* ($url)"
  python3 tools/loadtest/loadtest.py --url "$url" --concurrency "$LEVELS" --max-tokens "$mt" --requests "$req" --time-limit 180
  kill "$PID"; wait "$PID" 2>/dev/null || true; PID=
}

echo "== demo model: mlxcel bench (decode, batch 1)"
"$B/mlxcel" bench -m models/fortune-6m-mlx-q4 -p 0 -n 256 -r 3
serve_and_load demo 256 2 -c 512

echo "== qwen3-0.6b (random, q4): mlxcel bench (decode, batch 1)"
"$B/mlxcel" bench --config bench/configs/qwen3-0.6b.json --random --q-bits 4 --q-group-size 64 -p 0 -n 64 -r 2
serve_and_load qwen3-0.6b-random-q4 64 1 -c 256 --random-config bench/configs/qwen3-0.6b.json --q-bits 4 \
  -m tests/fixtures/tokenizers/qwen3   # tokenizer and chat template of the real Qwen3
