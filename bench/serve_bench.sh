#!/usr/bin/env bash
# Serving throughput and latency of `moex serve` under load, one JSON line per run:
#   bench/serve_bench.sh BUILD_DIR [MODEL] [HOST_BUDGET] [OUT.jsonl]
# Starts the server (fully resident when HOST_BUDGET is empty or "resident", else with
# experts offloaded under that budget, e.g. 25%), then drives it with bench/serve_load.cc:
# closed loop at 1, 4 and 16 concurrent clients, and open loop on the Azure conversation
# arrival trace, time-scaled to this machine: by default its mean arrival rate is set to
# LOAD_FACTOR (0.7) x the request rate the 16-client run sustained. Each line also records
# the CPU and the load average as the run started (other jobs share the cores).
# Environment: REQUESTS (per closed-loop run, default 32), MAX_TOKENS (default 64),
# TRACE_REQUESTS (default 64), TIME_SCALE (default auto; a number divides the trace's
# times by it), LOAD_FACTOR (default 0.7), PORT (default 18080), PROMPTS, ARRIVALS (default
# ../shared/data/...), SERVE_ARGS (more `moex serve` options, e.g.
# "--store /tmp/demo.store --policy nextgate+lru").
set -euo pipefail
build=${1:?usage: serve_bench.sh BUILD_DIR [MODEL] [HOST_BUDGET] [OUT.jsonl]}
root=$(cd "$(dirname "$0")/.." && pwd)
model=${2:-$root/models/olmoe-demo}
budget=${3:-resident}
out=${4:-/dev/stdout}
requests=${REQUESTS:-32}
max_tokens=${MAX_TOKENS:-64}
trace_requests=${TRACE_REQUESTS:-64}
time_scale=${TIME_SCALE:-auto}
load_factor=${LOAD_FACTOR:-0.7}
port=${PORT:-18080}
prompts=${PROMPTS:-$root/../shared/data/prompts/sharegpt_v3_filtered_500.json}
arrivals=${ARRIVALS:-$root/../shared/data/arrivals/AzureLLMInferenceTrace_conv.csv}

budget_args=()
if [ -n "$budget" ] && [ "$budget" != resident ]; then budget_args=(--host-budget "$budget"); fi
log=$(mktemp)
"$build/moex" serve --model "$model" --port "$port" --max-running 32 --max-queue 256 \
  "${budget_args[@]}" ${SERVE_ARGS:-} >"$log" 2>&1 &
server=$!
trap 'kill -TERM $server 2>/dev/null; wait $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 600); do
  grep -q "serving" "$log" && break
  kill -0 $server 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 0.1
done

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
tag() { jq -c --arg model "$(basename "$model")" --arg budget "$budget" --arg cpu "$cpu" \
  --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
  '. + {model: $model, budget: $budget, cpu: $cpu, load_average: $load}'; }
# Warm-up (page cache, expert store, allocator), not reported.
"$build/serve_load" --port "$port" --prompts "$prompts" --clients 4 --requests 8 \
  --max-tokens 16 --json >/dev/null
rate16=0
for clients in 1 4 16; do
  line=$("$build/serve_load" --port "$port" --prompts "$prompts" --clients "$clients" \
    --requests "$requests" --max-tokens "$max_tokens" --json | tag)
  echo "$line" >>"$out"
  rate16=$(jq .requests_per_s <<<"$line")
done
if [ "$time_scale" = auto ]; then
  pace=(--rate "$(jq -n "$rate16 * $load_factor")")
else
  pace=(--time-scale "$time_scale")
fi
"$build/serve_load" --port "$port" --prompts "$prompts" --arrivals "$arrivals" \
  --requests "$trace_requests" "${pace[@]}" --max-tokens "$max_tokens" --json \
  | tag >>"$out"
