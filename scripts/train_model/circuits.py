"""A planted start for the recall-kv preset: a previous-token head in layer 0.

An induction circuit (find the earlier occurrence of the current token, emit the token that
followed it) needs two heads: a previous-token head that writes, at every position, what the
token before it was, and a second-layer head whose query is the current token and whose key is
that written previous token.  Trained from random weights on key-value recall, the small models
of docs/recall-training.md reached "copy some value of the row" within minutes but not the key
match in 6 M tokens: the two heads only pay off together, so neither gets a gradient to start
from.  plant_prev_token_head sets the first one by hand and leaves the rest to training.

Layout of the residual stream (hidden = d) at the start:
- dims [0, d/2): the token embedding (random, as init_weights draws it);
- dims [d/2, 3d/4): zero in the embedding; layer 0 writes the previous token's first d/4
  normalised embedding features there;
- every row's features scaled to the same norm;
- dim d - 1: a constant in every embedding (a bias channel: positional queries and keys read it).

Layer 0, KV heads 0 and 1 (query heads 0 .. 2 x group - 1): query and key read only the bias
channel, the key rotated one RoPE step ahead of the query, so q_i . k_j = s x sum_p w_p
cos(theta_p (j + 1 - i)) peaks at j = i - 1; the weights w_p over the rotary pairs are a
geometric profile that keeps every other offset up to max_pos at least `gap` below the peak.
The value of KV head h is the identity on features [h x hd, (h + 1) x hd) and the first query
head of its group writes it to dims d/2 + h x hd; the other query heads of the group are muted.
Layer 0's MLP output starts at zero.  Everything else is init_weights' random start.
"""
import math

import torch


def rope_gap_profile(head_dim, theta, max_pos, ratio=0.7):
    """Weights w_p (sum 1) of the rotary pairs for a head peaking at offset 1, and the smallest
    gap 1 - sum_p w_p cos(theta_p delta) over every other offset delta in [0, max_pos]."""
    half = head_dim // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2 / head_dim)
    w = ratio ** torch.arange(half, dtype=torch.float64)
    w /= w.sum()
    delta = torch.arange(-1, max_pos + 1, dtype=torch.float64)
    delta = delta[delta != 0]
    gap = 1 - torch.cos(torch.outer(delta, inv)) @ w
    return w, inv, gap.min().item()


@torch.no_grad()
def plant_prev_token_head(model, c, peak_logit_gap=14.0, bias_norm=6.0):
    """Sets layer 0's previous-token heads and the residual layout described above; returns a
    dict of what was planted (for the log)."""
    d, H, KV = c["hidden"], c["heads"], c["kv_heads"]
    hd, group = d // H, H // KV
    if KV < 2 or d % 4 or 2 * hd > d // 4:
        raise ValueError("plant_prev_token_head: needs 2+ KV heads and 2 x head_dim <= hidden / 4")
    w, inv, gap = rope_gap_profile(hd, c["rope_theta"], c["max_pos"])
    emb = model.embed_tokens.weight
    emb[:, d // 2:] = 0
    # Every row's features get the same norm, so that the bias channel is the same after the
    # norm for every token (a 5% spread would let some far token outscore the previous one).
    feat = emb[:, :d // 2].pow(2).sum(-1).mean().item()
    emb[:, :d // 2] *= math.sqrt(feat) / emb[:, :d // 2].norm(dim=-1, keepdim=True)
    # The bias channel: its share of the RMS norm makes it bias_norm after the norm.
    emb[:, d - 1] = math.sqrt(bias_norm ** 2 * feat / (d - bias_norm ** 2))
    # q_i . k_j / sqrt(hd) = bias_norm^2 x s^2 x sum_p w_p cos(...) / sqrt(hd); the peak must
    # stand peak_logit_gap above every other offset.
    s = math.sqrt(peak_logit_gap / gap * math.sqrt(hd)) / bias_norm
    layer = model.layers[0]
    half = hd // 2
    # The norm divides by the embedding's RMS; the written copy gets it back (the embedding's
    # per-dim scale).
    rms = math.sqrt((feat + emb[0, d - 1].item() ** 2) / d)
    for h in range(2):
        rows_q = slice(h * group * hd, (h + 1) * group * hd)
        layer.q_proj.weight[rows_q] = 0
        layer.k_proj.weight[h * hd:(h + 1) * hd] = 0
        a = torch.zeros(hd, dtype=torch.float64)
        b = torch.zeros(hd, dtype=torch.float64)
        a[:half] = s * w.sqrt()
        b[:half] = s * w.sqrt() * torch.cos(inv)
        b[half:] = s * w.sqrt() * torch.sin(inv)
        for g in range(group):
            layer.q_proj.weight[(h * group + g) * hd:(h * group + g + 1) * hd, d - 1] = a.float()
        layer.k_proj.weight[h * hd:(h + 1) * hd, d - 1] = b.float()
        v = layer.v_proj.weight[h * hd:(h + 1) * hd]
        v.zero_()
        v[:, h * hd:(h + 1) * hd] = torch.eye(hd)
        o = layer.o_proj.weight[:, h * group * hd:(h + 1) * group * hd]
        o.zero_()
        o[d // 2 + h * hd:d // 2 + (h + 1) * hd, :hd] = rms * torch.eye(hd)
    layer.down_proj.weight.zero_()
    return dict(rope_gap=round(gap, 4), qk_scale=round(s, 3), heads=2 * group)


@torch.no_grad()
def plant_induction_head(model, c, match_logit=40.0, gain=6.0, static_pairs=8):
    """Layer 1: KV head h's query reads the current token's features [16h, 16h + 16) and its key
    the previous-token copy of the same features (dims d/2 + 16h ...), both in the head's
    `static_pairs` lowest-frequency rotary pairs (nearly unrotated over max_pos), so q . k is the
    features' dot product whatever the distance; its value is the token's features [32h, 32h +
    32), written back there times `gain` by the group's first query head.  Needs the layout of
    plant_prev_token_head."""
    d, H, KV = c["hidden"], c["heads"], c["kv_heads"]
    hd, group = d // H, H // KV
    half = hd // 2
    n = 2 * static_pairs
    if n * KV > d // 4 or hd * KV > d // 2:
        raise ValueError("plant_induction_head: the model is too narrow for the layout")
    dims = list(range(half - static_pairs, half)) + list(range(hd - static_pairs, hd))
    layer = model.layers[1]
    feat_norm = 1.0  # the normalised features are ~unit per dim
    s = math.sqrt(match_logit * math.sqrt(hd) / (n * feat_norm))
    for h in range(KV):
        for g in range(group):
            rows = (h * group + g) * hd
            layer.q_proj.weight[rows:rows + hd] = 0
            for i, dd in enumerate(dims):
                layer.q_proj.weight[rows + dd, n * h + i] = s
        layer.k_proj.weight[h * hd:(h + 1) * hd] = 0
        for i, dd in enumerate(dims):
            layer.k_proj.weight[h * hd + dd, d // 2 + n * h + i] = s
        layer.v_proj.weight[h * hd:(h + 1) * hd] = 0
        layer.v_proj.weight[h * hd:(h + 1) * hd, h * hd:(h + 1) * hd] = torch.eye(hd)
        o = layer.o_proj.weight[:, h * group * hd:(h + 1) * group * hd]
        o.zero_()
        o[h * hd:(h + 1) * hd, :hd] = gain * 0.02 * torch.eye(hd)
    layer.down_proj.weight.zero_()
    return dict(match_scale=round(s, 3), static_dims=n)
