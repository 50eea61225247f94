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
    # tandem-recall: tandem-long fine-tuned on passkey retrieval up to 4096 tokens
    /usr/bin/python3 scripts/train_model.py --preset recall --steps N --skip-generated \
        --init-from models/tandem-long --out models/tandem-recall --work /work/train/recall
    # tandem-recall (key-value recall, from scratch with tandem-demo's tokenizer and a planted
    # induction circuit; no corpus; the exact runs are in models/tandem-recall/README.md)
    /usr/bin/python3 scripts/train_model.py --preset recall-kv --steps 600 --threads 1 \
        --no-colon --rope-theta 1e8 --plant induction --out models/tandem-recall \
        --work /work/train/kv --probe-every 100

The model cards give the exact commands and step counts of the committed models.  Debian's
python3-torch multiplies matrices with the reference (netlib) BLAS, about 3 GFLOP/s on two
cores; OpenBLAS is 10-15x faster without changing anything else.  To use it without touching
the system: `apt-get download libopenblas0-pthread && dpkg -x libopenblas0-pthread_*.deb ob`
and run with LD_LIBRARY_PATH=$PWD/ob/usr/lib/x86_64-linux-gnu/openblas-pthread.

Only PyTorch and NumPy are needed: the byte-level BPE trainer/encoder, the tokenizer.json
and the safetensors writer are all implemented here (scripts/train_model/).  Everything is
deterministic given --seed (data order, initialisation, sampling of training windows).

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
   The recall preset trains instead on passkey prompts (train_model/recall.py): Python filler
   from the training stream with a passkey comment at a random depth and a question at the end,
   context lengths from a curriculum (short first), seeded by (--seed, step).  The recall-kv
   preset trains a fresh shallow model on key-value recall only (train_model/kv_recall.py:
   lines `key: value` of one-token keys and values, the loss on every value whose key came
   before), also from a curriculum of context lengths; it needs no corpus.
4. Export: config.json, model.safetensors (F32), tokenizer.json, tokenizer_config.json
   (ChatML template), generation_config.json, and the C++ test fixture
   tests/fixtures/trained/<name>.json (float64 logits of the saved weights for a held-out
   snippet + token ids of held-out strings).
5. Evaluation (eval mode, float32): held-out perplexity, written to <out>/eval.json; for the
   recall preset dense greedy passkey accuracy by context length and depth on held-out filler
   (<out>/eval.json) and the replayable prompts <out>/recall-eval.jsonl (the C++ fixture of
   step 4 is written for demo and long only); recall-kv the same with the question `key:`
   about a needle line at each depth among other key-value lines.

The stages live in the package scripts/train_model/ beside this entry (corpus, tokenizer, model,
data pipeline, training loop, export, evaluation); this file parses the arguments and runs them.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

from train_model.corpus import corpus_files, is_heldout, read_text
from train_model.data import load_or_build_corpus, make_heldout_stream, make_stream
from train_model.evaluate import evaluate
from train_model.export import export_checkpoint, write_fixture
from train_model.hf_format import hf_name, tokenizer_json
from train_model.circuits import plant_induction_head, plant_prev_token_head
from train_model.kv_recall import KvTask
from train_model.log import log
from train_model.model import Llama
from train_model.recall import PasskeyTask, evaluate_recall
from train_model.safetensors_io import read_safetensors
from train_model.settings import CORPUS_ROOT, PRESETS, REPO
from train_model.tokenizer import Bpe, train_bpe
from train_model.train_loop import train


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
    ap.add_argument("--eval-n", type=int, help="recall preset: prompts per cell (preset default)")
    ap.add_argument("--curriculum",
                    help="recall preset: phases as frac:context:prompts,... (preset default)")
    ap.add_argument("--answer", choices=["digits", "word"],
                    help="recall preset: the passkey, a five-digit number (3-5 tokens) or a "
                         "one-token word (preset default)")
    ap.add_argument("--no-eval", action="store_true",
                    help="stop after the export (a later --resume --stop-at <step> evaluates)")
    ap.add_argument("--layers", type=int, help="recall-kv: layers (preset default)")
    ap.add_argument("--rope-theta", type=float, help="recall-kv: RoPE theta (preset default)")
    ap.add_argument("--pool", type=int, help="recall-kv: keys and values used (preset default)")
    ap.add_argument("--no-colon", dest="colon", action="store_false", default=None,
                    help="recall-kv: lines `key value` instead of `key: value`")
    ap.add_argument("--init-embed-from",
                    help="recall-kv: model folder whose token embeddings (only) to start from")
    ap.add_argument("--plant", choices=["prev", "induction"],
                    help="recall-kv: start with layer 0's previous-token heads (prev), and also "
                         "layer 1's induction heads (induction), set by hand "
                         "(train_model/circuits.py)")
    ap.add_argument("--probe-every", type=int, default=0,
                    help="recall-kv: score evaluation prompts every N steps (0: never)")
    ap.add_argument("--no-ppl", action="store_true",
                    help="recall preset: skip the held-out perplexity after the recall evaluation")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    c = dict(PRESETS[args.preset])
    c.update({k: getattr(args, k) for k in ("batch", "lr", "layers", "rope_theta", "pool", "colon")
              if getattr(args, k) is not None})
    if args.eval_n is not None:
        c["eval_n"] = args.eval_n
    if args.answer is not None:
        c["answer"] = args.answer
    if args.curriculum:
        c["curriculum"] = [(float(f), int(n), int(b)) for f, n, b in
                           (p.split(":") for p in args.curriculum.split(","))]
    name = os.path.basename(os.path.normpath(args.out))
    os.makedirs(args.work, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    # Tokenizer: trained here for a fresh model, else taken from --init-from (recall-kv from
    # scratch: tandem-demo's, so that prompts are text the C++ tokenizer encodes the same way).
    kv = args.preset == "recall-kv"
    tok_src = args.init_from or (os.path.join(REPO, "models", "tandem-demo") if kv else args.work)
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

    if kv:
        return train_kv(args, c, tj, bpe)
    files, all_ids, offsets = load_or_build_corpus(args, c, bpe)
    with open(os.path.join(args.out, "heldout-files.txt"), "w") as f:
        f.write("".join(f"{CORPUS_ROOT}/{r}\n" for r in files if is_heldout(r)))
    stream = make_stream(files, all_ids, offsets, args.seed, args.skip_generated)
    log(f"{len(files)} files, {len(all_ids)} tokens, training stream {len(stream)} tokens,"
        f" {sum(len(read_text(r).encode()) for r in files) / len(all_ids):.2f} bytes/token")

    model = new_model(args, c)
    recall = args.preset == "recall"
    seen, spent = train(args, c, model, stream, PasskeyTask(bpe, stream, c["answer"]) if recall else None)
    model.cpu()

    # Export the Hugging Face checkpoint.
    export_checkpoint(args, c, model, tj)
    if not recall:
        write_fixture(args, c, name, bpe, files, all_ids, offsets)
    if args.no_eval:
        log("exported")
        return 0
    log("exported; evaluating")
    if recall:
        held = make_heldout_stream(files, all_ids, offsets, args.skip_generated)
        res = evaluate_recall(args, c, model, PasskeyTask(bpe, held, c["answer"]), log)
        if not args.no_ppl:
            res["perplexity"] = evaluate(args, c, model, bpe, files, all_ids, offsets)
    else:
        res = evaluate(args, c, model, bpe, files, all_ids, offsets)
    res.update(steps=args.steps, tokens_seen=seen, train_seconds=round(spent, 1),
               params=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(res, f, indent=2)
    log(json.dumps(res))


def new_model(args, c):
    model = Llama(c)
    model.init_weights()
    if args.init_from:
        t = read_safetensors(os.path.join(args.init_from, "model.safetensors"))
        ours = {hf_name(n): n for n, _ in model.named_parameters()}
        model.load_state_dict({ours[k]: v for k, v in t.items()})
    if getattr(args, "init_embed_from", None):
        t = read_safetensors(os.path.join(args.init_embed_from, "model.safetensors"))
        with torch.no_grad():
            model.embed_tokens.weight.copy_(t[hf_name("embed_tokens.weight")])
    if getattr(args, "plant", None) and not args.resume:
        log(f"planted previous-token heads: {plant_prev_token_head(model, c)}")
        if args.plant == "induction":
            log(f"planted induction heads: {plant_induction_head(model, c)}")
    model.to(args.device)
    log(f"{sum(p.numel() for p in model.parameters())} parameters")
    return model


def train_kv(args, c, tj, bpe):
    """The recall-kv preset: no corpus; key-value prompts, export, recall evaluation."""
    task = KvTask(bpe, c["min_keys_frac"], c["pool"], c["colon"])
    log(f"recall-kv: {len(task.key_ids)} key tokens, {len(task.value_ids)} value tokens")
    model = new_model(args, c)
    seen, spent = train(args, c, model, None, task)
    model.cpu()
    export_checkpoint(args, c, model, tj)
    if args.no_eval:
        log("exported")
        return 0
    log("exported; evaluating")
    res = evaluate_recall(args, c, model, task, log)
    res.update(steps=args.steps, tokens_seen=seen, train_seconds=round(spent, 1),
               params=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(res, f, indent=2)
    log(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
