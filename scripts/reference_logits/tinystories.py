"""The TinyStories prompt and its BPE, re-implemented from tokenizer.json (normalizer: prepend
'\u2581', ' ' -> '\u2581'; no pre-tokenizer; lowest-rank-first merges).
"""
import json
import os

from .settings import TINYSTORIES

TINY_TEXT = "Once upon a time, there was a little girl named Lily. She liked to"


def tinystories_tokenizer():
    with open(os.path.join(TINYSTORIES, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    m = tj["model"]
    assert m["type"] == "BPE" and tj["pre_tokenizer"] is None
    vocab = m["vocab"]
    ranks = {}
    for i, mg in enumerate(m["merges"]):
        a, b = mg.split(" ") if isinstance(mg, str) else mg
        ranks[(a, b)] = i
    inv = {i: s for s, i in vocab.items()}

    def encode(text):
        s = "\u2581" + text.replace(" ", "\u2581")  # normalizer: Prepend('▁'), Replace(' ', '▁')
        parts = list(s)
        while True:
            best = None
            for i in range(len(parts) - 1):
                r = ranks.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        for p in parts:
            assert p in vocab, "token %r not in vocab" % p
        return [1] + [vocab[p] for p in parts]  # TemplateProcessing: <|start_story|> $A

    def decode(ids):
        return "".join(inv[i] for i in ids).replace("\u2581", " ")

    return encode, decode
