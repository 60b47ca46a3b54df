#!/usr/bin/env python3
"""Adds the physical bound to each bench/offload_run.sh result line (stdin -> stdout).

    offload_bound.py DISK_GB_PER_S LOADAVG [COMPUTE_MS] < runs.jsonl
"""
import json, sys
# Physical bound per configuration (issue 6): the expert bytes this run read per decoded
# token at the disk bandwidth dd measured, plus the compute time per token. Compute time is
# the smallest decode time less stall per token among the 100 % runs (all experts cached
# after prefill: what is left is the forward pass itself); COMPUTE_MS overrides it.
disk, la_before, compute_env = float(sys.argv[1]), sys.argv[2], sys.argv[3]
runs = [json.loads(line) for line in sys.stdin if line.strip()]
full = [j["decode_compute_ms_per_token"] for j in runs if j["budget"] == "100%"]
compute_ms = float(compute_env) if compute_env else (min(full) if full else None)
for j in runs:
    bpt = j["decode_bytes_per_token"]
    j["disk_gb_per_s"] = disk
    j["loadavg_before_sweep"] = la_before
    j["io_bound_tokens_per_s"] = disk * 1e9 / bpt if bpt > 0 else None
    j["decode_read_share_of_disk"] = j["decode_read_gb_per_s_while_busy"] / disk
    if compute_ms is not None:
        bound_s = bpt / (disk * 1e9) + compute_ms / 1000
        j["compute_ms_per_token"] = compute_ms
        j["bound_tokens_per_s"] = 1 / bound_s
        tps = j["decode_tokens_per_s"]
        j["time_over_bound"] = (1 / tps) / bound_s if tps > 0 else None
    print(json.dumps(j), flush=True)
