#!/usr/bin/python3
"""The policy table of docs/accuracy.md: every host policy and option of the hybrid KV store at
device budgets of 25% and 12.5% of the context, measured with the bundled binary:

- needle accuracy on a recall model (`tandem eval-recall`, its recall-eval.jsonl split by
  context, the device window set to the budget's share of each context);
- perplexity through the decode path on a language model (`tandem perplexity --prefill 1`,
  held-out text, the budget's share of --ctx);
- the share of host entries attended, the CPU-compute ratio and the similarity-reuse hit ratio
  where the policy reports them, and the mean decode step time of the perplexity run.

Usage (scripts/accuracy.sh --policies calls it):
    scripts/accuracy_policies.py --recall models/tandem-recall --long models/tandem-long \
        --text FILE --text-label LABEL --out docs/accuracy/policies
writes OUT.jsonl (one line per command run; rows already there are not run again, so a new
policy costs only its own rows) and OUT.md (the table).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUDGETS = [0.25, 0.125]


def policies(args, window):
    """(label, flags) of every row; window is the device window in tokens, and a CPU top-k
    budget of as many tokens is the natural sparse budget beside it."""
    k = max(1, window // args.block)
    rows = [
        ("window only (sinks + window, host ignored)", ["--sparse", "topk", "--topk-blocks", "0"]),
        ("full (exact)", ["--sparse", "full"]),
        ("full, --cpu-attn ahead", ["--sparse", "full", "--cpu-attn", "ahead"]),
        ("hgca beta=1", ["--sparse", "hgca", "--hgca-beta", "1"]),
        (f"topk ({k} blocks)", ["--sparse", "topk", "--topk-blocks", str(k)]),
        (f"topk ({k} blocks) + similarity reuse",
         ["--sparse", "topk", "--topk-blocks", str(k), "--similarity-reuse"]),
        ("tau 0.9", ["--sparse", "tau", "--tau", "0.9"]),
        ("tau 0.9 + similarity reuse", ["--sparse", "tau", "--tau", "0.9", "--similarity-reuse"]),
        ("tau 0.9 + value offload, 8-bit keys",
         ["--sparse", "tau", "--tau", "0.9", "--value-offload", "--key-bits", "8"]),
        ("tau 0.9 + value offload, 4-bit keys",
         ["--sparse", "tau", "--tau", "0.9", "--value-offload", "--key-bits", "4"]),
        ("full + value offload, 4-bit keys (the quantisation alone)",
         ["--sparse", "full", "--value-offload", "--key-bits", "4"]),
    ]
    # ScoutAttention §3.4: half the device budget is the window, half the important host blocks
    # (--device-budget); the CPU's top-k budget stays the whole budget's tokens.
    half = max(args.block, window // 2 // args.block * args.block)
    for recall in ["0", "8", "auto"]:
        rows.append((f"topk ({k} blocks) + device budget (half the window), recall {recall}",
                     ["--sparse", "topk", "--topk-blocks", str(k), "--window", str(half),
                      "--device-budget", str(window - half), "--recall-interval", recall]))
    # ScoutAttention's proportions: most of the device budget resident, a top-k budget the
    # resident set can hold for every KV head (so that recall can keep the CPU ratio low).
    quarter = max(args.block, window // 4 // args.block * args.block)
    kq = max(1, quarter // args.block)
    rows.append((f"topk ({kq} blocks) + device budget (3/4 of the window), recall auto",
                  ["--sparse", "topk", "--topk-blocks", str(kq), "--window", str(quarter),
                   "--device-budget", str(max(args.block, window - quarter)),
                   "--recall-interval", "auto"]))
    return rows


def run(cmd):
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def split_recall(path, tmp):
    """{context: file} of the recall set's lines, one file per context."""
    by = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                by.setdefault(json.loads(line)["context"], []).append(line)
    files = {}
    for ctx, lines in sorted(by.items()):
        files[ctx] = os.path.join(tmp, f"recall-{ctx}.jsonl")
        with open(files[ctx], "w") as f:
            f.writelines(lines)
    return files


def window_of(budget, ctx, block, sinks):
    """The device window of a budget: budget x ctx tokens minus the sinks, in whole blocks."""
    return max(block, int(budget * ctx - sinks) // block * block)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recall", required=True)
    ap.add_argument("--long", required=True)
    ap.add_argument("--text", required=True)
    ap.add_argument("--text-label", default="")
    ap.add_argument("--ctx", type=int, default=4096, help="perplexity context")
    ap.add_argument("--block", type=int, default=32)
    ap.add_argument("--sinks", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--samples", type=int, default=40,
                    help="recall prompts per context (spread over its depth cells)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    tandem = os.path.join(ROOT, "build", "tandem")
    # parallel: the host part starts with the layer's true query, so that the rows compare the
    # policies' selections (one row shows what the `ahead` start's predicted query costs).
    base = ["--block", str(args.block), "--sinks", str(args.sinks), "--threads",
            str(args.threads), "--cpu-attn", "parallel"]
    # Rows already in OUT.jsonl are kept, not run again (a new policy adds only its own rows).
    done = {}
    if os.path.exists(args.out + ".jsonl"):
        with open(args.out + ".jsonl") as f:
            for line in f:
                j = json.loads(line)
                done[(j["kind"], j["budget"], j["policy"], j.get("context"))] = j
    raw = open(args.out + ".jsonl", "a")

    def record(kind, budget, label, cmd, context=None):
        key = (kind, budget, label, context)
        if key not in done:
            j = run(cmd)
            j.update(kind=kind, budget=budget, policy=label, context=context)
            raw.write(json.dumps(j) + "\n")
            raw.flush()
            done[key] = j
        return done[key]

    table = []
    with tempfile.TemporaryDirectory() as tmp:
        recall_files = split_recall(os.path.join(args.recall, "recall-eval.jsonl"), tmp)
        recall = [tandem, "eval-recall", "--model", args.recall, "--max-samples",
                  str(args.samples)]
        dense_acc = {ctx: record("recall", None, "dense", recall + ["--file", f, "--dense"] + base,
                                 ctx) for ctx, f in recall_files.items()}
        ppl = [tandem, "perplexity", "--model", args.long, "--file", args.text, "--ctx",
               str(args.ctx), "--prefill", "1"] + base
        dense_ppl = record("ppl", None, "dense", ppl + ["--dense"])
        table.append(("dense", None, {c: j["accuracy"] for c, j in dense_acc.items()},
                      dense_ppl))
        for budget in BUDGETS:
            w_ppl = window_of(budget, args.ctx, args.block, args.sinks)
            for i, (label, _) in enumerate(policies(args, w_ppl)):
                accs = {}
                for ctx, f in recall_files.items():
                    w = window_of(budget, ctx, args.block, args.sinks)
                    flags = policies(args, w)[i][1]
                    j = record("recall", budget, label,
                               recall + ["--file", f, "--window", str(w)] + base + flags, ctx)
                    accs[ctx] = j["accuracy"]
                flags = policies(args, w_ppl)[i][1]
                p = record("ppl", budget, label, ppl + ["--window", str(w_ppl)] + flags)
                table.append((label, budget, accs, p))
                print(f"{budget} {label}: {accs} ppl {p['ppl']:.3f}", file=sys.stderr)
    raw.close()
    write_md(args, table, sorted(recall_files), dense_ppl["ppl"])


def write_md(args, table, contexts, dense_ppl):
    cpu = open("/proc/cpuinfo").read().split("model name")[1].split(":")[1].split("\n")[0].strip()
    load = open("/proc/loadavg").read().split()[:3]
    L = ["## Every policy at 25% and 12.5% device budgets", "",
         f"Produced by `scripts/accuracy.sh --policies {args.recall} {args.long}` on {cpu}, "
         f"{datetime.date.today()} (load average at the end {' '.join(load)}; the step times "
         "are this shared 2-core machine's). Block "
         f"{args.block}, sinks {args.sinks}, `--cpu-attn parallel` but in the row that says ahead "
         "(the host part started with the layer's true query, so that the rows compare the "
         "selections). The device budget "
         "is sinks + window as a share of each context; `topk` reads as many host tokens as the "
         "window holds (the K in a row's name is the perplexity run's, at its context; the recall "
         "runs use the same share of theirs). The device-budget rows split the budget: half "
         "window, half resident host blocks, top-k as in the topk rows. Needle accuracy: `tandem eval-recall` on "
         f"{os.path.basename(args.recall)}'s recall-eval.jsonl (the prompt's last token decoded "
         "through the policy), by context. Perplexity: `tandem perplexity --prefill 1 --ctx "
         f"{args.ctx}` of {os.path.basename(args.long)} on {args.text_label or args.text} "
         "(every token a decode step). \"host attended\": share of (host token, KV head) entries "
         "the policy read in the perplexity run (the recall runs' per context in the JSON lines). "
         "\"CPU ratio\" (topk): host tokens the CPU attended over the top-k budget, per layer "
         "and step (ScoutAttention's CPU compute ratio; below 1 when resident blocks are the "
         "device's).",
         "", "| policy | budget | " + " | ".join(f"needle {c}" for c in contexts)
         + " | ppl | vs dense | host attended | CPU ratio | reuse hits | step ms |",
         "|---|---|" + "---|" * len(contexts) + "---|---|---|---|---|---|"]
    for label, budget, accs, p in table:
        hits = p.get("similarity_reuse_hit_ratio")
        ratio = p.get("cpu_compute_ratio")
        step = 1000 * p["seconds"] / max(1, p["tokens"])
        L.append(f"| {label} | {'-' if budget is None else f'{budget:.1%}'} | "
                 + " | ".join(f"{accs[c]:.1%}" for c in contexts)
                 + f" | {p['ppl']:.3f} | {100 * (p['ppl'] / dense_ppl - 1):+.2f}% | "
                 f"{p.get('host_fraction_attended', 0):.3f} | "
                 f"{'-' if ratio is None else f'{ratio:.3f}'} | "
                 f"{'-' if hits is None else f'{hits:.3f}'} | {step:.2f} |")
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    sys.exit(main())
