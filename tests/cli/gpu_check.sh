#!/usr/bin/env bash
# tests/cli/gpu_check.sh: the parts of scripts/gpu_check.sh that need no GPU. --clock-summary reads
# nvidia-smi's CSV samples (SM clock, memory clock, power) as GPU_CHECK_CLOCKS=1 takes them during a
# bench row: the samples of a card at work (SM above 1000 MHz) give the minimum, median (the lower
# of two middles) and maximum SM clock and the median memory clock and power; idle samples are left
# out.
source "$(dirname "$0")/lib.sh"
T=$(mktemp -d /tmp/mlxcel-gpucheck-XXXXXX)
trap 'rm -rf "$T"' EXIT
G="bash $MLXCEL_ROOT/scripts/gpu_check.sh"
printf '1980, 2619, 650.2\n345, 1593, 70.1\n1755, 2619, 700.0\n1900, 2619, 690.2\n1830, 2619, 640.0\n' >"$T/c.csv"
out=$($G --clock-summary "$T/c.csv" 2>&1)
[ "$out" = "SM 1755 / 1830 / 1980 MHz (min / median / max of 4 samples), memory 2619 MHz, power 650 W (median)" ] &&
  pass clock_summary || fail clock_summary "$out"
printf '345, 1593, 70.1\n' >"$T/idle.csv"
$G --clock-summary "$T/idle.csv" 2>&1 | grep -q "no samples at work" && pass clock_summary_idle ||
  fail clock_summary_idle "$($G --clock-summary "$T/idle.csv" 2>&1)"
expect_fail clock_summary_missing "usage: .*--clock-summary FILE" $G --clock-summary "$T/none.csv"
t_done
