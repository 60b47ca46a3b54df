#!/usr/bin/env bash
# Token regrouping on the server (`moex serve --regroup N`, ExpertFlow §3.3): activated
# experts per pass, offload reads and throughput with and without regrouping, under the
# Azure conversation arrival trace at several loads. One JSON line per configuration and rate:
#   bench/regroup_bench.sh BUILD_DIR [MODEL] [OUT.jsonl]
# Each run starts a fresh server (so /metrics counts that run only), replays REQUESTS
# arrivals of the trace scaled to RATE req/s with bench/serve_load.cc, then reads /metrics.
# Configurations (CONFIGS, NAME:REGROUP:POLICY[:STATE]; default below):
#   one:1:lru            every running request in one pass (no units)
#   split:2:lru          units of two passes, split in admission order (lru never regroups)
#   lastpath:2:regroup+lru:record   units of two passes regrouped by each request's last
#                        path; its paths are recorded to a fresh --policy-state file
#   oracle:2:regroup+lru:replay     the same, loading that file: the same requests replayed,
#                        every pass is regrouped by the path it will take (ORACLE paths);
#                        its line also scores, on those true paths and on the same units,
#                        the admission-order split and the last-path clustering's split
#                        (true_experts_per_unit: activated experts per unit, Eq. 5)
#   NAME:2:expertflow:/PATH/TO/STATE   expertflow with its learned predictor (a state saved
#                        by `moex sim --learn-from ... --policy-state FILE`) regroups each unit
# A pass may hold MAX_RUNNING / REGROUP decodes plus one prefill chunk (PREFILL_CHUNK).
# Environment: RATES (default "2 4 8"), REQUESTS (48), MAX_TOKENS (64), BUDGET (25%),
# MAX_RUNNING (32), PREFILL_CHUNK (16), STORE (default /tmp/moex-regroup-bench.store),
# PORT (18090), PROMPTS, ARRIVALS (default ../shared/data/...).
set -euo pipefail
build=${1:?usage: regroup_bench.sh BUILD_DIR [MODEL] [OUT.jsonl]}
root=$(cd "$(dirname "$0")/.." && pwd)
model=${2:-$root/models/olmoe-demo}
out=${3:-/dev/stdout}
rates=${RATES:-2 4 8}
requests=${REQUESTS:-48}
max_tokens=${MAX_TOKENS:-64}
budget=${BUDGET:-25%}
max_running=${MAX_RUNNING:-32}
chunk=${PREFILL_CHUNK:-16}
store=${STORE:-/tmp/moex-regroup-bench.store}
port=${PORT:-18090}
configs=${CONFIGS:-one:1:lru split:2:lru lastpath:2:regroup+lru:record oracle:2:regroup+lru:replay}
prompts=${PROMPTS:-$root/../shared/data/prompts/sharegpt_v3_filtered_500.json}
arrivals=${ARRIVALS:-$root/../shared/data/arrivals/AzureLLMInferenceTrace_conv.csv}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)

# A metric's value from a /metrics exposition (first sample; summed over labels with SUM=1).
metric() { awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $2; f = 1 } END { print f ? s : 0 }' <<<"$1"; }

log=$(mktemp)
server=
stop() { [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" 2>/dev/null; server=; }
trap 'stop; rm -f "$log"' EXIT
for rate in $rates; do
  for config in $configs; do
    IFS=: read -r name regroup policy state <<<"$config"
    state_args=()
    if [ -n "${state:-}" ] && [ "${state#/}" != "$state" ]; then
      # A learned state file (e.g. expertflow's, from `moex sim --learn-from`): each run gets
      # a copy, since the server saves its state at exit.
      cp "$state" "$store.learned"
      state_args=(--policy-state "$store.learned")
    elif [ -n "${state:-}" ]; then
      [ "$state" = record ] && rm -f "$store.paths"
      state_args=(--policy-state "$store.paths")
    fi
    groups=$((regroup > 1 ? regroup : 1))
    pass_tokens=$(((max_running + groups - 1) / groups + chunk))
    "$build/moex" serve --model "$model" --port "$port" --host-budget "$budget" --store "$store" \
      --policy "$policy" --policy-worker sync --regroup "$regroup" --max-running "$max_running" \
      --max-queue 1024 --max-batch-tokens "$pass_tokens" --prefill-chunk "$chunk" \
      "${state_args[@]}" >"$log" 2>&1 &
    server=$!
    for _ in $(seq 600); do
      grep -q "serving" "$log" && break
      kill -0 "$server" 2>/dev/null || { cat "$log" >&2; exit 1; }
      sleep 0.1
    done
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    result=$("$build/serve_load" --port "$port" --prompts "$prompts" --arrivals "$arrivals" \
      --requests "$requests" --rate "$rate" --max-tokens "$max_tokens" --json)
    m=$(curl -s "http://127.0.0.1:$port/metrics")
    stop
    report=$(sed -n 's/^moex: policy report: //p' "$log" | tail -1)
    jq -c --arg name "$name" --arg policy "$policy" --argjson regroup "$regroup" \
      --argjson rate "$rate" --argjson pass_tokens "$pass_tokens" --arg cpu "$cpu" \
      --arg load "$load" \
      --argjson experts "$(metric "$m" moex_pass_activated_experts_sum)" \
      --argjson passes "$(metric "$m" moex_pass_activated_experts_count)" \
      --argjson dexperts "$(metric "$m" moex_decode_pass_activated_experts_sum)" \
      --argjson dpasses "$(metric "$m" moex_decode_pass_activated_experts_count)" \
      --argjson units "$(metric "$m" moex_regroup_units_total)" \
      --argjson regrouped "$(metric "$m" moex_regroup_units_regrouped_total)" \
      --argjson hits "$(metric "$m" moex_offload_hits_total)" \
      --argjson misses "$(metric "$m" moex_offload_misses_total)" \
      --argjson read "$(metric "$m" moex_offload_read_bytes_total)" \
      --argjson tokens "$(metric "$m" moex_completion_tokens_total)" \
      --argjson prompt "$(metric "$m" moex_prompt_tokens_total)" \
      --argjson report "${report:-null}" \
      '{config: $name, policy: $policy, regroup: $regroup, rate: $rate,
        max_batch_tokens: $pass_tokens, passes: $passes, units: $units,
        units_regrouped: $regrouped, experts_per_pass: ($experts / ([$passes, 1] | max)),
        decode_passes: $dpasses, experts_per_decode_pass: ($dexperts / ([$dpasses, 1] | max)),
        experts_per_token: ($experts / ([$tokens + $prompt, 1] | max)),
        hit_rate: ($hits / ([$hits + $misses, 1] | max)),
        read_mib_per_token: ($read / 1048576 / ([$tokens, 1] | max)),
        output_tok_s: .output_tokens_per_s, ttft_p50_ms: .ttft_ms.p50,
        tpot_p50_ms: .tpot_ms.p50, errors: .errors, requests: .requests,
        cpu: $cpu, load_average: $load}
       + (if $report.regroup.scored_units > 0 then {scored_units: $report.regroup.scored_units,
            true_experts_per_unit: ($report.regroup | {
              admission_order: (.true_experts_admission_order / .scored_units),
              last_path: (.true_experts_last_path / .scored_units),
              recorded_path: (.true_experts_recorded_path / .scored_units)})}
          else {} end)
       + (if ($report.expertflow.regrouping.units // 0) > 0
          then {predicted_experts_per_unit: ($report.expertflow.regrouping | {
              admission_order: (.predicted_activated_before / .units),
              regrouped: (.predicted_activated_after / .units)})}
          else {} end)' <<<"$result" >>"$out"
  done
done
