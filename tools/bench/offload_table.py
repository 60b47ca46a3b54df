#!/usr/bin/env python3
"""Markdown table of a bench/offload_run.sh result file (its stdout, one JSON line each).

"bound" is the issue's physical bound, I/O and compute in series: bytes read per token / dd
bandwidth + compute time per token; overlapping the two can beat it (time / bound < 1).
"max(I/O, compute)" is the bound with perfect overlap.

    tools/bench/offload_table.py RESULTS.jsonl
"""
import json
import sys


def main() -> None:
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    disk = [r for r in rows if "dd_iflag_direct" in r]
    after = [r for r in rows if "dd_iflag_direct_after" in r]
    runs = [r for r in rows if "policy" in r]
    if disk:
        print(f"dd before: {disk[0]['dd_iflag_direct']} (load {disk[0].get('loadavg', '?')})")
    if after:
        print(f"dd after: {after[0]['dd_iflag_direct_after']} (load {after[0]['loadavg_after']})")
    if runs and "compute_ms_per_token" in runs[0]:
        print(f"compute time per token (100 % runs, decode less stall): "
              f"{runs[0]['compute_ms_per_token']:.0f} ms")
    print()
    print("| policy | budget | decode tok/s | hit rate | MB read / token | read GB/s (busy) "
          "| of dd | I/O hidden | bound tok/s | time / bound | time / max(I/O, compute) "
          "| load (1/5/15) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in runs:
        bound = r.get("bound_tokens_per_s")
        ratio = r.get("time_over_bound")
        # Strict lower bound: I/O and compute fully overlapped.
        io_s = r["decode_bytes_per_token"] / (r["disk_gb_per_s"] * 1e9)
        overlap_bound_s = max(io_s, r.get("compute_ms_per_token", 0) / 1000)
        tps = r["decode_tokens_per_s"]
        strict = (1 / tps) / overlap_bound_s if tps > 0 and overlap_bound_s > 0 else 0
        print(f"| {r['policy']} | {r['budget']} | {r['decode_tokens_per_s']:.2f} "
              f"| {r['decode_hit_rate']:.2f} | {r['decode_bytes_per_token'] / 1e6:.0f} "
              f"| {r['decode_read_gb_per_s_while_busy']:.2f} "
              f"| {100 * r['decode_read_share_of_disk']:.0f} % "
              f"| {100 * r['decode_io_hidden_share']:.0f} % "
              f"| {bound:.2f} | {ratio:.2f}x | {strict:.2f}x | {r.get('loadavg', '?')} |"
              if bound and ratio else
              f"| {r['policy']} | {r['budget']} | {r['decode_tokens_per_s']:.2f} | ... |")


if __name__ == "__main__":
    main()
