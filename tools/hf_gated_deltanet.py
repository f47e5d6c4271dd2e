#!/usr/bin/env python3
"""Write a random-weight Gated DeltaNet folder in flash-linear-attention's Hugging Face layout
(GatedDeltaNetForCausalLM, model_type "gated_deltanet", as fla/models/gated_deltanet saves it).

    /usr/bin/python3 tools/hf_gated_deltanet.py --out /tmp/gdn [--tokenizer train|none|DIR] \
        [--vocab_size 512] [--hidden_size 64] [--num_hidden_layers 2] [--num_heads 2] \
        [--num_v_heads N] [--head_dim 16] [--expand_v 2] [--hidden_ratio 4] \
        [--intermediate_size N] [--conv_size 4] [--norm_eps 1e-6] [--tie_word_embeddings] \
        [--dtype bfloat16|float32] [--shards 1] [--seed 1] [--init_gain 1] [--force] \
        [--attn_layers 1,3 --attn_num_heads 4 [--attn_num_kv_heads 2] [--attn_qkv_bias]]

config.json keys (fla/models/gated_deltanet/configuration_gated_deltanet.py GatedDeltaNetConfig,
read at fla-org/flash-linear-attention bc3b101d, plus what save_pretrained adds; sorted):
allow_neg_eigval false, architectures ["GatedDeltaNetForCausalLM"], attn null, attn_mode
"chunk", attnres_block_size null, bos_token_id 1, conv_size, eos_token_id 2, expand_v,
fuse_cross_entropy true, fuse_linear_cross_entropy false, fuse_norm true, fuse_swiglu true,
head_dim, hidden_act "swish", hidden_ratio, hidden_size, initializer_range 0.02,
intermediate_size, max_position_embeddings, model_type "gated_deltanet", norm_eps, num_heads,
num_hidden_layers, num_v_heads, pad_token_id null, tie_word_embeddings, torch_dtype,
transformers_version, use_cache true, use_gate true, use_l2warp false, use_short_conv true,
vocab_size. --attn_layers makes a hybrid: attn is one spec (tools/fla_hybrid.py) and those
layers hold fla's Attention tensors instead of the GatedDeltaNet ones below.

Tensors (module order; D hidden, Hk = num_heads, Hv = num_v_heads or Hk, dk = head_dim,
dv = int(dk expand_v), Kw = Hk dk, Vw = Hv dv, K conv_size, I intermediate (as tools/hf_gla.py),
V vocab):

    model.embeddings.weight                          [V, D]
    per layer i (P = model.layers.i.):
      P attn_norm.weight                             [D]
      P attn.q_proj.weight, .k_proj.weight           [Kw, D]
      P attn.v_proj.weight                           [Vw, D]
      P attn.a_proj.weight, .b_proj.weight           [Hv, D]
      P attn.A_log, P attn.dt_bias                   [Hv]
      P attn.q_conv1d.weight, .k_conv1d.weight       [Kw, 1, K]   (no bias)
      P attn.v_conv1d.weight                         [Vw, 1, K]
      P attn.g_proj.weight                           [Vw, D]
      P attn.o_norm.weight                           [dv]
      P attn.o_proj.weight                           [D, Vw]
      P mlp_norm.weight                              [D]
      P mlp.gate_proj.weight, .up_proj.weight        [I, D];  P mlp.down_proj.weight [D, I]
    model.norm.weight                                [D]
    lm_head.weight                                   [V, D]  (absent when tied)

Weights (torch.Generator(seed), float32 draws in module order, rounded to --dtype; g =
--init_gain): embeddings N(0,1); norm weights 1 + 0.1 N; projections N(0, (g/sqrt(fan_in))^2);
conv N(0, 1/K); A_log log(U(0.05, 2)); dt_bias 0.5 N; lm_head N(0, (4/sqrt(D))^2). The tokenizer
files are tools/hf_llama.py's (SentencePiece).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import OrderedDict
from typing import Optional, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fla_hybrid import add_attn_args, attn_from_args, attn_shapes, attn_spec  # noqa: E402
from hf_gla import mlp_size  # noqa: E402
from hf_llama import (BOS_ID, DEFAULT_TEXT, DTYPES, EOS_ID, HfLlamaError,  # noqa: E402
                      draw_weights, start_folder, write_json, write_model_files)

ARCH = "GatedDeltaNetForCausalLM"
TRANSFORMERS_VERSION = "4.53.0"


def make_config(vocab_size: int = 512, hidden_size: int = 64, num_hidden_layers: int = 2,
                num_heads: int = 2, num_v_heads: Optional[int] = None, head_dim: int = 16,
                expand_v: float = 2.0, hidden_ratio: Optional[float] = 4,
                intermediate_size: Optional[int] = None, conv_size: int = 4,
                norm_eps: float = 1e-6, tie_word_embeddings: bool = False,
                dtype: str = "bfloat16", max_position_embeddings: int = 2048,
                attn: Optional[dict] = None) -> "OrderedDict":
    """config.json's dict (module docstring), keys sorted as save_pretrained writes them;
    attn: None or a tools/fla_hybrid.py spec."""
    if dtype not in DTYPES:
        raise HfLlamaError(f"dtype {dtype!r}")
    c = {
        "allow_neg_eigval": False, "architectures": [ARCH], "attn": attn, "attn_mode": "chunk",
        "attnres_block_size": None, "bos_token_id": BOS_ID, "conv_size": conv_size,
        "eos_token_id": EOS_ID, "expand_v": expand_v, "fuse_cross_entropy": True,
        "fuse_linear_cross_entropy": False, "fuse_norm": True, "fuse_swiglu": True,
        "head_dim": head_dim, "hidden_act": "swish", "hidden_ratio": hidden_ratio,
        "hidden_size": hidden_size, "initializer_range": 0.02,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings, "model_type": "gated_deltanet",
        "norm_eps": norm_eps, "num_heads": num_heads, "num_hidden_layers": num_hidden_layers,
        "num_v_heads": num_v_heads, "pad_token_id": None,
        "tie_word_embeddings": bool(tie_word_embeddings), "torch_dtype": dtype,
        "transformers_version": TRANSFORMERS_VERSION, "use_cache": True, "use_gate": True,
        "use_l2warp": False, "use_short_conv": True, "vocab_size": vocab_size,
    }
    resolved(c)
    return OrderedDict(sorted(c.items()))


def resolved(cfg: dict) -> dict:
    """fla's derived sizes: D, Hk, Hv, dk, dv, Kw, Vw, K, I, V, L. Raises HfLlamaError on what
    fla rejects or this project does not implement (use_gate / use_short_conv false,
    allow_neg_eigval, attnres_block_size, attn specs fla_hybrid.py refuses)."""
    D, Hk, dk = cfg["hidden_size"], cfg.get("num_heads", 6), cfg.get("head_dim", 256)
    Hv = cfg.get("num_v_heads") or Hk
    if Hv % Hk:
        raise HfLlamaError(f"num_v_heads {Hv} is not a multiple of num_heads {Hk}")
    dv = int(dk * cfg.get("expand_v", 2.0))
    if not math.isclose(dk * cfg.get("expand_v", 2.0), dv, rel_tol=1e-5):
        raise HfLlamaError(f"expand_v {cfg.get('expand_v')}: head_dim * expand_v not whole")
    for key, want in (("use_gate", True), ("use_short_conv", True), ("allow_neg_eigval", False)):
        if cfg.get(key, want) != want:
            raise HfLlamaError(f"{key} = {cfg[key]!r}: only {want} is supported")
    if cfg.get("attnres_block_size") is not None:
        raise HfLlamaError(f"attnres_block_size = {cfg['attnres_block_size']!r}: null only")
    attn = attn_spec(cfg)
    if cfg.get("hidden_act", "swish") != "swish":
        raise HfLlamaError(f"hidden_act {cfg.get('hidden_act')!r}: swish only")
    return {"D": D, "Hk": Hk, "Hv": Hv, "dk": dk, "dv": dv, "Kw": Hk * dk, "Vw": Hv * dv,
            "K": cfg.get("conv_size", 4), "I": mlp_size(cfg), "V": cfg["vocab_size"],
            "L": cfg["num_hidden_layers"], "attn": attn}


def tensor_shapes(cfg: dict) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape in module order (module docstring)."""
    s = resolved(cfg)
    D, I = s["D"], s["I"]
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out["model.embeddings.weight"] = (s["V"], D)
    for i in range(s["L"]):
        p = f"model.layers.{i}."
        a = p + "attn."
        out[p + "attn_norm.weight"] = (D,)
        if s["attn"] is not None and i in s["attn"]["layers"]:
            out.update(attn_shapes(cfg, i))
        else:
            _add_gdn_shapes(out, a, s)
        out[p + "mlp_norm.weight"] = (D,)
        out[p + "mlp.gate_proj.weight"] = (I, D)
        out[p + "mlp.up_proj.weight"] = (I, D)
        out[p + "mlp.down_proj.weight"] = (D, I)
    out["model.norm.weight"] = (D,)
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = (s["V"], D)
    return out


def _add_gdn_shapes(out: dict, a: str, s: dict) -> None:
    """A GatedDeltaNet layer's tensors (prefix a = "model.layers.i.attn.") in module order."""
    D, Kw, Vw, Hv, K = s["D"], s["Kw"], s["Vw"], s["Hv"], s["K"]
    for n, shape in (("q_proj.weight", (Kw, D)), ("k_proj.weight", (Kw, D)),
                     ("v_proj.weight", (Vw, D)), ("a_proj.weight", (Hv, D)),
                     ("b_proj.weight", (Hv, D)), ("A_log", (Hv,)), ("dt_bias", (Hv,)),
                     ("q_conv1d.weight", (Kw, 1, K)), ("k_conv1d.weight", (Kw, 1, K)),
                     ("v_conv1d.weight", (Vw, 1, K)), ("g_proj.weight", (Vw, D)),
                     ("o_norm.weight", (s["dv"],)), ("o_proj.weight", (D, Vw))):
        out[a + n] = shape


def random_weights(cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        if name.endswith("A_log"):
            return torch.log(0.05 + 1.95 * torch.rand(shape, generator=g, dtype=torch.float32))
        if name.endswith("dt_bias"):
            return 0.5 * r
        if name.endswith("conv1d.weight"):
            return r / math.sqrt(shape[-1])
        if name.endswith("norm.weight"):
            return 1.0 + 0.1 * r
        if name.endswith(".bias"):  # a hybrid softmax layer's q / k / v biases
            return 0.5 * r
        if name == "model.embeddings.weight":
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        return r * (init_gain / math.sqrt(shape[1]))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def write_hf_gated_deltanet(out_dir: str, cfg: dict, seed: int = 1, shards: int = 1,
                            init_gain: float = 1.0) -> dict:
    """config.json, generation_config.json, the shards and the index. Returns the index."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("_from_model_config", True), ("bos_token_id", cfg["bos_token_id"]),
        ("eos_token_id", cfg["eos_token_id"]), ("transformers_version", TRANSFORMERS_VERSION)]))
    tensors = random_weights(cfg, seed=seed, init_gain=init_gain)
    return write_model_files(out_dir, cfg, tensors, shards, names=list(tensor_shapes(cfg)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="train")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ints = (("vocab_size", 512), ("hidden_size", 64), ("num_hidden_layers", 2),
            ("num_heads", 2), ("head_dim", 16), ("conv_size", 4),
            ("max_position_embeddings", 2048), ("shards", 1), ("seed", 1))
    for n, d in ints:
        ap.add_argument("--" + n, type=int, default=d)
    ap.add_argument("--num_v_heads", type=int, default=None)
    ap.add_argument("--intermediate_size", type=int, default=None)
    ap.add_argument("--hidden_ratio", type=float, default=4)
    ap.add_argument("--expand_v", type=float, default=2.0)
    ap.add_argument("--norm_eps", type=float, default=1e-6)
    ap.add_argument("--init_gain", type=float, default=1.0)
    ap.add_argument("--tie_word_embeddings", action="store_true")
    add_attn_args(ap)
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        vocab = start_folder(a.out, a.force, a.tokenizer, a.vocab_size, a.text,
                             a.max_position_embeddings)
        ratio = int(a.hidden_ratio) if float(a.hidden_ratio).is_integer() else a.hidden_ratio
        ev = int(a.expand_v) if float(a.expand_v).is_integer() else a.expand_v
        cfg = make_config(vocab_size=vocab, hidden_size=a.hidden_size,
                          num_hidden_layers=a.num_hidden_layers, num_heads=a.num_heads,
                          num_v_heads=a.num_v_heads, head_dim=a.head_dim, expand_v=ev,
                          hidden_ratio=ratio, intermediate_size=a.intermediate_size,
                          conv_size=a.conv_size, norm_eps=a.norm_eps,
                          tie_word_embeddings=a.tie_word_embeddings, dtype=a.dtype,
                          max_position_embeddings=a.max_position_embeddings,
                          attn=attn_from_args(a))
        index = write_hf_gated_deltanet(a.out, cfg, seed=a.seed, shards=a.shards,
                                        init_gain=a.init_gain)
    except HfLlamaError as e:
        print(f"hf_gated_deltanet.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {vocab}, {len(index['weight_map'])} tensors, "
          f"{index['metadata']['total_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
