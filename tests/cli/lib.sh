# tests/cli/lib.sh: helpers for shell test scripts (sourced). Cases print PASS/FAIL lines.
: "${MLXCEL_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${MLXCEL_BIN:=$MLXCEL_ROOT/build/mlxcel}"
: "${MLXCEL_SERVER_BIN:=$MLXCEL_ROOT/build/mlxcel-server}"
T_FAILS=0
pass() { echo "PASS $1"; }
fail() { echo "FAIL $1: ${2:-}"; T_FAILS=$((T_FAILS + 1)); }
# expect_fail NAME PATTERN CMD...: the command must exit non-zero (not a crash: status < 128)
# and print PATTERN (grep -E) on stderr or stdout.
expect_fail() {
  local name=$1 pat=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -eq 0 ]; then fail "$name" "exit 0, expected failure"; return; fi
  if [ $rc -ge 124 ]; then fail "$name" "crashed or timed out (status $rc): $(echo "$out" | tail -3)"; return; fi
  if ! printf '%s' "$out" | grep -qE -- "$pat"; then fail "$name" "message lacks /$pat/: $(echo "$out" | tail -2)"; return; fi
  pass "$name"
}
t_done() { [ "$T_FAILS" = 0 ]; exit $?; }
