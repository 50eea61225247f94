"""Byte-level BPE: the trainer (merges by count, ties to the smallest pair) and the encoder that
applies the merges as Hugging Face `tokenizers` does.
"""
import heapq
import re
from collections import Counter

from .settings import SPECIALS

# GPT-2's pre-tokenizer regex as Python `re` can write it (no \p{..}): letters are
# [^\W\d_], numbers \d, "other" is [^\s\w] or '_'.  For ASCII text it splits exactly like
# "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+".
PRETOKENIZE = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_MAP = bytes_to_unicode()


def to_symbols(piece):
    return "".join(BYTE_MAP[b] for b in piece.encode("utf-8"))


def train_bpe(texts, vocab_size):
    """Byte-level BPE: returns (vocab dict token->id, merges list of (a, b))."""
    words = Counter()
    for t in texts:
        words.update(to_symbols(p) for p in PRETOKENIZE.findall(t))
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for b in range(256):
        vocab[BYTE_MAP[b]] = len(vocab)
    seqs = [list(w) for w in words]
    counts = list(words.values())
    pairs = Counter()
    where = {}
    for i, s in enumerate(seqs):
        for p in zip(s, s[1:]):
            pairs[p] += counts[i]
            where.setdefault(p, set()).add(i)
    # Max-heap on (count, then smallest pair) with lazy invalidation.
    heap = [(-c, p) for p, c in pairs.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < vocab_size and heap:
        negc, best = heapq.heappop(heap)
        if pairs.get(best, 0) != -negc or negc == 0:
            continue
        merges.append(best)
        new = best[0] + best[1]
        vocab[new] = len(vocab)
        changed = set()
        for i in sorted(where.pop(best, ())):
            s, c = seqs[i], counts[i]
            for p in zip(s, s[1:]):
                pairs[p] -= c
                changed.add(p)
            out, j = [], 0
            while j < len(s):
                if j + 1 < len(s) and s[j] == best[0] and s[j + 1] == best[1]:
                    out.append(new)
                    j += 2
                else:
                    out.append(s[j])
                    j += 1
            seqs[i] = out
            for p in zip(out, out[1:]):
                pairs[p] += c
                changed.add(p)
                where.setdefault(p, set()).add(i)
        pairs.pop(best, None)
        for p in changed:
            if p != best and pairs.get(p, 0) > 0:
                heapq.heappush(heap, (-pairs[p], p))
    return vocab, merges


class Bpe:
    """Encoder for the tokenizer trained above: pre-tokenize, then apply the merges in
    rank order inside each piece (lowest rank first), as Hugging Face `tokenizers` does."""

    def __init__(self, vocab, merges):
        self.vocab = vocab
        self.ranks = {tuple(m): r for r, m in enumerate(merges)}
        self.cache = {}

    def piece(self, sym):
        ids = self.cache.get(sym)
        if ids is not None:
            return ids
        parts = list(sym)
        while len(parts) > 1:
            best, at = None, -1
            for j in range(len(parts) - 1):
                r = self.ranks.get((parts[j], parts[j + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, j
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        ids = [self.vocab[p] for p in parts]
        self.cache[sym] = ids
        return ids

    def encode(self, text):
        out = []
        for p in PRETOKENIZE.findall(text):
            out += self.piece(to_symbols(p))
        return out

    def decode(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        unmap = {c: b for b, c in BYTE_MAP.items()}
        data = bytearray()
        for i in ids:
            tok = inv[i]
            if tok in SPECIALS:
                data += tok.encode()
            else:
                data += bytes(unmap[c] for c in tok)
        return data.decode("utf-8", errors="replace")
