#!/usr/bin/env python3
"""Train a byte-level Gated DeltaNet on tiny Shakespeare and write it as an fla-layout Hugging
Face folder (GatedDeltaNetForCausalLM, tools/hf_gated_deltanet.py's layout) with a byte-level
tokenizer.json (issue 29 item 3: "a tiny gated_deltanet model trained like the shipped ones").

    /usr/bin/python3 tools/train_gated_deltanet.py --out build/train/gdn [--steps 600] ...

Same data, split, recipe and evaluation as tools/train.py (bytes; first 90 % train, last 10 %
validation; AdamW, warm-up then cosine to 10 %, gradient clip 1, seed 1234; validation loss =
mean cross-entropy in nats per byte over every non-overlapping --seq_len window), so its
validation loss stands beside the shipped models' in docs/models.md. The model is fla's Gated
DeltaNet block (flatstate_ref/gated_deltanet.py's math) in float32 with trainable parameters
named as the folder's tensors; the delta rule runs in flatstate_ref/gated_delta.py's chunked
form (chunks of 64 on the absolute grid, batched over [B, Hv]).

Defaults give ~0.85 M parameters, the shipped models' budget: hidden 128, 4 layers, 4 heads of
32 (key and value: expand_v 1), short convolutions of 4, SwiGLU 288 wide, untied head, vocab
256. The tokenizer maps byte b to id b (BPE over GPT-2's byte-to-unicode alphabet, no merges,
ByteLevel pre-tokenizer and decoder); the folder has no BOS or EOS id. Writes OUT/config.json,
generation_config.json, model.safetensors (float32), tokenizer.json, tokenizer_config.json and
train_record.json (losses, wall time, command).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flatstate_ref.gated_delta import CHUNK, L2_EPS, _chunk  # noqa: E402
from hf_gated_deltanet import make_config, resolved, tensor_shapes  # noqa: E402
from hf_llama import write_json, write_model_files  # noqa: E402
from train import DEFAULT_DATA, load_splits, train_model  # noqa: E402


def byte_unicode() -> "list[str]":
    """GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others move to
    code points from 256 up, in byte order."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + \
        list(range(0xAE, 0xFF + 1))
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def write_byte_tokenizer(out_dir: str) -> None:
    """tokenizer.json mapping byte b to id b, and a tokenizer_config.json without special
    tokens."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    doc = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "", "fuse_unk": False,
                  "byte_fallback": False,
                  "vocab": {c: b for b, c in enumerate(byte_unicode())}, "merges": []},
    }
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    write_json(os.path.join(out_dir, "tokenizer_config.json"), OrderedDict([
        ("added_tokens_decoder", {}), ("bos_token", None), ("clean_up_tokenization_spaces", False),
        ("eos_token", None), ("model_max_length", 1048576), ("tokenizer_class",
                                                             "PreTrainedTokenizerFast")]))


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def linear(n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False)


def short_conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """silu(depthwise causal conv) over time: x [B, T, C], w [C, 1, K] (flatstate_ref's
    causal_conv from an empty window)."""
    K = w.shape[-1]
    y = F.conv1d(F.pad(x.transpose(1, 2), (K - 1, 0)), w, groups=w.shape[0])
    return F.silu(y.transpose(1, 2))


class GatedDeltaNet(nn.Module):
    """fla's GatedDeltaNet layer (flatstate_ref/gated_deltanet.py _gdn), batched, float32."""

    def __init__(self, s: dict, eps: float):
        super().__init__()
        self.s = s
        D, Kw, Vw, Hv, K = s["D"], s["Kw"], s["Vw"], s["Hv"], s["K"]
        self.q_proj, self.k_proj, self.v_proj = linear(D, Kw), linear(D, Kw), linear(D, Vw)
        self.a_proj, self.b_proj = linear(D, Hv), linear(D, Hv)
        # fla's initialisation of the decay: A in [0, 16], dt from [1e-3, 1e-1] log-uniform.
        self.A_log = nn.Parameter(torch.log(torch.empty(Hv).uniform_(1, 16)))
        dt = torch.exp(torch.rand(Hv) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus^-1(dt)
        self.q_conv1d = nn.Conv1d(Kw, Kw, K, groups=Kw, bias=False)
        self.k_conv1d = nn.Conv1d(Kw, Kw, K, groups=Kw, bias=False)
        self.v_conv1d = nn.Conv1d(Vw, Vw, K, groups=Vw, bias=False)
        self.g_proj = linear(D, Vw)
        self.o_norm = RMSNorm(s["dv"], eps)
        self.o_proj = linear(Vw, D)

    def forward(self, x):
        s = self.s
        B, T, _ = x.shape
        Hk, Hv, dk, dv = s["Hk"], s["Hv"], s["dk"], s["dv"]
        q = short_conv(self.q_proj(x), self.q_conv1d.weight).view(B, T, Hk, dk)
        k = short_conv(self.k_proj(x), self.k_conv1d.weight).view(B, T, Hk, dk)
        v = short_conv(self.v_proj(x), self.v_conv1d.weight).view(B, T, Hv, dv)
        beta = torch.sigmoid(self.b_proj(x))                                   # [B, T, Hv]
        g = -torch.exp(self.A_log) * F.softplus(self.a_proj(x) + self.dt_bias)  # [B, T, Hv]
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + L2_EPS)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + L2_EPS)
        if Hv != Hk:
            q = q.repeat_interleave(Hv // Hk, dim=2)
            k = k.repeat_interleave(Hv // Hk, dim=2)
        q = q * dk ** -0.5
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))                        # [B, Hv, T, *]
        g, beta = g.transpose(1, 2), beta.transpose(1, 2)                      # [B, Hv, T]
        S = x.new_zeros(B, Hv, dk, dv)
        outs = []
        for b in range(0, T, CHUNK):
            e = min(T, b + CHUNK)
            o, S = _chunk(q[:, :, b:e], k[:, :, b:e], v[:, :, b:e], g[:, :, b:e],
                          beta[:, :, b:e], S)
            outs.append(o)
        o = torch.cat(outs, 2).transpose(1, 2)                                 # [B, T, Hv, dv]
        o = self.o_norm(o) * F.silu(self.g_proj(x).view(B, T, Hv, dv))
        return self.o_proj(o.reshape(B, T, Hv * dv))


class Mlp(nn.Module):
    def __init__(self, D: int, I: int):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = linear(D, I), linear(D, I), linear(I, D)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, s: dict, eps: float):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(s["D"], eps), GatedDeltaNet(s, eps)
        self.mlp_norm, self.mlp = RMSNorm(s["D"], eps), Mlp(s["D"], s["I"])

    def forward(self, h):
        h = h + self.attn(self.attn_norm(h))
        return h + self.mlp(self.mlp_norm(h))


class Body(nn.Module):
    def __init__(self, s: dict, eps: float):
        super().__init__()
        self.embeddings = nn.Embedding(s["V"], s["D"])
        self.layers = nn.ModuleList([Block(s, eps) for _ in range(s["L"])])
        self.norm = RMSNorm(s["D"], eps)


class GatedDeltaNetLM(nn.Module):
    """Parameters named as the folder's tensors (model.layers.i.attn.q_proj.weight, ...)."""

    def __init__(self, cfg: dict):
        super().__init__()
        s = resolved(cfg)
        eps = float(cfg["norm_eps"])
        self.model = Body(s, eps)
        self.lm_head = linear(s["D"], s["V"])
        for name, p in self.named_parameters():  # GPT-style: N(0, 0.02), residual outs scaled
            if p.dim() == 2 and not name.endswith("norm.weight"):
                std = 0.02 / math.sqrt(2 * s["L"]) if name.endswith(("o_proj.weight",
                                                                     "down_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        want = tensor_shapes(cfg)
        got = OrderedDict((n, tuple(p.shape)) for n, p in self.named_parameters())
        if set(got) != set(want) or any(got[n] != tuple(want[n]) for n in want):
            raise ValueError(f"parameters do not match the layout: {sorted(set(got) ^ set(want))}")

    def forward(self, ids):
        h = self.model.embeddings(ids)
        for layer in self.model.layers:
            h = layer(h)
        return self.lm_head(self.model.norm(h))


def byte_config(hidden_size: int = 128, layers: int = 4, heads: int = 4, head_dim: int = 32,
                expand_v=1, intermediate_size: int = 288, conv_size: int = 4) -> dict:
    """config.json's dict for a 256-byte vocabulary, float32, no BOS / EOS."""
    cfg = make_config(vocab_size=256, hidden_size=hidden_size, num_hidden_layers=layers,
                      num_heads=heads, head_dim=head_dim, expand_v=expand_v, hidden_ratio=None,
                      intermediate_size=intermediate_size, conv_size=conv_size,
                      dtype="float32", max_position_embeddings=1048576)
    cfg["bos_token_id"] = None
    cfg["eos_token_id"] = None
    return cfg


def write_folder(out_dir: str, cfg: dict, model: GatedDeltaNetLM, record: dict) -> None:
    """The Hugging Face folder (module docstring) of `model`'s parameters."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), OrderedDict(sorted(cfg.items())))
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("_from_model_config", True), ("transformers_version", cfg["transformers_version"])]))
    tensors = OrderedDict((n, t.detach().clone()) for n, t in model.state_dict().items())
    write_model_files(out_dir, cfg, tensors, 1, names=list(tensor_shapes(cfg)))
    write_byte_tokenizer(out_dir)
    write_json(os.path.join(out_dir, "train_record.json"), record)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="folder to write (must not exist unless --force)")
    p.add_argument("--force", action="store_true")
    p.add_argument("--data", default=DEFAULT_DATA)
    for n, d in (("hidden_size", 128), ("layers", 4), ("heads", 4), ("head_dim", 32),
                 ("intermediate_size", 288), ("conv_size", 4), ("seq_len", 128), ("batch", 32),
                 ("steps", 600), ("warmup", 50), ("seed", 1234), ("threads", 1),
                 ("eval_every", 200)):
        p.add_argument("--" + n, type=int, default=d)
    p.add_argument("--expand_v", type=float, default=1.0)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight_decay", type=float, default=0.05)
    a = p.parse_args(argv)
    for name in ("seq_len", "batch", "steps", "threads", "eval_every", "warmup"):
        if getattr(a, name) <= 0:
            sys.exit(f"error: --{name}={getattr(a, name)} must be > 0")
    if os.path.exists(a.out) and not a.force:
        sys.exit(f"error: {a.out} exists (pass --force to overwrite)")
    ev = int(a.expand_v) if float(a.expand_v).is_integer() else a.expand_v
    cfg = byte_config(a.hidden_size, a.layers, a.heads, a.head_dim, ev, a.intermediate_size,
                      a.conv_size)

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    train, val = load_splits(a.data)
    model = GatedDeltaNetLM(cfg)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"gated_deltanet params={nparams} train_bytes={train.numel()} val_bytes={val.numel()}",
          flush=True)
    ema, val_loss, wall = train_model(model, train, val, a)
    record = OrderedDict([
        ("params", nparams), ("train_loss", ema), ("val_loss", val_loss), ("wall_seconds", wall),
        ("command", " ".join(["/usr/bin/python3", "tools/train_gated_deltanet.py"] +
                             (argv if argv is not None else sys.argv[1:]))),
        ("seed", a.seed), ("steps", a.steps), ("batch", a.batch), ("seq_len", a.seq_len),
        ("torch", torch.__version__)])
    write_folder(a.out, cfg, model, record)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
