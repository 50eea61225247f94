"""The float64 building blocks of the reference forward passes: norms, linear, RoPE (default /
linear / llama3 inv_freq), causal softmax attention over a KV cache.
"""
import math

import torch


def rms_norm(x, w, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(var + eps))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = (x - mu).pow(2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def linear(x, w, b=None):
    y = x @ w.t()
    return y if b is None else y + b


def rope_inv_freq(cfg, head_dim):
    """inv_freq as transformers' rope-parameter functions (default / linear / llama3)."""
    base = float(cfg.get("rope_theta", 10000.0))
    dim = head_dim  # partial_rotary_factor = 1 for all architectures here
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rs = cfg.get("rope_scaling")
    if rs is None:
        return inv_freq
    rtype = rs.get("rope_type", rs.get("type"))
    if rtype == "default":
        return inv_freq
    if rtype == "linear":
        return inv_freq / float(rs["factor"])
    if rtype == "llama3":
        factor = float(rs["factor"])
        low_freq_factor = float(rs["low_freq_factor"])
        high_freq_factor = float(rs["high_freq_factor"])
        old_context_len = float(rs["original_max_position_embeddings"])
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium, smoothed, inv_freq_llama)
    raise ValueError("unsupported rope type %r" % rtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x, positions, inv_freq):
    """x: [heads, T, D]; positions: [T] (float64)."""
    freqs = positions[:, None] * inv_freq[None, :]          # [T, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)                # [T, D]
    return x * emb.cos()[None] + rotate_half(x) * emb.sin()[None]


def attention(q, k, v, q_pos, scale):
    """q: [H, T, D]; k, v: [H, S, D] (all cached keys, positions 0..S-1); q_pos: [T] ints.
    Causal: query at position p sees keys at positions <= p."""
    S = k.shape[1]
    scores = (q @ k.transpose(-1, -2)) * scale            # [H, T, S]
    kpos = torch.arange(S)
    mask = kpos[None, :] > q_pos[:, None]                 # [T, S]
    scores = scores.masked_fill(mask[None], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return p @ v                                          # [H, T, D]
