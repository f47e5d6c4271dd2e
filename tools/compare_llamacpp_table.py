#!/usr/bin/env python3
"""The llama.cpp comparison's table, from the raw outputs bench/compare_llamacpp.sh writes.

    /usr/bin/python3 tools/compare_llamacpp_table.py OUT_DIR [--csv OUT_DIR/table.csv]

OUT_DIR holds, per weight type pair (flatstate f32 / bf16 / int8 against llama.cpp F32 / BF16 /
Q8_0): llama-<TYPE>-*.json (llama-bench -o json) and flatstate-<type>[.rN].json (flatstate-bench
--benchmark_out, Google Benchmark JSON); the samples of every file of a case are pooled (an
interleaved run writes one file per round, .rN). The table takes the median of each case's
repetitions (--stat best: the fastest, as runs before issue 33 did); the CSV has both.
With flatstate-reference.json (REFERENCE=1) it also prints the bandwidth probe's fastest
MemoryRead row per thread count (bench/bandwidth_probe.cc), the machine's streaming limit.

flatstate's rows are named <family>/<model>/<type>/...: one table row per model, labelled by the
model's name less a "gpt2-small-" prefix (linear_elu, softmax; a same-checkpoint run's folder
name, e.g. hf-llama). When every flatstate row has llama.cpp's parameter count (the same
checkpoint, SAME_CHECKPOINT=1), the ratios are per token only: per parameter is the same number.

Columns (tok/s): decode at batch 1 on 1 and 2 threads (llama.cpp: tg at depth 0; flatstate:
Decode/<model>/<type>/threads:T/batch:1, at a 64-token context), prefill of 512 tokens on 1 and 2
threads and of 4096 on 2 (and 1 if run), decode at depth 0 / 1k / 16k on 2 threads (llama.cpp:
tg at -d N; flatstate: DecodeAtContext/<model>/<type>/threads:2/ctx:N). Ratios are flatstate over
llama.cpp at the same weight type, per token (tok/s) and per parameter (tok/s x parameters).
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import statistics
import sys
from typing import Dict, List, Optional, Tuple

PAIRS = [("f32", "F32"), ("bf16", "BF16"), ("int8", "Q8_0")]
KINDS = ["linear_elu", "softmax"]  # the GPT-2-small models' order; other models follow, sorted

Key = Tuple[str, int, int]  # ("decode" | "pp" | "depth", threads, tokens: prompt or depth)


def columns(present: set) -> List[Tuple[Key, str]]:
    """The columns for the keys in `present`: decode, then prefill by length, then decode at
    depth by depth (whatever prompt lengths and depths were run), threads ascending in each."""
    def depth_name(d: int) -> str:
        return f"{d // 1024}k" if d and d % 1024 == 0 else str(d)

    name = {"decode": lambda t, n: f"decode {t}t", "pp": lambda t, n: f"pp{n} {t}t",
            "depth": lambda t, n: f"decode@{depth_name(n)} {t}t"}
    order = {"decode": 0, "pp": 1, "depth": 2}
    keys = sorted(present, key=lambda k: (order[k[0]], k[2], k[1]))
    return [(k, name[k[0]](k[1], k[2])) for k in keys]


class Stat:
    def __init__(self, samples: List[float], params: float):
        self.samples = samples
        self.params = params

    @property
    def best(self) -> float:
        return max(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def add_samples(out: Dict[Key, Stat], key: Key, samples: List[float], params: float) -> None:
    if key in out:
        out[key].samples.extend(samples)
    else:
        out[key] = Stat(list(samples), params)


def read_llama(path: str, out: Dict[Key, Stat]) -> None:
    with open(path) as f:
        text = f.read().strip()
    rows = json.loads(text) if text.startswith("[") else [json.loads(x) for x in text.splitlines()]
    for r in rows:
        t, npp, ngen, depth = r["n_threads"], r["n_prompt"], r["n_gen"], r["n_depth"]
        samples = [float(x) for x in r.get("samples_ts") or [r["avg_ts"]]]
        if npp > 0 and ngen == 0 and depth == 0:
            key = ("pp", t, npp)
        elif npp == 0 and ngen > 0:
            key = ("depth", t, depth)
            if depth == 0:
                add_samples(out, ("decode", t, 0), samples, float(r["model_n_params"]))
        else:
            continue
        add_samples(out, key, samples, float(r["model_n_params"]))


NAME = re.compile(r"^(Decode|Prefill|DecodeAtContext)/([^/]+)/(\w+)/threads:(\d+)/"
                  r"(batch|len|ctx):(\d+)(/|$)")


def kind_of(model: str) -> str:
    """The table's name for a flatstate model: gpt2-small-<kind> -> <kind>, others as named."""
    return model[len("gpt2-small-"):] if model.startswith("gpt2-small-") else model


def kinds_in(fs: Dict[str, Dict[str, Dict[Key, "Stat"]]]) -> List[str]:
    found = {k for per_kind in fs.values() for k in per_kind}
    return [k for k in KINDS if k in found] + sorted(found - set(KINDS))


def read_flatstate(path: str, out: Dict[str, Dict[Key, Stat]]) -> None:
    with open(path) as f:
        doc = json.load(f)
    acc: Dict[Tuple[str, Key], Tuple[List[float], float]] = {}
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration" or "error_occurred" in b:
            continue
        m = NAME.match(b["name"])
        if not m:
            continue
        family, model, _, threads, arg, value = m.groups()[:6]
        kind = kind_of(model)
        t, v = int(threads), int(value)
        if family == "Decode":
            if v != 1:
                continue
            key: Key = ("decode", t, 0)
        elif family == "Prefill":
            key = ("pp", t, v)
        else:
            key = ("depth", t, v)
        samples, _ = acc.setdefault((kind, key), ([], float(b.get("params", 0))))
        samples.append(float(b["items_per_second"]))
    for (kind, key), (samples, params) in acc.items():
        add_samples(out.setdefault(kind, {}), key, samples, params)


PROBE = re.compile(r"^MemoryRead/(\w+)/streams:(\d+)/prefetch:(\d)/threads:(\d+)")


def probe_lines(out_dir: str) -> List[str]:
    """The bandwidth probe's fastest row per thread count, from flatstate-reference.json."""
    path = os.path.join(out_dir, "flatstate-reference.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        doc = json.load(f)
    best: Dict[int, Tuple[float, str]] = {}
    for b in doc["benchmarks"]:
        m = PROBE.match(b["name"])
        if not m or "bytes_per_second" not in b:
            continue
        t = int(m.group(4))
        gbs = float(b["bytes_per_second"]) / 1e9
        if gbs > best.get(t, (0.0, ""))[0]:
            best[t] = (gbs, b["name"].split("/min_time")[0])
    return [f"- {t} thread{'s' if t > 1 else ''}: {gbs:.1f} GB/s ({name})"
            for t, (gbs, name) in sorted(best.items())]


def fmt(x: Optional[float], digits: int = 1) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir")
    p.add_argument("--csv", default=None, help="default OUT_DIR/table.csv")
    p.add_argument("--stat", choices=["median", "best"], default="median",
                   help="which repetition the table and ratios use (default median)")
    a = p.parse_args(argv)
    pick = (lambda st: st.median) if a.stat == "median" else (lambda st: st.best)

    llama: Dict[str, Dict[Key, Stat]] = {}
    fs: Dict[str, Dict[str, Dict[Key, Stat]]] = {}
    for ours, theirs in PAIRS:
        files = sorted(glob.glob(os.path.join(a.out_dir, f"llama-{theirs}-*.json")))
        if files:
            llama[theirs] = {}
            for path in files:
                read_llama(path, llama[theirs])
        paths = sorted(glob.glob(os.path.join(a.out_dir, f"flatstate-{ours}.json")) +
                       glob.glob(os.path.join(a.out_dir, f"flatstate-{ours}.r*.json")))
        if paths:
            fs[ours] = {}
            for path in paths:
                read_flatstate(path, fs[ours])
    # The columns both engines measured.
    theirs_keys, ours_keys = set(), set()
    for d in llama.values():
        theirs_keys |= set(d)
    for per_kind in fs.values():
        for d in per_kind.values():
            ours_keys |= set(d)
    present = theirs_keys & ours_keys
    cols = columns(present)
    if not cols:
        print(f"no results under {a.out_dir}", file=sys.stderr)
        return 1

    kinds = kinds_in(fs)
    csv_rows = []
    lines = ["| engine, weights | params | " + " | ".join(n for _, n in cols) + " |",
             "|---|---:|" + "---:|" * len(cols)]

    def add(engine: str, weights: str, kind: str, d: Dict[Key, Stat]) -> None:
        label = f"{engine} {weights}" + (f", {kind}" if kind else "")
        params = next((s.params for s in d.values() if s.params), 0.0)
        cells = [fmt(pick(d[k])) if k in d else "-" for k, _ in cols]
        lines.append(f"| {label} | {params / 1e6:.1f} M | " + " | ".join(cells) + " |")
        for k, name in cols:
            if k in d:
                csv_rows.append([engine, weights, kind, name, f"{d[k].best:.3f}", f"{d[k].median:.3f}",
                                 len(d[k].samples), f"{d[k].params:.0f}"])

    for ours, theirs in PAIRS:
        for kind in kinds:
            if ours in fs and kind in fs[ours]:
                add("flatstate", ours, kind, fs[ours][kind])
        if theirs in llama:
            add("llama.cpp", theirs, "", llama[theirs])
    reps = max((len(st.samples) for d in llama.values() for st in d.values()), default=0)
    print(f"tok/s, {'median' if a.stat == 'median' else 'fastest'} of {reps} repetitions:\n")
    print("\n".join(lines))

    # Ratios: flatstate over llama.cpp, per token and per parameter, at the same weight type.
    pairs = [(ours, theirs, kind) for ours, theirs in PAIRS for kind in kinds
             if ours in fs and kind in fs[ours] and theirs in llama]
    # The same checkpoint: every compared case has llama.cpp's parameter count (to 0.1 %).
    same = all(abs(fs[o][kind][k].params / llama[t][k].params - 1) < 1e-3
               for o, t, kind in pairs for k, _ in cols
               if k in fs[o][kind] and k in llama[t] and llama[t][k].params)
    rl = ["| flatstate / llama.cpp | " + " | ".join(n for _, n in cols) + " |",
          "|---|" + "---:|" * len(cols)]
    for ours, theirs, kind in pairs:
        mine, peer = fs[ours][kind], llama[theirs]
        cells = []
        for k, _ in cols:
            if k in mine and k in peer:
                tok = pick(mine[k]) / pick(peer[k])
                par = tok * mine[k].params / peer[k].params
                cells.append(f"{tok:.2f}" if same else f"{tok:.2f} / {par:.2f}")
            else:
                cells.append("-")
        rl.append(f"| {ours} {kind} vs {theirs} | " + " | ".join(cells) + " |")
    if same:
        print("\nratios per token (the same parameters on both sides: per parameter is the same):\n")
    else:
        print("\nratios per token / per parameter (tok/s x parameters):\n")
    print("\n".join(rl))
    probe = probe_lines(a.out_dir)
    if probe:
        print("\nbandwidth probe, fastest MemoryRead row per thread count:\n")
        print("\n".join(probe))

    path = a.csv or os.path.join(a.out_dir, "table.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["engine", "weights", "kind", "case", "tok_per_s_best", "tok_per_s_median", "repetitions",
                    "params"])
        w.writerows(csv_rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
