#!/usr/bin/env python3
"""Time to first token of a repeated prompt and of a multi-turn chat against a running
OpenAI-compatible server, with the server's prefix-cache counters. Standard library only.

    python3 scripts/prefix_ttft.py --base-url http://127.0.0.1:8000 --model tandem-long \
        [--tokens 3171] [--repeats 3] [--turns 8] [--turn-tokens 300] [--output-len 16]

The repeated prompt is `--tokens` token ids (deterministic, sent as a token array to
/v1/completions) sent `--repeats` times one after the other. The chat sends `--turns` turns in
order, each with the whole history (the assistant's replies as received) and a new user message
of about `--turn-tokens` tokens. For each request: TTFT (first streamed token), end-to-end time,
prompt tokens and usage.prompt_tokens_details.cached_tokens; for each chat turn also how many
prompt tokens the engine prefilled (the difference of tandem_engine_prompt_tokens_total
from /metrics, when the server has them). Prints one JSON object.
"""
import argparse
import http.client
import json
import random
import time
import urllib.parse

WORDS = ("the cat dog ran sat on a mat and saw big red ball tree house garden river "
         "boat sun moon star code data list value key function return print loop").split()


def post_stream(url, path, body, headers):
    """POSTs a streamed request; returns (ttft, e2e, text, usage)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{path}: HTTP {r.status}: {r.read()[:300]!r}")
    ttft, text, usage = None, "", None
    buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            frame, buf = buf.split(b"\n\n", 1)
            if not frame.startswith(b"data: "):
                continue
            data = frame[6:]
            if data == b"[DONE]":
                continue
            j = json.loads(data)
            if j.get("usage"):
                usage = j["usage"]
            for c in j.get("choices", []):
                piece = c.get("text") or (c.get("delta") or {}).get("content") or ""
                if piece and ttft is None:
                    ttft = time.perf_counter() - t0
                text += piece
    e2e = time.perf_counter() - t0
    conn.close()
    return ttft if ttft is not None else e2e, e2e, text, usage


def metric(url, name, headers):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/metrics", headers=headers)
    body = conn.getresponse().read().decode()
    conn.close()
    for line in body.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--tokens", type=int, default=3171)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--turn-tokens", type=int, default=300)
    ap.add_argument("--output-len", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=4000, help="token ids are drawn below this")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    headers = {"Authorization": f"Bearer {a.api_key}"} if a.api_key else {}
    rng = random.Random(a.seed)
    out = {"base_url": a.base_url, "model": a.model, "repeated": [], "chat": []}

    prompt = [rng.randrange(10, a.vocab) for _ in range(a.tokens)]
    for i in range(a.repeats):
        body = {"model": a.model, "prompt": prompt, "max_tokens": a.output_len, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True}}
        ttft, e2e, text, usage = post_stream(a.base_url, "/v1/completions", body, headers)
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        out["repeated"].append({"request": i, "prompt_tokens": (usage or {}).get("prompt_tokens"),
                                "cached_tokens": cached, "ttft_s": round(ttft, 4),
                                "e2e_s": round(e2e, 4)})

    messages = [{"role": "system", "content": "You are a helpful assistant."}]
    for turn in range(a.turns):
        words = " ".join(rng.choice(WORDS) for _ in range(a.turn_tokens))
        messages.append({"role": "user", "content": f"Turn {turn}: {words}"})
        before = metric(a.base_url, "tandem_engine_prompt_tokens_total", headers)
        body = {"model": a.model, "messages": messages, "max_tokens": a.output_len,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
        ttft, e2e, text, usage = post_stream(a.base_url, "/v1/chat/completions", body, headers)
        after = metric(a.base_url, "tandem_engine_prompt_tokens_total", headers)
        messages.append({"role": "assistant", "content": text})
        u = usage or {}
        out["chat"].append({
            "turn": turn, "prompt_tokens": u.get("prompt_tokens"),
            "cached_tokens": (u.get("prompt_tokens_details") or {}).get("cached_tokens"),
            "prefilled_tokens": None if before is None or after is None else int(after - before),
            "ttft_s": round(ttft, 4), "e2e_s": round(e2e, 4)})
    r = out["repeated"]
    if len(r) > 1 and r[1]["ttft_s"] > 0:
        out["ttft_ratio_first_to_second"] = round(r[0]["ttft_s"] / r[1]["ttft_s"], 1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
