"""The Llama-architecture model (RMSNorm, RoPE, grouped KV heads, SiLU-gated MLP, tied output)
with the Hugging Face module layout, so hf_format.hf_name maps its parameters one to one.
"""
import math

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables(seq, head_dim, theta, dtype, device):
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype).to(device), ang.sin().to(dtype).to(device)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Block(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        d, hd = c["hidden"], c["hidden"] // c["heads"]
        self.heads, self.kv_heads, self.hd = c["heads"], c["kv_heads"], hd
        self.input_layernorm = RMSNorm(d)
        self.q_proj = torch.nn.Linear(d, c["heads"] * hd, bias=False)
        self.k_proj = torch.nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.v_proj = torch.nn.Linear(d, c["kv_heads"] * hd, bias=False)
        self.o_proj = torch.nn.Linear(c["heads"] * hd, d, bias=False)
        self.post_attention_layernorm = RMSNorm(d)
        self.gate_proj = torch.nn.Linear(d, c["ffn"], bias=False)
        self.up_proj = torch.nn.Linear(d, c["ffn"], bias=False)
        self.down_proj = torch.nn.Linear(c["ffn"], d, bias=False)

    def attention(self, q, k, v):
        """Causal attention with grouped KV heads (query head h uses KV head h // rep): the
        queries of one KV group share one matmul; query blocks skip fully masked keys."""
        B, H, T, hd = q.shape
        rep = H // self.kv_heads
        q = q.reshape(B, self.kv_heads, rep, T, hd)
        blk = 256
        outs = []
        for s in range(0, T, blk):
            e = min(T, s + blk)
            qb = q[:, :, :, s:e].reshape(B, self.kv_heads, rep * (e - s), hd)
            sc = (qb @ k[:, :, :e].transpose(-1, -2)).view(B, self.kv_heads, rep, e - s, e)
            mask = torch.ones(e - s, e, dtype=torch.bool, device=q.device).triu(s + 1)
            p = torch.softmax(sc.masked_fill(mask, float("-inf")), dim=-1)
            outs.append((p.view(B, self.kv_heads, rep * (e - s), e) @ v[:, :, :e])
                        .view(B, self.kv_heads, rep, e - s, hd))
        return torch.cat(outs, dim=3).reshape(B, H, T, hd)

    def forward(self, x, cos, sin):
        B, T, _ = x.shape
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, self.heads, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(B, T, self.kv_heads, self.hd).transpose(1, 2)
        q = (q * cos + rotate_half(q) * sin) * (1.0 / math.sqrt(self.hd))
        k = k * cos + rotate_half(k) * sin
        a = self.attention(q, k, v).transpose(1, 2).reshape(B, T, -1)
        x = x + self.o_proj(a)
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["vocab"], c["hidden"])
        self.layers = torch.nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = RMSNorm(c["hidden"])

    def init_weights(self):
        std = 0.02
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                continue
            scale = 1 / math.sqrt(2 * self.c["layers"]) if name.endswith(
                ("o_proj.weight", "down_proj.weight")) else 1.0
            torch.nn.init.normal_(p, 0.0, std * scale)

    def hidden(self, ids):
        """The final hidden states (after the last norm), (B, T, hidden)."""
        T = ids.shape[1]
        p = next(self.parameters())
        cos, sin = rope_tables(T, self.c["hidden"] // self.c["heads"], self.c["rope_theta"],
                               p.dtype, p.device)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x)

    def forward(self, ids):
        return self.hidden(ids) @ self.embed_tokens.weight.t()  # tied output projection
