"""The passkey-retrieval task of the recall preset: a five-digit passkey hidden as a comment line
at a chosen depth of Python filler text, then a question whose answer is the passkey.

A prompt of context N at depth D (0 = right after <|endoftext|>, 1 = right before the question):

    <|endoftext|>{filler before}# The passkey is 48213. Remember it.
    {filler after}# What is the passkey? The passkey is

and the answer is " 48213" (3-5 tokens).  The filler is a run of consecutive tokens of the
corpus stream decoded to text and cut after its last newline; the needle goes at the line start
nearest to D of the filler's characters.  The whole prompt text is encoded at once, so
prompt_ids == [<|endoftext|>] + encode(prompt) and the C++ tokenizer gives the same ids for the
text; len(prompt_ids) + len(answer_ids) == N (rarely N - 1 or N - 2, when cutting the filler
one token shorter re-encodes its first characters differently).  Training samples come from the
training stream, evaluation samples from the held-out files; every sample is a function of a
seeded generator only.
"""
import json
import math
import os
import re

import numpy as np
import torch
import torch.nn.functional as F

from .model import rope_tables, rotate_half
from .settings import BOS
from .tokenizer import BYTE_MAP, SPECIALS

QUESTION = "# What is the passkey? The passkey is"


def needle(key):
    return f"# The passkey is {key}. Remember it.\n"


class Decoder:
    """Token ids -> text, with <|endoftext|> (a document separator in the stream) as a blank
    line, so that filler text never contains a special token."""

    def __init__(self, vocab):
        unmap = {c: b for b, c in BYTE_MAP.items()}
        self.bytes = [b""] * len(vocab)
        for tok, i in vocab.items():
            self.bytes[i] = b"\n\n" if tok in SPECIALS else bytes(unmap[ch] for ch in tok)

    def __call__(self, ids):
        return b"".join(self.bytes[i] for i in ids).decode("utf-8", errors="replace")


def word_keys(bpe):
    """The one-token passkeys of answer="word": lower-case words of 4+ letters that are a single
    token after a space, and stay that token inside the needle and as the answer, sorted."""
    out = []
    for tok, i in bpe.vocab.items():
        if not re.fullmatch("\u0120[a-z]{4,}", tok):
            continue
        w = tok[1:]
        if bpe.encode(" " + w) == [i] and i in bpe.encode(needle(w)):
            out.append(w)
    return sorted(out)


class PasskeyTask:
    def __init__(self, bpe, stream, answer="digits"):
        """stream: int64 tensor of token ids the filler is cut from.  answer: "digits" (a
        five-digit number, 3-5 tokens) or "word" (one token of word_keys)."""
        self.bpe = bpe
        self.stream = stream.numpy() if torch.is_tensor(stream) else np.asarray(stream)
        self.decode = Decoder(bpe.vocab)
        self.n_fixed = 1 + len(bpe.encode(needle(10000) + QUESTION))
        self.answer = answer
        self.words = word_keys(bpe) if answer == "word" else None
        if answer not in ("digits", "word"):
            raise ValueError(f"answer must be digits or word, not {answer!r}")

    def key(self, rng):
        if self.words is not None:
            return self.words[int(rng.integers(len(self.words)))]
        return int(rng.integers(10000, 100000))

    def sample(self, rng, n_ctx, depth):
        """One prompt of n_ctx - len(answer) tokens.  Returns a dict with prompt_ids,
        answer_ids, prompt, answer, the needle's first token index and the depth asked."""
        key = self.key(rng)
        answer = f" {key}"
        answer_ids = self.bpe.encode(answer)
        want = n_ctx - len(answer_ids)
        n_fill = want - self.n_fixed + 8  # the last partial line is cut off
        end = int(rng.integers(n_fill, len(self.stream)))
        best = None
        for it in range(24):
            text = self.decode(self.stream[end - n_fill:end].tolist())
            text = text[:text.rfind("\n") + 1]
            starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
            at = min(starts, key=lambda s: abs(s - depth * len(text)))
            prompt = text[:at] + needle(key) + text[at:] + QUESTION
            ids = [BOS] + self.bpe.encode(prompt)
            if len(ids) <= want and (best is None or len(ids) > len(best[0])):
                best = (ids, prompt, text, at)
            if len(ids) == want:
                break
            # Move the filler's start by the excess; after 8 tries (re-encoding at the cut can
            # oscillate) by one token at a time towards a prompt that fits.
            excess = len(ids) - want
            n_fill -= excess if it < 8 else (1 if excess > 0 else -1)
            n_fill = min(end, n_fill)
        if best is None:
            raise RuntimeError(f"no prompt of at most {want} tokens for context {n_ctx}")
        ids, prompt, text, at = best  # len(ids) == want but for the rare prompt a token short
        pos = 1 + len(self.bpe.encode(text[:at]))
        return dict(prompt_ids=ids, answer_ids=answer_ids, prompt=prompt, answer=answer,
                    needle_pos=pos, depth=depth)

    def batch(self, rng, n_ctx, batch):
        """A training batch: (inputs, targets, answer mask), shapes (batch, n_ctx - 1); rows
        shorter than n_ctx are padded at the end with <|endoftext|> and target -100."""
        x = torch.full((batch, n_ctx), BOS, dtype=torch.long)
        tgt = torch.full((batch, n_ctx - 1), -100, dtype=torch.long)
        ans = torch.zeros(batch, n_ctx - 1, dtype=torch.bool)
        for b in range(batch):
            s = self.sample(rng, n_ctx, float(rng.random()))
            seq = s["prompt_ids"] + s["answer_ids"]
            x[b, :len(seq)] = torch.tensor(seq)
            tgt[b, :len(seq) - 1] = torch.tensor(seq[1:])
            ans[b, len(s["prompt_ids"]) - 1:len(seq) - 1] = True
        return x[:, :-1], tgt, ans


def recall_loss(logits, tgt, ans, answer_weight):
    """Language-model loss over every real token + answer_weight x the loss of the answer
    tokens alone (the retrieval signal is 3-4 tokens of a window); returns (loss, answer
    loss)."""
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                          reduction="none").view(tgt.shape)
    real = tgt != -100
    ans_loss = nll[ans].mean()
    return nll[real].mean() + answer_weight * ans_loss, ans_loss.detach()


def phase_at(step, steps, curriculum):
    """(context length, prompts) of a training step: curriculum is a list of (fraction of the
    steps at which a phase starts, context length, prompts per step), in order."""
    phase = curriculum[0][1:]
    for frac, n_ctx, batch in curriculum:
        if step >= frac * steps:
            phase = (n_ctx, batch)
    return phase


@torch.no_grad()
def logits_from(model, x, first):
    """Logits (B, T - first, vocab) of the positions first.. of x (B, T), as model(x)[:, first:]
    gives them: every layer but the last runs over all positions, the last layer's queries,
    MLP and the output projection only from position first on (a quarter of the work of a
    4096-token forward that the answer check does not need)."""
    B, T = x.shape
    last = model.layers[-1]
    H, G, hd = last.heads, last.kv_heads, last.hd
    cos, sin = rope_tables(T, hd, model.c["rope_theta"], torch.float32, x.device)
    h = model.embed_tokens(x)
    for layer in model.layers[:-1]:
        h = layer(h, cos, sin)
    a = last.input_layernorm(h)
    n_q = T - first
    q = last.q_proj(a[:, first:]).view(B, n_q, H, hd).transpose(1, 2)
    k = last.k_proj(a).view(B, T, G, hd).transpose(1, 2)
    v = last.v_proj(a).view(B, T, G, hd).transpose(1, 2)
    q = (q * cos[first:] + rotate_half(q) * sin[first:]) * (1.0 / math.sqrt(hd))
    k = k * cos + rotate_half(k) * sin
    # Query head h uses KV head h // (H / G), as in Block.attention.
    q = q.reshape(B, G, H // G * n_q, hd)
    sc = (q @ k.transpose(-1, -2)).view(B, G, H // G, n_q, T)
    mask = torch.ones(n_q, T, dtype=torch.bool, device=x.device).triu(first + 1)
    p = torch.softmax(sc.masked_fill(mask, float("-inf")), dim=-1)
    o = (p.view(B, G, H // G * n_q, T) @ v).view(B, H, n_q, hd)
    h = h[:, first:] + last.o_proj(o.transpose(1, 2).reshape(B, n_q, H * hd))
    a = last.post_attention_layernorm(h)
    h = h + last.down_proj(F.silu(last.gate_proj(a)) * last.up_proj(a))
    return model.norm(h) @ model.embed_tokens.weight.t()


@torch.no_grad()
def answer_correct(model, samples):
    """Greedy decoding gives the answer iff the argmax at every answer position, given the
    prompt and the answer so far, is the answer token: one forward pass per sample (rows
    padded at the end, which causal attention never sees).  Returns (answer right, first answer
    token right) per sample."""
    seqs = [s["prompt_ids"] + s["answer_ids"] for s in samples]
    n = max(len(q) for q in seqs)
    x = torch.full((len(seqs), n), BOS, dtype=torch.long)
    for i, q in enumerate(seqs):
        x[i, :len(q)] = torch.tensor(q)
    first = min(len(s["prompt_ids"]) for s in samples) - 1
    logits = logits_from(model, x[:, :-1], first)
    out = []
    for i, s in enumerate(samples):
        p, a = len(s["prompt_ids"]) - 1 - first, s["answer_ids"]
        pred = logits[i, p:p + len(a)].argmax(-1).tolist()
        out.append((pred == a, pred[0] == a[0]))
    return out


def evaluate_recall(args, c, model, task, log):
    """Dense greedy accuracy (eval mode, float32) per (context, depth) cell on held-out
    filler, and how often the first answer token is right; c["eval_n"] samples per cell from
    seed c["eval_seed"]; the first c["jsonl_n"] of every cell are written to
    <out>/recall-eval.jsonl."""
    model.eval()
    cells, rows = [], []
    for n_ctx in c["eval_contexts"]:
        for depth in c["eval_depths"]:
            rng = np.random.default_rng([c["eval_seed"], n_ctx, int(round(depth * 100))])
            samples = [task.sample(rng, n_ctx, depth) for _ in range(c["eval_n"])]
            per = max(1, 4096 // n_ctx)
            ok = []
            for i in range(0, len(samples), per):
                ok += answer_correct(model, samples[i:i + per])
            first = sum(f for _, f in ok)
            ok = [a for a, _ in ok]
            cells.append(dict(context=n_ctx, depth=depth, n=len(ok), correct=sum(ok),
                              accuracy=sum(ok) / len(ok), first_token_correct=first))
            log(f"recall context {n_ctx} depth {depth:.2f}: {sum(ok)}/{len(ok)}"
                f" (first token {first})")
            for s, good in list(zip(samples, ok))[:c["jsonl_n"]]:
                rows.append(dict(context=n_ctx, depth=depth, needle_pos=s["needle_pos"],
                                 prompt_ids=s["prompt_ids"], answer_ids=s["answer_ids"],
                                 prompt=s["prompt"], answer=s["answer"], pytorch_correct=good))
    with open(os.path.join(args.out, "recall-eval.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
    by_ctx = {}
    for cell in cells:
        by_ctx.setdefault(cell["context"], []).append(cell)
    summary = {str(n): sum(x["correct"] for x in v) / sum(x["n"] for x in v)
               for n, v in by_ctx.items()}
    model.train()
    return dict(eval_seed=c["eval_seed"], samples_per_cell=c["eval_n"], cells=cells,
                accuracy_by_context=summary, jsonl_rows=len(rows))
