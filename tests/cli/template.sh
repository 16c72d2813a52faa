#!/usr/bin/env bash
# tests/cli/template.sh: `mlxcel apply-template` end to end: byte-exact prompts against the
# transformers goldens (tests/fixtures/goldens/chat), the demo model's template, flags, and errors
# (one line, non-zero exit, never a crash).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$MLXCEL_ROOT" || exit 1
B=$MLXCEL_BIN
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT

# Write each golden case's inputs and expected prompt to files (python3 only splits the JSON).
python3 - "$T" <<'PY' || { fail template_golden_split "python3 failed"; t_done; }
import json, sys, glob, os
out = sys.argv[1]
for f in sorted(glob.glob('tests/fixtures/goldens/chat/*.json')):
    g = json.load(open(f))
    for c in g['cases']:
        d = os.path.join(out, os.path.basename(f)[:-5] + '__' + c['name'])
        os.makedirs(d)
        open(d + '/tokenizer', 'w').write(g['tokenizer'])
        json.dump(c['messages'], open(d + '/messages.json', 'w'), ensure_ascii=False)
        if c['tools'] is not None: json.dump(c['tools'], open(d + '/tools.json', 'w'))
        if not c['add_generation_prompt']: open(d + '/nogen', 'w').close()
        if c['kwargs']: open(d + '/kwargs', 'w').write(json.dumps(c['kwargs']))
        if c.get('error'): open(d + '/error', 'w').write(c['error'].split(': ', 1)[1])
        else: open(d + '/want', 'wb').write(c['prompt'].encode('utf-8'))
PY

n=0
for d in "$T"/*__*; do
  name=template_cli_golden_$(basename "$d")
  args=(apply-template --tokenizer "tests/fixtures/tokenizers/$(cat "$d/tokenizer")" --messages "$d/messages.json")
  [ -f "$d/tools.json" ] && args+=(--tools "$d/tools.json")
  [ -f "$d/nogen" ] && args+=(--no-generation-prompt)
  [ -f "$d/kwargs" ] && args+=(--kwargs "$(cat "$d/kwargs")")
  n=$((n + 1))
  if [ -f "$d/error" ]; then
    expect_fail "$name" "$(cat "$d/error" | sed 's/[.[\*^$()+?{|]/\\&/g')" "$B" "${args[@]}"
    continue
  fi
  "$B" "${args[@]}" >"$d/got" 2>"$d/err"; rc=$?
  if [ $rc -ne 0 ]; then fail "$name" "exit $rc: $(head -c 300 "$d/err")"
  elif cmp -s "$d/got" "$d/want"; then pass "$name"
  else fail "$name" "output differs: $(cmp "$d/got" "$d/want" 2>&1 | head -1)"; fi
done
[ $n -ge 36 ] && pass template_cli_golden_count || fail template_cli_golden_count "only $n golden cases"

# demo model: chat_template.jinja, exact bytes, no trailing newline added
printf '[{"role":"user","content":"Tell me a fortune"}]' >"$T/m.json"
printf '<|im_start|>user\nTell me a fortune<|im_end|>\n<|im_start|>assistant\n' >"$T/want_demo"
"$B" apply-template -m models/fortune-6m-mlx-q4 --messages "$T/m.json" >"$T/got_demo" 2>"$T/err_demo"
if cmp -s "$T/got_demo" "$T/want_demo"; then pass template_cli_demo_model; else fail template_cli_demo_model "$(cat "$T/err_demo") $(od -c "$T/got_demo" | tail -3)"; fi
printf '<|im_start|>user\nTell me a fortune<|im_end|>\n' >"$T/want_demo2"
"$B" apply-template -m models/fortune-6m --messages "$T/m.json" --no-generation-prompt >"$T/got_demo2" 2>/dev/null
cmp -s "$T/got_demo2" "$T/want_demo2" && pass template_cli_no_generation_prompt || fail template_cli_no_generation_prompt "$(od -c "$T/got_demo2" | tail -2)"

# messages from stdin, and {"messages": [...]} accepted
out=$(printf '{"messages":[{"role":"user","content":"x"}]}' | "$B" apply-template -m models/fortune-6m --messages -)
[ "$out" = $'<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant' ] && pass template_cli_stdin_object || fail template_cli_stdin_object "got [$out]"

# --kwargs reaches the template; --template overrides the directory's template
printf '{{ bos_token }}|{{ flavor }}|{{ messages[0].content | upper }}|{{ add_generation_prompt }}' >"$T/t.jinja"
out=$("$B" apply-template --tokenizer tests/fixtures/tokenizers/llama3_1 --template "$T/t.jinja" --messages "$T/m.json" --kwargs '{"flavor":"mint"}')
[ "$out" = "<|begin_of_text|>|mint|TELL ME A FORTUNE|True" ] && pass template_cli_kwargs_template || fail template_cli_kwargs_template "got [$out]"

# help
"$B" apply-template --help | grep -q -- '--messages' && pass template_cli_help || fail template_cli_help "no usage"

# errors: one line, non-zero exit
printf '[{"role":"user"' >"$T/bad.json"
printf '{"role":"user"}' >"$T/obj.json"
printf '{%% for m in messages %%}{{ m.content }' >"$T/syntax.jinja"
printf '{{ messages[0].content.nope() }}' >"$T/runtime.jinja"
expect_fail template_cli_err_no_dir "required" "$B" apply-template --messages "$T/m.json"
expect_fail template_cli_err_no_messages "required" "$B" apply-template -m models/fortune-6m
expect_fail template_cli_err_bad_json "messages" "$B" apply-template -m models/fortune-6m --messages "$T/bad.json"
expect_fail template_cli_err_not_array "array" "$B" apply-template -m models/fortune-6m --messages "$T/obj.json"
expect_fail template_cli_err_missing_file "messages" "$B" apply-template -m models/fortune-6m --messages "$T/nope.json"
expect_fail template_cli_err_bad_kwargs "kwargs" "$B" apply-template -m models/fortune-6m --messages "$T/m.json" --kwargs '[1]'
expect_fail template_cli_err_no_template "no chat template" "$B" apply-template --tokenizer tests/fixtures/tokenizers/llama2 --messages "$T/m.json"
expect_fail template_cli_err_missing_dir "no chat template" "$B" apply-template -m "$T/nowhere" --messages "$T/m.json"
expect_fail template_cli_err_syntax "line 1" "$B" apply-template -m models/fortune-6m --template "$T/syntax.jinja" --messages "$T/m.json"
expect_fail template_cli_err_runtime "no attribute|no method|undefined" "$B" apply-template -m models/fortune-6m --template "$T/runtime.jinja" --messages "$T/m.json"
expect_fail template_cli_err_unknown_flag "unknown option" "$B" apply-template -m models/fortune-6m --messages "$T/m.json" --frob
lines=$("$B" apply-template -m models/fortune-6m --template "$T/syntax.jinja" --messages "$T/m.json" 2>&1 >/dev/null | wc -l)
[ "$lines" = 1 ] && pass template_cli_error_one_line || fail template_cli_error_one_line "$lines lines"
t_done
