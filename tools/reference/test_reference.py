"""Self-check: the reference forward (logits.py) against the training model's exact
(dropless, float32) forward, for a tiny random OLMoE exported via tools/train/export.py, and
for a tiny random Mixtral (the training model with q/k norm removed and top-k renormalised),
and gpt_oss.py's MXFP4 dequantisation on a hand-computed block.

  /usr/bin/python3 tools/reference/test_reference.py
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "train"))
from model import Config, Olmoe  # noqa: E402
import export as ex  # noqa: E402
from safetensors_io import save_file  # noqa: E402


def run_ref(d, ids):
    out = os.path.join(d, "logits.f32")
    subprocess.run([sys.executable, os.path.join(HERE, "logits.py"), "--model", d, "--ids",
                    ",".join(map(str, ids)), "--out", out], check=True)
    return np.fromfile(out, dtype="<f4")


def bf16_round(model):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def main():
    torch.manual_seed(0)
    ids = [5, 17, 300, 2, 99, 1000, 42, 7, 7, 7, 123, 50279]
    ok = True
    for tied in (True, False):
        c = Config(vocab_size=1024, hidden_size=64, intermediate_size=16, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=4, num_experts=8, num_experts_per_tok=3,
                   tie_word_embeddings=tied, initializer_range=0.2)
        m = Olmoe(c).eval()
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "norm" in n:
                    p.copy_(1 + 0.3 * torch.randn_like(p))
        bf16_round(m)
        with tempfile.TemporaryDirectory() as d:
            ck = os.path.join(d, "ck.pt")
            torch.save({"model": m.state_dict(), "config": c.to_dict(), "state": {"step": 0, "tokens": 0},
                        "args": {}}, ck)
            ex.export(ck, d)
            got = run_ref(d, [i % 1024 for i in ids]).reshape(len(ids), -1)
            with torch.no_grad():
                want = m(torch.tensor([[i % 1024 for i in ids]]), mode="dropless")[0][0].numpy()
            err = np.abs(got - want).max()
            print(f"olmoe tied={tied}: max |ref - train| = {err:.2e}")
            ok &= err < 1e-4
    # Mixtral: training model without q/k norm, renormalised top-k, GQA
    c = Config(vocab_size=1024, hidden_size=64, intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
               num_key_value_heads=2, num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
               tie_word_embeddings=False, initializer_range=0.2, rope_theta=1e6)
    m = Olmoe(c).eval()
    for L in m.layers:
        L.self_attn.q_norm = torch.nn.Identity()
        L.self_attn.k_norm = torch.nn.Identity()
    bf16_round(m)
    t = {}
    F_ = c.intermediate_size
    for k, v in m.state_dict().items():
        if k.startswith("layers."):
            i = k.split(".")[1]
            p = f"model.layers.{i}."
            if k.endswith("mlp.w_gate_up"):
                for e in range(c.num_experts):
                    t[p + f"block_sparse_moe.experts.{e}.w1.weight"] = v[e, :, :F_].t()
                    t[p + f"block_sparse_moe.experts.{e}.w3.weight"] = v[e, :, F_:].t()
            elif k.endswith("mlp.w_down"):
                for e in range(c.num_experts):
                    t[p + f"block_sparse_moe.experts.{e}.w2.weight"] = v[e].t()
            elif k.endswith("mlp.gate.weight"):
                t[p + "block_sparse_moe.gate.weight"] = v
            else:
                t[p + ".".join(k.split(".")[2:])] = v
        elif k == "lm_head.weight":
            t[k] = v
        else:
            t["model." + k] = v
    cfg = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 16, "num_hidden_layers": 3,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 8, "num_experts_per_tok": 2,
           "rms_norm_eps": 1e-5, "rope_theta": 1e6, "vocab_size": 1024, "tie_word_embeddings": False,
           "sliding_window": None}
    with tempfile.TemporaryDirectory() as d:
        # two shards + index, to exercise the sharded loader
        names = sorted(t)
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
        wm = {}
        for fn, ns in shards.items():
            save_file({n: t[n] for n in ns}, os.path.join(d, fn), "BF16")
            wm.update({n: fn for n in ns})
        json.dump({"metadata": {}, "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
        got = run_ref(d, [i % 1024 for i in ids]).reshape(len(ids), -1)
        with torch.no_grad():
            want = m(torch.tensor([[i % 1024 for i in ids]]), mode="dropless")[0][0].numpy()
        err = np.abs(got - want).max()
        print(f"mixtral: max |ref - train| = {err:.2e}")
        ok &= err < 1e-4
    # gpt-oss's MXFP4 experts: a hand-computed block (both nibbles, exponent 128 = times 2).
    import gpt_oss  # noqa: E402
    codes = torch.zeros(1, 1, 1, 16, dtype=torch.uint8)
    codes[0, 0, 0, 0], codes[0, 0, 0, 7], codes[0, 0, 0, 15] = 0x21, 0x9C, 0xF7
    got = gpt_oss.dequantize_mxfp4(codes, torch.full((1, 1, 1), 128, dtype=torch.uint8))
    want = torch.zeros(1, 32, 1)
    want[0, [0, 1, 14, 15, 30, 31], 0] = torch.tensor([1.0, 2.0, -4.0, -1.0, 12.0, -12.0])
    mx_ok = torch.equal(got, want)
    print(f"mxfp4 hand block: {'ok' if mx_ok else 'WRONG'}")
    ok &= mx_ok
    print("OK" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
