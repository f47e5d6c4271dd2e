#!/usr/bin/env python3
"""Convert a BlinkDL RWKV-7 checkpoint (.pth state dict, as RWKV-LM's RWKV-v7 trains and
publishes it) to the fla-hub Hugging Face layout (RWKV7ForCausalLM; tools/hf_rwkv7.py lists it).

    /usr/bin/python3 tools/rwkv7_from_pth.py MODEL.pth OUT_DIR [--dtype bfloat16|float32]
        [--norm_eps 1e-5] [--vocab rwkv_vocab_v20230424.txt] [--force]

Sizes come from the tensors: D from emb.weight [V, D], layers from blocks.{i}.ffn.key.weight,
I from ffn.key.weight [I, D], head_dim N from att.r_k [H, N], LoRA ranks from att.w1 / a1 / g1
[D, R] and blocks.1.att.v1 (layer 0's v LoRA is never used and is dropped).

Names (BlinkDL -> fla-hub; P = blocks.i., Q = model.layers.i.):
    emb.weight [V, D]                 -> model.embeddings.weight
    blocks.0.ln0.weight / .bias       -> model.layers.0.pre_norm.weight / .bias
    P ln1.* / P ln2.*                 -> Q attn_norm.* / Q ffn_norm.*
    P att.x_r .. x_g [1, 1, D]        -> Q attn.x_r .. x_g [1, 1, D]     (as is)
    P att.w0 / a0 / v0 [1, 1, D]      -> Q attn.{w,a,v}_lora.lora.2.bias [D]
    P att.w1 / a1 / v1 / g1 [D, R]    -> Q attn.{w,a,v,g}_lora.lora.0.weight [R, D]  (transposed)
    P att.w2 / a2 / v2 / g2 [R, D]    -> Q attn.{w,a,v,g}_lora.lora.2.weight [D, R]  (transposed)
    P att.k_k / k_a [1, 1, D]         -> Q attn.k_k / k_a [D]
    P att.r_k [H, N]                  -> Q attn.r_k [H, N]
    P att.receptance / key / value / output .weight -> Q attn.r_proj / k_proj / v_proj / o_proj
    P att.ln_x.weight / .bias         -> Q attn.g_norm.weight / .bias
    P ffn.x_k [1, 1, D]               -> Q ffn.x_k [D]
    P ffn.key.weight / value.weight   -> Q ffn.key.weight / value.weight
    ln_out.weight / .bias             -> model.norm.weight / .bias
    head.weight                       -> lm_head.weight

The maths is the same except one constant: BlinkDL's ln_x GroupNorm has eps 64e-5 whatever the
head size, fla's g_norm head_dim * norm_eps (and its LayerNorms norm_eps, BlinkDL's 1e-5). With
head_dim 64 and norm_eps 1e-5 (every published RWKV-7) the two agree; otherwise this warns.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections import OrderedDict
from typing import Dict

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama import DTYPES, HfLlamaError, _check_out_dir, write_json, write_safetensors  # noqa
from hf_rwkv7 import VOCAB_FILE, make_config, tensor_shapes  # noqa: E402

LORAS = ("w", "a", "v", "g")
PROJ = {"receptance": "r_proj", "key": "k_proj", "value": "v_proj", "output": "o_proj"}
TOP = {"emb.weight": "model.embeddings.weight", "ln_out.weight": "model.norm.weight",
       "ln_out.bias": "model.norm.bias", "head.weight": "lm_head.weight"}
NORMS = {"ln0": "pre_norm", "ln1": "attn_norm", "ln2": "ffn_norm"}


def config_from_pth(sd: Dict[str, torch.Tensor], norm_eps: float = 1e-5,
                    dtype: str = "bfloat16") -> dict:
    V, D = sd["emb.weight"].shape
    L = 0
    while f"blocks.{L}.ffn.key.weight" in sd:
        L += 1
    H, N = sd["blocks.0.att.r_k"].shape
    if "blocks.1.att.v1" in sd:
        rv = sd["blocks.1.att.v1"].shape[1]
    elif "blocks.0.att.v1" in sd:
        rv = sd["blocks.0.att.v1"].shape[1]
    else:
        raise HfLlamaError("no att.v1 tensor: cannot tell the v LoRA rank")
    return make_config(vocab_size=V, hidden_size=D, head_dim=N, num_hidden_layers=L,
                       intermediate_size=sd["blocks.0.ffn.key.weight"].shape[0],
                       decay_low_rank_dim=sd["blocks.0.att.w1"].shape[1],
                       a_low_rank_dim=sd["blocks.0.att.a1"].shape[1], v_low_rank_dim=rv,
                       gate_low_rank_dim=sd["blocks.0.att.g1"].shape[1], norm_eps=norm_eps,
                       dtype=dtype, tie_word_embeddings="head.weight" not in sd)


def fla_name(name: str):
    """(fla name or None for a tensor to drop, how: "" | "t" transpose | "flat" to [D])."""
    if name in TOP:
        return TOP[name], ""
    part = name.split(".")
    if part[0] != "blocks" or len(part) < 4:
        raise HfLlamaError(f"{name}: not an RWKV-7 tensor name")
    i, mod, rest = int(part[1]), part[2], part[3:]
    q = f"model.layers.{i}."
    if mod in NORMS:
        return q + NORMS[mod] + "." + ".".join(rest), ""
    if mod == "ffn":
        if rest == ["x_k"]:
            return q + "ffn.x_k", "flat"
        return q + "ffn." + ".".join(rest), ""
    if mod != "att":
        raise HfLlamaError(f"{name}: unknown module {mod!r}")
    leaf = rest[0]
    if len(leaf) == 2 and leaf[0] in LORAS and leaf[1] in "012":
        if leaf[0] == "v" and i == 0:
            return None, ""                                    # never used
        lora = f"{q}attn.{leaf[0]}_lora.lora."
        return {"0": (lora + "2.bias", "flat"), "1": (lora + "0.weight", "t"),
                "2": (lora + "2.weight", "t")}[leaf[1]]
    if leaf.startswith("x_"):
        return q + "attn." + leaf, ""
    if leaf in ("k_k", "k_a"):
        return q + "attn." + leaf, "flat"
    if leaf == "r_k":
        return q + "attn.r_k", ""
    if leaf in PROJ:
        return q + "attn." + PROJ[leaf] + "." + ".".join(rest[1:]), ""
    if leaf == "ln_x":
        return q + "attn.g_norm." + ".".join(rest[1:]), ""
    raise HfLlamaError(f"{name}: unknown attention tensor")


def convert_state_dict(sd: Dict[str, torch.Tensor], cfg: dict) -> "OrderedDict":
    """fla-hub tensors (float32) in tools/hf_rwkv7.py's module order; checks every shape."""
    out = {}
    for n, t in sd.items():
        new, how = fla_name(n)
        if new is None:
            continue
        t = t.detach().to(torch.float32)
        if how == "t":
            t = t.t().contiguous()
        elif how == "flat":
            t = t.reshape(-1)
        out[new] = t
    want = tensor_shapes(cfg)
    if set(out) != set(want):
        raise HfLlamaError(f"tensors missing or extra: {sorted(set(out) ^ set(want))}")
    for n, s in want.items():
        if tuple(out[n].shape) != tuple(s):
            raise HfLlamaError(f"{n}: shape {list(out[n].shape)}, want {list(s)}")
    return OrderedDict((n, out[n]) for n in want)


def convert(pth: str, out_dir: str, dtype: str = "bfloat16", norm_eps: float = 1e-5,
            vocab: str = "") -> dict:
    sd = torch.load(pth, map_location="cpu")
    cfg = config_from_pth(sd, norm_eps, dtype)
    if cfg["head_dim"] * norm_eps != 64e-5:
        print(f"rwkv7_from_pth.py: warning: g_norm eps head_dim * norm_eps = "
              f"{cfg['head_dim'] * norm_eps:g}, BlinkDL's ln_x uses 64e-5", file=sys.stderr)
    tensors = convert_state_dict(sd, cfg)
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, dtype)
    if vocab:
        shutil.copyfile(vocab, os.path.join(out_dir, VOCAB_FILE))
    return cfg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pth")
    ap.add_argument("out_dir")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--norm_eps", type=float, default=1e-5)
    ap.add_argument("--vocab", default="", help="an rwkv_vocab_v20230424.txt to copy in")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        _check_out_dir(a.out_dir, a.force)
        cfg = convert(a.pth, a.out_dir, a.dtype, a.norm_eps, a.vocab)
    except HfLlamaError as e:
        print(f"rwkv7_from_pth.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out_dir}: {cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}, "
          f"head_dim {cfg['head_dim']}, vocab {cfg['vocab_size']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
