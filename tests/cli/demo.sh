#!/usr/bin/env bash
# tests/cli/demo.sh: the README's demo (the `demo` recipe of the Makefile) runs: its generate
# command line, taken from the Makefile itself, prints text and the speed line and exits 0.
. "$(dirname "$0")/lib.sh"
cd "$MLXCEL_ROOT"
line=$(sed -n 's|^\t\./build/mlxcel \(generate .*\)$|\1|p' Makefile | head -1)
if [ -z "$line" ]; then fail demo_recipe "no ./build/mlxcel generate line in the Makefile's demo"; t_done; fi
pass demo_recipe
out=$(eval "\"$MLXCEL_BIN\" $line" 2>"${TMPDIR:-/tmp}/demo.err.$$"); rc=$?
err=$(cat "${TMPDIR:-/tmp}/demo.err.$$"); rm -f "${TMPDIR:-/tmp}/demo.err.$$"
if [ $rc -eq 0 ] && [ -n "$(echo "$out" | tr -d '[:space:]')" ]; then pass demo_runs; else fail demo_runs "rc=$rc $err"; fi
if echo "$err" | grep -qE "generated [0-9]+ tokens, [0-9.]+ tok/s"; then pass demo_prints_speed; else fail demo_prints_speed "$err"; fi
t_done
