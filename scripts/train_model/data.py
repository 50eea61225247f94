"""The data pipeline: every corpus file tokenized (cached in <work>/corpus.npz) and the training
stream of the training files.
"""
import os

import numpy as np
import torch

from .corpus import corpus_files, is_generated, is_heldout, read_text
from .log import log
from .settings import BOS


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


def make_heldout_stream(files, all_ids, offsets, skip_generated):
    """The held-out files in path order, each prefixed by <|endoftext|> (recall filler)."""
    parts = []
    for i, f in enumerate(files):
        if is_heldout(f) and not (skip_generated and is_generated(f)):
            parts += [np.array([BOS], dtype=np.uint16), file_ids(all_ids, offsets, i)]
    return torch.from_numpy(np.concatenate(parts).astype(np.int64))
