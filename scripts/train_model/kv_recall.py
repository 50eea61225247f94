"""The key-value recall task of the recall-kv preset: multi-query associative recall (MQAR, as in
the Zoology / H3 line of work) written as text lines `key: value`, where every key is one token
of the BPE vocabulary and every value one token.

A sequence is <|endoftext|> followed by lines

    self: Ġreturn\\n   ->   "self: return\\n"   (4 tokens: key, ":", value, "\\n")

drawn from a dictionary of m keys (m random per sequence), each key with one value; a key can
come back any number of times and always with its value.  Training: the loss is the value
token of every line whose key came before (the copy targets; first occurrences are random and
carry no loss), so every fourth token of a sequence can be a supervised copy at a distance of
anything from one line to the whole context.

Evaluation prompt of context N at depth D: (N - 4) / 4 lines, one of which (the needle, the
line at index round(D x (lines - 1)); D = 0: right after <|endoftext|>, D = 1: right before the
question) holds a key that no other line has, then the question `key:`; the answer is the
needle's value (one token).  The other lines come from the training distribution.  The prompt
text re-encodes to exactly prompt_ids[1:] (every line is four pre-tokens of the GPT-2 regex,
each a single token; checked for every sample), and len(prompt_ids) + 1 == N.  Every sample
is a function of a seeded generator only.
"""
import re

import numpy as np
import torch
import torch.nn.functional as F

from .settings import BOS



def kv_vocab(bpe):
    """(keys, values): the key tokens (2+ ASCII letters, no leading space, one token at a line
    start before ":") and the value tokens (a space + 2+ ASCII letters, one token after ": "),
    as sorted lists of token strings; disjoint by construction."""
    v = bpe.vocab
    colon, newline = bpe.encode(":") + bpe.encode("\n")
    keys = sorted(t for t in v if re.fullmatch("[a-zA-Z]{2,}", t)
                  and bpe.encode(f"x\n{t}: y\n")[2:4] == [v[t], colon])
    values = sorted(t for t in v if re.fullmatch("\u0120[a-zA-Z]{2,}", t)
                    and bpe.encode(f"x: {t[1:]}\n")[2:4] == [v[t], newline])
    return keys, values


class KvTask:
    def __init__(self, bpe, min_keys_frac=1 / 16, pool=None, colon=True):
        """min_keys_frac: a sequence of L lines has a dictionary of m keys, m uniform in
        [max(2, L x min_keys_frac), min(L, keys)] (small m: many short-range repeats; large m:
        fewer, far ones).  pool: use only the pool keys and pool values of the lowest token ids
        (the BPE's earliest merges), or all of kv_vocab's when None.  colon: lines `key: value`
        (4 tokens), else `key value` (3 tokens: the value right after its key, the plain
        induction pattern)."""
        self.bpe = bpe
        keys, values = kv_vocab(bpe)
        if pool:
            keys = sorted(sorted(keys, key=bpe.vocab.get)[:pool])
            values = sorted(sorted(values, key=bpe.vocab.get)[:pool])
        self.key_text, self.value_text = keys, [t[1:] for t in values]
        self.key_ids = np.array([bpe.vocab[t] for t in keys])
        self.value_ids = np.array([bpe.vocab[t] for t in values])
        self.colon, self.newline = bpe.encode(":") + bpe.encode("\n")
        self.sep = ":" if colon else ""
        self.per_line = 4 if colon else 3  # tokens per line; the value is at per_line - 2
        self.min_keys_frac = min_keys_frac

    def lines(self, rng, n_lines, exclude=None):
        """n_lines random lines: (key index, value index) arrays, keys from a dictionary of m
        keys (not exclude), values fixed per key."""
        pool = len(self.key_ids) - (exclude is not None)
        lo = max(2, int(n_lines * self.min_keys_frac))
        m = int(rng.integers(lo, max(lo, min(n_lines, pool)) + 1))
        dic = rng.choice(pool, size=m, replace=False)
        if exclude is not None:
            dic = dic + (dic >= exclude)
        val = rng.integers(len(self.value_ids), size=m)
        pick = rng.integers(m, size=n_lines)
        return dic[pick], val[pick]

    def line_ids(self, keys, vals):
        out = np.empty((len(keys), self.per_line), dtype=np.int64)
        out[:, 0] = self.key_ids[keys]
        out[:, 1] = self.colon  # overwritten by the value without the colon
        out[:, -2] = self.value_ids[vals]
        out[:, -1] = self.newline
        return out.reshape(-1)

    def batch(self, rng, n_ctx, batch):
        """A training batch: (inputs, targets, copy mask), shapes (batch, n_ctx - 1); the mask
        marks the positions whose target is the value of a key seen earlier in the row."""
        L = self.per_line
        n_lines = -(-(n_ctx - 1) // L)
        x = torch.empty(batch, n_ctx, dtype=torch.long)
        mask = torch.zeros(batch, n_ctx - 1, dtype=torch.bool)
        for b in range(batch):
            keys, vals = self.lines(rng, n_lines)
            x[b, 0] = BOS
            x[b, 1:] = torch.from_numpy(self.line_ids(keys, vals)[:n_ctx - 1])
            first = np.zeros(n_lines, dtype=bool)
            first[np.unique(keys, return_index=True)[1]] = True
            # Line i's value is token 1 + L i + L - 2, predicted at the position before.
            at = 1 + L * np.nonzero(~first)[0] + L - 3
            mask[b, at[at < n_ctx - 1]] = True
        return x[:, :-1], x[:, 1:].clone(), mask

    def sample(self, rng, n_ctx, depth):
        """One evaluation prompt of n_ctx - 1 tokens (without the colon: as many whole lines as
        fit, n_ctx - 1 - (n_ctx % 3) tokens; see the module docstring): a dict with
        prompt_ids, answer_ids, prompt, answer, needle_pos (index of the needle's key token in
        prompt_ids) and depth."""
        L = self.per_line
        n_lines = (n_ctx - L) // L
        if n_lines < 1 or (L == 4 and n_ctx % 4):
            raise ValueError(f"context {n_ctx}: want 4 + 4 x lines tokens")
        needle = int(rng.integers(len(self.key_ids)))
        value = int(rng.integers(len(self.value_ids)))
        keys, vals = self.lines(rng, n_lines - 1, exclude=needle)
        at = int(round(depth * (n_lines - 1)))
        keys = np.insert(keys, at, needle)
        vals = np.insert(vals, at, value)
        ids = [BOS] + self.line_ids(keys, vals).tolist() + [int(self.key_ids[needle])]
        ids += [self.colon] if self.sep else []
        sep = self.sep
        prompt = "".join(f"{self.key_text[k]}{sep} {self.value_text[v]}\n"
                         for k, v in zip(keys, vals))
        prompt += f"{self.key_text[needle]}{sep}"
        answer = " " + self.value_text[value]
        if self.bpe.encode(prompt + answer) != ids[1:] + [int(self.value_ids[value])]:
            raise RuntimeError("a recall-kv prompt does not re-encode to its ids")
        return dict(prompt_ids=ids, answer_ids=[int(self.value_ids[value])], prompt=prompt,
                    answer=answer, needle_pos=1 + L * at, depth=depth)


def copy_loss(model, x, tgt, mask):
    """Cross-entropy of the copy targets alone, the output projection computed only at the
    masked positions; returns (loss, share of them the argmax gets right)."""
    h = model.hidden(x)[mask]
    logits = h @ model.embed_tokens.weight.t()
    t = tgt[mask]
    return F.cross_entropy(logits, t), (logits.argmax(-1) == t).float().mean().item()


@torch.no_grad()
def probe(model, task, contexts, n, seed):
    """Dense greedy accuracy on n evaluation prompts per context at depths spread over 0..1
    (a learning curve during training); {context: accuracy}."""
    from .recall import answer_correct
    was = model.training
    model.eval()
    out = {}
    for n_ctx in contexts:
        rng = np.random.default_rng([seed, n_ctx])
        samples = [task.sample(rng, n_ctx, i / max(1, n - 1)) for i in range(n)]
        per = max(1, 4096 // n_ctx)
        ok = []
        for i in range(0, n, per):
            ok += [a for a, _ in answer_correct(model, samples[i:i + per])]
        out[n_ctx] = sum(ok) / n
    model.train(was)
    return out
