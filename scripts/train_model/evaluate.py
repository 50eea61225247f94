"""Held-out perplexities of the trained model (eval mode, float32)."""
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from .corpus import is_heldout, read_text
from .data import file_ids
from .settings import BOS, CLI_SEGMENTS, EVAL_SEGMENTS


@torch.no_grad()
def token_nll(model, ids):
    """Per-position NLL (float64 numpy) of ids[1:] given the prefix, one window."""
    x = torch.tensor(ids, dtype=torch.long)[None]
    logits = model(x[:, :-1]).double()
    return F.cross_entropy(logits[0], x[0, 1:], reduction="none").numpy()


def evaluate(args, c, model, bpe, files, all_ids, offsets):
    """Held-out perplexities (eval mode, float32).
    demo: the held-out files concatenated into one text (<work>/heldout.txt), cut into
      segments of <|endoftext|> + 1023 tokens, every position after the first scored, over
      the first EVAL_SEGMENTS segments ("heldout_ppl"; a CPU-time budget) and over the first
      CLI_SEGMENTS, the figure of `tandem perplexity --file <work>/heldout.txt --ctx 1024
      --prefill 1 --max-segments 16` ("cli_protocol_ppl").
    long: the first 4096 tokens (after <|endoftext|>) of every held-out file of at least
      4096 tokens, per position; perplexity over all positions, over [0, 512), over
      [3072, 4096) and per 512-position bucket."""
    model.eval()
    held = [i for i, f in enumerate(files) if is_heldout(f)]
    res = {"heldout_files": len(held)}
    if c["max_pos"] < 4096:
        text = "".join(read_text(files[i]) for i in held)
        with open(os.path.join(args.work, "heldout.txt"), "w") as f:
            f.write(text)
        ids = bpe.encode(text)
        body = c["max_pos"] - 1
        nll = [token_nll(model, [BOS] + ids[s:s + body]).mean()
               for s in range(0, min(len(ids) - body + 1, EVAL_SEGMENTS * body), body)]
        res.update(heldout_text_tokens=len(ids), heldout_segments=len(nll),
                   heldout_ppl=math.exp(np.mean(nll)),
                   cli_segments=CLI_SEGMENTS,
                   cli_protocol_ppl=math.exp(np.mean(nll[:CLI_SEGMENTS])))
    else:
        long_files = [i for i in held if offsets[i + 1] - offsets[i] >= 4096]
        acc = np.zeros(4096)
        for i in long_files:
            ids = np.concatenate([[BOS], file_ids(all_ids, offsets, i)[:4096]]).astype(np.int64)
            acc += token_nll(model, ids)  # position p predicts token p+1 of the window
        acc /= len(long_files)
        res.update(long_files=[files[i] for i in long_files],
                   heldout_tokens=4096 * len(long_files),
                   heldout_ppl=math.exp(acc.mean()),
                   ppl_pos_0_512=math.exp(acc[:512].mean()),
                   ppl_pos_3072_4096=math.exp(acc[3072:].mean()),
                   ppl_by_512=[math.exp(acc[s:s + 512].mean()) for s in range(0, 4096, 512)])
    model.train()
    return res
