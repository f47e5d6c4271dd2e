#!/usr/bin/env python3
"""The upstream implementations on flatstate's golden folders (issue 32 item 2).

Runs each tests/data/hf_* folder through its upstream model code -- transformers' own classes for
Llama / Qwen2 / Qwen3 / Qwen3.5 / Mamba-2, fla's (flash-linear-attention, carried as source) for
GLA / DeltaNet / Gated DeltaNet / RWKV-7 -- on the golden prompt, and compares with the folder's
golden_reference.json (flatstate's float64 reference, which the C++ engine is checked against on
the CPU and, by tests/engine/runtime/engine_device_hf_test.cc, on CUDA):

  * max |logit - reference| over the golden positions, and over the logit range;
  * 64 greedy tokens (argmax over a full forward of prompt + generated ids, no cache) against the
    reference's. RWKV-7 goes through fla's cache instead (the prompt in 32-token pieces, then a
    token per call): fla's RWKV-7 layer takes its chunk kernel for any call of 64 tokens or more,
    and that kernel did not finish in float32.

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
      [--only hf_qwen35_tiny,...] [--timeout S]
  python3 tools/gpu_upstream_parity.py --from_rows RUN1/upstream_parity.json,... --golden_dir DIR
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
    """Upstream's own class for `arch`: transformers' for its families, fla's for fla's (by name,
    not through the Auto* registry, where importing fla replaces transformers' Mamba-2). fla's
    float32 rows run its fused recurrent kernels (its chunk kernels take bf16 only)."""
    import transformers
    kw = {}
    if arch in FLA_ARCHS:
        import fla.models
        cls = getattr(fla.models, arch)
        # fla still names tied weights as a list (transformers 4); transformers 5 wants a map.
        tied = getattr(cls, "_tied_weights_keys", None)
        if isinstance(tied, list):
            cls._tied_weights_keys = {k: "model.embeddings.weight" for k in tied}
        cfg = json.load(open(os.path.join(folder, "config.json")))
        if dtype == torch.float32 and "attn_mode" in cfg:
            kw["attn_mode"] = "fused_recurrent"
    else:
        cls = getattr(transformers, arch)
    model = cls.from_pretrained(folder, dtype=dtype, **kw)
    return model.to(device).eval()


def run_row(folder, arch, device, dtype_name, golden, torch):
    dtype = {"float32": torch.float32, "float64": torch.float64,
             "bfloat16": torch.bfloat16}[dtype_name]
    t0 = time.time()
    model = load_model(folder, arch, device, dtype, torch)
    prompt = golden["prompt"]
    if arch == "RWKV7ForCausalLM":
        # fla's RWKV-7 layer runs its chunk kernel for any call of 64 tokens or more, whatever
        # attn_mode says, and that kernel did not finish in float32 (2026-11-26): feed it pieces
        # of fewer than 64 tokens with its cache, so every call takes the fused recurrent kernel.
        return run_row_incremental(model, device, golden, torch, t0)
    with torch.no_grad():
        ids = torch.tensor([prompt], device=device)
        logits = model(input_ids=ids).logits[0].double().cpu()
        seq = list(prompt)
        greedy = []
        for _ in range(len(golden["greedy"])):
            out = model(input_ids=torch.tensor([seq], device=device)).logits[0, -1]
            t = int(out.argmax().item())
            greedy.append(t)
            seq.append(t)
    return finish_row(golden, logits, greedy, t0, torch)


def run_row_incremental(model, device, golden, torch, t0, piece=32):
    """run_row through the model's cache: the prompt in pieces of `piece` tokens, then one
    token per call."""
    prompt = golden["prompt"]
    with torch.no_grad():
        past, rows = None, []
        for i in range(0, len(prompt), piece):
            ids = torch.tensor([prompt[i:i + piece]], device=device)
            out = model(input_ids=ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0].double().cpu())
        logits = torch.cat(rows)
        greedy = [int(logits[-1].argmax().item())]
        while len(greedy) < len(golden["greedy"]):
            out = model(input_ids=torch.tensor([[greedy[-1]]], device=device),
                        past_key_values=past, use_cache=True)
            past = out.past_key_values
            greedy.append(int(out.logits[0, -1].argmax().item()))
    return finish_row(golden, logits, greedy, t0, torch)


def finish_row(golden, logits, greedy, t0, torch):
    """The row's figures from the prompt's logits (float64 [T, vocab] on the CPU) and the greedy
    ids: max |logit - reference| over the golden positions, greedy agreement, seconds."""
    worst = 0.0
    for i, p in enumerate(golden["positions"]):
        want = torch.tensor(golden["logits"][i], dtype=torch.float64)
        worst = max(worst, (logits[p, :want.shape[0]] - want).abs().max().item())
    rng = golden["logit_max"] - golden["logit_min"]
    same = 0
    while same < len(greedy) and greedy[same] == golden["greedy"][same]:
        same += 1
    return {"max_abs_diff": worst, "logit_range": rng, "rel_to_range": worst / rng,
            "greedy": greedy, "greedy_equal": greedy == golden["greedy"],
            "greedy_prefix_equal": same, "seconds": round(time.time() - t0, 2)}


def worker(task_path):
    """One process per task (a list of rows): a CUDA fault (an illegal address poisons the
    process's context) then costs only that task's rows."""
    task = json.load(open(task_path))
    if task["fla"]:
        add_fla_source(task["fla"])
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    if task["fla"]:
        patch_fla_attention(torch)
    rows = []
    for folder, arch, lib, device, dtype in task["rows"]:
        name = os.path.basename(folder)
        row = {"folder": name, "arch": arch, "library": lib, "device": device, "dtype": dtype}
        if device == "cuda" and not torch.cuda.is_available():
            row["error"] = "no CUDA device"
        else:
            try:
                golden = json.load(open(os.path.join(folder, "golden_reference.json")))
                row.update(run_row(folder, arch, device, dtype, golden, torch))
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"
                row["traceback"] = traceback.format_exc()[-2000:]
        rows.append(row)
        json.dump(rows, open(task["out"], "w"))  # after every row: a crash keeps the earlier ones
        print(f"[{time.strftime('%H:%M:%S')}] {name} {lib} {device} {dtype}: "
              f"{row.get('error', 'ok')[:200]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/data")
    ap.add_argument("--fla", help="fla source: a folder holding fla/ or a .tar.gz of it")
    ap.add_argument("--out")
    ap.add_argument("--golden_dir", help="write <folder>/golden_upstream.json under this dir")
    ap.add_argument("--timeout", type=float, default=110,
                    help="seconds for all workers; then the unfinished are killed, their rows "
                         "recorded as errors, and the files written")
    ap.add_argument("--only", help="comma-separated folder names: run just these")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--from_rows", help="comma-separated upstream_parity.json files of earlier "
                    "runs: write --golden_dir from their rows (a later file's row for the same "
                    "folder, library, device and dtype replaces an earlier one) and run nothing")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if args.from_rows:
        if not args.golden_dir:
            ap.error("--from_rows needs --golden_dir")
        rows, env = {}, None
        for path in args.from_rows.split(","):
            data = json.load(open(path))
            env = data["env"]
            for r in data["rows"]:
                key = (r["folder"], r["library"], r["device"], r["dtype"])
                if "error" not in r or key not in rows:
                    rows[key] = r
        write_goldens([rows[k] for k in sorted(rows)], env, args.golden_dir)
        return
    if not args.out:
        ap.error("--out is required")
    import subprocess
    from importlib import metadata
    os.makedirs(args.out, exist_ok=True)
    # Versions without importing torch here (the workers do; the parent stays quick).
    env = {}
    for pkg in ("torch", "transformers", "triton"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    env["fla"] = "0.5.2 source (fla-org/flash-linear-attention bc3b101d)" if args.fla else None
    env["flash_attn"] = "fla.layers.attn.flash_attn_func -> torch sdpa stand-in"
    tmp = tempfile.mkdtemp(prefix="upstream-")
    fla_src = None
    if args.fla:
        fla_src = args.fla
        if fla_src.endswith(".tar.gz"):  # unpacked once, shared by the workers
            fla_src = add_fla_source(fla_src)
            sys.path.remove(fla_src)
    # Tasks: transformers' families in one process (no fla on its path: its own torch code),
    # each fla folder in its own, all at once.
    hf_rows, tasks = [], []
    for name in sorted(os.listdir(args.data)):
        folder = os.path.abspath(os.path.join(args.data, name))
        if not os.path.exists(os.path.join(folder, "golden_reference.json")):
            continue
        if args.only and name not in args.only.split(","):
            continue
        arch = json.load(open(os.path.join(folder, "config.json")))["architectures"][0]
        if arch in FLA_ARCHS:
            tasks.append({"fla": fla_src, "rows": [[folder, arch, "fla", "cuda", d]
                                                   for d in ("float32", "bfloat16")]})
        else:
            hf_rows += [[folder, arch, "transformers", dv, d] for dv, d in
                        (("cpu", "float64"), ("cuda", "float32"), ("cuda", "bfloat16"))]
    # transformers' rows: one process per folder as well (Mamba-2's and Qwen3.5's torch paths in
    # float64 on the CPU take minutes each; in one process they ran past the step's limit).
    by = {}
    for r in hf_rows:
        by.setdefault(r[0], []).append(r)
    tasks = [{"fla": None, "rows": rs} for rs in by.values()] + tasks
    procs = []
    for n, t in enumerate(tasks):
        t["out"] = os.path.join(tmp, f"rows-{n}.json")
        path = os.path.join(tmp, f"task-{n}.json")
        json.dump(t, open(path, "w"))
        log = open(os.path.join(tmp, f"log-{n}.txt"), "w")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", path],
                                      stdout=log, stderr=subprocess.STDOUT))
    deadline = time.time() + args.timeout
    rows = []
    for n, (t, p) in enumerate(zip(tasks, procs)):
        try:
            p.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        got = json.load(open(t["out"])) if os.path.exists(t["out"]) else []
        done = {(r["folder"], r["device"], r["dtype"]) for r in got}
        log_text = open(os.path.join(tmp, f"log-{n}.txt")).read()
        with open(os.path.join(args.out, f"worker-{n}.log"), "w") as f:
            f.write(log_text)
        tail = log_text[-600:]
        for folder, arch, lib, device, dtype in t["rows"]:
            if (os.path.basename(folder), device, dtype) not in done:
                got.append({"folder": os.path.basename(folder), "arch": arch, "library": lib,
                            "device": device, "dtype": dtype,
                            "error": f"worker exited {p.returncode} before this row: {tail}"})
        rows += got
    rows.sort(key=lambda r: (r["folder"], r["library"], r["device"], r["dtype"]))
    for row in rows:
        print(f"{row['folder']:32s} {row['library']:12s} {row['device']:4s} {row['dtype']:8s} " +
              (f"max|d| {row['max_abs_diff']:.3e} ({row['rel_to_range']:.1e} of range) "
               f"greedy {row['greedy_prefix_equal']}/64 {row['seconds']}s"
               if "error" not in row else "ERROR " + row["error"][:300].replace("\n", " | ")),
              flush=True)
    json.dump({"env": env, "rows": rows}, open(os.path.join(args.out, "upstream_parity.json"), "w"),
              indent=1)
    if args.golden_dir:
        write_goldens(rows, env, args.golden_dir)
    print(json.dumps(env))


def write_goldens(rows, env, golden_dir):
    """One golden_upstream.json per folder with a row that ran: every such row's greedy ids and
    differences (no logit rows), and the environment it ran in."""
    by_folder = {}
    for r in rows:
        by_folder.setdefault(r["folder"], []).append(r)
    for name, rs in sorted(by_folder.items()):
        ok = [r for r in rs if "error" not in r]
        if not ok:
            continue
        out = {"how": "tools/gpu_upstream_parity.py on the golden prompt",
               "env": env,
               "runs": [{k: r[k] for k in ("library", "device", "dtype", "max_abs_diff",
                                           "logit_range", "greedy_equal",
                                           "greedy_prefix_equal", "greedy")} for r in ok]}
        d = os.path.join(golden_dir, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "golden_upstream.json"), "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
