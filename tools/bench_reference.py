#!/usr/bin/env python3
"""Decode speed of the PyTorch reference at batch 1 (the side-by-side baseline for flatstate).

    /usr/bin/python3 tools/bench_reference.py --model models/shakespeare-linear-elu \
        --prompt "ROMEO:" --tokens 200 [--threads 1]

Greedy decoding in float32 with the recurrent form (softmax: KV cache), token by token, exactly
the computation flatstate runs; prints one JSON line with decode tokens/s and the tokens.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import load_exported  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--prompt", default="ROMEO:")
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if not os.path.isdir(a.model):
        sys.exit(f"error: model folder not found: {a.model}")
    torch.set_num_threads(a.threads)
    model = load_exported(a.model).eval()
    mode = "parallel" if model.cfg.attention_kind == "softmax" else "recurrent"
    prompt = torch.tensor(list(a.prompt.encode("utf-8")), dtype=torch.long)
    out = []
    with torch.no_grad():
        logits, state = model.step(prompt, None, "chunked" if mode == "recurrent" else mode,
                                   dtype=torch.float32)
        tok = int(torch.argmax(logits[-1]))
        out.append(tok)
        t0 = time.perf_counter()
        for _ in range(a.tokens - 1):
            logits, state = model.step(torch.tensor([tok]), state, mode, dtype=torch.float32)
            tok = int(torch.argmax(logits[-1]))
            out.append(tok)
        dt = time.perf_counter() - t0
    print(json.dumps({"model": os.path.basename(a.model.rstrip("/")), "threads": a.threads,
                      "decode_tokens_per_s": (a.tokens - 1) / dt, "tokens": out}))


if __name__ == "__main__":
    main()
