"""How concentrated the demo model's routing is, measured as OLMoE's routing analysis measured
the real model: teacher-forced text of one domain at a time, every token, every layer.

  /usr/bin/python3 tools/train/routing_concentration.py --model models/olmoe-demo --out-json FILE

For each domain and layer: the top-8 share (share of the domain's routing assignments that go
to its 8 busiest experts; uniform = 12.5 %), the max share (its busiest expert's share) and the
load entropy H(load)/log(E). The real OLMoE-1B-7B figure it can be set beside is the layer-0
GSM8K routing in ../shared/data/routing (vLLM log): `--real-log` computes the same three
numbers from it. --model takes an HF directory or a training checkpoint (.pt); the text is
each domain's validation split, all of it unless --max-seqs says otherwise.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from analyze_routing import collect  # noqa: E402
from export import load_model  # noqa: E402


def concentration(load, k):
    p = load / load.sum()
    nz = p[p > 0]
    return {"top8_share": float(np.sort(p)[::-1][:k].sum()),
            "max_share": float(p.max()),
            "entropy": float(-(nz * np.log(nz)).sum() / math.log(len(p)))}


def real_log(path, warmup_rows):
    """Layer-0 loads of a vLLM routing log (meta line, then one route line per token)."""
    rows, meta = [], None
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("type") == "meta":
                meta = r
            elif r.get("type") == "route" and r.get("layer") == 0:
                rows.append(r["topk_ids"])
    rows = rows[warmup_rows:]
    E = meta["num_experts"]
    load = np.bincount(np.asarray(rows).ravel(), minlength=E).astype(float)
    return {"model": meta["model_id"], "tokens": len(rows), "layer": 0,
            **concentration(load, meta["top_k"])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="/var/tmp/moex-train/data")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--max-seqs", type=int, default=None, help="sequences per domain (default: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--real-log", default=None, help="vLLM routing log of the real OLMoE (layer 0)")
    ap.add_argument("--real-warmup-rows", type=int, default=2048,
                    help="rows of the log's warm-up requests to drop (SOURCES.md: 2,048)")
    ap.add_argument("--out-json", default=None)
    a = ap.parse_args()
    if a.max_seqs is not None and a.max_seqs < 1:
        ap.error("--max-seqs must be at least 1")
    torch.set_num_threads(a.threads)
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    domains = list(meta["domains"])
    model, info = load_model(a.model)
    E, k = model.c.num_experts, model.c.num_experts_per_tok
    R = collect(model, a.data, domains, a.seq, a.max_seqs, False)
    res = {"model": a.model, "step": info.get("step"), "tokens_trained": info.get("tokens"),
           "tokens": {d: int(len(R[d])) for d in domains}, "seq": a.seq,
           "max_seqs": a.max_seqs, "domains": {}}
    for d in domains:
        L = R[d].shape[1]
        res["domains"][d] = [concentration(np.bincount(R[d][:, l].ravel(), minlength=E).astype(float), k)
                             for l in range(L)]
    # Experts no token of any domain picks, per layer ("keep every expert in use").
    res["dead_experts"] = [int((sum(np.bincount(R[d][:, l].ravel(), minlength=E) for d in domains) == 0).sum())
                           for l in range(R[domains[0]].shape[1])]
    if a.real_log:
        res["real"] = real_log(a.real_log, a.real_warmup_rows)
    # One line per domain: layer 0, the mean of layers 4-15 (OLMoE's "middle and late"), min/max.
    print("domain | top-8 L0 | top-8 mean L4-15 | max share mean L4-15 | entropy mean L4-15")
    for d in domains:
        rows = res["domains"][d]
        late = rows[4:]
        print(f"{d} | {100 * rows[0]['top8_share']:.1f}% | "
              f"{100 * np.mean([r['top8_share'] for r in late]):.1f}% | "
              f"{100 * np.mean([r['max_share'] for r in late]):.1f}% | "
              f"{np.mean([r['entropy'] for r in late]):.3f}")
    print(f"dead experts per layer: {res['dead_experts']}")
    if a.real_log:
        r = res["real"]
        print(f"real {r['model']} layer 0, {r['tokens']} tokens: top-8 {100 * r['top8_share']:.1f}%, "
              f"max {100 * r['max_share']:.1f}%, entropy {r['entropy']:.3f}")
    if a.out_json:
        with open(a.out_json, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
