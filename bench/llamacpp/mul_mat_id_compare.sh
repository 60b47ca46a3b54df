#!/usr/bin/env bash
# The routed-expert FFN with 1-32 tokens per expert, moex against llama.cpp, side by side:
# `kernels_bench --few-tokens` (moex's ExpertFfn) and mul_mat_id_bench.c (llama.cpp's three
# ggml_mul_mat_id with SwiGLU, weights in the buffer type llama.cpp's loader would pick) on
# the same shapes: 64 OLMoE-1B-7B experts (d = 2048, F = 1024), 8 per token, every expert
# given the same number of tokens. The two alternate case by case (which goes first
# alternates too), so a noisy machine weighs on both alike. Never run in CI.
#
#   bench/llamacpp/mul_mat_id_compare.sh BUILD_DIR OUT.jsonl
#
# TYPES and TOKENS (tokens per expert) narrow the cases; THREADS (default: every core) is
# given to both. llama.cpp comes from LLAMA_CPP (default /work/data/llama.cpp, built by
# get_llamacpp.sh). Writes one JSON line per case and prints a table whose ratio is
# llama.cpp's time over moex's (above 1: moex is faster).
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT.jsonl" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
OUT=$2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LLAMA_CPP=${LLAMA_CPP:-/work/data/llama.cpp}
THREADS=${THREADS:-$(nproc)}
TYPES=${TYPES:-"f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_K q3_K q4_K q5_K q6_K iq4_nl iq4_xs mxfp4"}
TOKENS=${TOKENS:-"1 2 4 8 16 32"}
REPS=7  # kernels_bench --few-tokens takes 7 too.
KERNELS_BENCH=$BUILD_DIR/kernels_bench
MMID=$LLAMA_CPP/build/bin/mul-mat-id-bench

[[ -x $KERNELS_BENCH ]] || { echo "no kernels_bench in $BUILD_DIR" >&2; exit 1; }
[[ -f $LLAMA_CPP/build/bin/libggml.so ]] || {
  echo "no llama.cpp build at $LLAMA_CPP/build: run bench/llamacpp/get_llamacpp.sh" >&2
  exit 1
}
if [[ ! -x $MMID || $HERE/mul_mat_id_bench.c -nt $MMID ]]; then
  cc -O2 -std=c11 -Wall -Wextra -I"$LLAMA_CPP/ggml/include" "$HERE/mul_mat_id_bench.c" \
    -L"$LLAMA_CPP/build/bin" -lggml -lggml-base -lggml-cpu -Wl,-rpath,"$LLAMA_CPP/build/bin" \
    -o "$MMID"
fi

: >"$OUT"
moex_case() {
  MOEX_THREADS=$THREADS "$KERNELS_BENCH" --few-tokens --type "$1" --tokens "$2" --json |
    jq -c '{side: "moex", membw_gb_per_s: .membw_gb_per_s.wall} + .few_tokens[0]'
}
llama_case() {
  "$MMID" "$1" 2048 1024 64 8 "$2" "$THREADS" "$REPS" 2>/dev/null | jq -c '{side: "llama.cpp"} + .'
}
printf '%-7s %6s %10s %12s %12s %7s\n' type tok/ex buffer "moex ms" "llama ms" ratio
i=0
for type in $TYPES; do
  for n in $TOKENS; do
    if ((i % 2 == 0)); then
      m=$(moex_case "$type" "$n")
      l=$(llama_case "$type" "$n")
    else
      l=$(llama_case "$type" "$n")
      m=$(moex_case "$type" "$n")
    fi
    i=$((i + 1))
    printf '%s\n%s\n' "$m" "$l" >>"$OUT"
    mb=$(jq -r .best_ms <<<"$m")
    lb=$(jq -r .best_ms <<<"$l")
    printf '%-7s %6s %10s %12.2f %12.2f %6.2fx\n' "$type" "$n" "$(jq -r .buffer <<<"$l")" \
      "$mb" "$lb" "$(jq -n "$lb / $mb")"
  done
done
