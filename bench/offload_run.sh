#!/bin/bash
# Offload benchmark: decode tok/s at several host budgets and policies on a random model in
# a real shape, next to the disk's own sequential O_DIRECT bandwidth (dd on the expert
# store itself) and the physical bound that implies: bytes read per token / disk GB/s +
# compute time per token (see the Python below). Never run in CI.
#
#   bench/offload_run.sh BUILD_DIR [MODEL_DIR] [ARCH] [SIZE]
# Writes one JSON line per configuration to stdout (after the sweep, with the bound); the raw
# lines stream to stderr as they come.
set -euo pipefail
build=${1:?usage: offload_run.sh BUILD_DIR [MODEL_DIR] [ARCH] [SIZE]}
model=${2:-/data/olmoe-full}
arch=${3:-olmoe}
size=${4:-full}
budgets=${BUDGETS:-10%,25%,50%,100%}
policies=${POLICIES:-lru,lfu,random,nextgate}
gen=${GEN_TOKENS:-16}
prompt=${PROMPT_TOKENS:-16}

# First call creates the model and packs the store; its numbers are not used.
"$build/offload_decode" --model "$model" --arch "$arch" --size "$size" --budgets 1% \
  --policies lru --gen-tokens 2 --prompt-tokens 2 >/dev/null

store="$model/experts.moex"
dd_out=$(dd if="$store" of=/dev/null bs=16M count=256 iflag=direct 2>&1 | tail -1)
dd_gbs=$(echo "$dd_out" | awk '{for (i = 1; i < NF; i++) if ($(i+1) ~ /^GB\/s$/) print $i; else if ($(i+1) ~ /^MB\/s$/) print $i / 1000}')
echo "{\"dd_iflag_direct\": \"$dd_out\", \"disk_gb_per_s\": $dd_gbs, \"loadavg\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"

la_before=$(cut -d' ' -f1-3 /proc/loadavg)
"$build/offload_decode" --model "$model" --budgets "$budgets" --policies "$policies" \
  --gen-tokens "$gen" --prompt-tokens "$prompt" | tee /dev/stderr |
  python3 "$(dirname "$0")/../tools/bench/offload_bound.py" "$dd_gbs" "$la_before" "${COMPUTE_MS:-}"

dd_after=$(dd if="$store" of=/dev/null bs=16M count=256 skip=256 iflag=direct 2>&1 | tail -1)
echo "{\"dd_iflag_direct_after\": \"$dd_after\", \"loadavg_after\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"
