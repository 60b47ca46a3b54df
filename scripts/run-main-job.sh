#!/usr/bin/env bash
# `make run`: generate text with the bundled demo model, resident and offloaded, and compare
# offloading policies on its recorded routing. Until the demo model is present
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
  "$moex" generate --model "$model" --prompt-ids 1,2,3,4 --max-tokens 16 --json
  exit 0
fi
"$moex" generate --model "$model" --prompt "The history of science" --max-tokens 48 \
  --temperature 0.7 --seed 1
"$moex" generate --model "$model" --prompt "def fibonacci(n):" --max-tokens 48 --json
# The same prompt with the experts offloaded: a quarter of them cached in RAM, the rest read
# from the expert store (packed next to the model on first use); the tokens are identical.
"$moex" generate --model "$model" --prompt "def fibonacci(n):" --max-tokens 48 \
  --host-budget 25% --policy lru --json
# The policies compared on the model's recorded routing (GSM8K prompts), Belady as the bound.
"$moex" sim --trace "$model/traces/gsm8k.trace" --policy lru,lfu,belady --budget 10%,25%,50%
