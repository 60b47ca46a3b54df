#!/bin/bash
# Policy sweep on real routing: records the demo model's traces over ShareGPT and GSM8K
# prompts (gate inputs and routers included, so next-layer speculation replays exactly),
# then replays each through LRU, LFU, random, next-gate speculation and Belady at budgets
# 5-75 %, on this machine (demo model's own expert sizes) and on an RTX 4090 costed as
# OLMoE-1B-7B (--scale-to olmoe:full).
#
#   bench/sim_sweep.sh BUILD_DIR OUT_DIR [PROMPTS_PER_SET]
# Writes OUT_DIR/{sharegpt,gsm8k}.trace, OUT_DIR/<set>-<hardware>.json and .html.
set -euo pipefail
build=${1:?usage: sim_sweep.sh BUILD_DIR OUT_DIR [PROMPTS_PER_SET]}
out=${2:?usage: sim_sweep.sh BUILD_DIR OUT_DIR [PROMPTS_PER_SET]}
count=${3:-100}
data=$(cd "$(dirname "$0")/../../shared/data/prompts" && pwd)
mkdir -p "$out"
policies=lru,lfu,random,nextgate,belady
budgets=5%,10%,25%,50%,75%
for set in sharegpt:sharegpt_v3_filtered_500.json gsm8k:gsm8k_test.jsonl; do
  name=${set%%:*}
  file=${set#*:}
  "$build/moex" trace record --prompts "$data/$file" --limit "$count" --max-prompt-tokens 256 \
    --max-tokens 32 --hidden f32 --probs none --out "$out/$name.trace" --json >"$out/$name-record.json"
  "$build/moex" sim --trace "$out/$name.trace" --policy "$policies" --budget "$budgets" \
    --hardware this-machine --json --html "$out/$name-this-machine.html" >"$out/$name-this-machine.json"
  "$build/moex" sim --trace "$out/$name.trace" --policy "$policies" --budget "$budgets" \
    --hardware rtx4090 --scale-to olmoe:full --json --html "$out/$name-rtx4090.html" \
    >"$out/$name-rtx4090.json"
done
# One table per sweep: hit rate / decode bytes per token / modelled TPOT per policy x budget.
python3 "$(dirname "$0")/../tools/bench/sim_sweep_table.py" "$out"
