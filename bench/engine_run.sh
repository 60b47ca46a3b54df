#!/usr/bin/env bash
# Engine throughput next to the machine's measured memory bandwidth, in one run:
#   bench/engine_run.sh BUILD_DIR MODEL [PROMPT_TOKENS] [GEN_TOKENS] [MOEX_BENCH_ARGS...]
# (further arguments go to `moex bench`, e.g. --host-budget 25%). Prints three JSON lines: bandwidth before, `moex bench --json`, bandwidth after, then the
# decode weight-streaming rate as a share of the mean measured bandwidth.
set -euo pipefail
build=${1:?usage: engine_run.sh BUILD_DIR MODEL [PROMPT_TOKENS] [GEN_TOKENS]}
model=${2:?usage: engine_run.sh BUILD_DIR MODEL [PROMPT_TOKENS] [GEN_TOKENS]}
prompt=${3:-128}
gen=${4:-32}
shift $(($# < 4 ? $# : 4))
before=$("$build/membw" --json)
bench=$("$build/moex" bench --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" "$@" --json | tr -d '\n')
after=$("$build/membw" --json)
echo "$before"
echo "$bench"
echo "$after"
python3 "$(dirname "$0")/../tools/bench/engine_share.py" "$before" "$bench" "$after"
