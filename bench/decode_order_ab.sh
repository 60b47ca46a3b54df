#!/usr/bin/env bash
# The two decode row orders (src/kernels/decode_order.h) side by side on one model:
#   bench/decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]
# bench/env_ab.sh with MOEX_DECODE_ORDER=interleaved and =sequential (its output: a JSON
# line per run, a median line per order, the per-pair ratios sequential / interleaved).
set -euo pipefail
usage="usage: decode_order_ab.sh BUILD_DIR MODEL [PAIRS] [PROMPT_TOKENS] [GEN_TOKENS]"
exec "$(dirname "$0")/env_ab.sh" "${1:?$usage}" "${2:?$usage}" MOEX_DECODE_ORDER \
  "interleaved sequential" "${3:-3}" "${4:-128}" "${5:-32}"
