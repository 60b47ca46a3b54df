"""Train the moex demo OLMoE on CPU.  Resumable, deterministic given --seed.

  nice -n 10 nohup /usr/bin/python3 tools/train/train.py --out /var/tmp/moex-train/run1 \
      >> /var/tmp/moex-train/run1.log 2>&1 &

Re-running the same command resumes from OUT/ckpt.pt (the model/optimizer state, step count
and the arguments stored in the checkpoint win over the command line, except the ones in
RESUMABLE_OVERRIDES, which may be changed on resume: threads, checkpoint interval, eval, lr
schedule tail).  Batches are a pure function of (seed, step), so a resumed run sees exactly
the data the uninterrupted run would have seen.
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Olmoe  # noqa: E402

RESUMABLE_OVERRIDES = {"threads", "ckpt_minutes", "eval_every", "eval_seqs", "max_steps", "max_hours", "capacity_factor",
                       "cooldown_start", "cooldown_steps", "log_every", "data"}


def parser():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/var/tmp/moex-train/data")
    ap.add_argument("--out", default="/var/tmp/moex-train/run1")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--init-from", default="",
                    help="warm start from an exported HF directory (models/olmoe-demo): its weights, step and token "
                         "counters and stored hyper-parameters; AdamW starts fresh and --warmup re-warms from there "
                         "(each session's machine is new, so the exported model is the only state that survives)")
    ap.add_argument("--threads", type=int, default=1)
    # model
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--expert-width", type=int, default=32)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--untied", action="store_true", help="separate lm_head (OLMoE itself is untied)")
    # optimisation
    ap.add_argument("--batch", type=int, default=4, help="sequences per step")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.0)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--cooldown-start", type=int, default=-1, help="step at which a linear decay to 0 starts (-1: none)")
    ap.add_argument("--cooldown-steps", type=int, default=0)
    ap.add_argument("--router-lr-mult", type=float, default=1.0,
                    help="learning-rate multiplier for the router (gate) weights; Adam otherwise moves all router "
                         "logits along the hidden states' shared direction and routing collapses early")
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--capacity-factor", type=float, default=2.0,
                    help="expert capacity in training, as a multiple of the mean load; 0 = dropless (OLMoE)")
    ap.add_argument("--balance-window", type=int, default=1,
                    help="steps whose expert counts make the balancing loss's f_e: 1 = this batch alone (micro-batch "
                         "balancing); W > 1 = this batch and the W-1 before it (global-batch balancing, which lets "
                         "experts specialise by domain although each 4-sequence batch holds one to four domains)")
    ap.add_argument("--aux-coef", type=float, default=0.1,
                    help="load-balancing loss coefficient (per layer; OLMoE: 0.01); its gradient reaches the router only")
    ap.add_argument("--z-coef", type=float, default=0.001, help="router z-loss coefficient (per layer)")
    ap.add_argument("--domain-temp", type=float, default=0.5, help="domain sampling prob ~ tokens^temp")
    ap.add_argument("--bf16", type=int, default=1, help="bf16 autocast for matmuls (fp32 master weights)")
    # bookkeeping
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-seqs", type=int, default=4)
    ap.add_argument("--log-every", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=1_000_000)
    ap.add_argument("--max-hours", type=float, default=1e9)
    return ap


def get_args(argv=None):
    ap = parser()
    a = ap.parse_args(argv)
    if a.capacity_factor < 0:
        ap.error(f"--capacity-factor {a.capacity_factor}: must be > 0, or 0 for dropless")
    if a.balance_window < 1:
        ap.error(f"--balance-window {a.balance_window}: must be at least 1 (1 = this batch alone)")
    return a


def given_options(argv=None):
    """The options written on the command line, abbreviated or not: a resumed run takes these,
    and only these, of RESUMABLE_OVERRIDES from it."""
    ap = parser()
    unset = object()
    ap.set_defaults(**{k: unset for k in vars(ap.parse_args([]))})
    return {k for k, v in vars(ap.parse_args(argv)).items() if v is not unset}


def resume_args(stored, cli, given):
    """A checkpoint's arguments, with the overridable ones written on the resuming command."""
    merged = {k: v for k, v in stored.items() if k != "given"}  # "given": stop-32 checkpoints stored it
    for k in RESUMABLE_OVERRIDES:
        if k in given or k not in merged:
            merged[k] = cli[k]
    return argparse.Namespace(**merged)


def model_config(a):
    return Config(hidden_size=a.d_model, intermediate_size=a.expert_width, num_hidden_layers=a.layers,
                  num_attention_heads=a.heads, num_key_value_heads=a.heads, num_experts=a.experts,
                  num_experts_per_tok=a.top_k, tie_word_embeddings=not a.untied,
                  router_aux_loss_coef=a.aux_coef, router_z_loss_coef=a.z_coef)


class Data:
    def __init__(self, path, split, temp=0.5):
        meta = json.load(open(os.path.join(path, "meta.json")))
        self.domains = list(meta["domains"].keys())
        self.arr = {d: np.load(os.path.join(path, f"{d}.{split}.npy"), mmap_mode="r") for d in self.domains}
        w = np.array([len(self.arr[d]) for d in self.domains], dtype=np.float64) ** temp
        self.p = w / w.sum()

    def batch(self, seed, step, B, T):
        rng = np.random.default_rng([seed, step])
        out = np.empty((B, T + 1), dtype=np.int64)
        doms = rng.choice(len(self.domains), size=B, p=self.p)
        for i, di in enumerate(doms):
            a = self.arr[self.domains[di]]
            s = int(rng.integers(0, len(a) - T - 1))
            out[i] = a[s:s + T + 1]
        return torch.from_numpy(out), doms

    def val_batches(self, d, T, max_seqs=None):
        a = self.arr[d]
        n = (len(a) - 1) // T
        if max_seqs is not None:
            n = min(n, max_seqs)
        for i in range(n):
            yield torch.from_numpy(np.asarray(a[i * T:i * T + T + 1], dtype=np.int64))[None]


def lr_at(a, step):
    """Warm-up, then inverse-square-root decay floored at --min-lr-frac (1.0 = constant), then the optional
    linear cool-down to 0.  A warm start (--init-from) re-warms from its first step."""
    start = getattr(a, "warm_start_step", 0)
    if step - start < a.warmup:
        f = (step - start + 1) / a.warmup
    else:
        f = max(math.sqrt(a.warmup / (step - start + 1)), a.min_lr_frac)
    if a.cooldown_start >= 0 and step >= a.cooldown_start:
        f *= max(0.0, 1.0 - (step - a.cooldown_start) / max(1, a.cooldown_steps))
    return a.lr * f


@torch.no_grad()
def evaluate(model, val, T, max_seqs, bf16):
    model.eval()
    res = {}
    for d in val.domains:
        tot, n = 0.0, 0
        for ids in val.val_batches(d, T, max_seqs):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(bf16)):
                logits, _, _ = model(ids[:, :-1], mode="dropless")
            tot += F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                   reduction="sum").item()
            n += ids.shape[1] - 1
        res[d] = tot / max(1, n)
    model.train()
    return res


def save_ckpt(path, model, opt, state, args, balance_counts):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "state": state, "args": vars(args),
                "config": model.c.to_dict(), "balance_counts": balance_counts}, tmp)
    if os.path.exists(path):
        os.replace(path, path.replace(".pt", ".prev.pt"))
    os.replace(tmp, path)


def param_groups(model, wd, router_lr_mult=1.0):
    decay, no_decay, router = [], [], []
    for n, p in model.named_parameters():
        if n.endswith("mlp.gate.weight"):
            router.append(p)
        elif p.ndim < 2 or "norm" in n:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": wd, "lr_mult": 1.0},
            {"params": no_decay, "weight_decay": 0.0, "lr_mult": 1.0},
            {"params": router, "weight_decay": wd, "lr_mult": router_lr_mult}]


def warm_start(a, model):
    """Load an exported model's weights (BF16, upcast) and its training counters into a fresh run."""
    from export import load_model
    src, info = load_model(a.init_from)
    # The router loss coefficients are training choices, not the model's shape: a warm start
    # may change them (issue 21 continues with OLMoE's 0.01 balance weight).
    def shape(c):
        d = c.to_dict()
        for k in ("router_aux_loss_coef", "router_z_loss_coef"):
            d.pop(k, None)
        return d
    if shape(src.c) != shape(model.c):
        raise SystemExit(f"--init-from {a.init_from}: its config differs from this run's model arguments:\n"
                         f"  export {json.dumps(src.c.to_dict())}\n  run    {json.dumps(model.c.to_dict())}")
    model.load_state_dict(src.state_dict())
    state = {"step": int(info.get("step", 0)), "tokens": int(info.get("tokens", 0)),
             "train_seconds": float(info.get("train_seconds", 0.0))}
    a.warm_start_step = state["step"]
    print(f"warm start from {a.init_from} at step {state['step']} ({state['tokens']} tokens); fresh AdamW, "
          f"re-warm-up over {a.warmup} steps", flush=True)
    return model, state


def main():
    a = get_args()
    os.makedirs(a.out, exist_ok=True)
    ckpt_path = os.path.join(a.out, "ckpt.pt")
    ck = None
    if os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location="cpu")
        a = resume_args(ck["args"], vars(a), given_options())
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = model_config(a)
    model = Olmoe(cfg)
    opt = torch.optim.AdamW(param_groups(model, a.wd, a.router_lr_mult), lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    state = {"step": 0, "tokens": 0, "train_seconds": 0.0}
    balance_counts = []  # [steps][layers][experts] of the last --balance-window - 1 steps
    if ck is None and a.init_from:
        model, state = warm_start(a, model)
        opt = torch.optim.AdamW(param_groups(model, a.wd, a.router_lr_mult), lr=a.lr, betas=(0.9, a.beta2),
                                eps=1e-8)
    if ck is not None:
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        state = ck["state"]
        # The balancing window's recent expert counts (stop-32 checkpoints kept them in state).
        balance_counts = ck.get("balance_counts", state.pop("balance_counts", []))
        print(f"resumed from {ckpt_path} at step {state['step']} ({state['tokens']} tokens)", flush=True)
        del ck
    else:
        with open(os.path.join(a.out, "args.json"), "w") as f:
            json.dump(vars(a), f, indent=1)
    print(f"config {json.dumps(cfg.to_dict())}", flush=True)
    print(f"params {model.num_params():,}  threads {a.threads}  bf16 {a.bf16}", flush=True)
    train = Data(a.data, "train", a.domain_temp)
    val = Data(a.data, "val", a.domain_temp)
    print("domains " + " ".join(f"{d}:{p:.3f}" for d, p in zip(train.domains, train.p)), flush=True)
    metrics = open(os.path.join(a.out, "metrics.jsonl"), "a")

    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    model.train()
    t_start = time.time()
    t_ckpt = time.time()
    tok_window, time_window = [], []
    L, E = cfg.num_hidden_layers, cfg.num_experts
    balance_window = getattr(a, "balance_window", 1)  # checkpoints written before the option: 1
    while state["step"] < a.max_steps and not stop["flag"]:
        step = state["step"]
        t0 = time.time()
        lr = lr_at(a, step)
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_mult", 1.0)
        ids, _ = train.batch(a.seed, step, a.batch, a.seq)
        stats = []
        window = balance_counts[-(balance_window - 1):] if balance_window > 1 else []
        prior = torch.tensor(window, dtype=torch.float32).sum(0) if window else None  # [L, E]
        for li, layer in enumerate(model.layers):
            layer.mlp.balance_prior = None if prior is None else prior[li]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bool(a.bf16)):
            logits, lb, z = model(ids[:, :-1], mode="capacity" if a.capacity_factor > 0 else "dropless",
                                  cf=a.capacity_factor, stats=stats)
        ce = F.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1))
        loss = ce + a.aux_coef * lb + a.z_coef * z
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        dt = time.time() - t0
        ntok = a.batch * a.seq
        if balance_window > 1:
            balance_counts = (window + [[s["counts"].tolist() for s in stats]])[-(balance_window - 1):]
        state["step"] += 1
        state["tokens"] += ntok
        state["train_seconds"] += dt
        tok_window.append(ntok)
        time_window.append(dt)
        tok_window, time_window = tok_window[-20:], time_window[-20:]
        if state["step"] % a.log_every == 0:
            counts = torch.stack([s["counts"] for s in stats]).float()  # [L, E]
            frac = counts / counts.sum(1, keepdim=True)
            ent = -(frac * (frac + 1e-12).log()).sum(1) / math.log(E)
            maxload = (frac.max(1).values * E)
            dropped = sum(s["dropped"] for s in stats) / (L * ntok * cfg.num_experts_per_tok)
            rec = {"step": state["step"], "tokens": state["tokens"], "loss": round(ce.item(), 4),
                   "lb": round(lb.item() / L, 4), "z": round(z.item() / L, 3), "lr": lr, "gnorm": round(float(gn), 3),
                   "tok_s": round(sum(tok_window) / sum(time_window), 1),
                   "load_entropy": round(ent.mean().item(), 4), "max_load": round(maxload.mean().item(), 2),
                   "dropped": round(dropped, 4), "hours": round(state["train_seconds"] / 3600, 3)}
            print(" ".join(f"{k} {v}" for k, v in rec.items()), flush=True)
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
        if a.eval_every > 0 and state["step"] % a.eval_every == 0:
            t1 = time.time()
            ev = evaluate(model, val, a.seq, a.eval_seqs, a.bf16)
            mean = sum(ev.values()) / len(ev)
            rec = {"step": state["step"], "tokens": state["tokens"], "val": {k: round(v, 4) for k, v in ev.items()},
                   "val_mean": round(mean, 4), "eval_s": round(time.time() - t1, 1)}
            print("EVAL " + json.dumps(rec), flush=True)
            metrics.write(json.dumps(rec) + "\n")
            metrics.flush()
        if time.time() - t_ckpt > a.ckpt_minutes * 60:
            save_ckpt(ckpt_path, model, opt, state, a, balance_counts)
            t_ckpt = time.time()
            print(f"checkpoint step {state['step']} -> {ckpt_path}", flush=True)
        if time.time() - t_start > a.max_hours * 3600:
            break
    save_ckpt(ckpt_path, model, opt, state, a, balance_counts)
    print(f"checkpoint step {state['step']} -> {ckpt_path} (exit)", flush=True)


if __name__ == "__main__":
    main()
