#!/usr/bin/env bash
# tests/cli/run.sh: `mlxcel run`, the interactive chat, driven through a pipe: a first greedy reply
# equals `generate -p` with the same message (same template path); the second turn sees the
# conversation so far; /reset starts over (the same first reply again); /exit stops reading;
# bad lines and flags are refused without ending the program.
. "$(dirname "$0")/lib.sh"
M=$MLXCEL_BIN
DEMO=$MLXCEL_ROOT/models/fortune-6m-mlx-q4
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

want=$("$M" generate -m "$DEMO" -p "Tell me something." -n 16 --temp 0 --no-stats 2>/dev/null)
printf 'Tell me something.\nAnd another?\n/reset\nTell me something.\n/exit\nnever read\n' |
  "$M" run -m "$DEMO" -n 16 --temp 0 >"$TMP/out" 2>"$TMP/err"
rc=$?
[ $rc -eq 0 ] && pass run_exit_0 || fail run_exit_0 "rc=$rc $(cat "$TMP/err")"
first=$(cat "$TMP/out")   # first reply, second reply, "(new conversation)", the first reply again
if [[ "$first" == "$want"* ]]; then pass run_first_reply_is_generate; else fail run_first_reply_is_generate "want [$want] got [$first]"; fi
after=${first#*"(new conversation)"$'\n'}
if [ "$after" != "$first" ] && [[ "$after" == "$want"* ]]; then pass run_reset_same_reply; else fail run_reset_same_reply "[$after]"; fi
if ! grep -q "never read" "$TMP/out"; then pass run_exit_stops; else fail run_exit_stops; fi
# the second turn is conditioned on the first: its prompt is longer than a lone message's
turns=$(printf 'Tell me something.\nAnd another?\n' | MLXCEL_LOG=error "$M" run -m "$DEMO" -n 4 --temp 0 2>&1 | wc -l)
[ "$turns" -ge 2 ] && pass run_two_turns || fail run_two_turns "$turns lines"

printf 'ok\xff\xfe\nTell me something.\n' | "$M" run -m "$DEMO" -n 4 --temp 0 >"$TMP/o2" 2>"$TMP/e2"
if [ $? -eq 0 ] && grep -q "not valid UTF-8" "$TMP/e2"; then pass run_bad_utf8_line; else fail run_bad_utf8_line "$(cat "$TMP/e2")"; fi
expect_fail run_no_model "required" "$M" run
expect_fail run_bad_flag "unknown option" "$M" run -m "$DEMO" --frob
expect_fail run_bad_ctx "exceeds" "$M" run -m "$DEMO" -c 100000
t_done
