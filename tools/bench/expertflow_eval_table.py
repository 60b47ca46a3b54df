#!/usr/bin/env python3
"""Markdown tables of a bench/expertflow_eval.sh output directory.

    expertflow_eval_table.py RES_DIR [POLICY_EVAL_RESULTS_DIR]

Accuracy: per case, the batch-level Jaccard (Eq. 7 as defined in
src/policy/expertflow/routing_path_accuracy.h), precision and recall of the learned predictor at
batches of 1, 8, 16 and 32 requests, beside the most-frequent-experts and previous-token
predictors, and the T5-style reference when its JSON is there; cases come from RES_DIR's
accuracy-CASE.json and from bench/policy_eval.sh's CASE-rtx4090.json (expertflow at 25 %). Ablation: per profile, each
spec's decode hit rate, bytes per decoded token, TPOT, TTFT and prefetch counts.
"""
import glob, json, os, sys


def load(path):
    """A result file, or None (with a note on stderr) when it is empty or cut short."""
    try:
        return json.load(open(path))
    except ValueError:
        print(f"skipping {path}: not complete JSON (a run still going, or one that failed)",
              file=sys.stderr)
        return None


def cell(row):
    return f"{row['jaccard']:.3f} ({row['precision']:.2f}/{row['recall']:.2f})"


def accuracy_runs(res, results):
    """case -> the expertflow result whose report holds the accuracy."""
    runs = {}
    if results:
        for path in glob.glob(os.path.join(results, "*-rtx4090.json")):
            name = os.path.basename(path)[:-len("-rtx4090.json")]
            for r in (load(path) or {"results": []})["results"]:
                if r["policy"] == "expertflow" and abs(r["budget_fraction"] - 0.25) < 1e-6:
                    runs[name] = r
    for path in glob.glob(os.path.join(res, "accuracy-*.json")):
        r = load(path)
        if r is None:
            continue
        runs[os.path.basename(path)[len("accuracy-"):-len(".json")]] = (
            r["results"][0] if "results" in r else r)
    return dict(sorted(runs.items()))


def main(res, results=None):
    runs = accuracy_runs(res, results)
    # t5-CASE.json or t5-CASE.TAG.json (TAG: a variant, e.g. b4 for batch 4).
    t5 = {}
    for path in sorted(glob.glob(os.path.join(res, "t5-*.json"))):
        case, _, tag = os.path.basename(path)[3:-5].partition(".")
        t = load(path)
        if t is not None:
            t5.setdefault(case, []).append((tag, t))
    print("## Batch-level accuracy (held-out requests' decode tokens)\n")
    print("Jaccard (precision/recall) per batch of B requests at the same decode step, mean "
          "over MoE layers.\n")
    print("| case | predictor | B = 1 | B = 8 | B = 16 | B = 32 |")
    print("|---|---|---|---|---|---|")
    for name, r in runs.items():
        rep = r["policy_report"]["expertflow"]
        for key, label in [("accuracy_threshold_0_5", f"expertflow, σ ≥ 0.5 ({rep['parameters'] * 4 / 2**20:.2f} MiB)"),
                           ("accuracy_topk", "expertflow, top-k"),
                           ("accuracy_most_frequent", "most frequent experts"),
                           ("accuracy_previous_token", "previous decode token's path")]:
            print(f"| {name} | {label} | " + " | ".join(cell(x) for x in rep[key]) + " |")
        for tag, t in t5.get(name, []):
            print(f"| {name} | T5-style enc-dec, top-k ({t['bytes_f32'] / 2**20:.2f} MiB, "
                  f"{t['epochs']} epochs{', ' + tag if tag else ''}) | "
                  + " | ".join(cell(x) for x in t["accuracy"]) + " |")
    print()
    for name, r in runs.items():
        acc = r["policy_report"]["expertflow"]["accuracy_topk"]
        print(f"**{name}** per MoE layer, expertflow (top-k) Jaccard at B = 1 / 8 / 32: " + ", ".join(
            f"{a:.2f}/{b:.2f}/{c:.2f}" for a, b, c in zip(acc[0]["jaccard_per_layer"],
                                                          acc[1]["jaccard_per_layer"],
                                                          acc[3]["jaccard_per_layer"])))
        print()
    for label in ["cpu", "rtx4090"]:
        path = os.path.join(res, f"ablation-{label}.json")
        if not os.path.exists(path):
            continue
        d = load(path)
        if d is None:
            continue
        print(f"## Ablation at 25 %, profile {label} ({d['hardware']['name'] if 'hardware' in d else label})\n")
        print("| spec | decode hit rate | MiB / decoded token | TPOT ms | TTFT ms "
              "| prefetches issued | used | wasted | cancelled |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in d["results"]:
            m = r["modelled"]
            print(f"| `{r['policy']}` | {r['decode_hit_rate']:.3f} "
                  f"| {r['decode_bytes_per_token'] / 2**20:.1f} | {m['tpot_ms']:.2f} "
                  f"| {m['ttft_ms']:.1f} | {r['prefetch_issued']} | {r['prefetch_used']} "
                  f"| {r['prefetch_wasted']} | {r['prefetch_cancelled']} |")
        print()


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    main(*sys.argv[1:])
