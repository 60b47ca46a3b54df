"""Qwen3.5-MoE (model_type qwen3_5_moe) for tools/reference/logits.py.

Written from HF transformers' Qwen3.5-MoE modules (eager path, eval mode, no cache, text
only). What differs from Qwen3-Next (qwen3_next.py, whose attention, MoE and norms it uses):
  config:    the text model's keys in text_config; rope_theta and partial_rotary_factor in
             rope_parameters, with mrope_section.
  weights:   under model.language_model. (lm_head.weight stays); experts fused,
             mlp.experts.gate_up_proj [E, 2F, d] (gate rows, then up rows) and
             mlp.experts.down_proj [E, d, F].
  DeltaNet:  four projections: in_proj_qkv ([q heads, k heads, v heads]), in_proj_z,
             in_proj_b, in_proj_a (one row per value head); value head h reads key head
             h // (value heads / key heads) (repeat_interleave).
  router:    top-k always renormalised.
  RoPE:      interleaved MRoPE: frequency i takes its angle from the temporal, height or width
             position id (i % 3 within the sections); computed here with the three ids equal,
             as for text.
"""
import torch
import torch.nn.functional as F

from glm4_moe import causal_gqa
from qwen3_next import delta_rule_heads, layer_types, moe, norm1p


def mrope(x, pos, theta, rot, sections):
    # x [H, T, hd]; rotate-half on the first `rot` values with MRoPE angles.
    half = rot // 2
    inv = 1.0 / (theta ** (torch.arange(0, half, dtype=torch.float64) * 2.0 / rot))
    ids = torch.stack([pos, pos, pos]).to(torch.float64)  # t, h, w: equal for text.
    freqs = ids[:, :, None] * inv[None, None, :]  # [3, T, half]
    angle = freqs[0].clone()
    for dim in (1, 2):
        idx = list(range(dim, sections[dim] * 3, 3))
        if idx:
            angle[:, idx] = freqs[dim][:, idx]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], dim=-1)


def attention(h, W, p, cfg, T):
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    rp = cfg["rope_parameters"]
    rot = int(round(hd * rp.get("partial_rotary_factor", 0.25)))
    eps = cfg["rms_norm_eps"]
    qg = (h @ W[p + "q_proj.weight"].t()).view(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nh * hd)
    q = norm1p(q, W[p + "q_norm.weight"], eps).transpose(0, 1)
    k = norm1p((h @ W[p + "k_proj.weight"].t()).view(T, nkv, hd), W[p + "k_norm.weight"],
               eps).transpose(0, 1)
    v = (h @ W[p + "v_proj.weight"].t()).view(T, nkv, hd).transpose(0, 1)
    pos = torch.arange(T)
    sections = rp.get("mrope_section", [11, 11, 10])
    q = mrope(q, pos, rp["rope_theta"], rot, sections)
    k = mrope(k, pos, rp["rope_theta"], rot, sections)
    out = causal_gqa(q, k, v, T) * torch.sigmoid(gate)
    return out @ W[p + "o_proj.weight"].t()


def delta_net(h, W, p, cfg, T):
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    mixed = h @ W[p + "in_proj_qkv.weight"].t()
    z = (h @ W[p + "in_proj_z.weight"].t()).view(T, nv, dv)
    b = h @ W[p + "in_proj_b.weight"].t()
    a = h @ W[p + "in_proj_a.weight"].t()
    return delta_rule_heads(mixed, z, b, a, W, p, cfg, T, nk, nv, dk, dv)


def forward(W, cfg, ids):
    t = dict(cfg["text_config"])
    E, F_ = t["num_experts"], t["moe_intermediate_size"]
    # The text model under the shared names, the fused experts split per expert.
    V = {}
    for name, w in W.items():
        if name.startswith("model.language_model."):
            name = "model." + name[len("model.language_model."):]
        elif name.startswith("model.") or name.startswith("mtp."):
            continue
        if name.endswith("mlp.experts.gate_up_proj"):
            for e in range(E):
                V[name[:-len("gate_up_proj")] + f"{e}.gate_proj.weight"] = w[e, :F_]
                V[name[:-len("gate_up_proj")] + f"{e}.up_proj.weight"] = w[e, F_:]
        elif name.endswith("mlp.experts.down_proj"):
            for e in range(E):
                V[name[:-len("down_proj")] + f"{e}.down_proj.weight"] = w[e]
        else:
            V[name] = w
    t["norm_topk_prob"] = True
    T = len(ids)
    eps = t["rms_norm_eps"]
    x = V["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    for i, kind in enumerate(layer_types(t)):
        p = f"model.layers.{i}."
        h = norm1p(x, V[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            x = x + delta_net(h, V, p + "linear_attn.", t, T)
        else:
            x = x + attention(h, V, p + "self_attn.", t, T)
        x = x + moe(norm1p(x, V[p + "post_attention_layernorm.weight"], eps), V, p, t)
    x = norm1p(x, V["model.norm.weight"], eps)
    head = V["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else V["lm_head.weight"]
    return x @ head.t()
