#!/usr/bin/env python3
"""Markdown tables of a bench/promoe_eval.sh output directory.

    promoe_eval_table.py RES_DIR

Predictors: per prompt set and spec, precision / recall / GoodPred at the distance the spec
predicts (all passes), and the learned predictor's mean held-out accuracy.
Ablation: per profile, the ladder's TTFT, TPOT, decode stall, bytes per decoded token and
decode hit rate for each chunk size.
"""
import glob, json, os, sys


def main(res):
    print("## Predictors (RTX 4090 profile, 25 %, test split learning from the set's 70 %)\n")
    print("| set | spec | distance | predicted | precision | GoodPred | recall | held-out accuracy |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(glob.glob(os.path.join(res, "predictors-*.json"))):
        name = os.path.basename(path)[len("predictors-"):-len(".json")]
        for r in json.load(open(path))["results"]:
            rates = r.get("predictions", {}).get("by_distance", [])
            if not rates:
                continue
            best = max(rates, key=lambda x: x["predicted"])  # Where the spec predicts.
            rep = r.get("policy_report", {}).get("promoe", {})
            acc = rep.get("mean_eval_accuracy") if rep.get("trained_layers") else None
            print(f"| {name} | `{r['policy']}` | {best['distance']} | {best['predicted']} "
                  f"| {best['precision']:.3f} | {best['goodpred']:.3f} "
                  f"| {best['recall_at_or_beyond']:.3f} | {'–' if acc is None else f'{acc:.3f}'} |")
    print()
    for label in ["cpu", "rtx4090"]:
        paths = sorted(glob.glob(os.path.join(res, f"ablation-{label}-chunk*.json")))
        if not paths:
            continue
        print(f"## Ablation (Fig. 12), test split, 25 %, profile {label}\n")
        print("| chunk neurons | spec | TTFT ms | TPOT ms | decode stall ms/token "
              "| MiB / decoded token | decode hit rate |")
        print("|---|---|---|---|---|---|---|")
        for path in paths:
            chunk = os.path.basename(path).split("chunk")[1][:-len(".json")]
            for r in json.load(open(path))["results"]:
                m = r["modelled"]
                print(f"| {chunk if chunk != '0' else 'default'} | `{r['policy']}` "
                      f"| {m['ttft_ms']:.1f} | {m['tpot_ms']:.2f} "
                      f"| {m['decode_stall_ms_per_token']:.2f} "
                      f"| {r['decode_bytes_per_token'] / 2**20:.1f} | {r['decode_hit_rate']:.3f} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
