#!/usr/bin/env python3
"""PyTorch baseline for flatstate's GPU benchmarks (issue 17 item 4), on the same GPU.

The GPT-2-small shape of bench/engine_bench.cc (12 layers, d 768, 12 heads of 64, MLP 3072,
vocab 256, fp32, random weights), written plainly in PyTorch:
  - copy: device-to-device copy bandwidth (bytes read + written / time), the physical limit;
  - decode: one token for each of B sessions per step; linear (elu+1 features, recurrent state
    S [B,H,64,64] and z updated in place) and softmax (KV cache of C tokens per session, SDPA);
    at every batch in --batches and context in --contexts (the linear state does not grow with
    context: its context only checks that);
  - prefill: one prompt of L tokens; linear in its chunked parallel form (chunk 64), softmax
    with causal SDPA (flash where PyTorch picks it).
Each case eager and, with --compile, torch.compile'd. Simplifications (the same for both kinds,
stated so the comparison is read fairly): no RoPE, no causal conv, no FAVOR+/cosFormer maps.
Bytes per decode step = weights + state read and written (linear) or KV read (softmax).

    python3 tools/torch_gpu_bench.py --out torch_bench.json [--compile] [--device cuda]

Prints one JSON line per case and writes them all to --out. A case that does not fit
--max_gib or raises is recorded with its error and the run goes on.
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

D, H, HD, MLP, VOCAB, LAYERS, CHUNK, EPS = 768, 12, 64, 3072, 256, 12, 64, 1e-6


def weights(dev, layers):
    g = torch.Generator(device="cpu").manual_seed(1234)
    r = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(dev)  # noqa: E731
    return {"layers": [dict(qkv=r(D, 3 * D), o=r(D, D), w1=r(D, MLP), w2=r(MLP, D))
                       for _ in range(layers)], "head": r(D, VOCAB)}


def weight_bytes(w):
    return 4 * (sum(t.numel() for lw in w["layers"] for t in lw.values()) + w["head"].numel())


def rms(x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def elu1(x):
    return F.elu(x) + 1


def sdpa(q, k, v, causal=False):
    """F.scaled_dot_product_attention, or its plain form on a PyTorch without it (< 2.0)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v


def decode_step(w, h, kind, state, pos):
    """h [B,D]; state per layer: linear (S [B,H,HD,HD], z [B,H,HD]) / softmax (K, V [B,H,T,HD])."""
    b = h.shape[0]
    for lw, st in zip(w["layers"], state):
        q, k, v = (rms(h) @ lw["qkv"]).view(b, 3, H, HD).unbind(1)
        if kind == "linear":
            s, z = st
            fq, fk = elu1(q), elu1(k)
            s.add_(fk.unsqueeze(-1) * v.unsqueeze(-2))
            z.add_(fk)
            a = (fq.unsqueeze(-2) @ s).squeeze(-2) / ((fq * z).sum(-1, keepdim=True) + EPS)
        else:
            kc, vc = st
            kc[:, :, pos] = k
            vc[:, :, pos] = v
            a = sdpa(q.unsqueeze(2), kc[:, :, :pos + 1], vc[:, :, :pos + 1]).squeeze(2)
        h = h + a.reshape(b, D) @ lw["o"]
        h = h + F.gelu(rms(h) @ lw["w1"]) @ lw["w2"]
    return rms(h) @ w["head"]


def prefill(w, h, kind):
    """h [L,D], one prompt; linear: chunked parallel form; softmax: causal SDPA."""
    n = h.shape[0]
    for lw in w["layers"]:
        q, k, v = (rms(h) @ lw["qkv"]).view(n, 3, H, HD).permute(1, 2, 0, 3).unbind(0)
        if kind == "linear":
            fq, fk = elu1(q), elu1(k)
            s = torch.zeros(H, HD, HD, device=h.device)
            z = torch.zeros(H, 1, HD, device=h.device)
            outs = []
            mask = torch.tril(torch.ones(CHUNK, CHUNK, device=h.device))
            for c in range(0, n, CHUNK):
                cq, ck, cv = fq[:, c:c + CHUNK], fk[:, c:c + CHUNK], v[:, c:c + CHUNK]
                m = mask[:cq.shape[1], :cq.shape[1]]
                att = (cq @ ck.transpose(-1, -2)) * m
                num = cq @ s + att @ cv
                den = (cq * z).sum(-1, keepdim=True) + att.sum(-1, keepdim=True) + EPS
                outs.append(num / den)
                s = s + ck.transpose(-1, -2) @ cv
                z = z + ck.sum(1, keepdim=True)
            a = torch.cat(outs, 1)
        else:
            a = sdpa(q, k, v, causal=True)
        h = h + a.permute(1, 0, 2).reshape(n, D) @ lw["o"]
        h = h + F.gelu(rms(h) @ lw["w1"]) @ lw["w2"]
    return rms(h[-1:]) @ w["head"]


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, dev, iters, warmup=2):
    for _ in range(warmup):
        fn()
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    sync(dev)
    return (time.perf_counter() - t0) / iters


def copy_bandwidth(dev, gib):
    x = torch.empty(int(gib * 2**30) // 4, device=dev)
    y = torch.empty_like(x)
    sec = timed(lambda: y.copy_(x), dev, 10)
    return {"case": "copy", "bytes": 2 * x.numel() * 4, "seconds": sec,
            "gb_per_s": 2 * x.numel() * 4 / sec / 1e9}


def decode_case(w, dev, kind, batch, ctx, steps, compiled, max_gib):
    layers = len(w["layers"])
    state_b = (4 * layers * batch * H * HD * (HD + 1) if kind == "linear"
               else 4 * layers * 2 * batch * H * (ctx + steps + 2) * HD)
    rec = {"case": "decode", "kind": kind, "batch": batch, "context": ctx,
           "compiled": compiled, "state_bytes": state_b}
    if state_b > max_gib * 2**30:
        return {**rec, "skipped": f"needs {state_b / 2**30:.1f} GiB > --max_gib"}
    if kind == "linear":
        state = [(torch.rand(batch, H, HD, HD, device=dev), torch.rand(batch, H, HD, device=dev))
                 for _ in range(layers)]
        moved = weight_bytes(w) + 2 * state_b  # every state read and written once
    else:
        state = [(torch.randn(batch, H, ctx + steps + 2, HD, device=dev),
                  torch.randn(batch, H, ctx + steps + 2, HD, device=dev)) for _ in range(layers)]
        moved = weight_bytes(w) + 4 * layers * 2 * batch * H * (ctx + 1) * HD
    step = torch.compile(decode_step) if compiled else decode_step
    h = torch.randn(batch, D, device=dev)
    pos = [ctx]

    def one():
        step(w, h, kind, state, pos[0] if kind == "softmax" else 0)
    with torch.no_grad():
        sec = timed(one, dev, steps)
    return {**rec, "seconds_per_step": sec, "tokens_per_s": batch / sec,
            "bytes_per_step": moved, "gb_per_s": moved / sec / 1e9}


def prefill_case(w, dev, kind, length, compiled):
    fn = torch.compile(prefill) if compiled else prefill
    h = torch.randn(length, D, device=dev)
    with torch.no_grad():
        sec = timed(lambda: fn(w, h, kind), dev, 2, warmup=1)
    return {"case": "prefill", "kind": kind, "length": length, "compiled": compiled,
            "seconds": sec, "tokens_per_s": length / sec}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--layers", type=int, default=LAYERS)
    p.add_argument("--batches", default="1,8,32,64,256")
    p.add_argument("--contexts", default="0,16384,65536")
    p.add_argument("--prefill", default="4096,16384,65536")
    p.add_argument("--kinds", default="linear,softmax")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--copy_gib", type=float, default=1.0)
    p.add_argument("--max_gib", type=float, default=40.0, help="largest state/KV cache tried")
    p.add_argument("--compile", action="store_true", help="also torch.compile each case")
    p.add_argument("--out", default="torch_bench.json")
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 like flatstate's cuBLAS path
    w = weights(dev, a.layers)
    ints = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
    cases = [({"case": "copy"}, lambda: copy_bandwidth(dev, a.copy_gib))]
    for compiled in ([False, True] if a.compile else [False]):
        for kind in a.kinds.split(","):
            for b in ints(a.batches):
                for c in ints(a.contexts):
                    cases.append(({"case": "decode", "kind": kind, "batch": b, "context": c,
                                   "compiled": compiled},
                                  lambda k=kind, b=b, c=c, cp=compiled:
                                  decode_case(w, dev, k, b, c, a.steps, cp, a.max_gib)))
            for n in ints(a.prefill):
                cases.append(({"case": "prefill", "kind": kind, "length": n,
                               "compiled": compiled},
                              lambda k=kind, n=n, cp=compiled: prefill_case(w, dev, k, n, cp)))
    results = [{"device": str(dev), "gpu": torch.cuda.get_device_name(dev)
                if dev.type == "cuda" else None, "torch": torch.__version__,
                "layers": a.layers}]
    for label, case in cases:
        try:
            r = case()
        except Exception as e:  # noqa: BLE001 -- record (OOM, compile failure) and go on
            r = {**label, "error": f"{type(e).__name__}: {str(e)[:300]}"}
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        print(json.dumps(r), flush=True)
        results.append(r)
        with open(a.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
