"""The training loop: AdamW, warmup + cosine decay, seeded random windows of the stream, short
windows first (or, for the recall presets, passkey or key-value prompts from a curriculum of
context lengths);
checkpoints (model, optimiser, step, RNG state) for --resume.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn.functional as F

from .log import log
from .kv_recall import KvTask, copy_loss, probe
from .recall import phase_at, recall_loss


def lr_at(step, c, steps):
    if step < c["warmup"]:
        return c["lr"] * (step + 1) / c["warmup"]
    t = (step - c["warmup"]) / max(1, steps - c["warmup"])
    return c["lr"] * (c["min_lr_frac"] + (1 - c["min_lr_frac"]) * 0.5 * (1 + math.cos(math.pi * t)))


def lm_batch(args, c, stream, step, gen):
    """Language-model windows at seeded random offsets of the stream: (inputs, targets)."""
    seq = c["short_seq"] if step < c["short_frac"] * args.steps else c["seq"]
    batch = c["batch"] * c["seq"] // seq
    starts = torch.randint(0, len(stream) - seq - 1, (batch,), generator=gen)
    win = torch.stack([stream[s:s + seq + 1] for s in starts.tolist()])
    return win[:, :-1], win[:, 1:]


def recall_batch(args, c, task, step):
    """Passkey prompts of the step's curriculum length; a function of (seed, step) alone, so a
    resumed run sees the same batches.  Returns (inputs, targets, answer mask)."""
    n_ctx, batch = phase_at(step, args.steps, c["curriculum"])
    return task.batch(np.random.default_rng([args.seed, step]), n_ctx, batch)


def train(args, c, model, stream, task=None):
    """Trains on LM windows of stream, or on task's prompts when task is given (passkey: LM
    loss + weighted answer loss; key-value recall: the copy targets' loss, with the batch's copy
    accuracy logged and, every args.probe_every steps, evaluation prompts scored)."""
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
    kv = isinstance(task, KvTask)
    accs = []
    t0 = time.time()
    while step < min(args.steps, args.stop_at or args.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, c, args.steps)
        if task is None:
            x, tgt = lm_batch(args, c, stream, step, gen)
            logits = model(x.to(args.device))
            loss = F.cross_entropy(logits.reshape(-1, c["vocab"]), tgt.to(args.device).reshape(-1))
            extra = ""
        elif kv:
            x, tgt, mask = recall_batch(args, c, task, step)
            loss, acc = copy_loss(model, x.to(args.device), tgt.to(args.device),
                                  mask.to(args.device))
            accs.append(acc)
            extra = (f" copy acc {sum(accs[-10:]) / len(accs[-10:]):.3f}"
                     f" ctx {x.shape[1] + 1}x{x.shape[0]}")
        else:
            x, tgt, ans = recall_batch(args, c, task, step)
            loss, ans_loss = recall_loss(model(x.to(args.device)), tgt.to(args.device),
                                         ans.to(args.device), c["answer_weight"])
            extra = f" answer loss {ans_loss.item():.4f} ctx {x.shape[1] + 1}x{x.shape[0]}"
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        seen += x.numel()
        now = time.time()
        spent += now - t0
        t0 = now
        if step % 10 == 0 or step == 1:
            lr = lr_at(step - 1, c, args.steps)
            log(f"step {step}/{args.steps} loss {loss.item():.4f} lr {lr:.2e}"
                f" tokens {seen} {seen / spent:.0f} tok/s elapsed {spent / 60:.1f} min{extra}")
        if step % args.save_every == 0 or step in (args.steps, args.stop_at):
            save()
        if kv and args.probe_every and step % args.probe_every == 0:
            n_ctx = phase_at(step - 1, args.steps, c["curriculum"])[0]
            t1 = time.time()
            acc = probe(model, task, [n for n in c["probe_contexts"] if n <= max(512, n_ctx)],
                        c["probe_n"], c["eval_seed"] + 1)
            log(f"probe step {step}: " + " ".join(f"{n}:{a:.3f}" for n, a in acc.items())
                + f" ({time.time() - t1:.0f} s, not counted)")
            t0 = time.time()
    return seen, spent

