#!/usr/bin/env bash
# tests/cli/tokenize.sh: `mlxcel tokenize` and `mlxcel detokenize` end to end against the HF
# goldens (ids, --special, --json, --jsonl, -f, decode, --skip-special), and bad flags/files: a
# one-line error and a non-zero exit, never a crash.
. "$(dirname "$0")/lib.sh"
M=$MLXCEL_BIN
R=$MLXCEL_ROOT
Q=$R/tests/fixtures/tokenizers/qwen3
L=$R/tests/fixtures/tokenizers/llama3_1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

out=$("$M" tokenize --help) && echo "$out" | grep -q -- "--jsonl" && pass tokenize_help || fail tokenize_help "$out"
out=$("$M" detokenize --help) && echo "$out" | grep -q -- "--skip-special" && pass detokenize_help || fail detokenize_help "$out"

# golden ids from the goldens file, via python (json)
gold() { python3 -c "import json,sys; d=json.load(open('$R/tests/fixtures/goldens/tokenizers/$1.json')); c=d['cases'][$2]; print(' '.join(map(str,c['$3'])))"; }

out=$("$M" tokenize --tokenizer "$Q" -p "Hello, world!")
[ "$out" = "$(gold qwen3 1 ids)" ] && pass tokenize_plain || fail tokenize_plain "$out"
out=$("$M" tokenize --tokenizer "$L" -p "Hello, world!" --special)
[ "$out" = "$(gold llama3_1 1 ids_with_special)" ] && pass tokenize_special || fail tokenize_special "$out"
out=$("$M" tokenize --tokenizer "$L" -p "Hello, world!" --special --json)
[ "$out" = "[$(gold llama3_1 1 ids_with_special | sed 's/ /, /g')]" ] && pass tokenize_json || fail tokenize_json "$out"
out=$("$M" tokenize -m "$R/models/fortune-6m" -p "A wise man once said")
[ "$out" = "35 2531 438 1157 623" ] && pass tokenize_model_dir || fail tokenize_model_dir "$out"

# -f: the whole file, newline included
printf 'def add(a, b):\n    return a + b\n' > "$TMP/in.txt"
out=$("$M" tokenize --tokenizer "$Q" -f "$TMP/in.txt")
want=$(python3 -c "import json; d=json.load(open('$R/tests/fixtures/goldens/tokenizers/qwen3.json')); print(' '.join(str(i) for c in d['cases'] if c['text']=='def add(a, b):\n    return a + b\n' for i in c['ids']))")
[ -n "$want" ] && [ "$out" = "$want" ] && pass tokenize_file || fail tokenize_file "$out want $want"

out=$(printf 'def add(a, b):\n    return a + b\n' | "$M" tokenize --tokenizer "$Q" -f -)
[ "$out" = "$want" ] && pass tokenize_stdin || fail tokenize_stdin "$out want $want"
out=$(printf '"Hello, world!"\n"<|im_start|>"\n' | "$M" tokenize --tokenizer "$Q" --jsonl -)
[ "$out" = "$(printf '[9707, 11, 1879, 0]\n[151644]')" ] && pass tokenize_jsonl_stdin || fail tokenize_jsonl_stdin "$out"

# --jsonl: every golden text of llama2, one JSON string a line; each output line the ids_with_special
python3 -c "import json; d=json.load(open('$R/tests/fixtures/goldens/tokenizers/llama2.json')); [print(json.dumps(c['text'])) for c in d['cases']]" > "$TMP/in.jsonl"
"$M" tokenize --tokenizer "$R/tests/fixtures/tokenizers/llama2" --jsonl "$TMP/in.jsonl" --special > "$TMP/out.jsonl" 2>"$TMP/err"
if python3 - "$R/tests/fixtures/goldens/tokenizers/llama2.json" "$TMP/out.jsonl" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
got = [json.loads(l) for l in open(sys.argv[2])]
assert len(got) == len(d["cases"]), (len(got), len(d["cases"]))
for c, g in zip(d["cases"], got):
    assert g == c["ids_with_special"], (c["text"], g)
PY
then pass tokenize_jsonl; else fail tokenize_jsonl "$(tail -3 "$TMP/err")"; fi

# detokenize
out=$("$M" detokenize --tokenizer "$Q" --ids 151644,9707,11,1879,0,151645)
[ "$out" = "<|im_start|>Hello, world!<|im_end|>" ] && pass detokenize || fail detokenize "$out"
out=$("$M" detokenize --tokenizer "$Q" --ids 151644,9707,11,1879,0,151645 --skip-special)
[ "$out" = "Hello, world!" ] && pass detokenize_skip_special || fail detokenize_skip_special "$out"
out=$("$M" detokenize --tokenizer "$R/tests/fixtures/tokenizers/llama2" --ids 1,22557,1526 --json)
[ "$out" = '"<s> Hello world"' ] && pass detokenize_json || fail detokenize_json "$out"
# round trip through both commands on non-ASCII text
txt='Ångström 你好 😀'
ids=$("$M" tokenize --tokenizer "$R/tests/fixtures/tokenizers/gemma3" -p "$txt" | tr ' ' ',')
out=$("$M" detokenize --tokenizer "$R/tests/fixtures/tokenizers/gemma3" --ids "$ids")
[ "$out" = "$txt" ] && pass roundtrip_gemma3 || fail roundtrip_gemma3 "$out"

# bench runs and reports its figures (no timing assertions)
"$M" tokenize --tokenizer "$R/models/fortune-6m" --bench --repeat 1 > "$TMP/bench" 2>&1 && grep -q "MB/s" "$TMP/bench" \
  && pass tokenize_bench || fail tokenize_bench "$(tail -2 "$TMP/bench")"

# bad input
expect_fail tok_no_dir "required" "$M" tokenize -p hi
expect_fail tok_no_text "exactly one" "$M" tokenize --tokenizer "$Q"
expect_fail tok_two_texts "exactly one" "$M" tokenize --tokenizer "$Q" -p a -f "$TMP/in.txt"
expect_fail tok_bad_flag "unknown option" "$M" tokenize --tokenizer "$Q" -p hi --frobnicate
expect_fail tok_missing_value "needs a value" "$M" tokenize --tokenizer "$Q" -p
expect_fail tok_missing_dir "no tokenizer.json" "$M" tokenize --tokenizer "$TMP/nope" -p hi
expect_fail tok_missing_file "cannot read|No such" "$M" tokenize --tokenizer "$Q" -f "$TMP/nope.txt"
printf '"ok"\nnot json\n' > "$TMP/bad.jsonl"
expect_fail tok_bad_jsonl "bad.jsonl:2" "$M" tokenize --tokenizer "$Q" --jsonl "$TMP/bad.jsonl"
printf 'a\xffb' > "$TMP/bad.txt"
expect_fail tok_bad_utf8 "UTF-8" "$M" tokenize --tokenizer "$Q" -f "$TMP/bad.txt"
mkdir -p "$TMP/badtok"
printf '{"model": {"type": "Mystery"}}' > "$TMP/badtok/tokenizer.json"
expect_fail tok_unknown_model "Mystery" "$M" tokenize --tokenizer "$TMP/badtok" -p hi
head -c 5000 "$R/models/fortune-6m/tokenizer.json" > "$TMP/badtok/tokenizer.json"
expect_fail tok_truncated "invalid JSON" "$M" tokenize --tokenizer "$TMP/badtok" -p hi
expect_fail detok_no_ids "ids" "$M" detokenize --tokenizer "$Q"
expect_fail detok_bad_ids "bad token id" "$M" detokenize --tokenizer "$Q" --ids 1,x,3
expect_fail detok_out_of_range "outside the vocabulary" "$M" detokenize --tokenizer "$Q" --ids 99999999
expect_fail detok_bad_flag "unknown option" "$M" detokenize --tokenizer "$Q" --ids 1 --bogus
t_done
