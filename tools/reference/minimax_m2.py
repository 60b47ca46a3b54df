"""MiniMax-M2 / M2.1 (model_type minimax_m2) for tools/reference/logits.py.

Written from the MiniMaxM2 modeling code published with the model (eager path, eval mode):
  attention: GQA, no biases; use_qk_norm: one RMSNorm over the whole q projection
             (num_heads * head_dim) and one over the whole k projection, before RoPE;
             RoPE (rotate_half) on the first rotary_dim values of each head, inv_freq =
             theta^(-2i/rotary_dim), the rest pass through; softmax scale head_dim^-0.5.
  gate:      sigmoid of the router logits; scores + e_score_correction_bias choose the top k;
             weights = the chosen sigmoid scores, renormalised, times routed_scaling_factor.
  experts:   block_sparse_moe.experts.{e}.w1 (gate), w3 (up), w2 (down), SwiGLU.
  MTP modules are not run.
"""
import torch

from deepseek import rms_norm
from glm4_moe import causal_gqa, partial_rope


def attention(h, W, p, cfg, T):
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    rot = cfg.get("rotary_dim") or hd
    eps = cfg["rms_norm_eps"]
    q = h @ W[p + "q_proj.weight"].t()
    k = h @ W[p + "k_proj.weight"].t()
    v = h @ W[p + "v_proj.weight"].t()
    if cfg.get("use_qk_norm", True):
        q = rms_norm(q, W[p + "q_norm.weight"], eps)
        k = rms_norm(k, W[p + "k_norm.weight"], eps)
    q = q.view(T, nh, hd).transpose(0, 1)
    k = k.view(T, nkv, hd).transpose(0, 1)
    v = v.view(T, nkv, hd).transpose(0, 1)
    pos = torch.arange(T)
    theta = cfg.get("rope_theta", 5000000.0)
    q = partial_rope(q, pos, theta, rot)
    k = partial_rope(k, pos, theta, rot)
    return causal_gqa(q, k, v, T) @ W[p + "o_proj.weight"].t()


def moe(h, W, p, cfg):
    E, K = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    scores = (h @ W[p + "block_sparse_moe.gate.weight"].t()).sigmoid()
    choice = scores + W[p + "block_sparse_moe.e_score_correction_bias"][None, :]
    ids = torch.topk(choice, k=K, dim=-1, sorted=True)[1]
    w = scores.gather(1, ids)
    w = w / w.sum(dim=-1, keepdim=True).clamp(min=1e-12)
    w = w * cfg.get("routed_scaling_factor", 1.0)
    out = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        x = h[tok]
        pe = p + f"block_sparse_moe.experts.{e}."
        y = (torch.nn.functional.silu(x @ W[pe + "w1.weight"].t()) * (x @ W[pe + "w3.weight"].t())
             ) @ W[pe + "w2.weight"].t()
        out.index_add_(0, tok, y * w[tok, slot][:, None])
    return out


def forward(W, cfg, ids):
    T = len(ids)
    eps = cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, W[p + "input_layernorm.weight"], eps), W, p + "self_attn.",
                          cfg, T)
        x = x + moe(rms_norm(x, W[p + "post_attention_layernorm.weight"], eps), W, p, cfg)
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.t()
