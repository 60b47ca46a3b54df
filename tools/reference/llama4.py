"""Llama 4 (model_type llama4 / llama4_text) for tools/reference/logits.py.

Written from the semantics of HF's Llama4TextModel (eager path, eval mode), on the stored
weights as they are (no reordering):
  attention: GQA (optional biases); on RoPE layers (no_rope_layers[i] == 1) RoPE rotates
             the pairs (2i, 2i + 1) of each head as complex numbers (freqs theta^(-2i/d),
             divided by llama3 rope_scaling's factors), then with use_qk_norm each q and k
             head is x / sqrt(mean(x^2) + eps), without weight; on the other (NoPE) layers,
             with attn_temperature_tuning, q is multiplied by
             log(floor((pos + 1) / floor_scale) + 1) * attn_scale + 1. Layers typed
             chunked_attention (default: the RoPE layers) see only keys in their query's chunk
             of attention_chunk_size. Softmax scale head_dim^-0.5.
  moe:       on layers moe_layers (default: the last of every interleave_moe_layer_step);
             top-k router logits, weights sigmoid(logit) multiplying the expert's input;
             plus the shared expert; experts as moex writes them per expert
             (feed_forward.experts.{e}.gate_proj/up_proj/down_proj) or fused as published
             (gate_up_proj [E, d, 2F], down_proj [E, F, d]).
  dense:     feed_forward.gate_proj/up_proj/down_proj of intermediate_size_mlp.
"""
import math

import torch

from deepseek import rms_norm


def layer_lists(cfg):
    L = cfg["num_hidden_layers"]
    rope = cfg.get("no_rope_layers") or [
        int((i + 1) % cfg.get("no_rope_layer_interval", 4) != 0) for i in range(L)]
    types = cfg.get("layer_types") or [
        "chunked_attention" if r else "full_attention" for r in rope]
    step = cfg.get("interleave_moe_layer_step", 1)
    moe = cfg.get("moe_layers")
    if moe is None:
        moe = list(range(step - 1, L, step))
    return rope, types, set(moe)


def inv_freq(cfg, hd):
    theta = cfg.get("rope_theta", 500000.0)
    f = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    rs = cfg.get("rope_scaling")
    if rs and rs.get("rope_type", rs.get("type")) == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        out = []
        for x in f.tolist():
            wavelen = 2 * math.pi / x
            if wavelen < old / high:
                out.append(x)
            elif wavelen > old / low:
                out.append(x / factor)
            else:
                s = (old / wavelen - low) / (high - low)
                out.append((1 - s) * x / factor + s * x)
        f = torch.tensor(out, dtype=torch.float64)
    return f


def rope_pairs(x, pos, freqs):
    # x [heads, T, hd]: pairs (2i, 2i + 1) as complex numbers times e^(i pos freq_i).
    ang = pos[:, None].double() * freqs[None, :]
    xc = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous())
    out = torch.view_as_real(xc * torch.polar(torch.ones_like(ang), ang)[None]).flatten(-2)
    return out.to(x.dtype)


def attention(h, W, p, cfg, T, use_rope, chunked):
    nh = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads") or nh
    hd = cfg.get("head_dim") or cfg["hidden_size"] // nh
    eps = cfg["rms_norm_eps"]

    def proj(name):
        y = h @ W[p + name + ".weight"].t()
        return y + W[p + name + ".bias"] if p + name + ".bias" in W else y

    q = proj("q_proj").view(T, nh, hd).transpose(0, 1)
    k = proj("k_proj").view(T, nkv, hd).transpose(0, 1)
    v = proj("v_proj").view(T, nkv, hd).transpose(0, 1)
    pos = torch.arange(T)
    if use_rope:
        freqs = inv_freq(cfg, hd)
        q, k = rope_pairs(q, pos, freqs), rope_pairs(k, pos, freqs)
        if cfg.get("use_qk_norm", True):
            q = q * torch.rsqrt(q.pow(2).mean(-1, keepdim=True) + eps)
            k = k * torch.rsqrt(k.pow(2).mean(-1, keepdim=True) + eps)
    elif cfg.get("attn_temperature_tuning", True):
        s = torch.log(torch.floor((pos.float() + 1.0) / cfg.get("floor_scale", 8192)) + 1.0)
        q = q * (s * cfg.get("attn_scale", 0.1) + 1.0)[None, :, None]
    k = k.repeat_interleave(nh // nkv, dim=0)
    v = v.repeat_interleave(nh // nkv, dim=0)
    scores = (q @ k.transpose(1, 2)) / math.sqrt(hd)
    i, j = pos[:, None], pos[None, :]
    allowed = j <= i
    chunk = cfg.get("attention_chunk_size")
    if chunked and chunk:
        allowed = allowed & (i // chunk == j // chunk)
    scores = scores.masked_fill(~allowed[None], float("-inf"))
    o = torch.softmax(scores, dim=-1) @ v
    return o.transpose(0, 1).reshape(T, nh * hd) @ W[p + "o_proj.weight"].t()


def mlp(x, W, p):
    return (torch.nn.functional.silu(x @ W[p + "gate_proj.weight"].t())
            * (x @ W[p + "up_proj.weight"].t())) @ W[p + "down_proj.weight"].t()


def moe(h, W, p, cfg):
    E, K = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    logits = h @ W[p + "router.weight"].t()
    top, ids = torch.topk(logits, k=K, dim=-1)
    w = top.sigmoid()
    out = mlp(h, W, p + "shared_expert.")
    fused = p + "experts.gate_up_proj" in W
    for e in range(E):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        x = h[tok] * w[tok, slot][:, None]
        if fused:
            gu = x @ W[p + "experts.gate_up_proj"][e]
            g, u = gu.chunk(2, dim=-1)
            y = (torch.nn.functional.silu(g) * u) @ W[p + "experts.down_proj"][e]
        else:
            y = mlp(x, W, p + f"experts.{e}.")
        out.index_add_(0, tok, y)
    return out


def forward(W, cfg, ids):
    if "text_config" in cfg:
        cfg = cfg["text_config"]
        W = {k[len("language_model."):]: v for k, v in W.items()
             if k.startswith("language_model.")}
    T = len(ids)
    eps = cfg["rms_norm_eps"]
    rope, types, moe_layers = layer_lists(cfg)
    x = W["model.embed_tokens.weight"][torch.tensor(ids, dtype=torch.long)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, W[p + "input_layernorm.weight"], eps), W, p + "self_attn.",
                          cfg, T, rope[i] == 1, types[i] == "chunked_attention")
        hn = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        x = x + (moe(hn, W, p + "feed_forward.", cfg) if i in moe_layers
                 else mlp(hn, W, p + "feed_forward."))
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
    return x @ head.t()
