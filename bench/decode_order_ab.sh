#!/usr/bin/env bash
# The two decode row orders (src/kernels/decode_order.h) side by side on one model:
#   bench/decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]
# Alternates bench/engine_run.sh with MOEX_DECODE_ORDER=interleaved and =sequential, PAIRS
# times, each run in its own autogroup at nice -20 when allowed; prints one JSON line per
# run (engine_run.sh's summary plus "order" and "pair") and a median line per order.
set -euo pipefail
build=${1:?usage: decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]}
model=${2:?usage: decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]}
pairs=${3:-3}
prompt=${4:-128}
gen=${5:-32}
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../tools/bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for pair in $(seq 1 "$pairs"); do
  for order in interleaved sequential; do
    line=$(MOEX_DECODE_ORDER=$order setsid bash -c \
      'echo -20 > /proc/self/autogroup 2>/dev/null || true; exec "$0" "$@"' \
      "$here/engine_run.sh" "$build" "$model" "$prompt" "$gen" | tail -1)
    echo "$line" | python3 "$tools/decode_order_summary.py" tag "$order" "$pair" | tee -a "$out"
  done
done
python3 "$tools/decode_order_summary.py" summary "$out"
