"""Qwen3-Next (model_type qwen3_next) for tools/reference/logits.py.

Written from HF transformers' Qwen3Next modules (eager path, eval mode, no cache):
  norms:     every RMSNorm but the DeltaNet's gated one is zero-centred:
             x * rsqrt(mean(x^2) + eps) * (1 + w).
  layers:    layer_types, or every full_attention_interval-th layer full attention and the
             others Gated DeltaNet ("linear_attention").
  attention: q_proj gives per head [query (head_dim), gate (head_dim)]; per-head q/k norm
             (zero-centred); RoPE (rotate_half) on the first head_dim * partial_rotary_factor
             values; causal GQA; output times sigmoid(gate), then o_proj.
  DeltaNet:  in_proj_qkvz per key head [q, k, v (r heads), z (r heads)] and in_proj_ba per key
             head [b (r), a (r)], r = value heads / key heads; causal depthwise conv1d over
             [q, k, v] (kernel linear_conv_kernel_dim, no bias) then SiLU; q and k L2-normalised
             (x / sqrt(sum x^2 + 1e-6)) and repeated to the value heads (repeat_interleave);
             beta = sigmoid(b), g = -exp(A_log) * softplus(a + dt_bias); per value head from a
             zero state S [dk, dv], token by token: S = exp(g) S; S += k (beta (v - S^T k))^T;
             o = S^T (q / sqrt(dk)); RMSNorm per head (weight as stored) times silu(z); out_proj.
  MoE:       softmax over the experts, top-k renormalised (norm_topk_prob), SwiGLU experts;
             plus the shared expert times sigmoid(shared_expert_gate . x).
MTP layers are not run.
"""
import torch
import torch.nn.functional as F

from glm4_moe import causal_gqa, partial_rope


def norm1p(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def layer_types(cfg):
    if cfg.get("layer_types"):
        return cfg["layer_types"]
    every = cfg.get("full_attention_interval", 4)
    return ["full_attention" if (i + 1) % every == 0 else "linear_attention"
            for i in range(cfg["num_hidden_layers"])]


def attention(h, W, p, cfg, T):
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or 256
    rot = int(round(hd * cfg.get("partial_rotary_factor", 0.25)))
    eps = cfg["rms_norm_eps"]
    qg = (h @ W[p + "q_proj.weight"].t()).view(T, nh, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:].reshape(T, nh * hd)
    q = norm1p(q, W[p + "q_norm.weight"], eps).transpose(0, 1)
    k = norm1p((h @ W[p + "k_proj.weight"].t()).view(T, nkv, hd), W[p + "k_norm.weight"],
               eps).transpose(0, 1)
    v = (h @ W[p + "v_proj.weight"].t()).view(T, nkv, hd).transpose(0, 1)
    pos = torch.arange(T)
    theta = cfg.get("rope_theta", 10000000.0)
    q = partial_rope(q, pos, theta, rot)
    k = partial_rope(k, pos, theta, rot)
    out = causal_gqa(q, k, v, T) * torch.sigmoid(gate)
    return out @ W[p + "o_proj.weight"].t()


def l2norm(x):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def delta_net(h, W, p, cfg, T):
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    r = nv // nk
    qkvz = (h @ W[p + "in_proj_qkvz.weight"].t()).view(T, nk, 2 * dk + 2 * r * dv)
    ba = (h @ W[p + "in_proj_ba.weight"].t()).view(T, nk, 2 * r)
    q, k = qkvz[..., :dk], qkvz[..., dk:2 * dk]
    v = qkvz[..., 2 * dk:2 * dk + r * dv].reshape(T, nv * dv)
    z = qkvz[..., 2 * dk + r * dv:].reshape(T, nv, dv)
    b, a = ba[..., :r].reshape(T, nv), ba[..., r:].reshape(T, nv)
    mixed = torch.cat([q.reshape(T, nk * dk), k.reshape(T, nk * dk), v], dim=-1)  # [T, C]
    return delta_rule_heads(mixed, z, b, a, W, p, cfg, T, nk, nv, dk, dv)


def delta_rule_heads(mixed, z, b, a, W, p, cfg, T, nk, nv, dk, dv):
    # mixed [T, C] = [q heads, k heads, v heads] before the convolution; z [T, nv, dv];
    # b, a [T, nv].
    r, K = nv // nk, cfg["linear_conv_kernel_dim"]
    w = W[p + "conv1d.weight"].reshape(mixed.shape[1], 1, K)
    conv = F.conv1d(mixed.t()[None], w, padding=K - 1, groups=mixed.shape[1])[0, :, :T]
    mixed = F.silu(conv).t()
    q = l2norm(mixed[:, :nk * dk].view(T, nk, dk)).repeat_interleave(r, dim=1) * dk ** -0.5
    k = l2norm(mixed[:, nk * dk:2 * nk * dk].view(T, nk, dk)).repeat_interleave(r, dim=1)
    v = mixed[:, 2 * nk * dk:].view(T, nv, dv)
    beta = torch.sigmoid(b)
    g = -W[p + "A_log"].exp() * F.softplus(a + W[p + "dt_bias"])
    S = torch.zeros(nv, dk, dv)
    out = torch.zeros(T, nv, dv)
    for t in range(T):
        S = S * g[t].exp()[:, None, None]
        mem = (S * k[t][:, :, None]).sum(1)
        delta = (v[t] - mem) * beta[t][:, None]
        S = S + k[t][:, :, None] * delta[:, None, :]
        out[t] = (S * q[t][:, :, None]).sum(1)
    eps = cfg["rms_norm_eps"]
    o = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + eps) * W[p + "norm.weight"]
    o = (o * F.silu(z)).reshape(T, nv * dv)
    return o @ W[p + "out_proj.weight"].t()


def moe(h, W, p, cfg):
    E, K = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(h @ W[p + "mlp.gate.weight"].t(), dim=-1)
    w, ids = torch.topk(probs, k=K, dim=-1)
    if cfg.get("norm_topk_prob", True):
        w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(h)
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        x = h[tok]
        pe = p + f"mlp.experts.{e}."
        y = (F.silu(x @ W[pe + "gate_proj.weight"].t()) * (x @ W[pe + "up_proj.weight"].t())
             ) @ W[pe + "down_proj.weight"].t()
        out.index_add_(0, tok, y * w[tok, slot][:, None])
    if cfg.get("shared_expert_intermediate_size", 0) > 0:
        ps = p + "mlp.shared_expert."
        y = (F.silu(h @ W[ps + "gate_proj.weight"].t()) * (h @ W[ps + "up_proj.weight"].t())
             ) @ W[ps + "down_proj.weight"].t()
        out = out + torch.sigmoid(h @ W[p + "mlp.shared_expert_gate.weight"].t()) * y
    return out


def forward(W, cfg, ids):
    T = len(ids)
    eps = cfg["rms_norm_eps"]
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    for i, kind in enumerate(layer_types(cfg)):
        p = f"model.layers.{i}."
        h = norm1p(x, W[p + "input_layernorm.weight"], eps)
        if kind == "linear_attention":
            x = x + delta_net(h, W, p + "linear_attn.", cfg, T)
        else:
            x = x + attention(h, W, p + "self_attn.", cfg, T)
        x = x + moe(norm1p(x, W[p + "post_attention_layernorm.weight"], eps), W, p, cfg)
    x = norm1p(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.t()
