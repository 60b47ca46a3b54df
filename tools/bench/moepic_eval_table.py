#!/usr/bin/env python3
"""Markdown tables of bench/moepic_eval.sh's results directory.

    moepic_eval_table.py RESULTS_DIR

Ablations (Table 3 of the MoEpic paper): per set, profile and budget, each variant's decode
hit rate, MiB moved per decoded token, stall per decoded token, modelled TPOT and TTFT, and
its TPOT and TTFT relative to moepic. Memory efficiency (Fig. 8): for target TPOTs between
the best and the worst point of the sweep, the smallest budget each policy needs. Then the
configurator's per-layer budgets and splits of moepic at 25 %.
"""
import glob, json, os, sys


def mib(b):
    return f"{b / 2**20:.1f}"


def ablations(path):
    j = json.load(open(path))
    rows = j["results"]
    budgets = sorted({round(r["budget_fraction"], 4) for r in rows})
    by = {(r["policy"], round(r["budget_fraction"], 4)): r for r in rows}
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    out = ["| variant | budget | decode hit rate | MiB / decoded token | stall ms / token "
           "| TPOT ms | TTFT ms | TPOT vs moepic | TTFT vs moepic |",
           "|---|---|---|---|---|---|---|---|---|"]
    for b in budgets:
        base = by.get(("moepic", b))
        for p in policies:
            r = by.get((p, b))
            if r is None:
                continue
            m = r["modelled"]
            rel_t = rel_f = "–"
            if base and base["modelled"]["tpot_ms"] > 0:
                rel_t = f"{m['tpot_ms'] / base['modelled']['tpot_ms']:.2f}x"
                rel_f = f"{m['ttft_ms'] / base['modelled']['ttft_ms']:.2f}x"
            out.append(f"| {p} | {b * 100:.0f} % | {r['decode_hit_rate']:.3f} | "
                       f"{mib(r['decode_bytes_per_token'])} | "
                       f"{m['decode_stall_ms_per_token']:.2f} | {m['tpot_ms']:.2f} | "
                       f"{m['ttft_ms']:.1f} | {rel_t} | {rel_f} |")
    return j, "\n".join(out)


def memory(path):
    j = json.load(open(path))
    curves = {}
    for r in j["results"]:
        curves.setdefault(r["policy"], []).append(
            (r["budget_fraction"], r["budget_bytes"], r["modelled"]["tpot_ms"]))
    for c in curves.values():
        c.sort()
    tpots = [t for c in curves.values() for _, _, t in c]
    lo, hi = min(tpots), max(tpots)
    targets = [lo + (hi - lo) * f for f in (0.1, 0.25, 0.5, 0.75)]
    names = list(curves)
    out = ["| target TPOT ms | " + " | ".join(f"{p}: smallest budget" for p in names) + " |",
           "|---|" + "---|" * len(names)]
    for t in targets:
        cells = []
        for p in names:
            hit = next(((f, b) for f, b, tp in curves[p] if tp <= t), None)
            cells.append(f"{hit[0] * 100:.0f} % ({hit[1] / 2**30:.2f} GiB)" if hit else "not reached")
        out.append(f"| {t:.2f} | " + " | ".join(cells) + " |")
    curve = ["| budget | " + " | ".join(f"{p} TPOT ms" for p in names) + " |",
             "|---|" + "---|" * len(names)]
    fractions = sorted({round(f, 4) for c in curves.values() for f, _, _ in c})
    for f in fractions:
        cells = [next((f"{tp:.2f}" for ff, _, tp in curves[p] if round(ff, 4) == f), "–")
                 for p in names]
        curve.append(f"| {f * 100:.0f} % | " + " | ".join(cells) + " |")
    return j, "\n".join(out), "\n".join(curve)


def layers(path):
    j = json.load(open(path))
    out = []
    for r in j["results"]:
        if r["policy"] != "moepic" or round(r["budget_fraction"], 2) != 0.25:
            continue
        rep = r.get("policy_report", {}).get("moepic")
        if not rep:
            continue
        out.append(f"moepic at 25 %: V_e = {rep['budget_experts']:.1f} experts, buffer "
                   f"{rep['buffer_experts']} experts per layer, {rep['reconfigurations']} "
                   f"reconfigurations, costs (ms) {rep['costs_ms']}\n")
        out.append("| layer | V_i (experts) | θ_i | C_i | modelled m_i | modelled exposed ms "
                   "| H(C_i) |")
        out.append("|---|---|---|---|---|---|---|")
        for l in rep["layers"]:
            out.append(f"| {l['layer']} | {l['budget_experts']:.2f} | {l['theta']:.3f} | "
                       f"{l['cache_size']} | {l['expected_in_memory']:.2f} | "
                       f"{l['modelled_exposed_ms']:.3f} | {l['hit_rate_at_cache_size']:.2f} |")
    return "\n".join(out)


def main():
    d = sys.argv[1]
    for f in sorted(glob.glob(os.path.join(d, "ablation-*.json"))):
        j, t = ablations(f)
        first = j["results"][0]
        print(f"**{os.path.basename(f)[9:-5]}**, {j['hardware']['name']} "
              f"({first['requests']} requests, {first['decode_tokens']} decoded tokens, "
              f"costed as {j['model']}):\n")
        print(t + "\n")
    for f in sorted(glob.glob(os.path.join(d, "sweep-*.json"))):
        j, t, curve = memory(f)
        print(f"**memory efficiency, {os.path.basename(f)[6:-5]}**, {j['hardware']['name']}:\n")
        print(t + "\n")
        print(curve + "\n")
        print(layers(f) + "\n")


if __name__ == "__main__":
    main()
