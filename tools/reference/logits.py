"""Plain PyTorch reference forward pass for HF OLMoE, Mixtral, Phi-3.5-MoE, DeepSeek-V2/V3 and
GLM-4.5 and gpt-oss checkpoints.

  /usr/bin/python3 tools/reference/logits.py --model DIR --ids 1,2,3 --out FILE

Loads DIR/config.json and the safetensors weights (single file or shards), runs the whole
sequence causally in float32 (BF16/F16 weights are upcast exactly), and writes the logits of
every position as raw little-endian float32, shape [n_tokens, vocab_size], row-major.

Semantics follow HF transformers' modeling_olmoe.py / modeling_mixtral.py (eager path):
  olmoe:   q/k RMSNorm over the whole projected q/k before the head split, optional clip_qkv,
           router softmax over all experts, top-k, renormalised only if norm_topk_prob.
  mixtral: no q/k norm, top-k softmax weights renormalised to sum 1; experts w1 (gate),
           w3 (up), w2 (down); optional sliding_window.
  phimoe:  modeling_phimoe.py in eval mode: LayerNorm (weight and bias, eps = rms_norm_eps)
           instead of RMSNorm, q/k/v/o biases (attention_bias), lm_head bias, LongRoPE
           (inv_freq = 1 / (factor * theta^(2i/d)), cos/sin times mscale; the long set when
           the pass - here the whole sequence - is longer than
           original_max_position_embeddings), sparsemixer top-2 routing with
           jitter_eps = router_jitter_noise, sliding_window.
  deepseek_v2, deepseek_v3: MLA, YaRN and DeepSeek's gate, in deepseek.py.
  glm4_moe: partial rotary, q/k/v biases, optional per-head q/k norm, V3's gate, in
           glm4_moe.py.
  gpt_oss: sinks, sliding layers, generic YaRN, biased experts with the clamped SwiGLU, in
           gpt_oss.py.
  minimax_m2: whole-width q/k norm, partial rotary, the sigmoid gate with its bias, in
           minimax_m2.py.
  qwen3_next: Gated DeltaNet layers, gated attention, zero-centred norms and the gated
           shared expert, in qwen3_next.py.
  qwen3_5_moe: qwen3_next's layers under Qwen3.5's names, fused experts and MRoPE, in
           qwen3_5_moe.py.
  llama4:  NoPE and chunked layers, pair-wise RoPE, weightless q/k norm, the temperature,
           sigmoid top-k weighting the experts' input and the shared expert, in llama4.py.
All others: rotate-half RoPE with rope_theta, SwiGLU experts, GQA; RMSNorm except phimoe.
No training code and no capacity limits: every expert computes every token routed to it.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deepseek  # noqa: E402
import glm4_moe  # noqa: E402
import gpt_oss  # noqa: E402
import llama4  # noqa: E402
import minimax_m2  # noqa: E402
import qwen3_5_moe  # noqa: E402
import qwen3_next  # noqa: E402
from safetensors_io import load_dir  # noqa: E402


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def norm(x, W, name, cfg):
    # name: the norm's prefix, e.g. "model.norm."
    eps = cfg["rms_norm_eps"]
    if cfg["model_type"] == "phimoe":
        w = W[name + "weight"]
        return torch.nn.functional.layer_norm(x, w.shape, w, W[name + "bias"], eps)
    return rms_norm(x, W[name + "weight"], eps)


def rope_scaling(cfg, T):
    """(factors or None, mscale) for a pass that ends at T tokens (phimoe LongRoPE)."""
    rs = cfg.get("rope_scaling")
    if cfg["model_type"] != "phimoe" or not rs:
        return None, 1.0
    kind = rs.get("rope_type", rs.get("type"))
    if kind not in ("longrope", "su"):
        raise ValueError(f"unsupported rope_scaling type {kind}")
    use_long = T > rs["original_max_position_embeddings"]
    factors = rs["long_factor"] if use_long else rs["short_factor"]
    return torch.tensor(factors, dtype=torch.float32), rs["long_mscale" if use_long else "short_mscale"]


def rope(x, pos, theta, factors=None, mscale=1.0):
    # x: [heads, T, head_dim]; HF rotate-half convention
    d = x.shape[-1]
    base = theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)
    inv = 1.0 / (base if factors is None else factors * base)
    fr = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([fr, fr], dim=-1)
    cos, sin = emb.cos() * mscale, emb.sin() * mscale
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    rot = torch.cat([-x2, x1], dim=-1)
    return x * cos + rot * sin


def attention(h, W, p, cfg, arch, T):
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    eps = cfg["rms_norm_eps"]
    q = h @ W[p + "q_proj.weight"].t()
    k = h @ W[p + "k_proj.weight"].t()
    v = h @ W[p + "v_proj.weight"].t()
    if p + "q_proj.bias" in W:
        q, k, v = q + W[p + "q_proj.bias"], k + W[p + "k_proj.bias"], v + W[p + "v_proj.bias"]
    if arch == "olmoe":
        q = rms_norm(q, W[p + "q_norm.weight"], eps)
        k = rms_norm(k, W[p + "k_norm.weight"], eps)
        clip = cfg.get("clip_qkv")
        if clip is not None:
            q, k, v = q.clamp(-clip, clip), k.clamp(-clip, clip), v.clamp(-clip, clip)
    q = q.view(T, nh, hd).transpose(0, 1)
    k = k.view(T, nkv, hd).transpose(0, 1)
    v = v.view(T, nkv, hd).transpose(0, 1)
    pos = torch.arange(T)
    theta = cfg.get("rope_theta", 10000.0)
    factors, mscale = rope_scaling(cfg, T)
    q = rope(q, pos, theta, factors, mscale)
    k = rope(k, pos, theta, factors, mscale)
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=0)
    v = v.repeat_interleave(rep, dim=0)
    s = (q @ k.transpose(-1, -2)) * hd ** -0.5
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    sw = cfg.get("sliding_window") if arch in ("mixtral", "phimoe") else None
    if sw is not None:
        allowed = allowed & (i - j < sw)
    s = s.masked_fill(~allowed, float("-inf"))
    a = torch.softmax(s, dim=-1)
    o = (a @ v).transpose(0, 1).reshape(T, nh * hd)
    out = o @ W[p + "o_proj.weight"].t()
    if p + "o_proj.bias" in W:
        out = out + W[p + "o_proj.bias"]
    return out


def sparsemixer(scores, eps):
    """Phi-3.5-MoE's top-2 routing in eval mode: (weights [T, 2], ids [T, 2])."""
    def masked_softmax_at(s, threshold, pick):
        # Drop j where (m - scores_j) / max(|scores_j|, m) > 2 eps; softmax of s at pick.
        ratio = (threshold - scores) / scores.abs().clamp(min=threshold)
        return torch.softmax(s.masked_fill(ratio > 2 * eps, float("-inf")), dim=-1).gather(-1, pick)

    m1, i1 = scores.max(dim=-1, keepdim=True)
    w1 = masked_softmax_at(scores, m1, i1)
    second = scores.scatter(-1, i1, float("-inf"))
    m2, i2 = second.max(dim=-1, keepdim=True)
    w2 = masked_softmax_at(second, m2, i2)
    return torch.cat([w1, w2], dim=-1), torch.cat([i1, i2], dim=-1)


def moe(h, W, p, cfg, arch):
    E = cfg["num_local_experts"] if arch in ("mixtral", "phimoe") else cfg["num_experts"]
    K = cfg["num_experts_per_tok"]
    if arch in ("mixtral", "phimoe"):
        gate = W[p + "block_sparse_moe.gate.weight"]
        names = lambda e: (p + f"block_sparse_moe.experts.{e}.w1.weight", p + f"block_sparse_moe.experts.{e}.w3.weight",
                           p + f"block_sparse_moe.experts.{e}.w2.weight")
        renorm = True
    else:
        gate = W[p + "mlp.gate.weight"]
        names = lambda e: (p + f"mlp.experts.{e}.gate_proj.weight", p + f"mlp.experts.{e}.up_proj.weight",
                           p + f"mlp.experts.{e}.down_proj.weight")
        renorm = bool(cfg.get("norm_topk_prob", False))
    logits = h @ gate.t()
    if arch == "phimoe":
        if K != 2:
            raise ValueError("sparsemixer is top-2 only")
        w, idx = sparsemixer(logits, cfg.get("router_jitter_noise", 0.01))
    else:
        probs = torch.softmax(logits, dim=-1)
        w, idx = torch.topk(probs, K, dim=-1)
        if renorm:
            w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        g, u, d = names(e)
        x = h[tok]
        y = (torch.nn.functional.silu(x @ W[g].t()) * (x @ W[u].t())) @ W[d].t()
        out.index_add_(0, tok, y * w[tok, slot][:, None])
    return out


def forward(W, cfg, ids):
    arch = cfg["model_type"]
    if arch in ("deepseek_v2", "deepseek_v3"):
        return deepseek.forward(W, cfg, ids)
    if arch == "glm4_moe":
        return glm4_moe.forward(W, cfg, ids)
    if arch == "gpt_oss":
        return gpt_oss.forward(W, cfg, ids)
    if arch == "minimax_m2":
        return minimax_m2.forward(W, cfg, ids)
    if arch == "qwen3_next":
        return qwen3_next.forward(W, cfg, ids)
    if arch == "qwen3_5_moe":
        return qwen3_5_moe.forward(W, cfg, ids)
    if arch in ("llama4", "llama4_text"):
        return llama4.forward(W, cfg, ids)
    if arch not in ("olmoe", "mixtral", "phimoe"):
        raise ValueError(f"unsupported model_type {arch}")
    T = len(ids)
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(norm(x, W, p + "input_layernorm.", cfg), W, p + "self_attn.", cfg, arch, T)
        x = x + moe(norm(x, W, p + "post_attention_layernorm.", cfg), W, p, cfg, arch)
    x = norm(x, W, "model.norm.", cfg)
    if cfg.get("tie_word_embeddings", False):
        head = W["model.embed_tokens.weight"]
    else:
        head = W["lm_head.weight"]
    out = x @ head.t()
    if "lm_head.bias" in W:
        out = out + W["lm_head.bias"]
    return out


def load(model_dir):
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    return cfg, load_dir(model_dir)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    ap.add_argument("--ids", required=True, help="comma-separated token ids")
    ap.add_argument("--out", required=True, help="output file: raw float32 [n_tokens, vocab]")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    ids = [int(s) for s in a.ids.replace(" ", "").split(",") if s != ""]
    cfg, W = load(a.model)
    with torch.no_grad():
        logits = forward(W, cfg, ids)
    np.ascontiguousarray(logits.numpy().astype("<f4")).tofile(a.out)
    print(f"wrote {a.out}: {logits.shape[0]} x {logits.shape[1]} float32", file=sys.stderr)


if __name__ == "__main__":
    main()
