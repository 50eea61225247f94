#!/usr/bin/env python3
"""Writes the "Prefix cache (hand-run)" section of docs/benchmarks.md and its plot from the JSON
files of scripts/prefix_bench.sh (medians over the repeats). Standard library + matplotlib.
    python3 scripts/prefix_report.py DIR BENCHMARKS_MD PLOT_PNG COMMIT
"""
import glob
import json
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, md_path, png, commit = sys.argv[1:5]


def runs(kind, cache):
    return [json.load(open(p)) for p in sorted(glob.glob(os.path.join(src, f"{kind}-{cache}-*.json")))]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def f(x, d=1):
    return "n/a" if x is None else f"{x:,.{d}f}"


ttft = {c: runs("ttft", c) for c in ("on", "off")}
rep = {c: runs("prefix-repetition", c) for c in ("on", "off")}
mt = {c: runs("multi-turn", c) for c in ("on", "off")}
loads = sorted({r["load"] for c in ttft for r in ttft[c]})

L = []
w = L.append
w("## Prefix cache (hand-run)")
w("")
w(f"Made by `scripts/prefix_bench.sh` (commit `{commit}`): `tandem serve --model "
  "models/tandem-long --max-batch 16` with the prefix cache (default) and with "
  "`--no-prefix-cache`, alternating, medians over the repeats; client and server share the "
  f"2-core machine (load averages during the runs: {'; '.join(loads)}). Raw results: "
  "`docs/prefix-cache/`.")
w("")
w("**A repeated 3,171-token prompt** (`scripts/prefix_ttft.py`, token ids to `/v1/completions`, "
  "16 output tokens, sent three times one after the other):")
w("")
w("| send | cached tokens (on) | TTFT on, s | TTFT off, s | off / on |")
w("|---:|---:|---:|---:|---:|")
for i in range(3):
    on = med([r["result"]["repeated"][i]["ttft_s"] for r in ttft["on"]])
    off = med([r["result"]["repeated"][i]["ttft_s"] for r in ttft["off"]])
    cached = med([r["result"]["repeated"][i]["cached_tokens"] for r in ttft["on"]])
    w(f"| {i + 1} | {f(cached, 0)} of 3,171 | {f(on, 3)} | {f(off, 3)} | "
      f"{f(off / on if on and off else None, 1)}x |")
w("")
w("**An 8-turn chat** to about 4K tokens of context (each turn the whole history and a new user "
  "message of ~300 words; prefilled = the server's `tandem_engine_prompt_tokens_total` delta):")
w("")
w("| turn | prompt tokens | cached (on) | prefilled on | prefilled off | TTFT on, s | TTFT off, s |")
w("|---:|---:|---:|---:|---:|---:|---:|")
turns = len(ttft["on"][0]["result"]["chat"]) if ttft["on"] else 0
chat_on, chat_off = [], []
for t in range(turns):
    g = lambda c, k: med([r["result"]["chat"][t][k] for r in ttft[c]])  # noqa: E731
    chat_on.append(g("on", "ttft_s"))
    chat_off.append(g("off", "ttft_s"))
    w(f"| {t + 1} | {f(g('on', 'prompt_tokens'), 0)} | {f(g('on', 'cached_tokens'), 0)} | "
      f"{f(g('on', 'prefilled_tokens'), 0)} | {f(g('off', 'prefilled_tokens'), 0)} | "
      f"{f(chat_on[-1], 3)} | {f(chat_off[-1], 3)} |")
w("")
w("**`tandem bench` workloads**: `--dataset-name prefix_repetition --prefix-repetition-prefix-len "
  "2048 --prefix-repetition-suffix-len 512 --prefix-repetition-num-prefixes 4 "
  "--prefix-repetition-output-len 32 --num-prompts 32 --max-concurrency 8 --ignore-eos`, and "
  "`--dataset-name multi_turn --multi-turn-turns 6 --multi-turn-input-len 256 "
  "--multi-turn-output-len 32 --num-prompts 8 --max-concurrency 4 --endpoint "
  "/v1/chat/completions --ignore-eos`:")
w("")
w("| workload | cache | req/s | total tok/s | TTFT mean / p99 ms | cached share of prompt tokens |")
w("|---|---|---:|---:|---:|---:|")
for label, d in (("prefix_repetition", rep), ("multi_turn", mt)):
    for c in ("on", "off"):
        rs = d[c]
        w(f"| {label} | {c} | {f(med([r['request_throughput'] for r in rs]), 2)} | "
          f"{f(med([r['total_token_throughput'] for r in rs]), 0)} | "
          f"{f(med([r.get('mean_ttft_ms') for r in rs]), 0)} / "
          f"{f(med([r.get('p99_ttft_ms') for r in rs]), 0)} | "
          f"{f(med([100 * (r.get('cached_token_share') or 0) for r in rs]), 1)} % |")
w("")
w("![prefix cache](bench-prefix.png)")
w("")

# The plot: TTFT per chat turn, and the bench workloads' TTFT, with and without the cache.
fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
x = list(range(1, turns + 1))
a.plot(x, chat_off, "o-", label="no prefix cache")
a.plot(x, chat_on, "o-", label="prefix cache")
a.set_xlabel("chat turn")
a.set_ylabel("TTFT (s)")
a.set_title("8-turn chat, tandem-long", fontsize=9)
a.grid(alpha=0.3)
a.legend(fontsize=8)
names = ["prefix_repetition", "multi_turn"]
on = [med([r.get("mean_ttft_ms") for r in d["on"]]) or 0 for d in (rep, mt)]
off = [med([r.get("mean_ttft_ms") for r in d["off"]]) or 0 for d in (rep, mt)]
b.bar([i - 0.2 for i in range(2)], off, 0.4, label="no prefix cache")
b.bar([i + 0.2 for i in range(2)], on, 0.4, label="prefix cache")
b.set_xticks(range(2), names)
b.set_ylabel("mean TTFT (ms)")
b.set_title("tandem bench workloads", fontsize=9)
b.grid(alpha=0.3, axis="y")
b.legend(fontsize=8)
fig.tight_layout()
fig.savefig(png, dpi=110)

# Replace (or add) the section in benchmarks.md, before "## Files".
text = open(md_path).read()
lines = text.split("\n")
outl, skip = [], False
for line in lines:
    if line.startswith("## "):
        skip = line.startswith("## Prefix cache (hand-run)")
    if not skip:
        outl.append(line)
text = "\n".join(outl)
at = text.find("## Files")
section = "\n".join(L) + "\n"
text = text[:at] + section + text[at:] if at >= 0 else text.rstrip("\n") + "\n\n" + section
open(md_path, "w").write(text)
print(section)
