#!/bin/bash
# Expert parallelism on this machine: `moex bench` in one process beside the same run under
# `mpirun -np RANKS --expert-parallel` (TCP over loopback), taken one after the other in one
# invocation. Prints one JSON object: decode tok/s of both and their ratio, network bytes per
# token (both directions), rank 0's wait on the network per token, and each rank's expert
# bytes and peak RSS. Never run in CI.
#
#   bench/expert_parallel.sh BUILD_DIR MODEL [RANKS]
# The prompt is one token, so almost every pass is a one-token decode step: the bytes per pass
# are the bytes per decoded token. Threads: the single process uses every core; each rank
# gets cores / RANKS. HOST_BUDGET (e.g. 25%) offloads the experts in both runs: the single
# process caches that share of all experts, each rank that share of its own (so both cache
# the same bytes in all), each with POLICY (default lru) and its store under the run's temp
# directory (packed once, before the timed runs); the per-rank store reads and waits are
# then reported too.
set -euo pipefail
build=${1:?usage: expert_parallel.sh BUILD_DIR MODEL [RANKS]}
model=${2:?usage: expert_parallel.sh BUILD_DIR MODEL [RANKS]}
ranks=${3:-2}
gen=${GEN_TOKENS:-32}
cores=$(nproc)
per_rank=$(( cores / ranks > 0 ? cores / ranks : 1 ))
out=$(mktemp -d /var/tmp/ep-bench.XXXX)
trap 'rm -rf "$out"' EXIT
offload=()
if [[ -n "${HOST_BUDGET:-}" ]]; then
  offload=(--host-budget "$HOST_BUDGET" --policy "${POLICY:-lru}" --store "$out/experts.moex")
  "$build/moex" pack --model "$model" --out "$out/experts.moex" >&2
fi

"$build/moex" bench -m "$model" -t "$cores" --prompt-tokens 1 --gen-tokens "$gen" --json \
  "${offload[@]}" > "$out/one.json"
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  mpirun -np "$ranks" --oversubscribe --bind-to none --mca btl self,tcp \
  --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
  "$build/moex" bench -m "$model" -t "$per_rank" --prompt-tokens 1 --gen-tokens "$gen" \
  --expert-parallel --json "${offload[@]}" > "$out/ep.json"

# Passes: the warm-up's two one-token passes, then one prefill pass and gen - 1 decode steps.
jq -n --slurpfile one "$out/one.json" --slurpfile ep "$out/ep.json" --arg cpu \
  "$(lscpu | sed -n 's/^Model name: *//p')" --argjson ranks "$ranks" --argjson gen "$gen" \
  --arg budget "${HOST_BUDGET:-resident}" '
  ($ep[0].offload.expert_parallel) as $x | (2 + $gen) as $passes |
  {cpu: $cpu, model: $one[0].model, arch: $one[0].arch, expert_dtype: $one[0].expert_dtype,
   ranks: $ranks,
   host_budget: $budget,
   one_process: {threads: $one[0].threads, decode_tokens_per_s: $one[0].decode_tokens_per_s,
                 peak_rss_bytes: $one[0].memory.peak_rss_bytes,
                 expert_bytes: $one[0].memory.host_cache_bytes,
                 store_bytes_read: ($one[0].offload.bytes_read // 0),
                 store_wait_ms: ($one[0].offload.stall_ms // 0)},
   expert_parallel: {threads_per_rank: $ep[0].threads,
                     decode_tokens_per_s: $ep[0].decode_tokens_per_s,
                     network_bytes_per_token:
                       (($x.network_bytes_sent + $x.network_bytes_received) / $passes),
                     network_wait_ms_per_token: ($x.network_wait_ms / $passes),
                     per_rank: [$x.per_rank[] | {rank, experts, expert_bytes, peak_rss_bytes,
                                                 bytes_sent, bytes_received, wait_ms,
                                                 compute_ms, hits, misses, store_bytes_read,
                                                 store_wait_ms}]},
   decode_ratio_ep_over_one: ($ep[0].decode_tokens_per_s / $one[0].decode_tokens_per_s)}'
