#!/usr/bin/env bash
# tests/cli/download.sh: `mlxcel download` and the -m resolver against a local stand-in for the
# Hugging Face Hub (tests/cli/hub_server.py on a loopback port): full download, interrupted and
# resumed, wrong token (401), missing repository (404), corrupt file (size mismatch), offline mode,
# --include, --local-dir, a full disk, bad repository ids, the HF cache used in place.
source "$(dirname "$0")/lib.sh"
BIN=$MLXCEL_BIN
T=$(mktemp -d /tmp/mlxcel-dl-XXXXXX)
SRV=$T/srv
SPID=
cleanup() { [ -n "$SPID" ] && kill "$SPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

FX=$MLXCEL_ROOT/tests/fixtures/models/llama-mlx-q4
mkdir -p "$SRV/test-org/tiny/sub" "$SRV/_control"
cp "$FX/config.json" "$FX/model.safetensors" "$FX/tokenizer.json" "$FX/tokenizer_config.json" "$SRV/test-org/tiny/"
echo "not weights" > "$SRV/test-org/tiny/pytorch_model.bin"
echo "not weights" > "$SRV/test-org/tiny/model-q4.gguf"
echo "nested" > "$SRV/test-org/tiny/sub/extra.json"
python3 "$MLXCEL_ROOT/tests/cli/hub_server.py" "$SRV" > "$T/port" 2> "$T/server.err" &
SPID=$!
for _ in $(seq 50); do [ -s "$T/port" ] && break; sleep 0.1; done
PORT=$(cat "$T/port")
if [ -z "$PORT" ]; then fail server_start "$(cat "$T/server.err")"; t_done; fi

export HF_ENDPOINT=http://127.0.0.1:$PORT MLXCEL_CACHE_DIR=$T/cache HF_HUB_CACHE=$T/hf
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_HUB_OFFLINE HF_HOME
STORE=$T/cache/models
LOG=$SRV/_control/log

same_files() { # $1 dir: the four fixture files byte-identical
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    cmp -s "$1/$f" "$SRV/test-org/tiny/$f" || return 1
  done
}

# 1. full download (stdout is a pipe: plain progress lines)
out=$("$BIN" download test-org/tiny 2>"$T/err"); rc=$?
if [ $rc -ne 0 ]; then fail full_download "rc $rc: $(tail -2 "$T/err")"
elif ! same_files "$STORE/test-org/tiny"; then fail full_download "files differ"
elif [ -e "$STORE/test-org/tiny/pytorch_model.bin" ] || [ -e "$STORE/test-org/tiny/model-q4.gguf" ]; then fail full_download ".bin/.gguf not skipped"
elif ! cmp -s "$STORE/test-org/tiny/sub/extra.json" "$SRV/test-org/tiny/sub/extra.json"; then fail full_download "nested file"
elif [ "$out" != "$STORE/test-org/tiny" ]; then fail full_download "stdout '$out'"
elif ! grep -q "download: model.safetensors done (118624 bytes)" "$T/err"; then fail full_download "no plain progress line: $(head -3 "$T/err")"
elif grep -q $'\r' "$T/err"; then fail full_download "carriage returns without a terminal"
elif [ -n "$(ls -A "$STORE/.partial" 2>/dev/null)" ]; then fail full_download "staging left behind"
else pass full_download; fi

# a second call finds it present and makes no file requests
: > "$LOG"
if "$BIN" download test-org/tiny >/dev/null 2>&1 && ! grep -q resolve "$LOG"; then pass already_present; else fail already_present "$(cat "$LOG")"; fi

# --force downloads again; --revision goes into the listing and file URLs
: > "$LOG"
if "$BIN" download test-org/tiny --force --revision v1.0 >/dev/null 2>&1 && grep -q "api/models/test-org/tiny/revision/v1.0" "$LOG" \
   && grep -q "resolve/v1.0/config.json" "$LOG" && same_files "$STORE/test-org/tiny"; then pass force_revision; else fail force_revision "$(cat "$LOG")"; fi

# listed by `list`
if "$BIN" list | grep -q "test-org/tiny"; then pass listed_after_download; else fail listed_after_download; fi

# 2. interrupted after 5000 bytes, then resumed with Range
echo "model.safetensors 5000" > "$SRV/_control/interrupt"
"$BIN" download test-org/tiny --models-dir "$T/m2" >/dev/null 2>"$T/err"; rc=$?
if [ $rc -eq 0 ] || [ $rc -ge 124 ]; then fail interrupted "rc $rc"
elif ! grep -q "interrupted" "$T/err"; then fail interrupted "$(tail -1 "$T/err")"
elif [ -e "$T/m2/test-org/tiny" ]; then fail interrupted "partial model visible in the store"
elif "$BIN" list --models-dir "$T/m2" 2>&1 | grep -q tiny; then fail interrupted "listed while partial"
else pass interrupted; fi
: > "$LOG"
"$BIN" download test-org/tiny --models-dir "$T/m2" >/dev/null 2>"$T/err"; rc=$?
if [ $rc -ne 0 ]; then fail resumed "rc $rc: $(tail -1 "$T/err")"
elif ! grep -q "model.safetensors range=bytes=5000-" "$LOG"; then fail resumed "no Range request: $(cat "$LOG")"
elif grep -q "resolve/main/config.json" "$LOG"; then fail resumed "complete file fetched again"
elif ! same_files "$T/m2/test-org/tiny"; then fail resumed "files differ"
else pass resumed; fi

# a resume against a server that ignores Range starts the file over
echo "model.safetensors 7000" > "$SRV/_control/interrupt"
"$BIN" download test-org/tiny --models-dir "$T/m2b" >/dev/null 2>&1
touch "$SRV/_control/norange"
if "$BIN" download test-org/tiny --models-dir "$T/m2b" >/dev/null 2>"$T/err" && same_files "$T/m2b/test-org/tiny"; then
  pass resume_without_range_support; else fail resume_without_range_support "$(tail -1 "$T/err")"; fi
rm -f "$SRV/_control/norange"

# 3. wrong token: 401; right token (flag and HF_TOKEN) works
echo "s3cret" > "$SRV/_control/token"
expect_fail wrong_token "authentication failed \(HTTP 401\)" "$BIN" download test-org/tiny --models-dir "$T/m3" --token nope
expect_fail no_token "HTTP 401" "$BIN" download test-org/tiny --models-dir "$T/m3"
if "$BIN" download test-org/tiny --models-dir "$T/m3" --token s3cret >/dev/null 2>&1 && same_files "$T/m3/test-org/tiny"; then pass token_flag; else fail token_flag; fi
if HF_TOKEN=s3cret "$BIN" download test-org/tiny --models-dir "$T/m4" >/dev/null 2>"$T/err" && same_files "$T/m4/test-org/tiny"; then pass hf_token_env; else fail hf_token_env "$(tail -1 "$T/err")"; fi
if HF_TOKEN=s3cret "$BIN" download test-org/tiny --models-dir "$T/m4b" 2>&1 | grep -q s3cret; then fail token_not_logged; else pass token_not_logged; fi
echo "s3cret" > "$T/tokenfile"
if HF_TOKEN_PATH=$T/tokenfile "$BIN" download test-org/tiny --models-dir "$T/m4c" >/dev/null 2>"$T/err" && same_files "$T/m4c/test-org/tiny"; then
  pass token_file; else fail token_file "$(tail -1 "$T/err")"; fi
rm -f "$SRV/_control/token"

# one download of a repository at a time
mkdir -p "$T/m13/.partial"
if command -v flock >/dev/null; then
  flock "$T/m13/.partial/test-org--tiny.lock" sleep 3 &
  sleep 0.5
  expect_fail concurrent_download "another download of test-org/tiny is in progress" "$BIN" download test-org/tiny --models-dir "$T/m13"
  wait $!
  if "$BIN" download test-org/tiny --models-dir "$T/m13" >/dev/null 2>&1 && same_files "$T/m13/test-org/tiny" \
     && [ -z "$(ls -A "$T/m13/.partial")" ]; then pass lock_released; else fail lock_released "$(ls -A "$T/m13/.partial")"; fi
else fail concurrent_download "no flock command"; fi

# 4. missing repository: 404
expect_fail missing_repo "not found \(HTTP 404\)" "$BIN" download test-org/nope --models-dir "$T/m5"
[ ! -e "$T/m5/test-org/nope" ] && pass missing_repo_nothing_left || fail missing_repo_nothing_left

# 5. corrupt file: the listing says 100 bytes more than is served
echo "model.safetensors" > "$SRV/_control/corrupt"
expect_fail corrupt_size "size mismatch" "$BIN" download test-org/tiny --models-dir "$T/m6"
if [ -e "$T/m6/test-org/tiny" ] || ls "$T/m6/.partial/test-org--tiny/" 2>/dev/null | grep -q "model.safetensors"; then
  fail corrupt_nothing_left "$(ls -R "$T/m6")"; else pass corrupt_nothing_left; fi
rm -f "$SRV/_control/corrupt"
# same size, one byte changed: the LFS sha256 catches it
echo "model.safetensors" > "$SRV/_control/flip"
expect_fail corrupt_checksum "checksum mismatch" "$BIN" download test-org/tiny --models-dir "$T/m6b"
[ ! -e "$T/m6b/test-org/tiny" ] && pass corrupt_checksum_not_in_store || fail corrupt_checksum_not_in_store
rm -f "$SRV/_control/flip"

# a listing that names an unsafe path, or a file the server then does not have
echo "../../escape.json" > "$SRV/_control/inject"
expect_fail unsafe_listing "unsafe path '\.\./\.\./escape.json'" "$BIN" download test-org/tiny --models-dir "$T/m11"
[ ! -e "$T/escape.json" ] && [ ! -e "$T/m11/escape.json" ] && pass unsafe_listing_nothing_written || fail unsafe_listing_nothing_written
echo "gone.json" > "$SRV/_control/inject"
expect_fail listed_file_404 "gone.json: not found \(HTTP 404\)" "$BIN" download test-org/tiny --models-dir "$T/m12"
[ ! -e "$T/m12/test-org/tiny" ] && pass listed_file_404_not_in_store || fail listed_file_404_not_in_store
rm -f "$SRV/_control/inject"

# 6. offline: present works without the network, absent is a clear error
: > "$LOG"
if HF_HUB_OFFLINE=1 "$BIN" download test-org/tiny >/dev/null 2>&1 && [ ! -s "$LOG" ]; then pass offline_present; else fail offline_present "$(cat "$LOG")"; fi
expect_fail offline_absent "HF_HUB_OFFLINE" env HF_HUB_OFFLINE=1 "$BIN" download test-org/other --models-dir "$T/m7"
[ ! -s "$LOG" ] && pass offline_no_requests || fail offline_no_requests "$(cat "$LOG")"

# 7. --include and --local-dir
if "$BIN" download test-org/tiny --include '*.json' --local-dir "$T/local" >/dev/null 2>"$T/err" \
   && [ -f "$T/local/config.json" ] && [ -f "$T/local/tokenizer.json" ] && [ ! -e "$T/local/model.safetensors" ]; then
  pass include_local_dir; else fail include_local_dir "$(ls "$T/local" 2>&1) $(tail -1 "$T/err")"; fi
expect_fail include_nothing "no files to download matching --include" "$BIN" download test-org/tiny --include '*.xyz' --models-dir "$T/m8"

# 8. a full disk: the partial file is /dev/full
mkdir -p "$T/m9/.partial/test-org--tiny"
ln -s /dev/full "$T/m9/.partial/test-org--tiny/model.safetensors.incomplete"
expect_fail disk_full "disk full" "$BIN" download test-org/tiny --models-dir "$T/m9"
[ ! -e "$T/m9/test-org/tiny" ] && pass disk_full_nothing_in_store || fail disk_full_nothing_in_store

# 9. bad repository ids
expect_fail repo_dotdot "contains '\.\.'" "$BIN" download ../etc --models-dir "$T/m10"
expect_fail repo_dotdot2 "contains '\.\.'" "$BIN" download test-org/..  --models-dir "$T/m10"
expect_fail repo_absolute "absolute path" "$BIN" download /etc/passwd --models-dir "$T/m10"
expect_fail repo_three_parts "more than one '/'" "$BIN" download a/b/c --models-dir "$T/m10"
expect_fail repo_bad_chars "invalid repository id" "$BIN" download 'a b/c' --models-dir "$T/m10"
[ ! -e "$T/m10" ] || [ -z "$(ls -A "$T/m10")" ] && pass bad_ids_nothing_written || fail bad_ids_nothing_written

# 10. the -m resolver: store hit, download when missing, offline error, HF cache in place
if "$BIN" inspect -m test-org/tiny --json 2>/dev/null | grep -q "\"model\": \"$STORE/test-org/tiny\""; then pass resolve_store; else fail resolve_store; fi
: > "$LOG"
if "$BIN" inspect -m test-org/tiny2 --json >/dev/null 2>&1; then fail resolve_missing_repo "exit 0"; else
  grep -q "api/models/test-org/tiny2" "$LOG" && pass resolve_tries_download || fail resolve_tries_download "$(cat "$LOG")"; fi
cp -r "$SRV/test-org/tiny" "$SRV/test-org/fresh"
if "$BIN" inspect -m test-org/fresh >/dev/null 2>&1 && same_files "$STORE/test-org/fresh"; then pass resolve_downloads; else fail resolve_downloads; fi
expect_fail resolve_offline "not in the store or the Hugging Face cache and HF_HUB_OFFLINE" env HF_HUB_OFFLINE=1 "$BIN" inspect -m test-org/absent
mkdir -p "$T/hf/models--test-org--cached/snapshots/abc123" "$T/hf/models--test-org--cached/refs"
cp "$FX/config.json" "$FX/model.safetensors" "$T/hf/models--test-org--cached/snapshots/abc123/"
echo abc123 > "$T/hf/models--test-org--cached/refs/main"
: > "$LOG"
if HF_HUB_OFFLINE=1 "$BIN" inspect -m test-org/cached --json 2>/dev/null | grep -q "snapshots/abc123" && [ ! -s "$LOG" ]; then pass resolve_hf_cache; else fail resolve_hf_cache; fi
expect_fail rm_never_hf_cache "not in the store" "$BIN" rm test-org/cached -y
[ -f "$T/hf/models--test-org--cached/snapshots/abc123/config.json" ] && pass hf_cache_untouched || fail hf_cache_untouched
expect_fail resolve_missing_dir "no such model directory" "$BIN" inspect -m ./no/such/dir
t_done
