#!/usr/bin/env bash
# DeepSeek-V2 (MLA) throughput of moex beside llama.cpp's llama-bench on the same GGUF,
# alternating rounds so both see the same machine state, plus moex's offloaded decode.
# One JSON line per run. Never run in CI.
#
#   bench/llamacpp/deepseek_compare.sh BUILD_DIR LLAMA_BENCH [OUT.jsonl]
#
# LLAMA_BENCH: llama.cpp's llama-bench, built by bench/llamacpp/get_llamacpp.sh
# (DEST/llama.cpp/build/bin/llama-bench).
# Environment: SIZE (random-model size of deepseek_v2, default small; full is the
# DeepSeek-V2-Lite shape, 31 GB in bf16), WORK (where the models go, default
# /tmp/moex-deepseek), PROMPT (default 128), GEN (default 32), THREADS (default 2),
# ROUNDS (default 3), BUDGET (moex's offloaded run, default 25%).
set -euo pipefail
build=${1:?usage: deepseek_compare.sh BUILD_DIR LLAMA_BENCH [OUT.jsonl]}
llama_bench=${2:?usage: deepseek_compare.sh BUILD_DIR LLAMA_BENCH [OUT.jsonl]}
out=${3:-/dev/stdout}
size=${SIZE:-small}
work=${WORK:-/tmp/moex-deepseek}
prompt=${PROMPT:-128}
gen=${GEN:-32}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}
budget=${BUDGET:-25%}
moex=$build/moex
mkdir -p "$work"
hf=$work/deepseek_v2-$size
gguf=$work/deepseek_v2-$size.gguf
# The same random weights (same seed) as an HF checkpoint and as llama.cpp's GGUF.
[ -d "$hf" ] || "$moex" random-model --arch deepseek_v2 --size "$size" --out "$hf"
[ -f "$gguf" ] || "$moex" random-model --arch deepseek_v2 --size "$size" --format gguf --out "$gguf"
export LD_LIBRARY_PATH=$(dirname "$llama_bench")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
load() { cut -d' ' -f1 /proc/loadavg; }
for round in $(seq 1 "$rounds"); do
  for model in "$gguf" "$hf"; do
    "$moex" bench --model "$model" --prompt-tokens "$prompt" --gen-tokens "$gen" \
      --threads "$threads" --json 2>/dev/null |
      python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'engine':'moex','model':'$model','round':$round,'prefill_tok_s':d['prefill_tokens_per_s'],'decode_tok_s':d['decode_tokens_per_s'],'load':'$(load)'}))" >>"$out"
  done
  "$llama_bench" -m "$gguf" -p "$prompt" -n "$gen" -t "$threads" -r 1 -o json 2>/dev/null |
    python3 -c "
import json, sys
runs = json.load(sys.stdin)
r = {'engine': 'llama.cpp', 'model': '$gguf', 'round': $round, 'load': '$(load)'}
for x in runs:
    r['prefill_tok_s' if x['n_prompt'] > 0 else 'decode_tok_s'] = x['avg_ts']
print(json.dumps(r))" >>"$out"
  "$moex" bench --model "$hf" --prompt-tokens "$prompt" --gen-tokens "$gen" --threads "$threads" \
    --host-budget "$budget" --store "$work/deepseek_v2-$size.experts" --json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'engine':'moex','model':'$hf','budget':'$budget','round':$round,'prefill_tok_s':d['prefill_tokens_per_s'],'decode_tok_s':d['decode_tokens_per_s'],'hit_rate':d['offload']['hit_rate'],'load':'$(load)'}))" >>"$out"
done
