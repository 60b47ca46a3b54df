"""The paper's routing-path predictor shape (ExpertFlow §3.1), for comparison with moex's.

A small T5-style encoder-decoder (torch.nn.Transformer): the encoder reads the prompt, the
decoder the generated tokens (causal, cross-attending to the prompt); L separate two-layer
MLP heads of E logits read every position (the encoder's for prompt tokens, the decoder's
for generated ones). Trained as the paper: per-layer BCE, AdamW lr 1e-3, weight decay 0.01,
cosine schedule, batch 16 (requests); --lr and --epochs change the first and the length. Scored like `expertflow`'s report
(src/policy/expertflow/routing_path_accuracy.cc): each decode token's top-k path per layer, batches of
B requests at the same decode step, per-layer Jaccard |P∩T|/|P∪T|, precision, recall.

  /usr/bin/python3 tools/expertflow/t5_predictor.py LEARN.trace TEST.trace [--epochs N] [--json OUT]

Needs torch and numpy (Debian python3-torch); never needed at run time.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trace_paths import paths, read_trace  # noqa: E402


class PathPredictor(nn.Module):
    def __init__(self, vocab, layers, experts, d, heads, enc_layers, dec_layers, ff, max_len):
        super().__init__()
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Embedding(max_len, d)
        self.t = nn.Transformer(d, heads, enc_layers, dec_layers, ff, dropout=0.1, batch_first=True)
        self.heads = nn.ModuleList(
            nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, experts)) for _ in range(layers))
        self.max_len = max_len

    def embed(self, x):
        pos = torch.arange(x.shape[1]).clamp(max=self.max_len - 1)
        return self.emb(x) + self.pos(pos)[None]

    def logits(self, h):
        return torch.stack([head(h) for head in self.heads], dim=2)  # [B, T, L, E]

    def forward(self, src, tgt):
        # Padding is at the end: the causal mask already hides it from every real position
        # (and a request with no generated token would otherwise attend to nothing).
        src_pad = src == 0
        mask = self.t.generate_square_subsequent_mask(tgt.shape[1])
        memory = self.t.encoder(self.embed(src), src_key_padding_mask=src_pad)
        out = self.t.decoder(self.embed(tgt), memory, tgt_mask=mask, memory_key_padding_mask=src_pad)
        return self.logits(memory), self.logits(out)


def split(r):
    """(prompt tokens, their paths' ids, generated tokens, their ids): the first pass is the
    prefill, every later pass one generated token."""
    n = r["passes"][0] if r["passes"] else 0
    return r["tokens"][:n], r["ids"][:n], r["tokens"][n:], r["ids"][n:]


def batch_tensors(reqs, vocab_of, experts, max_len):
    src_len = max(1, max(min(len(split(r)[0]), max_len) for r in reqs))
    tgt_len = max(1, max(min(len(split(r)[2]), max_len) for r in reqs))
    b = len(reqs)
    src = torch.zeros(b, src_len, dtype=torch.long)
    tgt = torch.zeros(b, tgt_len, dtype=torch.long)
    layers = reqs[0]["ids"].shape[1]
    ysrc = torch.zeros(b, src_len, layers, experts)
    ytgt = torch.zeros(b, tgt_len, layers, experts)
    for i, r in enumerate(reqs):
        pt, pi, gt, gi = split(r)
        pt, pi, gt, gi = pt[:max_len], pi[:max_len], gt[:max_len], gi[:max_len]
        src[i, :len(pt)] = torch.tensor([vocab_of(t) for t in pt], dtype=torch.long)
        tgt[i, :len(gt)] = torch.tensor([vocab_of(t) for t in gt], dtype=torch.long)
        if len(pt):
            ysrc[i, :len(pt)] = torch.from_numpy(paths(pi, experts)).float()
        if len(gt):
            ytgt[i, :len(gt)] = torch.from_numpy(paths(gi, experts)).float()
    return src, tgt, ysrc, ytgt


def top_k_paths(logits, k):
    """Bool [..., L, E]: per layer the k highest logits."""
    idx = logits.topk(k, dim=-1).indices
    out = torch.zeros_like(logits, dtype=torch.bool)
    out.scatter_(-1, idx, True)
    return out.numpy()


def batch_accuracy(samples, batch):
    """samples: (request, step, predicted [L,E] bool, truth [L,E] bool). Per-layer means."""
    by_step = {}
    for s in samples:
        by_step.setdefault(s[1], []).append(s)
    jac, prec, rec = [], [], []
    for step in sorted(by_step):
        group = sorted(by_step[step], key=lambda s: s[0])
        for i in range(0, len(group), batch):
            p = np.any([g[2] for g in group[i:i + batch]], axis=0)
            t = np.any([g[3] for g in group[i:i + batch]], axis=0)
            both, np_, nt = (p & t).sum(1), p.sum(1), t.sum(1)
            either = np_ + nt - both
            jac.append(np.where(either > 0, both / np.maximum(either, 1), 1.0))
            prec.append(np.where(np_ > 0, both / np.maximum(np_, 1), np.nan))
            rec.append(np.where(nt > 0, both / np.maximum(nt, 1), np.nan))
    jac, prec, rec = np.array(jac), np.array(prec), np.array(rec)
    per_layer = jac.mean(0)
    return {"batch": batch, "batches": len(jac), "jaccard": float(per_layer.mean()),
            "precision": float(np.nanmean(prec, 0).mean()), "recall": float(np.nanmean(rec, 0).mean()),
            "jaccard_per_layer": per_layer.tolist()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("learn")
    ap.add_argument("test")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2, help="encoder and decoder layers each")
    ap.add_argument("--ff", type=int, default=256)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)

    header, learn = read_trace(a.learn)
    _, test = read_trace(a.test)
    model_shape = header["model"]
    experts, k = model_shape["num_experts"], model_shape["top_k"]
    layers = len(model_shape["moe_layers"])
    # Ids seen while learning get rows 1..V; 0 pads, V + 1 is every unseen id.
    seen = sorted({int(t) for r in learn for t in r["tokens"]} | {int(t) for r in learn for t in r["prompt"]})
    row = {t: i + 1 for i, t in enumerate(seen)}
    unk = len(seen) + 1
    vocab_of = lambda t: row.get(int(t), unk)  # noqa: E731

    model = PathPredictor(unk + 1, layers, experts, a.d, a.heads, a.layers, a.layers, a.ff, a.max_len)
    params = sum(p.numel() for p in model.parameters())
    learn = [r for r in learn if len(r["tokens"])]
    steps = a.epochs * math.ceil(len(learn) / a.batch)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
    bce = nn.BCEWithLogitsLoss(reduction="none")
    start = time.time()
    step = 0
    for epoch in range(a.epochs):
        order = rng.permutation(len(learn))
        total, count = 0.0, 0
        model.train()
        for i in range(0, len(order), a.batch):
            reqs = [learn[j] for j in order[i:i + a.batch]]
            src, tgt, ysrc, ytgt = batch_tensors(reqs, vocab_of, experts, a.max_len)
            lsrc, ltgt = model(src, tgt)
            msrc, mtgt = (src != 0).float()[..., None, None], (tgt != 0).float()[..., None, None]
            loss_sum = (bce(lsrc, ysrc) * msrc).sum() + (bce(ltgt, ytgt) * mtgt).sum()
            bits = (msrc.sum() + mtgt.sum()) * layers * experts
            loss = loss_sum / bits
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            total += float(loss_sum)
            count += float(bits)
        print(f"epoch {epoch + 1}/{a.epochs}: loss {total / count:.4f} ({time.time() - start:.0f} s)",
              file=sys.stderr)

    # Held-out: every decode token of the test requests.
    model.eval()
    samples, test_loss, test_bits = [], 0.0, 0
    with torch.no_grad():
        for r in test:
            pt, _, gt, gi = split(r)
            if len(gt) == 0:
                continue
            src, tgt, _, ytgt = batch_tensors([r], vocab_of, experts, 10**9)
            src = src[:, :a.max_len]
            _, ltgt = model(src, tgt)
            test_loss += float(bce(ltgt, ytgt).sum())
            test_bits += ytgt.numel()
            pred = top_k_paths(ltgt[0], k)
            truth = paths(gi, experts)
            for s in range(len(gt)):
                samples.append((r["id"], s, pred[s], truth[s]))
    result = {
        "model": "T5-style encoder-decoder",
        "parameters": params,
        "bytes_f32": params * 4,
        "d_model": a.d, "heads": a.heads, "layers": a.layers, "ff": a.ff, "epochs": a.epochs,
        "batch": a.batch, "lr": a.lr,
        "train_requests": len(learn), "train_seconds": time.time() - start,
        "test_decode_tokens": len(samples),
        "test_loss": test_loss / max(1, test_bits),
        "accuracy": [batch_accuracy(samples, b) for b in (1, 8, 16, 32)],
    }
    text = json.dumps(result, indent=1)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    for acc in result["accuracy"]:
        print(f"B={acc['batch']}: jaccard {acc['jaccard']:.3f} precision {acc['precision']:.3f} "
              f"recall {acc['recall']:.3f} ({acc['batches']} batches)")
    print(f"{params} parameters, test loss {result['test_loss']:.4f}")


if __name__ == "__main__":
    main()
