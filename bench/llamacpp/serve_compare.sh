#!/usr/bin/env bash
# `moex serve` beside llama.cpp's `llama-server` on the same GGUF, driven by the same load
# generator (bench/serve_load.cc) one server at a time, alternating, so both see the same
# machine state. One JSON line per run ("server": moex | llama-server), then one line of
# ratios (moex / llama-server) per load. Never run in CI.
#
#   bench/llamacpp/serve_compare.sh BUILD_DIR LLAMA_SERVER [OUT.jsonl]
#
# LLAMA_SERVER: the llama-server binary, built from the llama.cpp source that npm's
# node-llama-cpp ships by bench/llamacpp/get_llamacpp.sh (DEST/llama.cpp/build/bin/llama-server).
# Environment: MODEL (a GGUF; default: a random OLMoE of SIZE written with the gpt-neox
# vocabulary), SIZE (default small), CLIENTS (default "1 4 16"), REQUESTS (per run, default
# 32), MAX_TOKENS (default 64), THREADS (default 2), ROUNDS (alternations, default 2; the
# ratio uses each server's best round), PROMPTS, PORT (default 18090; llama-server PORT+1),
# TURNS (default 1: turns per conversation, each re-sending the history: serve_load --turns),
# COLD (1: every run takes prompts no earlier run sent, so no prefix cache helps; default 0:
# every run sends the same prompts, as clients that repeat a system prompt or a question do),
# MEMORY_LIMIT_GIB (each server in its own cgroup v1 memory group with this limit, page cache
# charged, as offload_compare.sh; needs root) with HOST_BUDGET (moex's --host-budget, e.g.
# 25%): serving a model larger than the memory each server is given. REQUEST_TIMEOUT_S
# (default 900) bounds each load run; a run cut by it is reported with timed_out true.
# MOEX_ARGS: more `moex serve` options (e.g. "--tpot-target 150").
# Prompts go to /v1/completions as text (no chat template), so both servers tokenize the
# same text with the same vocabulary; greedy, ignore_eos, exactly MAX_TOKENS out.
set -euo pipefail
build=${1:?usage: serve_compare.sh BUILD_DIR LLAMA_SERVER [OUT.jsonl]}
llama_server=${2:?usage: serve_compare.sh BUILD_DIR LLAMA_SERVER [OUT.jsonl]}
out=${3:-/dev/stdout}
root=$(cd "$(dirname "$0")/../.." && pwd)
shared=$root/../shared/data
size=${SIZE:-small}
clients_list=${CLIENTS:-1 4 16}
requests=${REQUESTS:-32}
max_tokens=${MAX_TOKENS:-64}
threads=${THREADS:-2}
rounds=${ROUNDS:-2}
prompts=${PROMPTS:-$shared/prompts/sharegpt_v3_filtered_500.json}
port=${PORT:-18090}
turns=${TURNS:-1}
cold=${COLD:-0}
memory_limit_gib=${MEMORY_LIMIT_GIB:-}
host_budget=${HOST_BUDGET:-}
run_timeout=${REQUEST_TIMEOUT_S:-900}
cgroup_root=/sys/fs/cgroup/memory
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  for g in moex-serve llama-serve; do rmdir "$cgroup_root/$g" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

model=${MODEL:-}
if [ -z "$model" ]; then
  model=$work/olmoe-$size.gguf
  "$build/moex" random-model --arch olmoe --size "$size" --format gguf \
    --gguf-vocab "$shared/gguf-vocab/ggml-vocab-gpt-neox.gguf" --out "$model" >&2
fi
max_clients=$(tr ' ' '\n' <<<"$clients_list" | sort -n | tail -1)

wait_ready() {  # PORT PID LOG
  for _ in $(seq 1200); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    kill -0 "$2" 2>/dev/null || { cat "$3" >&2; exit 1; }
    sleep 0.25
  done
  echo "server on port $1 did not become ready" >&2
  exit 1
}

# With MEMORY_LIMIT_GIB: runs "$@" in memory group $1 (created with the limit), after
# dropping the model's files from the page cache so neither server starts warm.
in_group() {
  local group=$1
  shift
  # exec: the background job's pid is the server's, so cleanup's kill reaches it.
  [ -z "$memory_limit_gib" ] && exec "$@"
  for f in "$model" "$model.experts.moex"; do
    [ -f "$f" ] && dd if="$f" iflag=nocache count=0 status=none 2>/dev/null
  done
  local cg=$cgroup_root/$group
  mkdir -p "$cg"
  echo "$(echo "$memory_limit_gib * 1073741824 / 1" | bc)" >"$cg/memory.limit_in_bytes"
  exec bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' _ "$cg" "$@"
}
moex_budget=()
[ -n "$host_budget" ] && moex_budget=(--host-budget "$host_budget")
in_group moex-serve "$build/moex" serve --model "$model" --port "$port" --threads "$threads" \
  --max-running "$max_clients" --max-queue 256 "${moex_budget[@]}" ${MOEX_ARGS:-} \
  >"$work/moex.log" 2>&1 &
pids+=($!)
wait_ready "$port" "${pids[-1]}" "$work/moex.log"
# One slot per client, each with room for a cut prompt (2,000 characters) and the output.
in_group llama-serve "$llama_server" -m "$model" --host 127.0.0.1 --port $((port + 1)) \
  --threads "$threads" --threads-batch "$threads" --parallel "$max_clients" \
  --ctx-size $((max_clients * 2048)) --cont-batching --no-webui >"$work/llama.log" 2>&1 &
pids+=($!)
wait_ready $((port + 1)) "${pids[-1]}" "$work/llama.log"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
run() {  # SERVER PORT CLIENTS ROUND OFFSET
  local result
  result=$(timeout "$run_timeout" "$build/serve_load" --port "$2" --prompts "$prompts" \
    --endpoint completions --clients "$3" --requests "$requests" --max-tokens "$max_tokens" \
    --turns "$turns" --prompt-offset "$5" --json)
  [ -n "$result" ] || result=$(jq -nc --argjson c "$3" --argjson t "$run_timeout" \
    '{clients: $c, timed_out: true, output_tokens_per_s: 0, wall_s: $t}')
  jq -c --arg server "$1" --arg model "$(basename "$model")" --arg cpu "$cpu" \
    --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" --argjson round "$4" --argjson cold "$cold" \
    --arg limit "$memory_limit_gib" --arg budget "$host_budget" \
    '. + {server: $server, model: $model, cpu: $cpu, load_average: $load, round: $round,
          cold: ($cold == 1), memory_limit_gib: $limit, host_budget: $budget}' <<<"$result"
}
# Warm-up (page cache, allocators), not reported.
timeout "$run_timeout" "$build/serve_load" --port "$port" --prompts "$prompts" \
  --endpoint completions --clients 2 --requests 4 --max-tokens 8 --json >/dev/null || true
timeout "$run_timeout" "$build/serve_load" --port $((port + 1)) --prompts "$prompts" \
  --endpoint completions --clients 2 --requests 4 --max-tokens 8 --json >/dev/null || true
lines=$work/runs.jsonl
offset=0
for clients in $clients_list; do
  for round in $(seq "$rounds"); do
    # Cold: past the warm-up's prompts and every earlier run's, the same for both servers.
    [ "$cold" = 1 ] && offset=$((4 + ${run_index:-0} * requests * turns))
    run_index=$((${run_index:-0} + 1))
    run moex "$port" "$clients" "$round" "$offset" | tee -a "$lines" >>"$out"
    run llama-server $((port + 1)) "$clients" "$round" "$offset" | tee -a "$lines" >>"$out"
  done
done
jq -s -c 'group_by(.clients)[] | {clients: .[0].clients,
    moex_tok_s: ([.[] | select(.server == "moex") | .output_tokens_per_s] | max),
    llama_tok_s: ([.[] | select(.server == "llama-server") | .output_tokens_per_s] | max),
    moex_ttft_p50_ms: ([.[] | select(.server == "moex") | .ttft_ms.p50] | min),
    llama_ttft_p50_ms: ([.[] | select(.server == "llama-server") | .ttft_ms.p50] | min)}
  | . + {ratio_tok_s: (.moex_tok_s / .llama_tok_s), ratio_ttft: (.moex_ttft_p50_ms / .llama_ttft_p50_ms)}' \
  "$lines" >>"$out"
