#!/usr/bin/env python3
"""Regenerate the golden vectors the C++ engine is checked against.

    /usr/bin/python3 tools/golden.py [--models_dir models] [--out tests/data/golden] [--only NAME]

For every folder in models/ whose config.json has model_type "flatstate", writes
tests/data/golden/<name>.json.  Everything is computed in float64 from the exported fp32 weights
(load_exported, then model.double()) with FlatstateLM.step:

  prefill   the whole prompt in one call, mode "chunked" (every kind with a constant state) or
            "parallel" (softmax)
  decode    64 greedy tokens: token 0 is the argmax of the logits after the last prompt byte
            (lowest index on ties); each next token is the argmax after feeding the previous one
            alone, mode "recurrent" (constant-state kinds) or "parallel" continuing the KV cache
            (softmax).
            The 64th token is not fed back.

File format:
  {"model": name, "attention_kind": kind, "chunk_size": C, "generator": "tools/golden.py",
   "config": {...config.json...},
   "cases": [{"name", "prompt_bytes": [ints], "logit_positions": [ints],
              "logits": [[256 floats] per position],  # output after consuming prompt byte p
              "greedy_tokens": [64 ints],
              "state": [{"layer", "head", "S": [[hd floats] x F], "z": [F], "M": float}]}]}
  state is taken after the prompt (before decoding), layers 0 and L-1, heads 0 and H-1
  (deduplicated), for every kind but softmax (an empty list).  -inf is written as "-inf".
  The keys of a state entry depend on the kind (docs/kinds.md): linear kinds S, z, M; gated S, z,
  "mass" (no M); window "ring_k", "ring_v": [[hd floats] x W], this head's slice of every ring slot in
  slot order (the key/value of position p is in slot p mod W, unwritten slots are 0); hybrid
  (layout sum) S, z, M and ring_k, ring_v; hybrid (alternate) whichever parts the layer has.
Cases: "short" b"ROMEO:\\n"; "long" 700 validation bytes (offset int(0.9 N) + 1000 of tiny
Shakespeare, crossing chunk boundaries); "utf8" "Ünïcödé — ✓ KING HENRY:\\n" in UTF-8.
"""
from __future__ import annotations

import os

# Bit-reproducible output: fix the thread count before torch is imported (the OpenMP/MKL
# environment changes float64 summation order at the 1e-14 level even with set_num_threads(1)).
if __name__ == "__main__":
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
from typing import List  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import CONFIG_FILE, load_exported  # noqa: E402

DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "tinyshakespeare", "input.txt")
NUM_GREEDY = 64
LONG_OFFSET = 1000
LONG_LEN = 700


def long_prompt(data_path: str) -> bytes:
    if not os.path.isfile(data_path):
        sys.exit(f"error: data file not found: {data_path} (pass --data)")
    with open(data_path, "rb") as f:
        data = f.read()
    start = int(0.9 * len(data)) + LONG_OFFSET
    chunk = data[start:start + LONG_LEN]
    if len(chunk) != LONG_LEN:
        sys.exit(f"error: {data_path} too short for the long case ({len(data)} bytes)")
    return chunk


def cases(data_path: str):
    return [("short", b"ROMEO:\n"),
            ("long", long_prompt(data_path)),
            ("utf8", "Ünïcödé — ✓ KING HENRY:\n".encode("utf-8"))]


def logit_positions(n: int) -> List[int]:
    return sorted({0, 1, n // 2, n - 1} & set(range(n)))


def _f(x: float):
    if math.isinf(x) and x < 0:
        return "-inf"
    if not math.isfinite(x):
        raise ValueError(f"non-finite value {x} in golden state")
    return float(x)


def _argmax(row: torch.Tensor) -> int:
    return int(np.argmax(row.numpy()))           # numpy: first (lowest) index on ties


def state_entry(ls: dict, layer: int, h: int) -> dict:
    """The golden state entry of head h of one layer's state dict (see the module docstring)."""
    e = {"layer": layer, "head": h}
    lin, ring = ls.get("lin"), ls.get("ring")
    if lin is not None:
        e["S"] = [[_f(v) for v in r] for r in lin["S"][h].tolist()]
        e["z"] = [_f(v) for v in lin["z"][h].tolist()]
        if "M" in lin:
            e["M"] = _f(float(lin["M"][h]))
        if "mass" in lin:
            e["mass"] = _f(float(lin["mass"][h]))
    if ring is not None:
        e["ring_k"] = [[_f(v) for v in r] for r in ring["k"][:, h].tolist()]
        e["ring_v"] = [[_f(v) for v in r] for r in ring["v"][:, h].tolist()]
    return e


def run_case(model, prompt: bytes) -> dict:
    cfg = model.cfg
    linear = cfg.is_recurrent
    toks = torch.tensor(list(prompt), dtype=torch.long)
    with torch.no_grad():
        logits, state = model.step(toks, None, "chunked" if linear else "parallel",
                                   dtype=torch.float64)
        pos = logit_positions(len(prompt))
        out_logits = [[float(v) for v in logits[p].tolist()] for p in pos]
        for row in out_logits:
            if not all(math.isfinite(v) for v in row):
                raise ValueError("non-finite logit")
        st = []
        if linear:
            L, H = cfg.num_hidden_layers, cfg.num_attention_heads
            for layer in sorted({0, L - 1}):
                for h in sorted({0, H - 1}):
                    st.append(state_entry(state["layers"][layer], layer, h))
        greedy = []
        last = logits[-1]
        mode = "recurrent" if linear else "parallel"
        for i in range(NUM_GREEDY):
            t = _argmax(last)
            greedy.append(t)
            if i + 1 < NUM_GREEDY:
                lg, state = model.step(torch.tensor([t], dtype=torch.long), state, mode,
                                       dtype=torch.float64)
                last = lg[-1]
    return {"prompt_bytes": list(prompt), "logit_positions": pos, "logits": out_logits,
            "greedy_tokens": greedy, "state": st}


def golden_for_model(model_dir: str, data_path: str) -> dict:
    name = os.path.basename(os.path.normpath(model_dir))
    model = load_exported(model_dir).double()
    cfg = model.cfg
    with open(os.path.join(model_dir, CONFIG_FILE)) as f:
        cfg_json = json.load(f)
    out = {"model": name, "attention_kind": cfg.attention_kind, "chunk_size": cfg.chunk_size,
           "generator": "tools/golden.py", "config": cfg_json, "cases": []}
    for cname, prompt in cases(data_path):
        c = {"name": cname}
        c.update(run_case(model, prompt))
        out["cases"].append(c)
    return out


def flatstate_model_dirs(models_dir: str) -> List[str]:
    dirs = []
    if not os.path.isdir(models_dir):
        return dirs
    for n in sorted(os.listdir(models_dir)):
        p = os.path.join(models_dir, n, CONFIG_FILE)
        if not os.path.isfile(p):
            continue
        try:
            with open(p) as f:
                if json.load(f).get("model_type") != "flatstate":
                    continue
        except (OSError, ValueError):
            continue
        dirs.append(os.path.join(models_dir, n))
    return dirs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models_dir", default="models")
    p.add_argument("--out", default=os.path.join("tests", "data", "golden"))
    p.add_argument("--data", default=DEFAULT_DATA, help="tiny Shakespeare input.txt")
    p.add_argument("--only", action="append", default=None,
                   help="restrict to these model names (repeatable)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads; keep the default 1: the files are bit-reproducible only "
                        "at one thread (other counts change float64 sums at the 1e-14 level)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    dirs = flatstate_model_dirs(a.models_dir)
    if a.only:
        dirs = [d for d in dirs if os.path.basename(d) in set(a.only)]
    if not dirs:
        print(f"error: no flatstate model folders in {a.models_dir}", file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    for d in dirs:
        g = golden_for_model(d, a.data)
        path = os.path.join(a.out, g["model"] + ".json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(g, f)
            f.write("\n")
        os.replace(tmp, path)
        print(f"wrote {path} ({g['attention_kind']}, {len(g['cases'])} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
