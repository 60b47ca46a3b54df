#!/usr/bin/env bash
# `make run`: generate text with the bundled demo model, then the same prompt with three
# quarters of its experts offloaded to disk (the text must be identical), then the offloading
# policies compared on the model's recorded routing. Until the demo model is present
# (models/olmoe-demo), a tiny random OLMoE-shaped model is generated and used instead.
set -euo pipefail
moex=${1:-build/moex}
cd "$(dirname "$0")/.."
model=models/olmoe-demo
if [ ! -f "$model/config.json" ]; then
  model=build/models/olmoe-random-small
  if [ ! -f "$model/config.json" ]; then
    echo "run: the demo model is not bundled yet; generating a random OLMoE-shaped model"
    "$moex" random-model --arch olmoe --size tiny --out "$model"
  fi
  "$moex" generate --model "$model" --prompt-ids 1,2,3,4 --max-tokens 16 --stats
  exit 0
fi
prompt="The history of science"
# Sampled (a fixed seed, so both runs draw the same numbers) with llama.cpp's repetition
# penalty: the small demo model loops when decoded greedily.
sampling=(--temp 0.7 -s 1 --repeat-penalty 1.1)
stats=$(mktemp)
trap 'rm -f "$stats"' EXIT
echo "== $model, every expert in memory: \"$prompt\""
resident=$("$moex" generate -m "$model" -p "$prompt" -n 48 "${sampling[@]}" --stats 2>"$stats")
echo "$prompt$resident"
cat "$stats"
echo
echo "== the same prompt, 25% of the experts cached in RAM, the rest read from the expert store"
offloaded=$("$moex" generate -m "$model" -p "$prompt" -n 48 "${sampling[@]}" --host-budget 25% \
  --policy lru --stats 2>"$stats")
grep -v "packing experts" "$stats" || true
if [ "$offloaded" = "$resident" ]; then
  echo "same text offloaded: yes"
else
  echo "same text offloaded: NO -- offloading changed the output:"
  echo "$prompt$offloaded"
  exit 1
fi
echo
echo "== offloading policies replayed on the model's recorded routing (GSM8K prompts)"
echo "hit rate: share of expert uses found in RAM; B/decoded tok: bytes read from disk per token;"
echo "TPOT: modelled time per output token. belady knows the future: the bound no policy passes."
echo "At 10% the cache holds fewer experts than one token uses, so LRU evicts each before reuse."
"$moex" sim --trace "$model/traces/gsm8k.trace" --policy lru,lfu,belady --budget 10%,25%,50% \
  2>/dev/null
