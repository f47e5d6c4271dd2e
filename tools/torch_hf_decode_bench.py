#!/usr/bin/env python3
"""Decode and prefill speed of a Hugging Face folder through transformers (+ fla's kernels where
transformers picks them up), the PyTorch baseline beside flatstate-bench's Decode/<folder> rows
on the same checkpoint (issue 32 item 3; docs/gpu.md).

For each batch B: a prefill of B prompts of --prompt tokens (random ids, timed), then --steps
decode steps of one token per sequence with the model's cache (greedy), timed with CUDA events
after --warmup steps; tokens/s = B * steps / time. Also the device-to-device copy bandwidth
(bytes read + written) of a 2 GiB buffer, the yardstick for bytes per step. Writes JSON to --out
and prints one line per row. Which gated-delta-rule implementation transformers picked (fla's
Triton kernels or its torch fallback) is not recorded: transformers' own log lines say so for
the conv (`causal_conv1d` fallback), nothing says it for the delta rule.

  python3 tools/torch_hf_decode_bench.py --model DIR --out FILE [--fla .upstream/fla.tar.gz]
      [--batches 1,8,32,64] [--dtype bfloat16] [--prompt 64] [--steps 32] [--prefill 4096]
"""
import argparse
import json
import sys
import os
import time


def copy_bandwidth(torch):
    n = 1 << 31
    a = torch.empty(n, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    a.random_(0, 255)
    for _ in range(3):
        b.copy_(a)
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        s.record()
        b.copy_(a)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return 2 * n / times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--fla")
    ap.add_argument("--batches", default="1,8,32,64")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--prefill", default="4096", help="single-sequence prefill lengths, comma list")
    args = ap.parse_args()
    if args.fla:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from gpu_upstream_parity import add_fla_source
        add_fla_source(args.fla)
    import torch
    import transformers
    torch.backends.cuda.matmul.allow_tf32 = False
    env = {"torch": torch.__version__, "transformers": transformers.__version__,
           "gpu": torch.cuda.get_device_name(0)}
    try:
        import fla
        env["fla"] = getattr(fla, "__version__", "?")
    except Exception as e:
        env["fla"] = f"not importable: {e!r}"
    env["copy_bandwidth_bytes_per_s"] = copy_bandwidth(torch)
    dtype = getattr(torch, args.dtype)
    model = transformers.AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).cuda().eval()
    vocab = model.config.vocab_size if hasattr(model.config, "vocab_size") else \
        model.config.get_text_config().vocab_size
    env["params"] = sum(p.numel() for p in model.parameters())
    env["model_class"] = f"{type(model).__module__}.{type(model).__name__}"
    rows = []
    g = torch.Generator(device="cpu").manual_seed(0)
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    with torch.no_grad():
        for B in [int(x) for x in args.batches.split(",") if x]:
            row = {"batch": B}
            try:
                ids = torch.randint(0, vocab, (B, args.prompt), generator=g).cuda()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model(input_ids=ids, use_cache=True)
                torch.cuda.synchronize()
                row["prefill_s"] = time.perf_counter() - t0
                past = out.past_key_values
                nxt = out.logits[:, -1:].argmax(-1)
                times = []
                for i in range(args.warmup + args.steps):
                    s, e = ev(), ev()
                    s.record()
                    out = model(input_ids=nxt, past_key_values=past, use_cache=True)
                    nxt = out.logits[:, -1:].argmax(-1)
                    past = out.past_key_values
                    e.record()
                    torch.cuda.synchronize()
                    if i >= args.warmup:
                        times.append(s.elapsed_time(e) / 1e3)
                times.sort()
                med = times[len(times) // 2]
                row.update(step_s_median=med, tokens_per_s=B / med)
            except Exception as e:  # out of memory, unsupported path: recorded
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
        for n in [int(x) for x in args.prefill.split(",") if x]:
            row = {"prefill_len": n}
            try:
                ids = torch.randint(0, vocab, (1, n), generator=g).cuda()
                model(input_ids=ids[:, :256])  # warm-up (kernel compilation)
                torch.cuda.synchronize()
                reps = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    model(input_ids=ids, use_cache=True)
                    torch.cuda.synchronize()
                    reps.append(time.perf_counter() - t0)
                reps.sort()
                row.update(seconds_median=reps[1], tokens_per_s=n / reps[1])
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    json.dump({"env": env, "model": args.model, "dtype": args.dtype, "rows": rows},
              open(args.out, "w"), indent=1)
    print(json.dumps(env))


if __name__ == "__main__":
    main()
