"""GLM-4.5 / 4.5-Air / 4.7 (model_type glm4_moe) for tools/reference/logits.py.

Written from HF transformers' modeling_glm4_moe.py (eager path, eval mode):
  attention: GQA with head_dim from the config (else hidden_size / heads); q/k/v biases when
             attention_bias, o_proj without bias; use_qk_norm: RMSNorm over each head of q
             and k (before RoPE); partial rotary: only the first
             rot = int(head_dim * partial_rotary_factor) values of each head are rotated
             (rotate_half within them, inv_freq = theta^(-2i/rot)), the rest pass through;
             softmax scale head_dim^-0.5.
  gate:      sigmoid of the router logits; scores + e_score_correction_bias choose, groups
             (n_group, kept topk_group) ranked by the sum of their two best; unkept experts
             score 0; weights = sigmoid scores at the top-k, renormalised (+1e-20) when
             norm_topk_prob, then always times routed_scaling_factor.
  layers:    the first first_k_dense_replace are dense SwiGLU MLPs (intermediate_size);
             the others add n_shared_experts fused as one MLP (mlp.shared_experts).
  MTP layers (model.layers.{num_hidden_layers + i}) are not run.
"""
import torch

from deepseek import mlp, rms_norm


def rotary_dim(cfg):
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    rp = cfg.get("rope_parameters") or {}
    factor = rp.get("partial_rotary_factor", cfg.get("partial_rotary_factor", 0.5))
    return hd, int(hd * factor)


def partial_rope(x, pos, theta, rot):
    # x: [heads, T, head_dim]; rotate-half on x[..., :rot], the rest unchanged.
    inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.int64).float() / rot))
    fr = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([fr, fr], dim=-1)
    cos, sin = emb.cos(), emb.sin()
    xr, xp = x[..., :rot], x[..., rot:]
    turned = torch.cat([-xr[..., rot // 2:], xr[..., : rot // 2]], dim=-1)
    return torch.cat([xr * cos + turned * sin, xp], dim=-1)


def attention(h, W, p, cfg, T):
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd, rot = rotary_dim(cfg)
    eps = cfg["rms_norm_eps"]
    q = h @ W[p + "q_proj.weight"].t()
    k = h @ W[p + "k_proj.weight"].t()
    v = h @ W[p + "v_proj.weight"].t()
    if cfg.get("attention_bias", False):
        q, k, v = q + W[p + "q_proj.bias"], k + W[p + "k_proj.bias"], v + W[p + "v_proj.bias"]
    q = q.view(T, nh, hd)
    k = k.view(T, nkv, hd)
    v = v.view(T, nkv, hd)
    if cfg.get("use_qk_norm", False):
        q = rms_norm(q, W[p + "q_norm.weight"], eps)
        k = rms_norm(k, W[p + "k_norm.weight"], eps)
    q, k, v = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)
    rp = cfg.get("rope_parameters") or {}
    theta = rp.get("rope_theta", cfg.get("rope_theta", 10000.0))
    pos = torch.arange(T)
    q = partial_rope(q, pos, theta, rot)
    k = partial_rope(k, pos, theta, rot)
    return causal_gqa(q, k, v, T) @ W[p + "o_proj.weight"].t()


def causal_gqa(q, k, v, T):
    # q [nh, T, hd], k and v [nkv, T, hd]: causal softmax attention, scale hd^-0.5, heads
    # concatenated to [T, nh * hd].
    nh, hd = q.shape[0], q.shape[-1]
    k = k.repeat_interleave(nh // k.shape[0], dim=0)
    v = v.repeat_interleave(nh // v.shape[0], dim=0)
    s = (q @ k.transpose(-1, -2)) * hd ** -0.5
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    s = s.masked_fill(~causal, float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, nh * hd)


def gate(h, W, p, cfg):
    E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    scores = (h @ W[p + "mlp.gate.weight"].t()).sigmoid()
    choice = scores + W[p + "mlp.gate.e_score_correction_bias"][None, :]
    G, keep = cfg.get("n_group", 1), cfg.get("topk_group", 1)
    group_scores = choice.view(-1, G, E // G).topk(2, dim=-1)[0].sum(dim=-1)
    kept = torch.topk(group_scores, k=keep, dim=-1, sorted=False)[1]
    mask = torch.zeros_like(group_scores).scatter_(1, kept, 1)
    mask = mask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
    choice = choice.masked_fill(~mask.bool(), 0.0)
    ids = torch.topk(choice, k=K, dim=-1, sorted=False)[1]
    w = scores.gather(1, ids)
    if cfg.get("norm_topk_prob", True):
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * cfg.get("routed_scaling_factor", 1.0), ids


def moe(h, W, p, cfg):
    w, idx = gate(h, W, p, cfg)
    out = torch.zeros_like(h)
    for e in range(cfg["n_routed_experts"]):
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        out.index_add_(0, tok, mlp(h[tok], W, p + f"mlp.experts.{e}.") * w[tok, slot][:, None])
    if cfg.get("n_shared_experts", 1):
        out = out + mlp(h, W, p + "mlp.shared_experts.")
    return out


def forward(W, cfg, ids):
    T = len(ids)
    eps = cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, W[p + "input_layernorm.weight"], eps), W, p + "self_attn.",
                          cfg, T)
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        dense = i < cfg.get("first_k_dense_replace", 1)
        x = x + (mlp(h, W, p + "mlp.") if dense else moe(h, W, p, cfg))
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.t()
