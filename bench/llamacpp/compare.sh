#!/usr/bin/env bash
# Side-by-side benchmark: moex against llama.cpp (node-llama-cpp) on the same random OLMoE
# model, as HF safetensors (moex) and as GGUF (llama.cpp), both bf16 with identical weights
# (same default seed). Never run in CI.
#
#   bench/llamacpp/compare.sh BUILD_DIR OUT_DIR [PROMPT_TOKENS=128] [GEN_TOKENS=32]
#
# SIZE=full compares the OLMoE-1B-7B shape; HF_MODEL / GGUF_MODEL reuse models written
# before (they must hold the same weights: same --seed for both).
# Needs node >= 20 and `npm install` in bench/llamacpp (node-llama-cpp 3.22.1, prebuilt CPU
# binaries). Runs moex and llama.cpp alternately, ROUNDS (default 2) times each, 2 threads each, prints one JSON
# line per run and a final JSON line with the median ratios moex / llama.cpp.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [PROMPT_TOKENS] [GEN_TOKENS]" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
OUT_DIR=$2
PROMPT=${3:-128}
GEN=${4:-32}
THREADS=2
ROUNDS=${ROUNDS:-2}  # alternations (environment), 2 by default
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VOCAB=${GGUF_VOCAB:-$HERE/../../../shared/data/gguf-vocab/ggml-vocab-gpt-neox.gguf}
MOEX=$BUILD_DIR/moex

mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
SIZE=${SIZE:-small}
HF=${HF_MODEL:-$OUT_DIR/olmoe-$SIZE}
GGUF=${GGUF_MODEL:-$OUT_DIR/olmoe-$SIZE.gguf}

if [[ ! -f $HF/config.json ]]; then
  "$MOEX" random-model --arch olmoe --size "$SIZE" --out "$HF" >&2
fi
if [[ ! -f $GGUF ]]; then
  "$MOEX" random-model --arch olmoe --size "$SIZE" --format gguf --gguf-vocab "$VOCAB" --out "$GGUF" >&2
fi
if [[ ! -d $HERE/node_modules/node-llama-cpp ]]; then
  echo "node-llama-cpp missing: run 'npm install' in $HERE" >&2
  exit 1
fi

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
RUNS=$OUT_DIR/compare_runs.jsonl
: > "$RUNS"

for ((r = 1; r <= ROUNDS; ++r)); do
  la=$(loadavg)
  line=$("$MOEX" bench --model "$HF" --threads "$THREADS" --prompt-tokens "$PROMPT" \
           --gen-tokens "$GEN" --json)
  line=$(jq -c --arg la "$la" --argjson r "$r" \
           '{engine: "moex", round: $r, loadavg_before: $la} + .' <<<"$line")
  echo "$line" | tee -a "$RUNS"

  la=$(loadavg)
  line=$(node "$HERE/bench.mjs" "$GGUF" "$PROMPT" "$GEN" "$THREADS" 2>"$OUT_DIR/llama_log_$r.txt" \
           | tail -n 1)
  line=$(jq -c --arg la "$la" --argjson r "$r" \
           '{engine: "llama.cpp", round: $r, loadavg_before: $la} + del(.engine)' <<<"$line")
  echo "$line" | tee -a "$RUNS"
done

jq -s -c --arg la "$(loadavg)" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  (map(select(.engine == "moex"))) as $m |
  (map(select(.engine == "llama.cpp"))) as $l |
  {summary: "moex / llama.cpp (median of runs)",
   prompt_tokens: $m[0].prompt_tokens, gen_tokens: $m[0].gen_tokens,
   moex_prefill_tokens_per_s: ($m | map(.prefill_tokens_per_s) | median),
   llama_prefill_tokens_per_s: ($l | map(.prefill_tokens_per_s) | median),
   moex_decode_tokens_per_s: ($m | map(.decode_tokens_per_s) | median),
   llama_decode_tokens_per_s: ($l | map(.decode_tokens_per_s) | median),
   llama_threads: $l[0].context_threads, llama_file_type: $l[0].file_type,
   llama_tensor_types: $l[0].tensor_types, loadavg_after: $la}
  | .prefill_ratio_moex_over_llama = (.moex_prefill_tokens_per_s / .llama_prefill_tokens_per_s)
  | .decode_ratio_moex_over_llama = (.moex_decode_tokens_per_s / .llama_decode_tokens_per_s)
' "$RUNS"
