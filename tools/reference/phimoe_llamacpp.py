"""Phi-3.5-MoE as llama.cpp computes it, one divergence from HF at a time.

  /usr/bin/python3 tools/reference/phimoe_llamacpp.py --model DIR --ids 1,2,3 --out FILE \
      [--as-llamacpp norm,router,rope] [--n-ctx N]

Runs logits.py's phimoe forward pass (HF's modeling_phimoe.py, eval mode) with the chosen
parts replaced by what llama.cpp's phimoe graph (src/models/phi3.cpp, the graph phimoe
shares with phi3) does instead, and writes the logits like logits.py (raw float32,
[n_tokens, vocab_size]). With all three it reproduces llama.cpp's logits on the same
weights, so each part's effect can be measured alone (docs/architectures.md, Phi-3.5-MoE):

  norm:   RMSNorm plus the bias (build_norm with LLM_NORM_RMS) instead of HF's LayerNorm
          (no mean subtraction).
  router: softmax over all experts, top-2, renormalised to sum 1 (build_moe_ffn with
          softmax gating and norm_w) instead of sparsemixer.
  rope:   one cos/sin scale for both factor sets, the converter's attn_factor
          sqrt(1 + ln(max / original) / ln(original)), instead of short_mscale /
          long_mscale; and the long factors whenever the context llama.cpp was created
          with, padded to a multiple of 256 (--n-ctx, default the sequence length), exceeds
          original_max_position_embeddings, instead of HF's per-pass sequence length.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import logits as ref  # noqa: E402

PARTS = ("norm", "router", "rope")


def rms_norm_with_bias(x, W, name, cfg):
    eps = cfg["rms_norm_eps"]
    return ref.rms_norm(x, W[name + "weight"], eps) + W[name + "bias"]


def softmax_top2_renormalised(scores, eps):
    del eps  # llama.cpp has no router jitter
    w, idx = torch.topk(torch.softmax(scores, dim=-1), 2, dim=-1)
    return w / w.sum(-1, keepdim=True), idx


def context_rope(n_ctx):
    def scaling(cfg, T):
        del T  # llama.cpp chooses by the context size, not by the pass
        rs = cfg.get("rope_scaling")
        if not rs:
            return None, 1.0
        orig = rs["original_max_position_embeddings"]
        scale = cfg["max_position_embeddings"] / orig
        attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1 else 1.0
        padded = -(-n_ctx // 256) * 256  # llama.cpp pads n_ctx to a multiple of 256
        factors = rs["long_factor"] if padded > orig else rs["short_factor"]
        return torch.tensor(factors, dtype=torch.float32), attn
    return scaling


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF phimoe checkpoint directory")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="output file: raw float32 [n_tokens, vocab]")
    ap.add_argument("--as-llamacpp", default=",".join(PARTS),
                    help="comma-separated parts computed as llama.cpp does: norm, router, rope "
                         "(empty: HF's model, as logits.py)")
    ap.add_argument("--n-ctx", type=int, default=0,
                    help="llama.cpp's context size (rope; default: the number of ids)")
    a = ap.parse_args()
    parts = [p for p in a.as_llamacpp.split(",") if p]
    for p in parts:
        if p not in PARTS:
            ap.error(f"--as-llamacpp: unknown part '{p}' (norm, router, rope)")
    ids = [int(s) for s in a.ids.replace(" ", "").split(",") if s != ""]
    cfg, W = ref.load(a.model)
    if cfg["model_type"] != "phimoe":
        ap.error(f"{a.model} is {cfg['model_type']}, not phimoe")
    if "norm" in parts:
        ref.norm = rms_norm_with_bias
    if "router" in parts:
        ref.sparsemixer = softmax_top2_renormalised
    if "rope" in parts:
        ref.rope_scaling = context_rope(a.n_ctx or len(ids))
    with torch.no_grad():
        out = ref.forward(W, cfg, ids)
    np.ascontiguousarray(out.numpy().astype("<f4")).tofile(a.out)
    print(f"wrote {a.out}: {out.shape[0]} x {out.shape[1]} float32 "
          f"(as llama.cpp: {','.join(parts) or 'nothing'})", file=sys.stderr)


if __name__ == "__main__":
    main()
