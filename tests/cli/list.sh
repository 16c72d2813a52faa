#!/usr/bin/env bash
# tests/cli/list.sh: `mlxcel list` (table, --json, --sort) and `mlxcel rm` (the store only, -y,
# refusal without a terminal, bad ids, paths escaping the store).
source "$(dirname "$0")/lib.sh"
BIN=$MLXCEL_BIN
T=$(mktemp -d /tmp/mlxcel-list-XXXXXX)
trap 'rm -rf "$T"' EXIT
export MLXCEL_CACHE_DIR=$T/cache HF_HUB_CACHE=$T/hf
unset HF_HOME
S=$T/cache/models

# empty store
out=$("$BIN" list 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "no models in the store" && pass list_empty || fail list_empty "rc $rc: $out"
[ "$("$BIN" list --json)" = "[]" ] && pass list_empty_json || fail list_empty_json

mkdir -p "$S/org-a/small" "$S/org-b/big" "$S/mlx-community/mid" "$S/.partial/org-c--partial"
head -c 1000 /dev/zero > "$S/org-a/small/model.safetensors"; echo '{}' > "$S/org-a/small/config.json"
head -c 300000 /dev/zero > "$S/org-b/big/model.safetensors"; echo '{}' > "$S/org-b/big/config.json"
head -c 50000 /dev/zero > "$S/mlx-community/mid/model.safetensors"
head -c 9999 /dev/zero > "$S/.partial/org-c--partial/model.safetensors.incomplete"
touch -d '2020-01-01' "$S/org-b/big/"*; touch -d '2021-01-01' "$S/mlx-community/mid/"*; touch -d '2022-01-01' "$S/org-a/small/"*

out=$("$BIN" list)
if echo "$out" | grep -q "org-a/small" && echo "$out" | grep -q "org-b/big" && ! echo "$out" | grep -q partial; then
  pass list_table; else fail list_table "$out"; fi
order() { "$BIN" list --json "$@" | python3 -c "import json,sys; print(' '.join(m['id'] for m in json.load(sys.stdin)))"; }
[ "$(order)" = "mlx-community/mid org-a/small org-b/big" ] && pass list_sort_name || fail list_sort_name "$(order)"
[ "$(order --sort size)" = "org-b/big mlx-community/mid org-a/small" ] && pass list_sort_size || fail list_sort_size "$(order --sort size)"
[ "$(order --sort modified)" = "org-a/small mlx-community/mid org-b/big" ] && pass list_sort_modified || fail list_sort_modified "$(order --sort modified)"
if "$BIN" list --json | python3 -c "
import json,sys
d={m['id']:m for m in json.load(sys.stdin)}
b=d['org-b/big']
assert b['size_bytes']==300003 and b['files']==2 and b['path'].endswith('/org-b/big') and b['modified'].startswith('2020-01-01'), b
"; then pass list_json_fields; else fail list_json_fields; fi
expect_fail list_bad_sort "not name, size or modified" "$BIN" list --sort age
expect_fail list_bad_flag "unknown option" "$BIN" list --bogus

# rm
expect_fail rm_needs_yes "pass -y" "$BIN" rm org-a/small < /dev/null
[ -d "$S/org-a/small" ] && pass rm_not_removed_without_yes || fail rm_not_removed_without_yes
if "$BIN" rm org-a/small -y 2>/dev/null && [ ! -e "$S/org-a/small" ] && [ ! -e "$S/org-a" ]; then pass rm_yes; else fail rm_yes; fi
if "$BIN" rm mid -y 2>/dev/null && [ ! -e "$S/mlx-community/mid" ]; then pass rm_bare_name; else fail rm_bare_name; fi
expect_fail rm_missing "not in the store" "$BIN" rm org-a/small -y
expect_fail rm_dotdot "contains '\.\.'" "$BIN" rm ../cache -y
expect_fail rm_dotdot2 "contains '\.\.'" "$BIN" rm org-b/.. -y
expect_fail rm_absolute "absolute path" "$BIN" rm /tmp -y
# a store entry that is a symlink to a directory outside the store is not followed
mkdir -p "$T/outside/victim"; echo keep > "$T/outside/victim/file"
mkdir -p "$S/evil"; ln -s "$T/outside/victim" "$S/evil/link"
expect_fail rm_escape "outside the store" "$BIN" rm evil/link -y
[ -f "$T/outside/victim/file" ] && pass rm_escape_untouched || fail rm_escape_untouched
[ -d "$S/org-b/big" ] && pass rm_others_untouched || fail rm_others_untouched
t_done
