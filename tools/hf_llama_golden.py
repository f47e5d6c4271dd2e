#!/usr/bin/env python3
"""Golden vectors for a Hugging Face Llama, Qwen2, Qwen3, Qwen3.5 or Mamba-2 folder: float64
reference, llama.cpp.

    # the seeded prompt (comma-separated ids: BOS, then N-1 ids drawn from [3, vocab))
    /usr/bin/python3 tools/hf_llama_golden.py prompt MODEL_DIR [--n 48] [--seed 1234]

    # reference logits + greedy ids (tools/flatstate_ref/llama.py), compared with the JSON that
    # tools/llamacpp/logits.cc wrote for the same prompt; writes OUT_DIR/golden_reference.json
    # and OUT_DIR/golden_llamacpp.json and prints the comparison
    /usr/bin/python3 tools/hf_llama_golden.py compare MODEL_DIR LLAMACPP_JSON OUT_DIR \
        [--llama_cpp_commit de3ff81] [--n_greedy 64]

    # golden_reference.json alone (e.g. a dense Qwen3-Next folder, which llama.cpp cannot load);
    # --text: a byte-level folder's prompt as text
    /usr/bin/python3 tools/hf_llama_golden.py reference MODEL_DIR OUT_DIR [--n 80] [--n_greedy 64]
        [--text TEXT]

    # seed scan: for each writer seed (and --init_gain), write the folder (no tokenizer) and
    # print the smallest top-1/top-2 margin along the greedy path and over the prompt
    /usr/bin/python3 tools/hf_llama_golden.py scan --seeds 0-7 [--gains 1,2] \
        [--writer hf_llama|hf_qwen35|hf_mamba2|hf_rwkv7|hf_gla|hf_gated_deltanet|hf_delta_net] \
        -- --family qwen3 --hidden_size 96 ...
                                                     (the writer's flags after --)

tools/llamacpp_parity.sh runs prompt and compare. The model family is whatever the folder's
config.json says (its model_type picks the reference, load_reference). The golden files keep the
logits of GOLDEN_POSITIONS only (16 of the 48 prompt positions, every one of the first 8), each
a full-vocabulary row. Qwen3.5 / Qwen3-Next folders (model_type qwen3_5, qwen3_5_text,
qwen3_next) run flatstate_ref/qwen35.py instead and keep QWEN35_POSITIONS (8 of an 80-token
prompt, around the delta rule's first 64-token chunk boundary) at 8 significant digits, and no
llama.cpp logit rows (only its greedy ids and vs_reference). RWKV-7 folders (model_type rwkv7,
tools/hf_rwkv7.py) run flatstate_ref/rwkv7.py the same way (RWKV7_POSITIONS; their prompt's BOS
is config's bos_token_id 0, the World vocabulary's <|endoftext|>). GLA folders (model_type gla,
tools/hf_gla.py), fla Gated DeltaNet folders (gated_deltanet, tools/hf_gated_deltanet.py) and
fla DeltaNet folders (delta_net, tools/hf_delta_net.py) run flatstate_ref/gla.py /
gated_deltanet.py / delta_net.py the same way (GLA_POSITIONS; llama.cpp has none of them).
Mamba-2 folders (model_type mamba2) run flatstate_ref/mamba2.py and keep MAMBA2_POSITIONS (8 of
an 80-token prompt, across the 32-token SSD chunks of the tiny folder's chunk_size) the same way,
and golden_reference.json adds "state_after_prompt": the recurrent state after the whole prompt,
per layer {"conv" [conv_dim, K-1], "ssm" [H, P, N]} flattened in C order, 8 significant digits:

    golden_reference.json  {"prompt", "positions", "logits" (float64 rounded to 10 significant
                            digits), "greedy" (argmax continuation, 64 ids),
                            "greedy_top2_margins" (top-1 minus top-2 logit at each greedy step),
                            "prompt_min_top2_margin", "logit_min", "logit_max", "how"}
    golden_llamacpp.json   {"prompt", "positions", "logits" (llama.cpp's float32, %.9g),
                            "greedy", "llama_cpp_commit", "settings",
                            "vs_reference": {"max_abs_diff_prompt_logits" (every prompt
                            position, not only the kept ones), "max_abs_diff_greedy_logits"
                            (along the common greedy prefix), "greedy_agree",
                            "first_greedy_mismatch"}}
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections import OrderedDict
from typing import List

import numpy as np
import torch

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)
from flatstate_ref.llama import HfLlama, top2_margin  # noqa: E402

GOLDEN_POSITIONS = [0, 1, 2, 3, 4, 5, 6, 7, 10, 15, 20, 25, 31, 37, 42, 47]
# Qwen3.5 / Qwen3-Next (hybrid) folders: fewer rows (8 significant digits), but across the
# delta rule's 64-token chunk, and golden_llamacpp.json without logit rows (size in git)
QWEN35_POSITIONS = [0, 1, 2, 31, 63, 64, 65, 79]
QWEN35_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_next")
# Mamba-2 folders: likewise, across the 32-token chunks of tests/data/hf_mamba2_tiny
MAMBA2_POSITIONS = [0, 1, 2, 31, 32, 63, 64, 79]
# RWKV-7 (fla-hub layout, model_type rwkv7): flatstate_ref/rwkv7.py, the same 8 positions of an
# 80-token prompt (across the chunked form's first 64-token chunk boundary), 8 digits, no
# llama.cpp logit rows
RWKV7_POSITIONS = [0, 1, 2, 31, 63, 64, 65, 79]
# fla layouts (model_type gla: flatstate_ref/gla.py; gated_deltanet: flatstate_ref/
# gated_deltanet.py; delta_net: flatstate_ref/delta_net.py; their hybrids with attn layers too),
# likewise (no llama.cpp: it has none of them)
GLA_POSITIONS = [0, 1, 2, 31, 63, 64, 65, 79]


def _text_cfg(model_dir: str) -> dict:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    return cfg.get("text_config") or cfg


def load_reference(model_dir: str):
    """(float64 reference model, golden positions): flatstate_ref/qwen35.py for model_type
    qwen3_5 / qwen3_5_text / qwen3_next, flatstate_ref/mamba2.py for mamba2, else
    flatstate_ref/llama.py."""
    if _text_cfg(model_dir).get("model_type") == "mamba2":
        from flatstate_ref.mamba2 import HfMamba2
        return HfMamba2.load(model_dir), MAMBA2_POSITIONS
    if _text_cfg(model_dir).get("model_type") in QWEN35_TYPES:
        from flatstate_ref.qwen35 import HfQwen35
        return HfQwen35.load(model_dir), QWEN35_POSITIONS
    if _text_cfg(model_dir).get("model_type") == "rwkv7":
        from flatstate_ref.rwkv7 import HfRwkv7
        return HfRwkv7.load(model_dir), RWKV7_POSITIONS
    if _text_cfg(model_dir).get("model_type") == "gla":
        from flatstate_ref.gla import HfGla
        return HfGla.load(model_dir), GLA_POSITIONS
    if _text_cfg(model_dir).get("model_type") == "gated_deltanet":
        from flatstate_ref.gated_deltanet import HfGatedDeltaNet
        return HfGatedDeltaNet.load(model_dir), GLA_POSITIONS
    if _text_cfg(model_dir).get("model_type") == "delta_net":
        from flatstate_ref.delta_net import HfDeltaNet
        return HfDeltaNet.load(model_dir), GLA_POSITIONS
    return HfLlama.load(model_dir), GOLDEN_POSITIONS
FIRST_ID = 3  # past <unk> <s> </s>


def seeded_prompt(vocab_size: int, n: int = 48, seed: int = 1234, bos: int = 1) -> List[int]:
    """BOS then n - 1 ids uniform in [FIRST_ID, vocab) from numpy's legacy RandomState(seed)
    (its stream is fixed across numpy versions)."""
    rs = np.random.RandomState(seed)
    return [bos] + [int(x) for x in rs.randint(FIRST_ID, vocab_size, size=n - 1)]


def _round(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


def _rows(t: torch.Tensor, positions: List[int], digits: int) -> List[List[float]]:
    return [[_round(v, digits) for v in t[p].tolist()] for p in positions]


def reference_golden(model_dir: str, prompt: List[int], n_greedy: int):
    """(golden dict, full prompt logits [T, V] float64, greedy ids, per-step rows [n, V])."""
    m, positions = load_reference(model_dir)
    positions = [p for p in positions if p < len(prompt)]
    digits = 10 if isinstance(m, HfLlama) else 8
    full = m.logits(prompt)
    seq = list(prompt)
    greedy: List[int] = []
    rows = []
    for _ in range(n_greedy):
        row = m.logits(seq)[-1]
        rows.append(row)
        nxt = int(torch.argmax(row))
        greedy.append(nxt)
        seq.append(nxt)
    steps = torch.stack(rows) if rows else torch.zeros(0, full.shape[1], dtype=full.dtype)
    allv = torch.cat([full, steps])
    g = OrderedDict([
        ("how", f"tools/flatstate_ref/{type(m).__module__.split('.')[-1]}.py (float64) on "
                "this folder; tools/hf_llama_golden.py compare"),
        ("prompt", prompt),
        ("positions", positions),
        ("logits", _rows(full, positions, digits)),
        ("greedy", greedy),
        ("greedy_top2_margins", [_round(top2_margin(r), 6) for r in rows]),
        ("prompt_min_top2_margin", _round(min(top2_margin(r) for r in full), 6)),
        ("logit_min", _round(float(allv.min()), 6)),
        ("logit_max", _round(float(allv.max()), 6)),
    ])
    if hasattr(m, "state_arrays"):  # recurrent-only models: the state after the prompt
        st = m.new_state()
        m.forward(prompt, st)
        g["state_after_prompt"] = [
            OrderedDict([(k, [_round(v, digits) for v in st["layers"][i][k].flatten().tolist()])
                         for k in ("conv", "ssm")]) for i in range(len(st["layers"]))]
    return g, full, greedy, steps


def compare(model_dir: str, cpp_json: str, out_dir: str, commit: str, n_greedy: int,
            settings: str) -> dict:
    with open(cpp_json, encoding="utf-8") as f:
        cpp = json.load(f)
    prompt = [int(i) for i in cpp["prompt"]]
    n_greedy = min(n_greedy, len(cpp["greedy"]))
    ref, full, greedy, steps = reference_golden(model_dir, prompt, n_greedy)
    cl = torch.tensor(cpp["logits"], dtype=torch.float64)
    if cl.shape != full.shape:
        raise SystemExit(f"llama.cpp logits {tuple(cl.shape)} vs reference {tuple(full.shape)}")
    diff_prompt = float((cl - full).abs().max())
    cg = [int(i) for i in cpp["greedy"][:n_greedy]]
    agree = 0
    while agree < n_greedy and cg[agree] == greedy[agree]:
        agree += 1
    # Along the common prefix both sides saw the same sequence, so their rows compare.
    common = min(agree + 1, n_greedy)
    cgl = torch.tensor(cpp["greedy_logits"][:common], dtype=torch.float64)
    diff_greedy = float((cgl - steps[:common]).abs().max()) if common else 0.0
    cpp_golden = OrderedDict([
        ("how", "tools/llamacpp/logits.cc against llama.cpp's libllama, on the GGUF that "
                "llama.cpp's convert_hf_to_gguf.py --outtype f32 made of this folder "
                "(tools/llamacpp_parity.sh)"),
        ("llama_cpp_commit", commit),
        ("settings", settings),
        ("prompt", prompt),
        ("positions", ref["positions"]),
        ("logits", [[float(f"{v:.9g}") for v in cpp["logits"][p]] for p in ref["positions"]]
         if "/llama.py" in ref["how"] else "not kept (see golden_reference.json)"),
        ("greedy", cg),
        ("vs_reference", OrderedDict([
            ("max_abs_diff_prompt_logits", _round(diff_prompt, 4)),
            ("max_abs_diff_greedy_logits", _round(diff_greedy, 4)),
            ("greedy_agree", agree == n_greedy),
            ("first_greedy_mismatch", None if agree == n_greedy else agree),
        ])),
    ])
    os.makedirs(out_dir, exist_ok=True)
    for name, obj in (("golden_reference.json", ref), ("golden_llamacpp.json", cpp_golden)):
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            json.dump(obj, f, separators=(",", ":"))
            f.write("\n")
    margins = ref["greedy_top2_margins"]
    summary = OrderedDict([
        ("max_abs_diff_prompt_logits", diff_prompt),
        ("max_abs_diff_greedy_logits", diff_greedy),
        ("logit_range", [ref["logit_min"], ref["logit_max"]]),
        ("greedy_agree", f"{agree}/{n_greedy}"),
        ("min_top2_margin_greedy_path", min(margins) if margins else None),
        ("min_top2_margin_prompt", ref["prompt_min_top2_margin"]),
    ])
    return summary


def _int_list(text: str) -> List[int]:
    out: List[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    return out


def scan(seeds: List[int], gains: List[float], writer_args: List[str], n_prompt: int,
         n_greedy: int, prompt_seed: int, writer: str = "hf_llama") -> List[dict]:
    """Margins of each (seed, init_gain) folder under the reference; prints one line each.
    writer: the tools/ module whose main() writes the folder (hf_llama, hf_qwen35, hf_mamba2)."""
    import importlib
    import tempfile
    writer_mod = importlib.import_module(writer)
    rows = []
    for gain in gains:
        for seed in seeds:
            with tempfile.TemporaryDirectory() as tmp:
                no_tok = ["--no_vocab"] if writer == "hf_rwkv7" else ["--tokenizer", "none"]
                if writer_mod.main(["--out", tmp, "--force"] + no_tok + writer_args +
                                   ["--seed", str(seed), "--init_gain", str(gain)]) != 0:
                    raise SystemExit(f"{writer}.py failed")
                with open(os.path.join(tmp, "config.json"), encoding="utf-8") as f:
                    cfg = json.load(f)
                prompt = seeded_prompt(cfg["vocab_size"], n_prompt, prompt_seed,
                                       cfg.get("bos_token_id", 1))
                ref, _, greedy, _ = reference_golden(tmp, prompt, n_greedy)
            row = OrderedDict([("seed", seed), ("init_gain", gain),
                               ("min_margin_greedy", min(ref["greedy_top2_margins"])),
                               ("min_margin_prompt", ref["prompt_min_top2_margin"]),
                               ("distinct_greedy", len(set(greedy))),
                               ("logit_range", [ref["logit_min"], ref["logit_max"]])])
            print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prompt")
    p.add_argument("model_dir")
    p.add_argument("--n", type=int, default=48)
    p.add_argument("--seed", type=int, default=1234)
    c = sub.add_parser("compare")
    c.add_argument("model_dir")
    c.add_argument("llamacpp_json")
    c.add_argument("out_dir")
    c.add_argument("--llama_cpp_commit", default="unknown")
    c.add_argument("--n_greedy", type=int, default=64)
    c.add_argument("--settings", default="F32 GGUF, F32 K/V cache, flash attention off, "
                                        "1 thread, CPU, argmax without a sampler")
    r = sub.add_parser("reference", help="golden_reference.json only (no llama.cpp)")
    r.add_argument("model_dir")
    r.add_argument("out_dir")
    r.add_argument("--n", type=int, default=48)
    r.add_argument("--seed", type=int, default=1234)
    r.add_argument("--n_greedy", type=int, default=64)
    r.add_argument("--text", help="prompt = this text's UTF-8 bytes as ids (a byte-level folder, "
                   "e.g. models/shakespeare-gated-deltanet) instead of the seeded ids")
    sc = sub.add_parser("scan")
    sc.add_argument("--seeds", default="0-7", help="e.g. 0-7 or 1,3,5")
    sc.add_argument("--gains", default="1", help="--init_gain values, comma-separated")
    sc.add_argument("--n", type=int, default=48)
    sc.add_argument("--n_greedy", type=int, default=64)
    sc.add_argument("--seed", type=int, default=1234, help="the prompt's seed")
    sc.add_argument("--writer", default="hf_llama",
                    choices=["hf_llama", "hf_qwen35", "hf_mamba2", "hf_rwkv7", "hf_gla",
                             "hf_gated_deltanet", "hf_delta_net"])
    sc.add_argument("writer_args", nargs=argparse.REMAINDER,
                    help="the writer's flags (after --)")
    a = ap.parse_args(argv)
    if a.cmd == "scan":
        wargs = a.writer_args[1:] if a.writer_args[:1] == ["--"] else a.writer_args
        scan(_int_list(a.seeds), [float(g) for g in a.gains.split(",")], wargs, a.n,
             a.n_greedy, a.seed, a.writer)
        return 0
    if a.cmd == "prompt":
        cfg = _text_cfg(a.model_dir)
        print(",".join(str(i) for i in seeded_prompt(cfg["vocab_size"], a.n, a.seed,
                                                     cfg.get("bos_token_id", 1))))
        return 0
    if a.cmd == "reference":
        cfg = _text_cfg(a.model_dir)
        if a.text is not None:
            if cfg["vocab_size"] != 256:
                raise SystemExit(f"--text needs a 256-id byte vocabulary, not {cfg['vocab_size']}")
            prompt = list(a.text.encode("utf-8"))
        else:
            prompt = seeded_prompt(cfg["vocab_size"], a.n, a.seed, cfg.get("bos_token_id", 1))
        ref = reference_golden(a.model_dir, prompt, a.n_greedy)[0]
        os.makedirs(a.out_dir, exist_ok=True)
        with open(os.path.join(a.out_dir, "golden_reference.json"), "w", encoding="utf-8") as f:
            json.dump(ref, f, separators=(",", ":"))
            f.write("\n")
        return 0
    s = compare(a.model_dir, a.llamacpp_json, a.out_dir, a.llama_cpp_commit, a.n_greedy,
                a.settings)
    print(json.dumps(s, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
