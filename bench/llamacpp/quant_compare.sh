#!/usr/bin/env bash
# Side-by-side benchmark on one quantized GGUF: moex with int8 activations, moex with f32
# activations, and llama.cpp's llama-bench, alternated ROUNDS times (2 threads each), so a
# noisy machine affects all three alike. Never run in CI.
#
#   bench/llamacpp/quant_compare.sh BUILD_DIR OUT_DIR [TYPE=q4_k_m] [PROMPT_TOKENS=64] [GEN_TOKENS=64]
#
# TYPE is a `moex random-model --gguf-type` (q4_k_m, q4_K, q8_0, ...) or bf16 (unquantised);
# ARCH (default olmoe) and SIZE=small|full pick the shape (small by default); GGUF_MODEL
# reuses a file. llama-bench comes from
# LLAMA_CPP (default /work/data/llama.cpp, built by get_llamacpp.sh). Prints one JSON line
# per run and a last line with the medians and the ratios moex / llama.cpp.
set -euo pipefail

if [[ $# -lt 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [TYPE] [PROMPT_TOKENS] [GEN_TOKENS]" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
OUT_DIR=$2
TYPE=${3:-q4_k_m}
PROMPT=${4:-64}
GEN=${5:-64}
THREADS=2
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-small}
ARCH=${ARCH:-olmoe}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VOCAB=${GGUF_VOCAB:-$HERE/../../../shared/data/gguf-vocab/ggml-vocab-gpt-neox.gguf}
LLAMA_BENCH=${LLAMA_CPP:-/work/data/llama.cpp}/build/bin/llama-bench
MOEX=$BUILD_DIR/moex

if [[ ! -x $LLAMA_BENCH ]]; then
  echo "no llama-bench at $LLAMA_BENCH: run bench/llamacpp/get_llamacpp.sh" >&2
  exit 1
fi
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
GGUF=${GGUF_MODEL:-$OUT_DIR/$ARCH-$SIZE-$TYPE.gguf}
if [[ ! -f $GGUF ]]; then
  quant=(--gguf-type "$TYPE")
  [[ $TYPE == bf16 ]] && quant=()
  "$MOEX" random-model --arch "$ARCH" --size "$SIZE" --format gguf "${quant[@]}" \
    --gguf-vocab "$VOCAB" --out "$GGUF" >&2
fi

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
RUNS=$OUT_DIR/quant_compare_runs.jsonl
: > "$RUNS"

for ((r = 1; r <= ROUNDS; ++r)); do
  for act in int8 f32; do
    la=$(loadavg)
    "$MOEX" bench --model "$GGUF" --threads "$THREADS" --activations "$act" \
        --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --membw --json 2>/dev/null |
      jq -c --arg la "$la" --argjson r "$r" --arg e "moex_$act" \
        '{engine: $e, round: $r, loadavg_before: $la, prefill_tokens_per_s,
          decode_tokens_per_s, load_ms, expert_dtype, activations,
          decode_weight_gb_per_s, membw_gb_per_s, decode_share_of_membw}' | tee -a "$RUNS"
  done
  la=$(loadavg)
  "$LLAMA_BENCH" -m "$GGUF" -p "$PROMPT" -n "$GEN" -t "$THREADS" -r 1 -o json 2>/dev/null |
    jq -c --arg la "$la" --argjson r "$r" '
      {engine: "llama.cpp", round: $r, loadavg_before: $la,
       prefill_tokens_per_s: (map(select(.n_prompt > 0)) | .[0].avg_ts),
       decode_tokens_per_s: (map(select(.n_gen > 0)) | .[0].avg_ts),
       build_commit: .[0].build_commit}' | tee -a "$RUNS"
done

jq -s -c --arg la "$(loadavg)" --arg model "$(basename "$GGUF")" '
  def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                     else (.[length / 2 - 1] + .[length / 2]) / 2 end;
  def med($e; $k): map(select(.engine == $e) | .[$k]) | median;
  {summary: "medians of alternated runs", model: $model,
   moex_int8_prefill: med("moex_int8"; "prefill_tokens_per_s"),
   moex_f32_prefill: med("moex_f32"; "prefill_tokens_per_s"),
   llama_prefill: med("llama.cpp"; "prefill_tokens_per_s"),
   moex_int8_decode: med("moex_int8"; "decode_tokens_per_s"),
   moex_f32_decode: med("moex_f32"; "decode_tokens_per_s"),
   llama_decode: med("llama.cpp"; "decode_tokens_per_s"),
   moex_int8_decode_gb_per_s: med("moex_int8"; "decode_weight_gb_per_s"),
   moex_int8_membw_gb_per_s: med("moex_int8"; "membw_gb_per_s"),
   moex_int8_decode_share_of_membw: med("moex_int8"; "decode_share_of_membw"),
   loadavg_after: $la}
  | .prefill_ratio_int8_over_llama = (.moex_int8_prefill / .llama_prefill)
  | .decode_ratio_int8_over_llama = (.moex_int8_decode / .llama_decode)
  | .decode_ratio_int8_over_f32 = (.moex_int8_decode / .moex_f32_decode)
' "$RUNS"
