"""The reference run: prefill plus greedy decode steps with an incremental KV cache,
cross-checked against a full recompute of the whole sequence.
"""
import torch

from .llama import LlamaFamily
from .opt import OPT
from .settings import DECODE_STEPS


def build_model(cfg, w):
    if cfg["model_type"] == "opt":
        return OPT(cfg, w)
    return LlamaFamily(cfg, w)


def run_reference(model, prompt):
    """Prefill + DECODE_STEPS greedy steps with an incremental KV cache.
    Returns (logits [P+16, V] float64, decode_ids, min top1-top2 margin over greedy choices)."""
    cache = model.new_cache()
    P = len(prompt)
    rows = [model.forward(prompt, 0, cache)]
    decode_ids = []
    margins = []
    last = rows[0][-1]
    for j in range(DECODE_STEPS):
        top2 = torch.topk(last, 2).values
        margins.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        decode_ids.append(nxt)
        out = model.forward([nxt], P + j, cache)
        rows.append(out)
        last = out[-1]
    logits = torch.cat(rows, dim=0)
    assert logits.shape == (P + DECODE_STEPS, model.vocab)
    # cross-check: a full recompute of the whole sequence without any cache gives the same rows
    full = model.forward(list(prompt) + decode_ids, 0, model.new_cache())
    err = float((full - logits).abs().max())
    assert err < 1e-9 * max(1.0, float(logits.abs().max())), "KV-cache / recompute mismatch %g" % err
    assert torch.isfinite(logits).all()
    return logits, decode_ids, min(margins)
