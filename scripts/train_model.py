#!/usr/bin/python3
"""Trains Tandem's own small Llama-architecture models from scratch and writes them as
Hugging Face checkpoints (see models/tandem-demo/README.md and models/tandem-long/README.md).

Usage (Debian's python3-torch; paths are relative to the repository root):

    # tandem-demo: BPE tokenizer + 1024-context model trained from scratch
    /usr/bin/python3 scripts/train_model.py --preset demo --steps 1330 --batch 1 --lr 1.5e-3 \
        --skip-generated --out models/tandem-demo --work /work/train/demo
    # tandem-long: initialised from tandem-demo, continued on 4096-token windows
    /usr/bin/python3 scripts/train_model.py --preset long --steps 56 --skip-generated \
        --init-from models/tandem-demo --out models/tandem-long --work /work/train/long

The model cards give the exact commands and step counts of the committed models.  Debian's
python3-torch multiplies matrices with the reference (netlib) BLAS, about 3 GFLOP/s on two
cores; OpenBLAS is 10-15x faster without changing anything else.  To use it without touching
the system: `apt-get download libopenblas0-pthread && dpkg -x libopenblas0-pthread_*.deb ob`
and run with LD_LIBRARY_PATH=$PWD/ob/usr/lib/x86_64-linux-gnu/openblas-pthread.

Only PyTorch and NumPy are needed: the byte-level BPE trainer/encoder, the tokenizer.json
and the safetensors writer are all implemented below.  Everything is deterministic given
--seed (data order, initialisation, sampling of training windows).

Stages (each run does all of them; the tokenizer, the tokenized corpus and, with --resume,
the finished training steps are reused from <work>):
1. Corpus: every *.py under /usr/lib/python3.11 (the Python standard library, Debian's
   libpython3.11-stdlib and friends), split by file: a file is held out when the first
   four bytes of sha1(relative path) mod 100 are < 5.  The held-out list is written to
   <out>/heldout-files.txt.
2. Tokenizer (demo only; long reuses the demo's): byte-level BPE trained on a seeded sample
   of at least --bpe-sample-mb (4) MB of the training files, GPT-2 pre-tokenizer regex,
   3 special tokens (<|endoftext|> = BOS/EOS, <|im_start|>, <|im_end|>), vocabulary 4096.
3. Training: AdamW, warmup + cosine decay, windows at seeded random offsets of the stream
   of training files (each prefixed by <|endoftext|>, in a seeded shuffled order; with
   --skip-generated without the generated tables of is_generated); the demo preset uses
   256-token windows for the first 75% of the steps, then full 1024-token ones.
   Checkpoints (model + optimiser + step + RNG states) go to <work>/ckpt.pt every
   --save-every steps; --resume continues from there.
4. Export: config.json, model.safetensors (F32), tokenizer.json, tokenizer_config.json
   (ChatML template), generation_config.json, and the C++ test fixture
   tests/fixtures/trained/<name>.json (float64 logits of the saved weights for a held-out
   snippet + token ids of held-out strings).
5. Evaluation (eval mode, float32): held-out perplexity, written to <out>/eval.json.
"""

import argparse
import hashlib
import heapq
import json
import math
import os
import re
import struct
import sys
import time
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS_ROOT = "/usr/lib/python3.11"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BOS = EOS = 0  # <|endoftext|> separates (and starts) documents
EVAL_SEGMENTS = 48  # 1024-token segments of held-out text scored for the demo
CLI_SEGMENTS = 16  # segments of the `tandem perplexity` cross-check

# GPT-2's pre-tokenizer regex as Python `re` can write it (no \p{..}): letters are
# [^\W\d_], numbers \d, "other" is [^\s\w] or '_'.  For ASCII text it splits exactly like
# "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+".
PRETOKENIZE = re.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")

PRESETS = {
    # ~5.5M parameters (22 MB in F32).  Every step sees batch * seq tokens; the first
    # short_frac of the steps use windows of short_seq tokens (attention is the costly part
    # on a CPU), the rest full-length windows.
    "demo": dict(hidden=256, layers=6, heads=8, kv_heads=4, ffn=704, vocab=4096,
                 max_pos=1024, rope_theta=10000.0, seq=1024, batch=4, lr=3e-3,
                 warmup=30, min_lr_frac=0.1, short_seq=256, short_frac=0.75),
    # Same shape, continued on 4096-token windows.
    "long": dict(hidden=256, layers=6, heads=8, kv_heads=4, ffn=704, vocab=4096,
                 max_pos=4096, rope_theta=10000.0, seq=4096, batch=1, lr=5e-4,
                 warmup=3, min_lr_frac=0.1, short_seq=4096, short_frac=0.0),
}


# ----------------------------------------------------------------------------- corpus

def corpus_files():
    """All .py files of the corpus as sorted paths relative to CORPUS_ROOT."""
    out = []
    for d, dirs, files in os.walk(CORPUS_ROOT):
        dirs.sort()
        out += [os.path.relpath(os.path.join(d, f), CORPUS_ROOT)
                for f in sorted(files) if f.endswith(".py")]
    return sorted(out)


def is_heldout(rel):
    return int.from_bytes(hashlib.sha1(rel.encode()).digest()[:4], "little") % 100 < 5


def read_text(rel):
    with open(os.path.join(CORPUS_ROOT, rel), "rb") as f:
        return f.read().decode("utf-8", errors="replace")


# -------------------------------------------------------------------------- tokenizer

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


def tokenizer_json(vocab, merges):
    """The tokenizer in Hugging Face `tokenizers` JSON format."""
    added = [dict(id=vocab[s], content=s, single_word=False, lstrip=False, rstrip=False,
                  normalized=False, special=True) for s in SPECIALS]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                          "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": SPECIALS[BOS], "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {SPECIALS[BOS]: {"id": SPECIALS[BOS], "ids": [BOS],
                                               "tokens": [SPECIALS[BOS]]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for a, b in merges]},
    }


CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tokenizer_config():
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIALS[BOS],
        "eos_token": SPECIALS[EOS],
        "unk_token": None,
        "pad_token": SPECIALS[EOS],
        "additional_special_tokens": SPECIALS[1:],
        "model_max_length": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
    }


# ------------------------------------------------------------------------------ model

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

    def forward(self, ids):
        T = ids.shape[1]
        p = next(self.parameters())
        cos, sin = rope_tables(T, self.c["hidden"] // self.c["heads"], self.c["rope_theta"],
                               p.dtype, p.device)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.norm(x) @ self.embed_tokens.weight.t()  # tied output projection


def hf_name(name):
    """Our parameter name -> the Hugging Face Llama tensor name."""
    for part in ("q_proj", "k_proj", "v_proj", "o_proj"):
        name = name.replace("." + part, ".self_attn." + part)
    for part in ("gate_proj", "up_proj", "down_proj"):
        name = name.replace("." + part, ".mlp." + part)
    return "model." + name


# ------------------------------------------------------------------------ safetensors

def write_safetensors(path, tensors):
    """tensors: dict name -> float32 torch tensor.  Header keys in sorted order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4")
        raw = data.tobytes()
        header[name] = {"dtype": "F32", "shape": list(data.shape),
                        "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32"
        a, b = t["data_offsets"]
        out[name] = torch.from_numpy(
            np.frombuffer(data[a:b], dtype="<f4").reshape(t["shape"]).copy())
    return out


def hf_config(c):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": c["hidden"],
        "intermediate_size": c["ffn"],
        "num_hidden_layers": c["layers"],
        "num_attention_heads": c["heads"],
        "num_key_value_heads": c["kv_heads"],
        "head_dim": c["hidden"] // c["heads"],
        "vocab_size": c["vocab"],
        "max_position_embeddings": c["max_pos"],
        "rope_theta": c["rope_theta"],
        "rope_scaling": None,
        "rms_norm_eps": 1e-5,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": True,
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "torch_dtype": "float32",
        "initializer_range": 0.02,
    }


# --------------------------------------------------------------------------- pipeline

def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def load_or_build_corpus(args, c, bpe):
    """Token ids of every corpus file (cached in <work>/corpus.npz) and the split."""
    cache = os.path.join(args.work, "corpus.npz")
    files = corpus_files()
    if os.path.exists(cache):
        z = np.load(cache, allow_pickle=False)
        return list(z["files"]), z["ids"], z["offsets"]
    log(f"tokenizing {len(files)} files")
    parts, offsets = [], [0]
    for rel in files:
        ids = np.asarray(bpe.encode(read_text(rel)), dtype=np.uint16)
        parts.append(ids)
        offsets.append(offsets[-1] + len(ids))
    ids = np.concatenate(parts)
    np.savez(cache, files=np.array(files), ids=ids, offsets=np.array(offsets))
    return files, ids, np.array(offsets)


def file_ids(all_ids, offsets, i):
    return all_ids[offsets[i]:offsets[i + 1]]


def is_generated(rel):
    """Generated data tables rather than code: the codec tables of encodings/, the HTML
    entity table and pydoc's help-topic text (together about a fifth of the tokens)."""
    return (rel.startswith("encodings/") and rel != "encodings/__init__.py") or \
        rel in ("pydoc_data/topics.py", "html/entities.py")


def make_stream(files, all_ids, offsets, seed, skip_generated):
    """Training files in a seeded shuffled order, each prefixed by <|endoftext|>."""
    order = [i for i, f in enumerate(files)
             if not is_heldout(f) and not (skip_generated and is_generated(f))]
    g = np.random.default_rng(seed)
    g.shuffle(order)
    parts = []
    for i in order:
        parts.append(np.array([BOS], dtype=np.uint16))
        parts.append(file_ids(all_ids, offsets, i))
    return torch.from_numpy(np.concatenate(parts).astype(np.int64))


def lr_at(step, c, steps):
    if step < c["warmup"]:
        return c["lr"] * (step + 1) / c["warmup"]
    t = (step - c["warmup"]) / max(1, steps - c["warmup"])
    return c["lr"] * (c["min_lr_frac"] + (1 - c["min_lr_frac"]) * 0.5 * (1 + math.cos(math.pi * t)))


def train(args, c, model, stream):
    ckpt = os.path.join(args.work, "ckpt.pt")
    decay = [p for n, p in model.named_parameters() if not n.endswith("norm.weight")]
    keep = [p for n, p in model.named_parameters() if n.endswith("norm.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": keep, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(0.9, 0.95), eps=1e-8)
    gen = torch.Generator().manual_seed(args.seed + 1)
    step, seen, spent = 0, 0, 0.0
    if args.resume and os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        gen.set_state(st["gen"])
        step, seen, spent = st["step"], st["tokens"], st["seconds"]
        log(f"resumed at step {step}")

    def save():
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
                    "step": step, "tokens": seen, "seconds": spent}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)

    model.train()
    t0 = time.time()
    while step < min(args.steps, args.stop_at or args.steps):
        seq = c["short_seq"] if step < c["short_frac"] * args.steps else c["seq"]
        batch = c["batch"] * c["seq"] // seq
        starts = torch.randint(0, len(stream) - seq - 1, (batch,), generator=gen)
        win = torch.stack([stream[s:s + seq + 1] for s in starts.tolist()]).to(args.device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, c, args.steps)
        logits = model(win[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, c["vocab"]), win[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += c["batch"] * c["seq"]
        now = time.time()
        spent += now - t0
        t0 = now
        if step % 10 == 0 or step == 1:
            lr = lr_at(step - 1, c, args.steps)
            log(f"step {step}/{args.steps} loss {loss.item():.4f} lr {lr:.2e}"
                f" tokens {seen} {seen / spent:.0f} tok/s elapsed {spent / 60:.1f} min")
        if step % args.save_every == 0 or step in (args.steps, args.stop_at):
            save()
    return seen, spent


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


def write_fixture(args, c, name, bpe, files, all_ids, offsets):
    """tests/fixtures/trained/<name>.json: float64 logits of the saved weights for a held-out
    snippet at a few positions, and the ids of a few held-out strings."""
    tensors = read_safetensors(os.path.join(args.out, "model.safetensors"))
    ref = Llama(c).double()
    ours = {hf_name(n): n for n, _ in ref.named_parameters()}
    ref.load_state_dict({ours[k]: v.double() for k, v in tensors.items()})
    ref.eval()
    held = [i for i, f in enumerate(files) if is_heldout(f)]
    # The long model's snippet reaches past the demo's 1024 positions.
    n_prompt = 1536 if c["max_pos"] >= 4096 else 40
    src = next(i for i in held if offsets[i + 1] - offsets[i] >= n_prompt)
    first = files[src]
    prompt = [BOS] + [int(t) for t in file_ids(all_ids, offsets, src)[:n_prompt - 1]]
    with torch.no_grad():
        logits = ref(torch.tensor(prompt)[None])[0]
    rows = sorted({0, 1, len(prompt) // 2, len(prompt) - 2, len(prompt) - 1})
    strings = []
    for i in held[:4]:
        text = read_text(files[i])
        strings.append(text[:400])
    strings.append("def fibonacci(n):\n    if n < 2:\n        return n\n")
    fixture = {
        "model": os.path.relpath(args.out, REPO),
        "source": f"{CORPUS_ROOT}/{first} (held out)",
        "prompt_ids": prompt,
        "positions": rows,
        "vocab": c["vocab"],
        "logits": [[float(f"{v:.9g}") for v in logits[r].tolist()] for r in rows],
        "strings": [{"text": s, "ids": bpe.encode(s)} for s in strings],
    }
    d = os.path.join(REPO, "tests", "fixtures", "trained")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{name}.json"), "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("--steps", type=int, required=True, help="total optimiser steps")
    ap.add_argument("--out", required=True, help="model folder to write")
    ap.add_argument("--work", required=True, help="scratch folder (cache, checkpoint)")
    ap.add_argument("--init-from", help="model folder whose weights and tokenizer to start from")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--resume", action="store_true", help="continue from <work>/ckpt.pt")
    ap.add_argument("--stop-at", type=int,
                    help="stop (checkpoint, export, evaluate) at this step; --steps still sets "
                         "the learning-rate schedule and the switch to full-length windows")
    ap.add_argument("--save-every", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bpe-sample-mb", type=float, default=4.0)
    ap.add_argument("--batch", type=int, help="full-length windows per step (preset default)")
    ap.add_argument("--lr", type=float, help="peak learning rate (preset default)")
    ap.add_argument("--skip-generated", action="store_true",
                    help="train without generated tables (see is_generated)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    c = dict(PRESETS[args.preset])
    c.update({k: getattr(args, k) for k in ("batch", "lr") if getattr(args, k) is not None})
    name = os.path.basename(os.path.normpath(args.out))
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    # Tokenizer: trained here for a fresh model, else taken from --init-from.
    tok_src = args.init_from or args.work
    tok_path = os.path.join(tok_src, "tokenizer.json")
    if not os.path.exists(tok_path):
        files = [f for f in corpus_files() if not is_heldout(f)]
        g = np.random.default_rng(args.seed)
        sample, size = [], 0
        for i in g.permutation(len(files)):
            if size >= args.bpe_sample_mb * 1e6:
                break
            t = read_text(files[i])
            sample.append(t)
            size += len(t)
        log(f"training BPE on {size / 1e6:.1f} MB ({len(sample)} files)")
        vocab, merges = train_bpe(sample, c["vocab"])
        with open(tok_path, "w") as f:
            json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False)
        log(f"BPE done: {len(vocab)} tokens")
    with open(tok_path) as f:
        tj = json.load(f)
    bpe = Bpe(tj["model"]["vocab"], [tuple(m) for m in tj["model"]["merges"]])

    files, all_ids, offsets = load_or_build_corpus(args, c, bpe)
    with open(os.path.join(args.out, "heldout-files.txt"), "w") as f:
        f.write("".join(f"{CORPUS_ROOT}/{r}\n" for r in files if is_heldout(r)))
    stream = make_stream(files, all_ids, offsets, args.seed, args.skip_generated)
    log(f"{len(files)} files, {len(all_ids)} tokens, training stream {len(stream)} tokens,"
        f" {sum(len(read_text(r).encode()) for r in files) / len(all_ids):.2f} bytes/token")

    model = Llama(c)
    model.init_weights()
    if args.init_from:
        t = read_safetensors(os.path.join(args.init_from, "model.safetensors"))
        ours = {hf_name(n): n for n, _ in model.named_parameters()}
        model.load_state_dict({ours[k]: v for k, v in t.items()})
    model.to(args.device)
    log(f"{sum(p.numel() for p in model.parameters())} parameters")
    seen, spent = train(args, c, model, stream)
    model.cpu()

    # Export the Hugging Face checkpoint.
    write_safetensors(os.path.join(args.out, "model.safetensors"),
                      {hf_name(n): p for n, p in model.named_parameters()})
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(hf_config(c), f, indent=2)
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tokenizer_config(), f, indent=2)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": BOS, "eos_token_id": [EOS, tj["model"]["vocab"]["<|im_end|>"]]},
                  f, indent=2)
    write_fixture(args, c, name, bpe, files, all_ids, offsets)
    log("exported; evaluating")
    res = evaluate(args, c, model, bpe, files, all_ids, offsets)
    res.update(steps=args.steps, tokens_seen=seen, train_seconds=round(spent, 1),
               params=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(res, f, indent=2)
    log(json.dumps(res))


if __name__ == "__main__":
    sys.exit(main())
