"""OLMoE in plain PyTorch (HF OlmoeForCausalLM semantics), for training on CPU.

Differences from HF are only in how the sparse MoE block is *computed*:
  * mode "capacity" (training): tokens are scattered into an [experts, capacity, d] buffer,
    the experts run as three bmm's, results are gathered back. Assignments beyond an
    expert's capacity (ceil(capacity_factor * tokens * top_k / experts)) are dropped.
  * mode "dropless" (evaluation/export checks): the same, with capacity = the largest
    expert load, so nothing is dropped; this is the exact HF forward (up to fp summation order).
Expert weights are stored stacked ([E, d, 2F] for gate|up, [E, F, d] for down); export.py
writes them in HF layout (mlp.experts.{e}.{gate,up,down}_proj.weight).
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int = 50304
    hidden_size: int = 256
    intermediate_size: int = 32  # per expert
    num_hidden_layers: int = 16
    num_attention_heads: int = 4
    num_key_value_heads: int = 4
    num_experts: int = 64
    num_experts_per_tok: int = 8
    norm_topk_prob: bool = False
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    router_aux_loss_coef: float = 0.01
    router_z_loss_coef: float = 0.001

    @property
    def head_dim(self):
        return self.hidden_size // self.num_attention_heads

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dt)


def rope_cos_sin(T, head_dim, theta, device=None):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float().to(device) / head_dim))
    t = torch.arange(T, dtype=torch.float32, device=device)
    fr = torch.outer(t, inv)
    emb = torch.cat([fr, fr], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * hd, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * hd, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * hd, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * hd, c.hidden_size, bias=False)
        self.q_norm = RMSNorm(c.num_attention_heads * hd, c.rms_norm_eps)
        self.k_norm = RMSNorm(c.num_key_value_heads * hd, c.rms_norm_eps)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        c = self.c
        hd = c.head_dim
        q = self.q_norm(self.q_proj(x)).view(B, T, c.num_attention_heads, hd).transpose(1, 2)
        k = self.k_norm(self.k_proj(x)).view(B, T, c.num_key_value_heads, hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
        att = att + mask
        att = torch.softmax(att.float(), dim=-1).to(q.dtype)
        y = torch.matmul(att, v).transpose(1, 2).reshape(B, T, -1)
        return self.o_proj(y)


class SparseMoe(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        E, d, f = c.num_experts, c.hidden_size, c.intermediate_size
        self.gate = nn.Linear(d, E, bias=False)
        self.lb_detach = True
        # Expert counts of earlier steps (detached, [E]) that the balancing loss's f_e includes:
        # global-batch balancing (set by train.py --balance-window); None = this batch alone.
        self.balance_prior = None
        self.w_gate_up = nn.Parameter(torch.empty(E, d, 2 * f))  # [..., :f] = gate, [..., f:] = up
        self.w_down = nn.Parameter(torch.empty(E, f, d))

    def forward(self, x, mode="capacity", capacity_factor=1.25, stats=None):
        shp = x.shape
        x = x.reshape(-1, shp[-1])
        N, d = x.shape
        c = self.c
        E, K = c.num_experts, c.num_experts_per_tok
        logits = self.gate(x)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        topv, topi = torch.topk(probs, K, dim=-1)
        if c.norm_topk_prob:
            topv = topv / topv.sum(-1, keepdim=True)
        topv = topv.to(x.dtype)
        e_flat = topi.reshape(-1)
        counts = torch.bincount(e_flat, minlength=E)
        # rank of each assignment inside its expert (stable: earlier tokens first)
        order = torch.argsort(e_flat * (N * K) + torch.arange(N * K), dim=0)
        starts = torch.cumsum(counts, 0) - counts
        pos_sorted = torch.arange(N * K) - starts[e_flat[order]]
        pos = torch.empty_like(pos_sorted)
        pos[order] = pos_sorted
        if mode == "dropless":
            C = int(counts.max().item())
        else:
            C = max(1, int(math.ceil(capacity_factor * N * K / E)))
        keep = pos < C
        tok = torch.arange(N).repeat_interleave(K)
        slot = (e_flat * C + pos)[keep]
        tok_k = tok[keep]
        w_k = topv.reshape(-1)[keep]
        buf = x.new_zeros(E * C, d).index_copy(0, slot, x.index_select(0, tok_k)).view(E, C, d)
        gu = torch.bmm(buf, self.w_gate_up)
        f = c.intermediate_size
        h = F.silu(gu[..., :f]) * gu[..., f:]
        y = torch.bmm(h, self.w_down).view(E * C, d).to(x.dtype)
        out = x.new_zeros(N, d).index_add(0, tok_k, y.index_select(0, slot) * w_k[:, None])
        aux = None
        if stats is not None or self.training:
            f_e = counts.float() / (N * K)
            if self.balance_prior is not None:
                f_e = (counts.float() + self.balance_prior) / (N * K + self.balance_prior.sum())
            # The balancing loss trains the router only: its probabilities are recomputed from
            # the detached router input, so a large coefficient cannot distort the rest of the model.
            p_e = torch.softmax(F.linear(x.detach(), self.gate.weight).float(), dim=-1).mean(0) if self.lb_detach \
                else probs.mean(0)
            lb = E * (f_e * p_e).sum()
            z = torch.logsumexp(logits.float(), dim=-1).pow(2).mean()
            aux = (lb, z)
            if stats is not None:
                stats.append({"counts": counts.detach(), "dropped": int((~keep).sum().item()),
                              "lb": float(lb.detach()), "z": float(z.detach())})
        return out.view(shp), aux


class Block(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.self_attn = Attention(c)
        self.mlp = SparseMoe(c)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, cos, sin, mask, mode, cf, stats):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        m, aux = self.mlp(self.post_attention_layernorm(x), mode, cf, stats)
        return x + m, aux


class Olmoe(nn.Module):
    def __init__(self, c: Config):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = None if c.tie_word_embeddings else nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self, emb_std=0.1, final_norm=0.2):
        """Truncated-normal init (±3σ). σ = initializer_range (0.02) for the input-side
        projections and the router, initializer_range / sqrt(2 · layers) for the residual-branch
        outputs (o_proj, experts' down), emb_std for the (tied) embedding, and the final norm's
        weight starts at final_norm. With HF's plain 0.02 everywhere the residual stream is
        dominated by attention outputs shared across tokens (rank collapse): at init the tokens'
        hidden states in layers >= 3 have mean squared cosine ~0.85 and top-8 routing picks
        the same experts for every token (load entropy 0.6); with this init, 0.02 and 0.99.
        A large tied embedding would make every position predict its own input token, hence
        the small final-norm weight."""
        std = self.c.initializer_range
        out_std = std / math.sqrt(2 * self.c.num_hidden_layers)
        for n, p in self.named_parameters():
            if n == "norm.weight":
                nn.init.constant_(p, final_norm)
            elif n.endswith("norm.weight") or "layernorm" in n:
                nn.init.ones_(p)
            elif n == "embed_tokens.weight":
                nn.init.trunc_normal_(p, std=emb_std, a=-3 * emb_std, b=3 * emb_std)
            elif n.endswith("o_proj.weight") or n.endswith("w_down"):
                nn.init.trunc_normal_(p, std=out_std, a=-3 * out_std, b=3 * out_std)
            else:
                nn.init.trunc_normal_(p, std=std, a=-3 * std, b=3 * std)

    def head_weight(self):
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def hidden(self, ids, mode="capacity", cf=1.25, stats=None):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        cos, sin = rope_cos_sin(T, self.c.head_dim, self.c.rope_theta)
        mask = torch.full((T, T), float("-inf")).triu(1)
        lb = x.new_zeros(())
        z = x.new_zeros(())
        for layer in self.layers:
            x, aux = layer(x, cos, sin, mask, mode, cf, stats)
            if aux is not None:
                lb = lb + aux[0]
                z = z + aux[1]
        return self.norm(x), lb, z

    def forward(self, ids, mode="capacity", cf=1.25, stats=None):
        h, lb, z = self.hidden(ids, mode, cf, stats)
        return F.linear(h, self.head_weight()), lb, z

    def num_params(self):
        return sum(p.numel() for p in self.parameters())
