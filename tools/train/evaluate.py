"""Validation loss / perplexity per domain (exact dropless forward, float32 by default),
against a unigram baseline fitted on the training split, plus a few greedy/sampled samples.

  /usr/bin/python3 tools/train/evaluate.py --model models/olmoe-demo --out /var/tmp/moex-train/eval.json

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
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from export import load_model  # noqa: E402
from bpe import Tokenizer  # noqa: E402
from prepare_data import TOKENIZER  # noqa: E402

PROMPTS = [
    "The history of the city",
    "def fibonacci(n):\n",
    "Question: Tom has 3 apples and buys 5 more. How many apples does he have?\nAnswer:",
    "And God said unto Moses,",
    "\\begin{abstract}\nWe propose",
]


def unigram_loss(data, domains, vocab, alpha=1.0):
    counts = np.zeros(vocab, dtype=np.float64)
    for d in domains:
        counts += np.bincount(np.load(os.path.join(data, f"{d}.train.npy")), minlength=vocab)[:vocab]
    p = (counts + alpha) / (counts.sum() + alpha * vocab)
    lp = np.log(p)
    out = {}
    for d in domains:
        v = np.load(os.path.join(data, f"{d}.val.npy")).astype(np.int64)
        out[d] = float(-lp[v[1:]].mean())
    return out


@torch.no_grad()
def val_loss(model, data, domains, seq, max_seqs, bf16):
    out = {}
    for d in domains:
        a = np.load(os.path.join(data, f"{d}.val.npy")).astype(np.int64)
        n = min(max_seqs, (len(a) - 1) // seq)
        tot, cnt = 0.0, 0
        for i in range(n):
            ids = torch.from_numpy(a[i * seq:i * seq + seq + 1])[None]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                logits = model(ids[:, :-1], mode="dropless")[0]
            tot += F.cross_entropy(logits.float()[0], ids[0, 1:], reduction="sum").item()
            cnt += seq
        out[d] = {"loss": tot / cnt, "ppl": math.exp(tot / cnt), "tokens": cnt}
    return out


@torch.no_grad()
def generate(model, ids, n, temperature=0.0, top_k=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = list(ids)
    for _ in range(n):
        logits = model(torch.tensor([ids[-256:]]), mode="dropless")[0][0, -1, :50280]
        if temperature <= 0:
            nxt = int(logits.argmax())
        else:
            v, i = torch.topk(logits / temperature, top_k)
            nxt = int(i[torch.multinomial(torch.softmax(v, -1), 1, generator=g)])
        ids.append(nxt)
        if nxt == 50279:
            break
    return ids


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", default="/var/tmp/moex-train/data")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--max-seqs", type=int, default=16, help="validation sequences per domain")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (faster, approximate)")
    ap.add_argument("--samples", type=int, default=48, help="tokens per sample (0: none)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    domains = list(meta["domains"])
    model, info = load_model(a.model)
    t0 = time.time()
    res = {"model": a.model, "step": info.get("step"), "tokens_trained": info.get("tokens"),
           "val": val_loss(model, a.data, domains, a.seq, a.max_seqs, a.bf16),
           "unigram": unigram_loss(a.data, domains, 50280)}
    res["val_mean"] = sum(v["loss"] for v in res["val"].values()) / len(domains)
    res["unigram_mean"] = sum(res["unigram"].values()) / len(domains)
    res["eval_seconds"] = time.time() - t0
    if a.samples:
        tk = Tokenizer(TOKENIZER)
        res["samples"] = []
        for i, p in enumerate(PROMPTS):
            ids = tk.encode(p)
            out = generate(model, ids, a.samples, temperature=0.8, seed=i)
            res["samples"].append({"prompt": p, "completion": tk.decode(out[len(ids):])})
    print("| domain | val tokens | val loss | val ppl | unigram loss | unigram ppl |")
    print("|---|---:|---:|---:|---:|---:|")
    for d in domains:
        v = res["val"][d]
        u = res["unigram"][d]
        print(f"| {d} | {v['tokens']} | {v['loss']:.3f} | {v['ppl']:.1f} | {u:.3f} | {math.exp(u):.1f} |")
    print(f"| mean | | {res['val_mean']:.3f} | | {res['unigram_mean']:.3f} | |")
    for s in res.get("samples", []):
        print("\nPROMPT: " + repr(s["prompt"]) + "\nOUTPUT: " + repr(s["completion"]))
    if a.out:
        json.dump(res, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
