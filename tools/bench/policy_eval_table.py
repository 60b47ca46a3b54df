#!/usr/bin/env python3
"""Markdown tables of a bench/policy_eval.sh output directory (EVALUATION.md's columns).

    policy_eval_table.py OUT_DIR [--summary] [CASE ...]

For each case (default: every results/*.json) and profile, one row per policy and budget:
decode hit rate, bytes moved per decoded token, stall per decoded token (decode passes),
modelled TPOT and TTFT, prefetch precision and recall at look-ahead distance 1 (and the
farthest distance predicted), wasted prefetch bytes per decoded token, policy CPU µs per
pass (hooks and worker jobs; and the demand insertions' eviction work apart), TPOT as a
multiple of lru's, and the share of the way from lru to oracle+belady the policy closes in
TPOT.
--summary prints one compact table per case instead: modelled TPOT and gap closed per
policy and budget, both profiles side by side.
"""
import glob, json, os, sys

ORDER = ["cpu", "rtx4090"]


def mib(b):
    return f"{b / 2**20:.1f}"


def prediction_cells(r):
    rates = r.get("predictions", {}).get("by_distance", [])
    if not rates:
        return "–", "–"
    d1 = rates[0]
    far = rates[-1]
    prec = f"{d1['precision']:.2f}"
    rec = f"{d1['recall_at_or_beyond']:.2f}"
    if far["distance"] > 1:
        prec += f" (d{far['distance']}: {far['precision']:.2f})"
    return prec, rec


def gap_closed(tpot, lru, bound):
    if lru is None or bound is None or lru - bound <= 1e-9:
        return "–"
    return f"{(lru - tpot) / (lru - bound) * 100:.0f} %"


def ratio(tpot, lru):
    return f"{tpot / lru:.2f}×" if lru else "–"


def table(path):
    j = json.load(open(path))
    rows = j["results"]
    by = {}
    for r in rows:
        by[(r["policy"], round(r["budget_fraction"], 4))] = r
    budgets = sorted({round(r["budget_fraction"], 4) for r in rows})
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    out = ["| policy | budget | decode hit rate | MiB / decoded token | stall ms / decoded token "
           "| TPOT ms | TTFT ms | precision d1 | recall d1 | wasted MiB / decoded token "
           "| policy µs / pass | evict µs / pass | TPOT × lru | lru → oracle+belady gap closed |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for b in budgets:
        lru = by.get(("lru", b))
        bound = by.get(("oracle+belady", b))
        lru_t = lru["modelled"]["tpot_ms"] if lru else None
        bound_t = bound["modelled"]["tpot_ms"] if bound else None
        for p in policies:
            r = by.get((p, b))
            if r is None:
                continue
            m = r["modelled"]
            dec = max(r["decode_tokens"], 1)
            prec, rec = prediction_cells(r)
            out.append(
                f"| {p} | {b * 100:.0f} % | {r['decode_hit_rate']:.3f} | "
                f"{mib(r['decode_bytes_per_token'])} | {m['decode_stall_ms_per_token']:.2f} | "
                f"{m['tpot_ms']:.2f} | {m['ttft_ms']:.1f} | {prec} | {rec} | "
                f"{mib(r['prefetch_wasted_bytes'] / dec)} | "
                f"{r['policy_cpu']['cpu_us_per_pass']:.1f} | "
                f"{r['policy_cpu'].get('evict_us_per_pass', 0):.1f} | "
                f"{ratio(m['tpot_ms'], lru_t)} | "
                f"{gap_closed(m['tpot_ms'], lru_t, bound_t)} |")
    return j, "\n".join(out)


def summary(out_dir, case):
    cells = {}
    budgets, policies, hws = [], [], []
    for hw in ORDER:
        f = os.path.join(out_dir, "results", f"{case}-{hw}.json")
        if not os.path.exists(f):
            continue
        j = json.load(open(f))
        hws.append((hw, j["hardware"]["name"]))
        by = {(r["policy"], round(r["budget_fraction"], 4)): r for r in j["results"]}
        for (p, b), r in by.items():
            if b not in budgets:
                budgets.append(b)
            if p not in policies:
                policies.append(p)
            lru, bound = by.get(("lru", b)), by.get(("oracle+belady", b))
            t = r["modelled"]["tpot_ms"]
            gap = gap_closed(t, lru and lru["modelled"]["tpot_ms"],
                             bound and bound["modelled"]["tpot_ms"])
            x = ratio(t, lru and lru["modelled"]["tpot_ms"])
            cells[(hw, p, b)] = f"{r['decode_hit_rate']:.2f} / {t:.1f} ms ({x}) / {gap}"
    budgets.sort()
    head = [f"{name} {b * 100:.0f} %" for _, name in hws for b in budgets]
    print(f"**{case}**: decode hit rate / modelled TPOT (× lru) / gap closed\n")
    print("| policy | " + " | ".join(head) + " |")
    print("|---|" + "---|" * len(head))
    for p in policies:
        row = [cells.get((hw, p, b), "–") for hw, _ in hws for b in budgets]
        print(f"| {p} | " + " | ".join(row) + " |")
    print()


def main():
    out_dir = sys.argv[1]
    args = sys.argv[2:]
    compact = "--summary" in args
    cases = [a for a in args if a != "--summary"]
    files = sorted(glob.glob(os.path.join(out_dir, "results", "*.json")))
    names = []
    for f in files:
        case, _, hw = os.path.basename(f)[:-5].rpartition("-")
        if case not in names:
            names.append(case)
    for case in cases or names:
        if compact:
            summary(out_dir, case)
            continue
        for hw in ORDER:
            f = os.path.join(out_dir, "results", f"{case}-{hw}.json")
            if not os.path.exists(f):
                continue
            j, t = table(f)
            first = j["results"][0]
            print(f"**{case}**, {j['hardware']['name']} "
                  f"({first['requests']} requests, {first['decode_tokens']} decoded tokens, "
                  f"costed as {j['model']}):\n")
            print(t)
            print()


if __name__ == "__main__":
    main()
