#!/usr/bin/env bash
# `moex serve --tpot-target` off and on, side by side: a fresh server per run, the two
# alternating on the same new prompts each round (ShareGPT through /v1/completions, greedy,
# ignore_eos), so both see the same machine and neither has a warm prefix cache. One JSON
# line per run: output tokens/s, TTFT and TPOT p50/p90, and the prefill chunks that waited
# (moex_prefill_deferred_total). Never run in CI.
#
#   bench/serve_tpot_ab.sh BUILD_DIR MODEL
#
# Environment: TARGET (ms, default 100), CLIENTS (default 16), REQUESTS (per run, default 32),
# MAX_TOKENS (default 32), ROUNDS (default 2), THREADS (default 2), PORT (default 18290),
# PROMPTS (default the shared ShareGPT set), OFFSET (first prompt, default 200).
set -euo pipefail
build=${1:?usage: serve_tpot_ab.sh BUILD_DIR MODEL}
model=${2:?usage: serve_tpot_ab.sh BUILD_DIR MODEL}
root=$(cd "$(dirname "$0")/.." && pwd)
prompts=${PROMPTS:-$root/../shared/data/prompts/sharegpt_v3_filtered_500.json}
target=${TARGET:-100}
clients=${CLIENTS:-16}
requests=${REQUESTS:-32}
max_tokens=${MAX_TOKENS:-32}
rounds=${ROUNDS:-2}
threads=${THREADS:-2}
port=${PORT:-18290}
offset=${OFFSET:-200}
pid=
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; wait 2>/dev/null || true' EXIT

for round in $(seq "$rounds"); do
  for t in 0 "$target"; do
    "$build/moex" serve --model "$model" --port "$port" --threads "$threads" \
      --max-running "$clients" --max-queue 256 --tpot-target "$t" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 1200); do
      curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || { echo "moex serve exited" >&2; exit 1; }
      sleep 0.25
    done
    # Warm-up on prompts the measured run does not send.
    "$build/serve_load" --port "$port" --prompts "$prompts" --endpoint completions \
      --clients 2 --requests 4 --max-tokens 8 --json >/dev/null
    result=$("$build/serve_load" --port "$port" --prompts "$prompts" --endpoint completions \
      --clients "$clients" --requests "$requests" --max-tokens "$max_tokens" \
      --prompt-offset "$offset" --json)
    deferred=$(curl -s "http://127.0.0.1:$port/metrics" |
      awk '/^moex_prefill_deferred_total/ {print $2}')
    kill -TERM "$pid"
    wait "$pid" || true
    pid=
    jq -c --argjson t "$t" --argjson round "$round" --argjson d "${deferred:-0}" \
      --arg cpu "$(lscpu | sed -n 's/^Model name: *//p' | head -1)" \
      '{round: $round, tpot_target_ms: $t, prefill_deferred: $d, cpu: $cpu,
        output_tokens_per_s, ttft_p50_ms: .ttft_ms.p50, ttft_p90_ms: .ttft_ms.p90,
        tpot_p50_ms: .tpot_ms.p50, tpot_p90_ms: .tpot_ms.p90}' <<<"$result"
  done
  offset=$((offset + requests))
done
