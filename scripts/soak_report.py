#!/usr/bin/env python3
"""The verdict and the plot of a soak run (scripts/soak.sh): reads the summary `tandem bench
--soak-seconds` wrote, adds a "verdict" object to it, writes the plot beside it (same name,
.png) and prints the verdict. Standard library + python3-matplotlib.
    python3 scripts/soak_report.py SOAK.json [--server-exit CODE]
Memory growth is read over the last 45 minutes of a run of an hour or more, else over its last
75%: the least-squares line of resident memory over that window, its rise across the window in
percent of its start, and its slope against the request count (bytes per request).
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def fit(xs, ys):
    """Least-squares slope and intercept of ys over xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


ap = argparse.ArgumentParser()
ap.add_argument("summary")
ap.add_argument("--server-exit", type=int, default=0)
ap.add_argument("--rss-bound-mb", type=float, default=None,
                help="every memory sample must stay under this (the stated bound)")
ap.add_argument("--end-metrics", default=None,
                help="the server's /metrics after the load: KV blocks free or cached, no leak")
args = ap.parse_args()
s = json.load(open(args.summary))
samples = [p for p in s["samples"] if p[1] is not None and p[1] > 0]
duration = s["seconds"]
window = 45 * 60 if duration >= 3600 else 0.75 * duration
start = duration - window
win = [p for p in samples if p[0] >= start]
v = {"window_seconds": round(window, 1)}
if len(win) >= 3:
    t = [p[0] for p in win]
    rss = [p[1] for p in win]
    req = [p[2] for p in win]
    slope_t, icpt_t = fit(t, rss)
    first = slope_t * t[0] + icpt_t
    v["rss_mb_start_end"] = [round(rss[0] / 1e6, 2), round(rss[-1] / 1e6, 2)]
    v["rss_mb_max"] = round(max(p[1] for p in samples) / 1e6, 2)
    v["growth_percent"] = round(100 * slope_t * (t[-1] - t[0]) / first, 3)
    v["bytes_per_request"] = round(fit(req, rss)[0], 2)
    v["requests_in_window"] = req[-1] - req[0]
else:
    v["growth_percent"] = None  # too few samples (run shorter than a few intervals)
v["server_errors"] = s["server_errors"]
v["rejected_well_formed"] = s.get("rejected")  # 4xx to valid requests (None: not counted)
v["server_exit"] = args.server_exit
v["crashed"] = bool(s.get("server_gone")) or args.server_exit != 0
v["requests_per_second"] = round(s["requests"] / duration, 1)
if args.rss_bound_mb is not None:
    v["rss_bound_mb"] = args.rss_bound_mb
    v["within_bound"] = all(p[1] / 1e6 <= args.rss_bound_mb for p in samples)
if args.end_metrics and os.path.exists(args.end_metrics):
    m = {}
    for line in open(args.end_metrics):
        if line.startswith("tandem_") and " " in line:
            name, value = line.rsplit(" ", 1)
            m[name] = float(value)
    kv = {k: m[k] for k in sorted(m) if k.startswith(("tandem_kv_", "tandem_prefix_cache"))}
    v["end_kv"] = kv
    if "tandem_prefix_cache_blocks" in m:
        v["no_leak"] = (m.get("tandem_kv_device_blocks_used", 0) == 0
                        and m.get("tandem_kv_host_blocks_used") == m["tandem_prefix_cache_blocks"])
v["pass"] = (
    v["server_errors"] == 0
    and not v["crashed"]
    and s["transport_errors"] == 0
    and s["incomplete"] == 0
    and s["malformed_accepted"] == 0
    and v["growth_percent"] is not None
    and v["growth_percent"] < 5
    and v.get("within_bound", True)
    and v.get("no_leak", True)
)
s["verdict"] = v
with open(args.summary, "w") as f:
    json.dump(s, f, indent=2)
    f.write("\n")

fig, ax = plt.subplots(figsize=(8, 4))
ax.plot([p[0] / 60 for p in samples], [p[1] / 1e6 for p in samples], lw=1.2, label="server RSS")
ax.axvspan(start / 60, duration / 60, color="tab:green", alpha=0.08, label="growth window")
if args.rss_bound_mb is not None:
    ax.axhline(args.rss_bound_mb, color="tab:red", lw=1, ls="--", label="stated bound")
ax.set_xlabel("minutes")
ax.set_ylabel("resident memory (MB)")
growth = "n/a" if v["growth_percent"] is None else "%+.2f%%" % v["growth_percent"]
ax.set_title(
    "soak: %d requests at concurrency %d, %d server errors, growth %s over the window"
    % (s["requests"], s["concurrency"], v["server_errors"], growth),
    fontsize=9,
)
ax.grid(alpha=0.3)
ax.legend(loc="lower right", fontsize=8)
fig.tight_layout()
png = os.path.splitext(args.summary)[0] + ".png"
fig.savefig(png, dpi=110)
print(json.dumps({"summary": args.summary, "plot": png, **v}, indent=2))
raise SystemExit(0 if v["pass"] else 1)
