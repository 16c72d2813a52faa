#!/usr/bin/env bash
# tests/cli/server_openai.sh: the official `openai` npm package (tests/node, installed by
# scripts/setup.sh) as a real client of mlxcel-server: models, chat and completions (whole and
# streamed), stop + logprobs, errors (400, context, 401) and an aborted stream.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/server_lib.inc"
NODE_DIR=$MLXCEL_ROOT/tests/node
if ! command -v node >/dev/null || [ ! -d "$NODE_DIR/node_modules/openai" ]; then
  fail openai_client_setup "node or tests/node/node_modules/openai missing: run scripts/setup.sh"
  t_done
fi
srv_start openai --api-key test-key-1 || { fail server_start "see above"; t_done; }
MLXCEL_URL=$SRV_URL MLXCEL_KEY=test-key-1 timeout 300 node "$NODE_DIR/openai_client.mjs" || T_FAILS=$((T_FAILS + 1))
t_done
