#!/usr/bin/env python3
"""Summary of scripts/peers/paired.sh output: per test, each pair's Tandem / llama.cpp speed
ratio, their median, and how many pairs Tandem won. Tokens per second: llama-bench's avg_ts;
Tandem's prefill_tokens_per_s (pp tests) or decode_tokens_per_s_median (tg, d4096).
Usage: paired_summary.py results.jsonl [--json]"""
import json
import statistics
import sys
from collections import defaultdict


def speed(row):
    if row["who"] == "llama.cpp":
        return row["avg_ts"]
    if row["test"].startswith("pp"):
        return row["prefill_tokens_per_s"]
    return row["decode_tokens_per_s_median"]


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    by = defaultdict(dict)  # (test, pair) -> who -> tok/s
    loads = defaultdict(list)
    for r in rows:
        by[(r["test"], r["pair"])][r["who"]] = speed(r)
        loads[r["test"]].append(r["load"])
    out = []
    for test in dict.fromkeys(t for t, _ in by):
        pairs = sorted(p for t, p in by if t == test)
        sides = [w for w in dict.fromkeys(w for p in pairs for w in by[(test, p)]) if w != "llama.cpp"]
        for side in sides:
            ratios, ours, theirs = [], [], []
            for p in pairs:
                got = by[(test, p)]
                if side in got and "llama.cpp" in got:
                    ours.append(got[side])
                    theirs.append(got["llama.cpp"])
                    ratios.append(got[side] / got["llama.cpp"])
            if not ratios:
                continue
            out.append({
                "test": test, "tandem": side, "pairs": len(ratios),
                "ratio_median": statistics.median(ratios),
                "ratio_min": min(ratios), "ratio_max": max(ratios),
                "tandem_ahead": sum(r > 1.0 for r in ratios),
                "tandem_tok_s": [round(x, 2) for x in ours],
                "llama_tok_s": [round(x, 2) for x in theirs],
                "load_min": min(loads[test]), "load_max": max(loads[test]),
            })
    if "--json" in sys.argv:
        for o in out:
            print(json.dumps(o))
        return
    for o in out:
        print(f"{o['test']:6s} {o['tandem']:13s} pairs {o['pairs']:2d}  ratio median {o['ratio_median']:.2f}x "
              f"[{o['ratio_min']:.2f}-{o['ratio_max']:.2f}]  ahead {o['tandem_ahead']}/{o['pairs']}  "
              f"tandem {statistics.median(o['tandem_tok_s']):.1f} llama.cpp {statistics.median(o['llama_tok_s']):.1f} tok/s  "
              f"load {o['load_min']:.1f}-{o['load_max']:.1f}")


if __name__ == "__main__":
    main()
