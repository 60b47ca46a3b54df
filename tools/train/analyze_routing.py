"""Routing analysis of a trained OLMoE on the per-domain validation splits.

  /usr/bin/python3 tools/train/analyze_routing.py --model models/olmoe-demo --out-md /var/tmp/moex-train/routing.md

Measures (exact dropless routing, the top-k set of every token at every layer):
  * per-layer expert-load entropy: H(load) / log(E) over all domains pooled (1 = perfectly
    balanced), and the max-load ratio (busiest expert's load / mean load);
  * per-domain top-8 share: for each domain and layer, the share of that domain's routing
    assignments that go to its 8 busiest experts (uniform routing: 8/64 = 12.5%); and how much
    domains differ: the mean overlap of each domain's top-8 experts with the other domains'
    top-8, and the Jensen-Shannon divergence between the domains' load distributions;
  * cross-layer co-activation: for layer pairs (l, l+1) and (l, l+4), the mutual information
    (bits) between "expert e chosen at layer l" and "expert e' chosen at layer l'" computed from
    the co-activation counts, against the same statistic with tokens shuffled at layer l'
    (no structure), and the mean best-successor lift max_e' P(e'|e) / P(e').
--model takes an HF directory or a training checkpoint (.pt).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from export import load_model  # noqa: E402


@torch.no_grad()
def collect(model, data, domains, seq, max_seqs, bf16):
    """{domain: int array [tokens, layers, k]} of routed experts."""
    out = {}
    for d in domains:
        a = np.load(os.path.join(data, f"{d}.val.npy")).astype(np.int64)
        n = len(a) // seq if max_seqs is None else min(max_seqs, len(a) // seq)
        rows = []
        for i in range(n):
            ids = torch.from_numpy(a[i * seq:(i + 1) * seq])[None]
            picks = []
            hooks = []
            for L in model.layers:
                def hook(mod, inp, outp, picks=picks):
                    x = inp[0].reshape(-1, inp[0].shape[-1])
                    probs = torch.softmax(mod.gate(x).float(), -1)
                    picks.append(torch.topk(probs, mod.c.num_experts_per_tok, -1).indices)
                hooks.append(L.mlp.register_forward_hook(hook))
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                model(ids, mode="dropless")
            for h in hooks:
                h.remove()
            rows.append(torch.stack(picks, 1).numpy())  # [T, L, k]
        out[d] = np.concatenate(rows, 0)
    return out


def entropy(p):
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def mutual_info(A, B, E):
    """A, B: [N, k] expert sets at two layers. MI (bits) of the indicator co-activation
    distribution P(e, e') = count(e in A, e' in B) / (N k^2)."""
    N, k = A.shape
    C = np.zeros((E, E), dtype=np.float64)
    for i in range(k):
        for j in range(k):
            np.add.at(C, (A[:, i], B[:, j]), 1)
    P = C / C.sum()
    pa = P.sum(1, keepdims=True)
    pb = P.sum(0, keepdims=True)
    nz = P > 0
    mi = float((P[nz] * np.log2(P[nz] / (pa @ pb)[nz])).sum())
    cond = P / np.maximum(pa, 1e-30)
    lift = (cond / np.maximum(pb, 1e-30)).max(1)
    lift = float((lift * pa[:, 0]).sum())  # usage-weighted mean best-successor lift
    return mi, lift


def analyze(R, E, k):
    domains = list(R)
    allr = np.concatenate([R[d] for d in domains], 0)
    N, L, _ = allr.shape
    res = {"tokens": {d: int(len(R[d])) for d in domains}, "layers": []}
    loads = {d: np.stack([np.bincount(R[d][:, l].ravel(), minlength=E) for l in range(L)]).astype(float)
             for d in domains}
    rng = np.random.default_rng(0)
    for l in range(L):
        tot = sum(loads[d][l] for d in domains)
        p = tot / tot.sum()
        row = {"layer": l, "entropy": entropy(p) / math.log(E), "max_load": float(p.max() * E)}
        shares, tops, dists = {}, {}, {}
        for d in domains:
            q = loads[d][l] / loads[d][l].sum()
            top = np.argsort(-q)[:k]
            shares[d] = float(q[top].sum())
            tops[d] = set(top.tolist())
            dists[d] = q
        row["top8_share"] = shares
        ov = []
        js = []
        for i, a in enumerate(domains):
            for b in domains[i + 1:]:
                ov.append(len(tops[a] & tops[b]) / k)
                m = 0.5 * (dists[a] + dists[b])
                js.append(0.5 * (entropy(m) * 2 - entropy(dists[a]) - entropy(dists[b])) / math.log(2))
        row["top8_overlap"] = float(np.mean(ov))
        row["js_bits"] = float(np.mean(js))
        for gap in (1, 4):
            if l + gap < L:
                mi, lift = mutual_info(allr[:, l], allr[:, l + gap], E)
                perm = rng.permutation(N)
                mi0, lift0 = mutual_info(allr[:, l], allr[perm, l + gap], E)
                row[f"mi_{gap}"] = mi
                row[f"mi_{gap}_shuffled"] = mi0
                row[f"lift_{gap}"] = lift
                row[f"lift_{gap}_shuffled"] = lift0
        res["layers"].append(row)
    return res


def markdown(res, E, k):
    domains = list(res["tokens"])
    lines = []
    lines.append(f"Validation tokens analysed: " + ", ".join(f"{d} {n}" for d, n in res["tokens"].items()) + "\n")
    lines.append("**Expert load and domain specialisation per layer** (entropy: H(load)/log %d over all domains; "
                 "top-8 share: share of a domain's assignments that go to its own 8 busiest experts, uniform = %.1f%%; "
                 "overlap: mean fraction of top-8 experts two domains share; JS: mean pairwise Jensen-Shannon "
                 "divergence of domain load distributions, bits)\n" % (E, 100 * k / E))
    lines.append("| layer | load entropy | max/mean load | " + " | ".join(f"top-8 {d}" for d in domains) +
                 " | top-8 overlap | JS (bits) |")
    lines.append("|---:|---:|---:|" + "---:|" * len(domains) + "---:|---:|")
    for r in res["layers"]:
        lines.append(f"| {r['layer']} | {r['entropy']:.3f} | {r['max_load']:.2f} | " +
                     " | ".join(f"{100 * r['top8_share'][d]:.1f}%" for d in domains) +
                     f" | {r['top8_overlap']:.2f} | {r['js_bits']:.3f} |")
    lines.append("")
    lines.append("**Cross-layer co-activation** (mutual information in bits between the expert sets of layer l and "
                 "l+g, real vs tokens shuffled at layer l+g; lift: usage-weighted mean of max_e' P(e' | e) / P(e'))\n")
    lines.append("| layer l | MI(l, l+1) | shuffled | lift(l, l+1) | shuffled | MI(l, l+4) | shuffled | lift(l, l+4) | shuffled |")
    lines.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["layers"]:
        if "mi_1" not in r:
            continue
        s = f"| {r['layer']} | {r['mi_1']:.3f} | {r['mi_1_shuffled']:.3f} | {r['lift_1']:.2f} | {r['lift_1_shuffled']:.2f} |"
        if "mi_4" in r:
            s += f" {r['mi_4']:.3f} | {r['mi_4_shuffled']:.3f} | {r['lift_4']:.2f} | {r['lift_4_shuffled']:.2f} |"
        else:
            s += " | | | |"
        lines.append(s)
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="/var/tmp/moex-train/data")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--max-seqs", type=int, default=8, help="validation sequences per domain")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out-md", default=None)
    ap.add_argument("--out-json", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    domains = list(meta["domains"])
    model, info = load_model(a.model)
    t0 = time.time()
    R = collect(model, a.data, domains, a.seq, a.max_seqs, a.bf16)
    E, k = model.c.num_experts, model.c.num_experts_per_tok
    res = analyze(R, E, k)
    res["step"] = info.get("step")
    res["tokens_trained"] = info.get("tokens")
    md = markdown(res, E, k)
    print(md)
    print(f"({time.time() - t0:.0f}s)", file=sys.stderr)
    if a.out_md:
        open(a.out_md, "w").write(md)
    if a.out_json:
        json.dump(res, open(a.out_json, "w"), indent=1)


if __name__ == "__main__":
    main()
