#!/usr/bin/env python3
"""Tables of a bench/sim_sweep.sh output directory: hit rate, bytes read per decoded token and
modelled TPOT per policy and budget.

    sim_sweep_table.py OUT_DIR [--markdown]

--markdown prints the tables of docs/benchmarks.md ("Policy sweep") instead of text.
"""
import json, os, sys

LABELS = {"this-machine": "this-machine, demo model", "rtx4090": "rtx4090, as OLMoE-1B-7B"}


def mib(b):
    if b == 0:
        return "0.0"
    m = b / 2**20
    return f"{m:.0f} MiB" if m >= 1000 else f"{m:.1f} MiB"


def main():
    out = sys.argv[1]
    markdown = "--markdown" in sys.argv[2:]
    for name in ("sharegpt", "gsm8k"):
        rec = json.load(open(os.path.join(out, f"{name}-record.json")))
        if markdown:
            title = {"sharegpt": "ShareGPT", "gsm8k": "GSM8K"}[name]
            print(f"**{title}** ({rec['requests']} requests, {rec['tokens']:,} tokens, {rec['iterations']:,} passes):\n")
        else:
            print(f"\n{name}: {rec['requests']} requests, {rec['tokens']} tokens, {rec['iterations']} passes")
        header_done = False
        for hw in ("this-machine", "rtx4090"):
            j = json.load(open(os.path.join(out, f"{name}-{hw}.json")))
            rows = {}
            for r in j["results"]:
                rows.setdefault(r["policy"], []).append(r)
            budgets = [f"{r['budget_fraction']*100:.0f}%" for r in next(iter(rows.values()))]
            if markdown:
                if not header_done:
                    print("| policy | " + " | ".join(b.replace("%", " %") for b in budgets) + " |")
                    print("|---|" + "---|" * len(budgets))
                    header_done = True
                print(f"| {LABELS.get(hw, hw)} |" + " |" * len(budgets))
                for p, rs in rows.items():
                    cells = " | ".join(f"{r['hit_rate']:.3f} / {mib(r['decode_bytes_per_token'])} / "
                                       f"{r['modelled']['tpot_ms']:.2f} ms" for r in rs)
                    print(f"| {p} | {cells} |")
            else:
                print(f"  {hw} ({j['model']})")
                print("    policy            " + "".join(f"{b:>22}" for b in budgets))
                for p, rs in rows.items():
                    cells = "".join(f"{r['hit_rate']:6.3f} {r['decode_bytes_per_token']/2**20:6.1f}M "
                                    f"{r['modelled']['tpot_ms']:7.2f}ms" for r in rs)
                    print(f"    {p:<18}" + cells)
        if markdown:
            print()


if __name__ == "__main__":
    main()
