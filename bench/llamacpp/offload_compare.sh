#!/usr/bin/env bash
# moex with offloaded experts (--host-budget, O_DIRECT expert store) against llama.cpp
# (node-llama-cpp, GGUF, mmap) on the same model, each process inside a cgroup v1 memory
# group with the same limit. cgroup v1 charges page cache to the group, so llama.cpp's
# mmapped weights count against the limit just as moex's host cache does. Never run in CI.
#
#   bench/llamacpp/offload_compare.sh BUILD_DIR MODEL GGUF [GEN_TOKENS=12] [PROMPT_TOKENS=4]
#
# MODEL is what moex runs: an HF directory with the same weights as GGUF, or GGUF itself
# (a quantized file, which both engines then read; its expert store, GGUF.experts.moex, is
# packed first with `moex pack --model GGUF`). With an HF directory, e.g. (the HF directory
# of bench/offload_run.sh was written with seed 1):
#   moex random-model --arch olmoe --size full --seed 1 --out DIR
#   moex random-model --arch olmoe --size full --seed 1 --format gguf \
#     --gguf-vocab ../shared/data/gguf-vocab/ggml-vocab-gpt-neox.gguf --out DIR.gguf
#
# Environment: BUDGETS (shares of expert bytes, default "25 10 100"), FIXED_GIB (memory
# allowed beyond the budget's share of expert bytes, for dense weights and runtime; default
# 1.5, so 25 % of OLMoE-1B-7B's 12.9 GB of experts gives a 4.5 GiB limit), POLICY (moex,
# default lru), TIMEOUT_S (per run, default 900), THREADS (default 2), CGROUP_ROOT
# (default /sys/fs/cgroup/memory), VOCAB (prompt ids are drawn below it when MODEL is a
# GGUF; default 50304, OLMoE's), LLAMA_BENCH (a llama-bench binary: llama.cpp runs
# `llama-bench -p PROMPT -n GEN -r 1` instead of node-llama-cpp). Needs root (to create
# memory groups), jq, and node >= 20 with `npm install` in bench/llamacpp unless
# LLAMA_BENCH is set.
#
# Prints one JSON line per run (limit, peak usage of the group, failcnt, load average before
# the run, the engine's own JSON) and one summary line per budget with the ratio
# moex / llama.cpp of decode tokens/s. Before each run the model files are dropped from the
# page cache (dd iflag=nocache count=0, per file), so neither engine starts warm and no
# page charged to another group is reused for free.
set -uo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 BUILD_DIR HF_DIR GGUF [GEN_TOKENS] [PROMPT_TOKENS]" >&2
  exit 2
fi
BUILD_DIR=$(cd "$1" && pwd)
if [[ -d $2 ]]; then
  HF=$(cd "$2" && pwd)
  STORE=$HF/experts.moex
else
  HF=$(realpath "$2")  # A GGUF: moex reads it too.
  STORE=$HF.experts.moex
fi
GGUF=$3
GEN=${4:-12}
PROMPT=${5:-4}
BUDGETS=${BUDGETS:-25 10 100}
FIXED_GIB=${FIXED_GIB:-1.5}
POLICY=${POLICY:-lru}
TIMEOUT_S=${TIMEOUT_S:-900}
THREADS=${THREADS:-2}
CGROUP_ROOT=${CGROUP_ROOT:-/sys/fs/cgroup/memory}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MOEX=$BUILD_DIR/moex
LOG_DIR=${LOG_DIR:-$(mktemp -d /tmp/offload-compare.XXXXXX)}
mkdir -p "$LOG_DIR"

for f in "$MOEX" "$STORE" "$GGUF"; do
  [[ -e $f ]] || { echo "missing $f (pack the store first: moex pack --model $HF)" >&2; exit 1; }
done
if [[ -n ${LLAMA_BENCH:-} ]]; then
  [[ -x $LLAMA_BENCH ]] || { echo "no llama-bench at $LLAMA_BENCH" >&2; exit 1; }
elif [[ ! -d $HERE/node_modules/node-llama-cpp ]]; then
  echo "node-llama-cpp missing: run 'npm install' in $HERE (or set LLAMA_BENCH)" >&2
  exit 1
fi
[[ -w $CGROUP_ROOT ]] || { echo "cannot create memory cgroups under $CGROUP_ROOT" >&2; exit 1; }

if [[ -d $HF ]]; then
  # Routed expert bytes (bf16): layers x experts x 3 matrices x hidden x intermediate x 2.
  EXPERT_BYTES=$(jq '.num_hidden_layers * .num_experts * 3 * .hidden_size * .intermediate_size * 2' \
    "$HF/config.json")
  VOCAB=$(jq '.vocab_size' "$HF/config.json")
else
  # The store holds the experts' blocks as the file does (plus a header of a few KiB).
  EXPERT_BYTES=$(stat -L -c %s "$STORE")  # -L: the store may be a link.
  VOCAB=${VOCAB:-50304}
fi
# The prompt bench.mjs uses: a deterministic walk over the vocabulary.
IDS=$(for ((i = 0; i < PROMPT; ++i)); do echo $((1000 + (i * 7919) % (VOCAB - 1000))); done | paste -sd,)

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

drop_model_cache() {
  local f
  for f in "$GGUF" "$HF"/*.safetensors "$STORE"; do
    dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || true
  done
}

# cg_run NAME LIMIT_BYTES OUT_FILE ERR_FILE CMD...: runs CMD in a fresh memory group with the
# limit; prints "rc max_usage_bytes failcnt wall_s".
cg_run() {
  local name=$1 limit=$2 out=$3 err=$4
  shift 4
  local cg=$CGROUP_ROOT/$name
  [[ -d $cg ]] && rmdir "$cg" 2>/dev/null
  mkdir "$cg" || return 1
  echo "$limit" >"$cg/memory.limit_in_bytes"
  [[ -w $cg/memory.memsw.limit_in_bytes ]] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
  local t0 t1 rc
  t0=$(date +%s.%N)
  bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" \
    timeout --kill-after=10 "$TIMEOUT_S" "$@" >"$out" 2>"$err"
  rc=$?
  t1=$(date +%s.%N)
  local max fail
  max=$(cat "$cg/memory.max_usage_in_bytes")
  fail=$(cat "$cg/memory.failcnt")
  rmdir "$cg" 2>/dev/null || true
  echo "$rc $max $fail $(echo "$t1 - $t0" | bc)"
}

RUNS=$LOG_DIR/offload_compare_runs.jsonl
: >"$RUNS"
echo "{\"log_dir\": \"$LOG_DIR\", \"expert_bytes\": $EXPERT_BYTES, \"prompt_ids\": \"$IDS\", \"gen_tokens\": $GEN, \"fixed_gib\": $FIXED_GIB, \"policy\": \"$POLICY\"}"

for pct in $BUDGETS; do
  limit=$(echo "$EXPERT_BYTES * $pct / 100 + $FIXED_GIB * 1073741824" | bc | cut -d. -f1)

  drop_model_cache
  la=$(loadavg)
  read -r rc max fail wall < <(cg_run "moex-offload-$pct" "$limit" "$LOG_DIR/moex_$pct.json" \
    "$LOG_DIR/moex_$pct.err" "$MOEX" generate --model "$HF" --prompt-ids "$IDS" \
    --max-tokens "$GEN" --ignore-eos --host-budget "$pct%" --policy "$POLICY" \
    --threads "$THREADS" --json)
  body=$(jq -c '{decode_tokens_per_s: .timings.decode_tokens_per_s, prefill_ms: .timings.prefill_ms,
                 load_ms: .timings.load_ms, tokens: .tokens, hit_rate: .offload.hit_rate,
                 bytes_read: .offload.bytes_read, stall_ms: .offload.stall_ms,
                 peak_rss_bytes: .memory.peak_rss_bytes, budget_bytes: .offload.budget_bytes}' \
    "$LOG_DIR/moex_$pct.json" 2>/dev/null || echo '{}')
  jq -c -n --argjson b "$body" --arg la "$la" --argjson pct "$pct" --argjson limit "$limit" \
    --argjson rc "$rc" --argjson max "$max" --argjson fail "$fail" --argjson wall "$wall" \
    '{engine: "moex", budget_pct: $pct, limit_bytes: $limit, loadavg_before: $la, rc: $rc,
      timed_out: ($rc == 124 or $rc == 137), cgroup_max_usage_bytes: $max, cgroup_failcnt: $fail,
      wall_s: $wall} + $b' | tee -a "$RUNS"

  drop_model_cache
  la=$(loadavg)
  if [[ -n ${LLAMA_BENCH:-} ]]; then
    read -r rc max fail wall < <(cg_run "llama-offload-$pct" "$limit" "$LOG_DIR/llama_$pct.json" \
      "$LOG_DIR/llama_$pct.log" "$LLAMA_BENCH" -m "$GGUF" -p "$PROMPT" -n "$GEN" \
      -t "$THREADS" -r 1 -o json)
    body=$(jq -c '{decode_tokens_per_s: (map(select(.n_gen > 0)) | .[0].avg_ts),
                   prefill_tokens_per_s: (map(select(.n_prompt > 0)) | .[0].avg_ts),
                   use_mmap: .[0].use_mmap, build_commit: .[0].build_commit}' \
             "$LOG_DIR/llama_$pct.json" 2>/dev/null)
    [[ -n $body ]] || body='{}'  # Timed out: no JSON.
  else
    read -r rc max fail wall < <(cg_run "llama-offload-$pct" "$limit" "$LOG_DIR/llama_$pct.json" \
      "$LOG_DIR/llama_$pct.log" node "$HERE/bench.mjs" "$GGUF" "$PROMPT" "$GEN" "$THREADS")
    body=$(tail -n 1 "$LOG_DIR/llama_$pct.json" | jq -c '{decode_tokens_per_s, prefill_ms,
             decode_ms, first_tokens, context_threads, use_mmap, file_type}' 2>/dev/null || echo '{}')
  fi
  jq -c -n --argjson b "$body" --arg la "$la" --argjson pct "$pct" --argjson limit "$limit" \
    --argjson rc "$rc" --argjson max "$max" --argjson fail "$fail" --argjson wall "$wall" \
    '{engine: "llama.cpp", budget_pct: $pct, limit_bytes: $limit, loadavg_before: $la, rc: $rc,
      timed_out: ($rc == 124 or $rc == 137), cgroup_max_usage_bytes: $max, cgroup_failcnt: $fail,
      wall_s: $wall} + $b' | tee -a "$RUNS"
done

jq -s -c --arg la "$(loadavg)" '
  group_by(.budget_pct)[] |
  (map(select(.engine == "moex"))[0]) as $m | (map(select(.engine == "llama.cpp"))[0]) as $l |
  {summary: "decode tokens/s, moex / llama.cpp, same cgroup memory limit",
   budget_pct: $m.budget_pct, limit_gib: ($m.limit_bytes / 1073741824),
   moex_decode_tokens_per_s: $m.decode_tokens_per_s,
   llama_decode_tokens_per_s: $l.decode_tokens_per_s,
   ratio_moex_over_llama: (if ($l.decode_tokens_per_s // 0) > 0 and $m.decode_tokens_per_s != null
                           then $m.decode_tokens_per_s / $l.decode_tokens_per_s else null end),
   llama_timed_out: $l.timed_out, loadavg_after: $la}' "$RUNS"
