#!/usr/bin/env bash
# Two or more settings of one environment variable side by side on one model:
#   bench/env_ab.sh BUILD_DIR MODEL VAR "VALUE..." [PAIRS=3] [PROMPT_TOKENS=128] [GEN_TOKENS=32] [MOEX_BENCH_ARGS...]
# e.g. MOEX_DECODE_ORDER "interleaved sequential", or MOEX_HUGE_PAGES "1 0". Runs
# bench/engine_run.sh once per value, PAIRS rounds, each run in its own autogroup at nice -20
# when allowed (a noisy machine then affects every value alike); prints one JSON line per
# run (engine_run.sh's summary plus "var", "value" and "pair"), a median line per value, and
# the per-round ratios of decode tokens/s and load time to the first value's.
set -euo pipefail
usage="usage: env_ab.sh BUILD_DIR MODEL VAR \"VALUE...\" [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS] [MOEX_BENCH_ARGS...]"
build=${1:?$usage}
model=${2:?$usage}
var=${3:?$usage}
values=${4:?$usage}
pairs=${5:-3}
prompt=${6:-128}
gen=${7:-32}
shift $(($# < 7 ? $# : 7))
here=$(cd "$(dirname "$0")" && pwd)
summary=$here/../tools/bench/env_ab_summary.py
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for pair in $(seq 1 "$pairs"); do
  for value in $values; do
    line=$(env "$var=$value" setsid bash -c \
      'echo -20 > /proc/self/autogroup 2>/dev/null || true; exec "$0" "$@"' \
      "$here/engine_run.sh" "$build" "$model" "$prompt" "$gen" "$@" | tail -1)
    echo "$line" | python3 "$summary" tag "$var" "$value" "$pair" | tee -a "$out"
  done
done
python3 "$summary" summary "$out"
