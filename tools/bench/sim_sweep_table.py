#!/usr/bin/env python3
"""Text tables of a bench/sim_sweep.sh output directory: hit rate, bytes per decoded token and
modelled TPOT per policy and budget.

    sim_sweep_table.py OUT_DIR
"""
import json, sys, os
out = sys.argv[1]
for name in ("sharegpt", "gsm8k"):
    rec = json.load(open(os.path.join(out, f"{name}-record.json")))
    print(f"\n{name}: {rec['requests']} requests, {rec['tokens']} tokens, {rec['iterations']} passes")
    for hw in ("this-machine", "rtx4090"):
        j = json.load(open(os.path.join(out, f"{name}-{hw}.json")))
        print(f"  {hw} ({j['model']})")
        rows = {}
        for r in j["results"]:
            rows.setdefault(r["policy"], []).append(r)
        budgets = [f"{r['budget_fraction']*100:.0f}%" for r in next(iter(rows.values()))]
        print("    policy            " + "".join(f"{b:>22}" for b in budgets))
        for p, rs in rows.items():
            cells = "".join(f"{r['hit_rate']:6.3f} {r['decode_bytes_per_token']/2**20:6.1f}M {r['modelled']['tpot_ms']:7.2f}ms" for r in rs)
            print(f"    {p:<18}" + cells)
