#!/usr/bin/env python3
"""The upstream implementations on flatstate's golden folders (issue 32 item 2).

Runs each tests/data/hf_* folder through its upstream model code -- transformers' own classes for
Llama / Qwen2 / Qwen3 / Qwen3.5 / Mamba-2, fla's (flash-linear-attention, carried as source) for
GLA / DeltaNet / Gated DeltaNet / RWKV-7 -- on the golden prompt, and compares with the folder's
golden_reference.json (flatstate's float64 reference, which the C++ engine is checked against on
the CPU and, by tests/engine/runtime/engine_device_hf_test.cc, on CUDA):

  * max |logit - reference| over the golden positions, and over the logit range;
  * 64 greedy tokens (argmax over a full forward of prompt + generated ids, no cache) against the
    reference's.

Backends per folder: transformers on the CPU in float64 (exact arithmetic of the upstream code) and
on CUDA in float32 (TF32 off) and bfloat16; fla on CUDA in float32 and bfloat16 (its Triton
kernels; fla's hybrid attention layers call flash_attn, which is not installed there: fla's module
gets a stand-in through torch's scaled_dot_product_attention, recorded in the output). The
bfloat16 rows say how far the upstream code itself lands from the exact result in that dtype,
the yardstick for flatstate's bf16 CUDA path.

Writes OUT/upstream_parity.json (every row) and, with --golden_dir, one golden_upstream.json per
folder (greedy ids and the differences; no logit rows) for the C++ tests. Exits 0 even when a row
differs: the verdict is in the table; exits 1 only on a usage error.

  python3 tools/gpu_upstream_parity.py --fla .upstream/fla.tar.gz --out OUT [--golden_dir DIR]
"""
import argparse
import json
import os
import sys
import tarfile
import tempfile
import time
import traceback

FLA_ARCHS = {"GLAForCausalLM", "GatedDeltaNetForCausalLM", "DeltaNetForCausalLM",
             "RWKV7ForCausalLM"}


def add_fla_source(path):
    """Puts fla (a folder holding fla/, or a .tar.gz of one) on sys.path, with a dist-info so that
    importlib.metadata (which transformers asks before it uses fla's kernels) finds it. Call before
    importing transformers. Returns the folder added."""
    import re
    if path.endswith(".tar.gz"):
        dst = tempfile.mkdtemp(prefix="fla-")
        with tarfile.open(path) as t:
            t.extractall(dst)
        path = dst
    text = open(os.path.join(path, "fla", "__init__.py")).read()
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", text)
    version = m.group(1) if m else "0.0.0"
    info = os.path.join(path, f"flash_linear_attention-{version}.dist-info")
    if not os.path.isdir(info):
        os.makedirs(info)
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write(f"Metadata-Version: 2.1\nName: flash-linear-attention\nVersion: {version}\n")
        with open(os.path.join(info, "top_level.txt"), "w") as f:
            f.write("fla\n")
        open(os.path.join(info, "RECORD"), "w").close()
    sys.path.insert(0, path)
    return path


def patch_fla_attention(torch):
    """fla's hybrid attention layer (fla/layers/attn.py) calls flash_attn_func, and flash_attn is
    not installed: point that module's name at an SDPA stand-in (q [B,T,H,D], k/v [B,T,Hkv,D],
    causal, no window). Only fla's module is patched; transformers never sees it."""
    import torch.nn.functional as F
    import fla.layers.attn as attn

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
                        window_size=(-1, -1), **_):
        if tuple(window_size) != (-1, -1):
            raise NotImplementedError("the flash_attn stand-in has no window")
        h, hkv = q.shape[2], k.shape[2]
        k = k.repeat_interleave(h // hkv, dim=2)
        v = v.repeat_interleave(h // hkv, dim=2)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=causal, scale=softmax_scale)
        return o.transpose(1, 2)

    attn.flash_attn_func = flash_attn_func


def load_model(folder, arch, device, dtype, torch):
    import transformers
    if arch in FLA_ARCHS:
        import fla  # noqa: F401  (registers fla's classes with the Auto* factories)
    cls = transformers.AutoModelForCausalLM
    model = cls.from_pretrained(folder, dtype=dtype)
    return model.to(device).eval()


def run_row(folder, arch, device, dtype_name, golden, torch):
    dtype = {"float32": torch.float32, "float64": torch.float64,
             "bfloat16": torch.bfloat16}[dtype_name]
    t0 = time.time()
    model = load_model(folder, arch, device, dtype, torch)
    prompt = golden["prompt"]
    positions = golden["positions"]
    with torch.no_grad():
        ids = torch.tensor([prompt], device=device)
        logits = model(input_ids=ids).logits[0].double().cpu()
        worst = 0.0
        for i, p in enumerate(positions):
            want = torch.tensor(golden["logits"][i], dtype=torch.float64)
            worst = max(worst, (logits[p, :want.shape[0]] - want).abs().max().item())
        seq = list(prompt)
        greedy = []
        for _ in range(len(golden["greedy"])):
            out = model(input_ids=torch.tensor([seq], device=device)).logits[0, -1]
            t = int(out.argmax().item())
            greedy.append(t)
            seq.append(t)
    rng = golden["logit_max"] - golden["logit_min"]
    same = 0
    while same < len(greedy) and greedy[same] == golden["greedy"][same]:
        same += 1
    return {"max_abs_diff": worst, "logit_range": rng, "rel_to_range": worst / rng,
            "greedy": greedy, "greedy_equal": greedy == golden["greedy"],
            "greedy_prefix_equal": same, "seconds": round(time.time() - t0, 2)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/data")
    ap.add_argument("--fla", help="fla source: a folder holding fla/ or a .tar.gz of it")
    ap.add_argument("--out", required=True)
    ap.add_argument("--golden_dir", help="write <folder>/golden_upstream.json under this dir")
    args = ap.parse_args()
    if args.fla:
        add_fla_source(args.fla)
    import torch
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}
    if args.fla:
        try:
            import fla
            env["fla"] = getattr(fla, "__version__", "?")
            patch_fla_attention(torch)
            env["flash_attn"] = "fla.layers.attn.flash_attn_func -> torch sdpa stand-in"
        except Exception as e:  # recorded: the fla rows then carry the error
            env["fla"] = f"import failed: {e!r}"
    try:
        import triton
        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for name in sorted(os.listdir(args.data)):
        folder = os.path.join(args.data, name)
        gpath = os.path.join(folder, "golden_reference.json")
        if not os.path.exists(gpath):
            continue
        golden = json.load(open(gpath))
        arch = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
        backends = ([("fla", "cuda", "float32"), ("fla", "cuda", "bfloat16")] if arch in FLA_ARCHS
                    else [("transformers", "cpu", "float64"), ("transformers", "cuda", "float32"),
                          ("transformers", "cuda", "bfloat16")])
        for lib, device, dtype in backends:
            row = {"folder": name, "arch": arch, "library": lib, "device": device, "dtype": dtype}
            if device == "cuda" and not torch.cuda.is_available():
                row["error"] = "no CUDA device"
            else:
                try:
                    row.update(run_row(folder, arch, device, dtype, golden, torch))
                except Exception as e:
                    row["error"] = f"{type(e).__name__}: {e}"
                    row["traceback"] = traceback.format_exc()[-2000:]
            rows.append(row)
            print(f"{name:32s} {lib:12s} {device:4s} {dtype:7s} " +
                  (f"max|d| {row['max_abs_diff']:.3e} ({row['rel_to_range']:.1e} of range) "
                   f"greedy {row['greedy_prefix_equal']}/64 {row['seconds']}s"
                   if "error" not in row else "ERROR " + row["error"][:150]), flush=True)
    json.dump({"env": env, "rows": rows}, open(os.path.join(args.out, "upstream_parity.json"), "w"),
              indent=1)
    if args.golden_dir:
        by_folder = {}
        for r in rows:
            by_folder.setdefault(r["folder"], []).append(r)
        for name, rs in by_folder.items():
            ok = [r for r in rs if "error" not in r]
            if not ok:
                continue
            out = {"how": "tools/gpu_upstream_parity.py on the golden prompt",
                   "env": env,
                   "runs": [{k: r[k] for k in ("library", "device", "dtype", "max_abs_diff",
                                               "logit_range", "greedy_equal",
                                               "greedy_prefix_equal", "greedy")} for r in ok]}
            d = os.path.join(args.golden_dir, name)
            os.makedirs(d, exist_ok=True)
            json.dump(out, open(os.path.join(d, "golden_upstream.json"), "w"), indent=1)
    print(json.dumps(env))


if __name__ == "__main__":
    main()
