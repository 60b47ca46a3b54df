#!/bin/bash
# Offload benchmark: decode tok/s at several host budgets and policies on a random model in
# a real shape, next to the disk's own sequential O_DIRECT bandwidth (dd on the expert
# store itself) and the physical bound that implies (disk GB/s / bytes read per token).
#
#   bench/offload_run.sh BUILD_DIR [MODEL_DIR] [ARCH] [SIZE]
# Writes one JSON line per configuration to stdout; progress on stderr.
set -euo pipefail
build=${1:?usage: offload_run.sh BUILD_DIR [MODEL_DIR] [ARCH] [SIZE]}
model=${2:-/work/offload-bench/olmoe-full}
arch=${3:-olmoe}
size=${4:-full}
budgets=${BUDGETS:-10%,25%,50%,100%}
policies=${POLICIES:-lru,nextgate}
gen=${GEN_TOKENS:-16}
prompt=${PROMPT_TOKENS:-16}

# First call creates the model and packs the store; its numbers are not used.
"$build/offload_decode" --model "$model" --arch "$arch" --size "$size" --budgets 1% \
  --policies lru --gen-tokens 2 --prompt-tokens 2 >/dev/null

store="$model/experts.moex"
dd_out=$(dd if="$store" of=/dev/null bs=16M count=256 iflag=direct 2>&1 | tail -1)
dd_gbs=$(echo "$dd_out" | awk '{for (i = 1; i < NF; i++) if ($(i+1) ~ /^GB\/s$/) print $i; else if ($(i+1) ~ /^MB\/s$/) print $i / 1000}')
echo "{\"dd_iflag_direct\": \"$dd_out\", \"disk_gb_per_s\": $dd_gbs}"

"$build/offload_decode" --model "$model" --budgets "$budgets" --policies "$policies" \
  --gen-tokens "$gen" --prompt-tokens "$prompt" |
  python3 -c '
import json, sys
disk = float(sys.argv[1])
for line in sys.stdin:
    j = json.loads(line)
    bpt = j["decode_bytes_per_token"]
    j["disk_gb_per_s"] = disk
    j["io_bound_tokens_per_s"] = disk * 1e9 / bpt if bpt > 0 else None
    print(json.dumps(j), flush=True)
' "$dd_gbs"
