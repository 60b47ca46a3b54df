"""DeepSeek-V2 / V3 (model_type deepseek_v2, deepseek_v3) for tools/reference/logits.py.

Written from HF's modeling_deepseek.py (DeepseekV2/V3 remote code, eager path, eval mode):
  attention: MLA with K and V decompressed as HF computes them: q = q_proj(x) or
             q_b_proj(RMSNorm(q_a_proj(x))); [c, k_pe] = kv_a_proj_with_mqa(x);
             [k_nope, v] = kv_b_proj(RMSNorm(c)) per head; q_pe and k_pe (shared by every
             head) are de-interleaved (view(d/2, 2).transpose) and rotated with rotate_half;
             YaRN (rope_scaling type yarn) as DeepseekV2YarnRotaryEmbedding; softmax scale
             (nope + rope)^-0.5 times yarn_get_mscale(factor, mscale_all_dim)^2.
  MoEGate:   softmax or sigmoid scores; greedy, group_limited_greedy (groups by max) or
             noaux_tc (scores + e_score_correction_bias, groups by their top-2 sum); masked
             experts score 0; weights are the scores at the top-k, renormalised (+1e-20)
             when norm_topk_prob and k > 1; V2 multiplies by routed_scaling_factor only
             when it does not renormalise, V3 always.
  layers:    the first first_k_dense_replace (and those not divisible by moe_layer_freq)
             are dense SwiGLU MLPs; MoE layers add n_shared_experts fused as one MLP.
"""
import math

import torch


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_tables(cfg, T):
    dim = cfg["qk_rope_head_dim"]
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling")
    pos = torch.arange(T, dtype=torch.float32)
    powers = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    mscale = 1.0
    if rs:
        kind = rs.get("type", rs.get("rope_type"))
        if kind != "yarn":
            raise ValueError(f"unsupported rope_scaling type {kind}")
        factor = rs["factor"]
        orig = rs["original_max_position_embeddings"]
        beta_fast, beta_slow = rs.get("beta_fast", 32), rs.get("beta_slow", 1)

        def corr(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        low = max(math.floor(corr(beta_fast)), 0)
        high = min(math.ceil(corr(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        keep = 1.0 - ramp
        inv = (1.0 / (factor * powers)) * (1 - keep) + (1.0 / powers) * keep
        mscale = yarn_get_mscale(factor, rs.get("mscale", 1)) / yarn_get_mscale(
            factor, rs.get("mscale_all_dim", 0))
    else:
        inv = 1.0 / powers
    fr = pos[:, None] * inv[None, :]
    emb = torch.cat([fr, fr], dim=-1)
    return emb.cos() * mscale, emb.sin() * mscale


def apply_rope(x, cos, sin):
    # x: [..., T, d]; HF first de-interleaves: (d/2, 2) -> (2, d/2).
    *lead, T, d = x.shape
    x = x.view(*lead, T, d // 2, 2).transpose(-1, -2).reshape(*lead, T, d)
    rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)
    return x * cos + rot * sin


def attention(h, W, p, cfg, T):
    H = cfg["num_attention_heads"]
    nope, R, V = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    L = cfg["kv_lora_rank"]
    eps = cfg["rms_norm_eps"]
    if cfg.get("q_lora_rank") is None:
        q = h @ W[p + "q_proj.weight"].t()
    else:
        q = rms_norm(h @ W[p + "q_a_proj.weight"].t(), W[p + "q_a_layernorm.weight"], eps)
        q = q @ W[p + "q_b_proj.weight"].t()
    q = q.view(T, H, nope + R).transpose(0, 1)
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    kv = h @ W[p + "kv_a_proj_with_mqa.weight"].t()
    c, k_pe = kv[:, :L], kv[:, L:].view(1, T, R)
    kv = (rms_norm(c, W[p + "kv_a_layernorm.weight"], eps) @ W[p + "kv_b_proj.weight"].t())
    kv = kv.view(T, H, nope + V).transpose(0, 1)
    k_nope, v = kv[..., :nope], kv[..., nope:]
    cos, sin = rope_tables(cfg, T)
    q_pe = apply_rope(q_pe, cos, sin)
    k_pe = apply_rope(k_pe, cos, sin)
    qs = torch.cat([q_nope, q_pe], dim=-1)
    ks = torch.cat([k_nope, k_pe.expand(H, T, R)], dim=-1)
    scale = (nope + R) ** -0.5
    rs = cfg.get("rope_scaling")
    if rs and rs.get("mscale_all_dim", 0):
        m = yarn_get_mscale(rs["factor"], rs["mscale_all_dim"])
        scale = scale * m * m
    s = (qs @ ks.transpose(-1, -2)) * scale
    causal = torch.arange(T)[None, :] <= torch.arange(T)[:, None]
    s = s.masked_fill(~causal, float("-inf"))
    o = (torch.softmax(s, dim=-1) @ v).transpose(0, 1).reshape(T, H * V)
    return o @ W[p + "o_proj.weight"].t()


def mlp(x, W, p):
    return (torch.nn.functional.silu(x @ W[p + "gate_proj.weight"].t()) *
            (x @ W[p + "up_proj.weight"].t())) @ W[p + "down_proj.weight"].t()


def gate(h, W, p, cfg):
    v3 = cfg["model_type"] == "deepseek_v3"
    E, K = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    logits = h @ W[p + "mlp.gate.weight"].t()
    scoring = cfg.get("scoring_func", "sigmoid" if v3 else "softmax")
    scores = logits.sigmoid() if scoring == "sigmoid" else logits.softmax(dim=-1)
    method = cfg.get("topk_method", "noaux_tc" if v3 else "greedy")
    choice = scores
    if method == "noaux_tc":
        choice = scores + W[p + "mlp.gate.e_score_correction_bias"][None, :]
    if method in ("group_limited_greedy", "noaux_tc"):
        G = cfg.get("n_group", 8 if v3 else 1)
        keep = cfg.get("topk_group", 4 if v3 else 1)
        grouped = choice.view(-1, G, E // G)
        if method == "noaux_tc":
            group_scores = grouped.topk(2, dim=-1)[0].sum(dim=-1)
        else:
            group_scores = grouped.max(dim=-1).values
        idx = torch.topk(group_scores, k=keep, dim=-1, sorted=False)[1]
        mask = torch.zeros_like(group_scores).scatter_(1, idx, 1)
        mask = mask.unsqueeze(-1).expand(-1, G, E // G).reshape(-1, E)
        choice = choice.masked_fill(~mask.bool(), 0.0)
    ids = torch.topk(choice, k=K, dim=-1, sorted=False)[1]
    w = scores.gather(1, ids)
    renorm = K > 1 and cfg.get("norm_topk_prob", v3)
    if renorm:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    if v3 or not renorm:
        w = w * cfg.get("routed_scaling_factor", 2.5 if v3 else 1.0)
    return w, ids


def moe(h, W, p, cfg):
    w, idx = gate(h, W, p, cfg)
    out = torch.zeros_like(h)
    for e in range(cfg["n_routed_experts"]):
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        out.index_add_(0, tok, mlp(h[tok], W, p + f"mlp.experts.{e}.") * w[tok, slot][:, None])
    if cfg.get("n_shared_experts"):
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
        is_moe = (cfg.get("n_routed_experts") is not None and
                  i >= cfg.get("first_k_dense_replace", 0) and i % cfg.get("moe_layer_freq", 1) == 0)
        x = x + (moe(h, W, p, cfg) if is_moe else mlp(h, W, p + "mlp."))
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.t()
