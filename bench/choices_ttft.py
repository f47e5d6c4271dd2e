#!/usr/bin/env python3
"""Time to first token of n > 1 choices against n = 1 (issue 31: "n = 8 costs one prefill").

Sends streamed /v1/completions requests with a prompt of --prompt_tokens bytes (the shipped
models are byte-level, so bytes = tokens; a model with another tokenizer gets fewer tokens) to a
running flatstate server, alternating n = 1 and n = N, --reps times each, and reports for each n
the median time to the first chunk with text and the median time until every choice has sent
its first chunk. Every prompt starts with a fresh counter, so the prefix cache never hits and
each request prefills the whole prompt. Standard library only.

  python3 bench/choices_ttft.py --url http://127.0.0.1:8080 --model shakespeare-linear-elu \
      --prompt_tokens 2048 --n 8 --reps 7
"""
import argparse
import json
import os
import statistics
import time
import urllib.request


COUNTER = [int.from_bytes(os.urandom(3), "little") * 1000]


def one(url, model, prompt, n, max_tokens):
    # A fresh first token every request: no prefix-cache hit, every request prefills it all.
    COUNTER[0] += 1
    prompt = f"{COUNTER[0]:010d}" + prompt[10:]
    body = json.dumps({"model": model, "prompt": prompt, "n": n, "max_tokens": max_tokens,
                       "temperature": 0.8, "seed": 1, "stream": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first = None
    seen = set()
    all_first = None
    with urllib.request.urlopen(req) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            for c in ev.get("choices", []):
                if c.get("text"):
                    now = time.perf_counter() - t0
                    if first is None:
                        first = now
                    seen.add(c["index"])
                    if len(seen) == n and all_first is None:
                        all_first = now
    return first, all_first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt_tokens", type=int, default=2048)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--max_tokens", type=int, default=4)
    a = ap.parse_args()
    base = "To be, or not to be, that is the question. " * (a.prompt_tokens // 44 + 1)
    prompt = base[:a.prompt_tokens]
    res = {1: [], a.n: []}
    one(a.url, a.model, prompt, 1, a.max_tokens)  # warm-up
    for _ in range(a.reps):
        for n in (1, a.n):
            res[n].append(one(a.url, a.model, prompt, n, a.max_tokens))
    med = {n: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
           for n, v in res.items()}
    print(f"model {a.model}, prompt {a.prompt_tokens} bytes, median of {a.reps}, seconds")
    print(f"| n | first chunk | every choice's first chunk |")
    print(f"|---:|---:|---:|")
    for n in (1, a.n):
        print(f"| {n} | {med[n][0]:.4f} | {med[n][1]:.4f} |")
    print(f"ratio n={a.n} / n=1: first chunk {med[a.n][0] / med[1][0]:.2f}, "
          f"every choice {med[a.n][1] / med[1][1]:.2f}")


if __name__ == "__main__":
    main()
