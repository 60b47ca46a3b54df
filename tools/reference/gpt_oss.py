"""Plain PyTorch forward pass for HF gpt-oss checkpoints (model_type gpt_oss), written from
the semantics of transformers' modeling_gpt_oss.py (eager path, eval mode); used by
logits.py.

  attention: GQA with q/k/v/o biases (attention_bias), rotate-half RoPE with HF's generic
             YaRN (_compute_yarn_parameters: correction range floored/ceiled only when
             rope_scaling.truncate, default true; cos/sin times 0.1 ln(factor) + 1),
             softmax over [scores, sink] per head with the sink column dropped, and a
             causal mask that on "sliding_attention" layers (layer_types, default
             alternating from sliding) also drops keys j <= i - sliding_window.
  router:    logits = x W^T + b; the top-k logits, softmaxed among themselves.
  experts:   fused gate_up_proj [E, d, 2F] (x @ W + b, gate = even columns, up = odd),
             gate = min(gate, limit), up = clamp(up, -limit, limit),
             (up + 1) * gate * sigmoid(1.702 gate) @ down_proj [E, F, d] + down_proj_bias.
  MXFP4:     the published checkpoints (quantization_config.quant_method "mxfp4") store
             gate_up_proj / down_proj as U8 X_blocks [E, rows, cols/32, 16] and X_scales
             [E, rows, cols/32] in Linear orientation; dequantised here as transformers'
             integrations/mxfp4 does: the low nibble of byte j is element 2j, the high nibble
             element 2j + 1, an e2m1 code times 2^(scale - 127), then transposed to x @ W.
Everything in float32 (BF16/F16 weights are upcast exactly).
"""
import math

import torch


def rms_norm(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def yarn_inv_freq(cfg, dim):
    """(inv_freq [dim/2], attention_factor) as HF's generic YaRN computes them."""
    base = cfg.get("rope_theta", 150000.0)
    rs = cfg.get("rope_scaling") or {}
    pos_freqs = base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)
    if rs.get("rope_type", rs.get("type")) != "yarn":
        return 1.0 / pos_freqs, 1.0
    factor = rs["factor"]
    original = rs["original_max_position_embeddings"]
    attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def correction_dim(rotations):
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extrapolation_factor = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation_factor) + (1.0 / pos_freqs) * extrapolation_factor
    return inv, attention_factor


def rope(x, pos, inv, scale):
    # x: [heads, T, head_dim]; rotate-half.
    d = x.shape[-1]
    fr = pos.float()[:, None] * inv[None, :]
    emb = torch.cat([fr, fr], dim=-1)
    cos, sin = emb.cos() * scale, emb.sin() * scale
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def layer_types(cfg):
    types = cfg.get("layer_types")
    if types is None:
        types = ["sliding_attention" if i % 2 == 0 else "full_attention"
                 for i in range(cfg["num_hidden_layers"])]
    return types


def attention(h, W, p, cfg, sliding, T):
    nh = cfg["num_attention_heads"]
    nkv = cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or 64
    q = h @ W[p + "q_proj.weight"].t()
    k = h @ W[p + "k_proj.weight"].t()
    v = h @ W[p + "v_proj.weight"].t()
    if cfg.get("attention_bias", True):
        q, k, v = q + W[p + "q_proj.bias"], k + W[p + "k_proj.bias"], v + W[p + "v_proj.bias"]
    q = q.view(T, nh, hd).transpose(0, 1)
    k = k.view(T, nkv, hd).transpose(0, 1)
    v = v.view(T, nkv, hd).transpose(0, 1)
    inv, scale = yarn_inv_freq(cfg, hd)
    pos = torch.arange(T)
    q, k = rope(q, pos, inv, scale), rope(k, pos, inv, scale)
    rep = nh // nkv
    k = k.repeat_interleave(rep, dim=0)
    v = v.repeat_interleave(rep, dim=0)
    s = (q @ k.transpose(-1, -2)) * hd ** -0.5
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    if sliding:
        allowed = allowed & (j > i - cfg.get("sliding_window", 128))
    s = s.masked_fill(~allowed, float("-inf"))
    sinks = W[p + "sinks"].reshape(nh, 1, 1).expand(nh, T, 1)
    combined = torch.cat([s, sinks], dim=-1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    probs = torch.softmax(combined, dim=-1)[..., :-1]
    o = (probs @ v).transpose(0, 1).reshape(T, nh * hd)
    out = o @ W[p + "o_proj.weight"].t()
    if cfg.get("attention_bias", True):
        out = out + W[p + "o_proj.bias"]
    return out


def moe(h, W, p, cfg):
    K = cfg.get("num_experts_per_tok", 4)
    limit = cfg.get("swiglu_limit", 7.0)
    alpha = 1.702
    logits = h @ W[p + "mlp.router.weight"].t() + W[p + "mlp.router.bias"]
    top, idx = torch.topk(logits, K, dim=-1)
    w = torch.softmax(top, dim=-1)
    gate_up, gate_up_b = W[p + "mlp.experts.gate_up_proj"], W[p + "mlp.experts.gate_up_proj_bias"]
    down, down_b = W[p + "mlp.experts.down_proj"], W[p + "mlp.experts.down_proj_bias"]
    out = torch.zeros_like(h)
    for e in range(gate_up.shape[0]):
        tok, slot = torch.nonzero(idx == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        gu = h[tok] @ gate_up[e] + gate_up_b[e]
        gate, up = gu[..., ::2], gu[..., 1::2]
        gate = gate.clamp(min=None, max=limit)
        up = up.clamp(min=-limit, max=limit)
        glu = gate * torch.sigmoid(gate * alpha)
        y = ((up + 1) * glu) @ down[e] + down_b[e]
        out.index_add_(0, tok, y * w[tok, slot][:, None])
    return out


E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequantize_mxfp4(blocks, scales):
    """[E, rows, n, 16] uint8 codes, [E, rows, n] uint8 exponents -> [E, cols, rows] float32."""
    E, rows, n, nb = blocks.shape
    if nb != 16 or tuple(scales.shape) != (E, rows, n):
        raise ValueError(f"MXFP4 blocks {tuple(blocks.shape)} and scales {tuple(scales.shape)}")
    codes = blocks.to(torch.long)
    values = torch.empty(E, rows, n, 32, dtype=torch.float32)
    lut = torch.tensor(E2M1, dtype=torch.float32)
    values[..., 0::2] = lut[codes & 0xF]
    values[..., 1::2] = lut[codes >> 4]
    scale = torch.pow(torch.tensor(2.0, dtype=torch.float64), scales.to(torch.float64) - 127)
    values = (values.to(torch.float64) * scale[..., None]).to(torch.float32)  # Exact.
    return values.reshape(E, rows, n * 32).transpose(1, 2).contiguous()


def unpack_mxfp4_experts(W, cfg):
    """Replaces every X_blocks / X_scales pair by the dequantised X (x @ W orientation)."""
    q = cfg.get("quantization_config")
    if not q:
        return W
    if q.get("quant_method") != "mxfp4":
        raise ValueError(f"unsupported quant_method {q.get('quant_method')}")
    for name in [k for k in W if k.endswith("_blocks")]:
        stem = name[: -len("_blocks")]
        W[stem] = dequantize_mxfp4(W.pop(name), W.pop(stem + "_scales"))
    return W


def forward(W, cfg, ids):
    W = unpack_mxfp4_experts(dict(W), cfg)
    T = len(ids)
    eps = cfg.get("rms_norm_eps", 1e-5)
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    types = layer_types(cfg)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        x = x + attention(a, W, p + "self_attn.", cfg, types[i] == "sliding_attention", T)
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + moe(m, W, p, cfg)
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    return x @ head.t()
