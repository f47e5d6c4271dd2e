#!/usr/bin/env python3
"""Write a random-weight GLA folder in flash-linear-attention's Hugging Face layout
(GLAForCausalLM, model_type "gla", as fla/models/gla saves it).

    /usr/bin/python3 tools/hf_gla.py --out /tmp/gla [--tokenizer train|none|DIR] \
        [--vocab_size 512] [--hidden_size 64] [--num_hidden_layers 2] [--num_heads 4] \
        [--num_kv_heads N] [--expand_k 0.5] [--expand_v 1.0] [--hidden_ratio 4] \
        [--intermediate_size N] [--use_short_conv] [--conv_size 4] [--no_output_gate] \
        [--clamp_min X] [--no_fuse_norm] [--norm_eps 1e-6] [--tie_word_embeddings] \
        [--dtype bfloat16|float32] [--shards 1] [--seed 1] [--init_gain 1] [--force] \
        [--attn_layers 1 --attn_num_heads 4 [--attn_num_kv_heads 2] [--attn_qkv_bias]]

config.json keys (fla/models/gla/configuration_gla.py GLAConfig, read at
fla-org/flash-linear-attention bc3b101d, plus what save_pretrained adds; sorted): architectures
["GLAForCausalLM"], attn (null; --attn_layers: a hybrid spec, tools/fla_hybrid.py, whose
layers hold fla's Attention tensors instead of the ones below), attn_mode "chunk",
attnres_block_size null, bos_token_id 1, clamp_min, conv_size, elementwise_affine true, eos_token_id 2, expand_k,
expand_v, feature_map null, fuse_cross_entropy true, fuse_linear_cross_entropy false, fuse_norm,
fuse_swiglu true, hidden_act "swish", hidden_ratio, hidden_size, initializer_range 0.02,
intermediate_size (null: int(D * hidden_ratio * 2 / 3) rounded up to a multiple of 256),
max_position_embeddings, model_type "gla", norm_eps, num_heads, num_hidden_layers, num_kv_heads,
pad_token_id null, tie_word_embeddings, torch_dtype, transformers_version, use_cache true,
use_gk true, use_gv false, use_l2warp false, use_output_gate, use_short_conv, vocab_size.

Tensors (module order; D hidden, H heads, G = H / num_kv_heads, Kw = int(D expand_k),
Vw = int(D expand_v), dk = Kw / H, dv = Vw / H, r = 16 (fla's gate_low_rank_dim), K conv_size,
I intermediate, V vocab; nn.Linear weights are [out, in]):

    model.embeddings.weight                          [V, D]
    per layer i (P = model.layers.i.):
      P attn_norm.weight                             [D]
      P attn.q_proj.weight                           [Kw, D]
      P attn.k_proj.weight                           [Kw / G, D]
      P attn.v_proj.weight                           [Vw / G, D]
      P attn.g_proj.weight                           [Vw, D]        (use_output_gate)
      P attn.q_conv1d.weight [Kw, 1, K], k_conv1d [Kw / G, 1, K], v_conv1d [Vw / G, 1, K]
                                                                    (use_short_conv; no bias)
      P attn.gk_proj.0.weight                        [r, D]
      P attn.gk_proj.1.weight, .bias                 [Kw / G, r], [Kw / G]
      P attn.o_proj.weight                           [D, Vw]
      P attn.g_norm_swish_gate.weight                [dv]  (fuse_norm and use_output_gate;
                                                            else P attn.g_norm.weight)
      P mlp_norm.weight                              [D]
      P mlp.gate_proj.weight, .up_proj.weight        [I, D]
      P mlp.down_proj.weight                         [D, I]
    model.norm.weight                                [D]
    lm_head.weight                                   [V, D]  (absent when tied)

Weights (torch.Generator(seed), float32 draws in module order, rounded to --dtype; g =
--init_gain): embeddings N(0,1); RMSNorm weights 1 + 0.1 N; projections N(0, (g/sqrt(fan_in))^2);
conv N(0, 1/K); gk_proj.1.bias N(0,1); lm_head N(0, (4/sqrt(D))^2). The tokenizer files are
tools/hf_llama.py's (SentencePiece, like the fla-hub GLA checkpoints' Llama-2 tokenizer).
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
from hf_llama import (BOS_ID, DEFAULT_TEXT, DTYPES, EOS_ID, HfLlamaError,  # noqa: E402
                      draw_weights, start_folder, write_json, write_model_files)

ARCH = "GLAForCausalLM"
TRANSFORMERS_VERSION = "4.53.0"
GATE_LOW_RANK_DIM = 16  # fla's GatedLinearAttention default; GLABlock never overrides it


def make_config(vocab_size: int = 512, hidden_size: int = 64, num_hidden_layers: int = 2,
                num_heads: int = 4, num_kv_heads: Optional[int] = None, expand_k: float = 0.5,
                expand_v: float = 1.0, hidden_ratio: Optional[float] = 4,
                intermediate_size: Optional[int] = None, use_short_conv: bool = False,
                conv_size: int = 4, use_output_gate: bool = True,
                clamp_min: Optional[float] = None, fuse_norm: bool = True,
                norm_eps: float = 1e-6, tie_word_embeddings: bool = False,
                dtype: str = "bfloat16", max_position_embeddings: int = 2048,
                attn: Optional[dict] = None) -> "OrderedDict":
    """config.json's dict (module docstring), keys sorted as save_pretrained writes them;
    attn: None or a tools/fla_hybrid.py spec (a hybrid)."""
    if dtype not in DTYPES:
        raise HfLlamaError(f"dtype {dtype!r}")
    c = {
        "architectures": [ARCH], "attn": attn, "attn_mode": "chunk", "attnres_block_size": None,
        "bos_token_id": BOS_ID, "clamp_min": clamp_min, "conv_size": conv_size,
        "elementwise_affine": True, "eos_token_id": EOS_ID, "expand_k": expand_k,
        "expand_v": expand_v, "feature_map": None, "fuse_cross_entropy": True,
        "fuse_linear_cross_entropy": False, "fuse_norm": bool(fuse_norm), "fuse_swiglu": True,
        "hidden_act": "swish", "hidden_ratio": hidden_ratio, "hidden_size": hidden_size,
        "initializer_range": 0.02, "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings, "model_type": "gla",
        "norm_eps": norm_eps, "num_heads": num_heads, "num_hidden_layers": num_hidden_layers,
        "num_kv_heads": num_kv_heads, "pad_token_id": None,
        "tie_word_embeddings": bool(tie_word_embeddings), "torch_dtype": dtype,
        "transformers_version": TRANSFORMERS_VERSION, "use_cache": True, "use_gk": True,
        "use_gv": False, "use_l2warp": False, "use_output_gate": bool(use_output_gate),
        "use_short_conv": bool(use_short_conv), "vocab_size": vocab_size,
    }
    resolved(c)  # validates the sizes
    return OrderedDict(sorted(c.items()))


def mlp_size(cfg: dict) -> int:
    """fla.modules.GatedMLP's intermediate size: intermediate_size, else
    int(hidden_size * hidden_ratio * 2 / 3) (hidden_ratio null: 4) rounded up to 256."""
    inter = cfg.get("intermediate_size")
    if inter is None:
        ratio = cfg.get("hidden_ratio")
        ratio = 4 if ratio is None else ratio
        inter = int(cfg["hidden_size"] * ratio * 2 / 3)
        inter = 256 * ((inter + 256 - 1) // 256)
    return int(inter)


def resolved(cfg: dict) -> dict:
    """The sizes fla's GLABlock derives from a config dict: D, H, G (kv groups), Kw, Vw, dk, dv,
    I (GatedMLP: intermediate_size, else int(D * hidden_ratio * 2 / 3) rounded up to 256), K
    (conv taps, 0 without short convolutions), V, L. Raises HfLlamaError on what fla rejects or
    this project does not implement."""
    D, H = cfg["hidden_size"], cfg.get("num_heads", 4)
    KV = cfg.get("num_kv_heads") or H
    if H % KV:
        raise HfLlamaError(f"num_kv_heads {KV} does not divide num_heads {H}")
    Kw, Vw = int(D * cfg.get("expand_k", 0.5)), int(D * cfg.get("expand_v", 1.0))
    if Kw % H or Vw % H or Kw == 0 or Vw == 0:
        raise HfLlamaError(f"key dim {Kw} / value dim {Vw} not multiples of num_heads {H}")
    for key in ("feature_map", "attnres_block_size"):
        if cfg.get(key) is not None:
            raise HfLlamaError(f"{key} = {cfg[key]!r}: not supported (null only)")
    if cfg.get("hidden_act", "swish") != "swish":
        raise HfLlamaError(f"hidden_act {cfg.get('hidden_act')!r}: swish only")
    if cfg.get("elementwise_affine", True) is not True:
        raise HfLlamaError("elementwise_affine false: not supported")
    return {"D": D, "H": H, "G": H // KV, "Kw": Kw, "Vw": Vw, "dk": Kw // H, "dv": Vw // H,
            "I": mlp_size(cfg), "K": cfg.get("conv_size", 4) if cfg.get("use_short_conv") else 0,
            "V": cfg["vocab_size"], "L": cfg["num_hidden_layers"], "attn": attn_spec(cfg)}


def tensor_shapes(cfg: dict) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape in module order (module docstring)."""
    s = resolved(cfg)
    D, G, Kw, Vw, I, K = s["D"], s["G"], s["Kw"], s["Vw"], s["I"], s["K"]
    gate = cfg.get("use_output_gate", True)
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out["model.embeddings.weight"] = (s["V"], D)
    for i in range(s["L"]):
        p = f"model.layers.{i}."
        a = p + "attn."
        out[p + "attn_norm.weight"] = (D,)
        if s["attn"] is not None and i in s["attn"]["layers"]:
            out.update(attn_shapes(cfg, i))
            _add_mlp_shapes(out, p, D, I)
            continue
        out[a + "q_proj.weight"] = (Kw, D)
        out[a + "k_proj.weight"] = (Kw // G, D)
        out[a + "v_proj.weight"] = (Vw // G, D)
        if gate:
            out[a + "g_proj.weight"] = (Vw, D)
        if K:
            out[a + "q_conv1d.weight"] = (Kw, 1, K)
            out[a + "k_conv1d.weight"] = (Kw // G, 1, K)
            out[a + "v_conv1d.weight"] = (Vw // G, 1, K)
        out[a + "gk_proj.0.weight"] = (GATE_LOW_RANK_DIM, D)
        out[a + "gk_proj.1.weight"] = (Kw // G, GATE_LOW_RANK_DIM)
        out[a + "gk_proj.1.bias"] = (Kw // G,)
        out[a + "o_proj.weight"] = (D, Vw)
        fused = cfg.get("fuse_norm", True) and gate
        out[a + ("g_norm_swish_gate.weight" if fused else "g_norm.weight")] = (s["dv"],)
        _add_mlp_shapes(out, p, D, I)
    out["model.norm.weight"] = (D,)
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = (s["V"], D)
    return out


def _add_mlp_shapes(out: dict, p: str, D: int, I: int) -> None:
    out[p + "mlp_norm.weight"] = (D,)
    out[p + "mlp.gate_proj.weight"] = (I, D)
    out[p + "mlp.up_proj.weight"] = (I, D)
    out[p + "mlp.down_proj.weight"] = (D, I)


def random_weights(cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        if name.endswith("conv1d.weight"):
            return r / math.sqrt(shape[-1])
        if name.endswith("norm.weight") or name.endswith("norm_swish_gate.weight"):
            return 1.0 + 0.1 * r
        if name.endswith(".bias"):
            return r
        if name == "model.embeddings.weight":
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        return r * (init_gain / math.sqrt(shape[1]))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def write_hf_gla(out_dir: str, cfg: dict, seed: int = 1, shards: int = 1,
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
            ("num_heads", 4), ("conv_size", 4), ("max_position_embeddings", 2048),
            ("shards", 1), ("seed", 1))
    for n, d in ints:
        ap.add_argument("--" + n, type=int, default=d)
    ap.add_argument("--num_kv_heads", type=int, default=None)
    ap.add_argument("--intermediate_size", type=int, default=None)
    ap.add_argument("--hidden_ratio", type=float, default=4)
    ap.add_argument("--expand_k", type=float, default=0.5)
    ap.add_argument("--expand_v", type=float, default=1.0)
    ap.add_argument("--clamp_min", type=float, default=None)
    ap.add_argument("--norm_eps", type=float, default=1e-6)
    ap.add_argument("--init_gain", type=float, default=1.0)
    ap.add_argument("--use_short_conv", action="store_true")
    ap.add_argument("--no_output_gate", action="store_true")
    ap.add_argument("--no_fuse_norm", action="store_true")
    ap.add_argument("--tie_word_embeddings", action="store_true")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--force", action="store_true")
    add_attn_args(ap)
    a = ap.parse_args(argv)
    try:
        vocab = start_folder(a.out, a.force, a.tokenizer, a.vocab_size, a.text,
                             a.max_position_embeddings)
        ratio = int(a.hidden_ratio) if float(a.hidden_ratio).is_integer() else a.hidden_ratio
        cfg = make_config(vocab_size=vocab, hidden_size=a.hidden_size,
                          num_hidden_layers=a.num_hidden_layers, num_heads=a.num_heads,
                          num_kv_heads=a.num_kv_heads, expand_k=a.expand_k,
                          expand_v=a.expand_v, hidden_ratio=ratio,
                          intermediate_size=a.intermediate_size,
                          use_short_conv=a.use_short_conv, conv_size=a.conv_size,
                          use_output_gate=not a.no_output_gate, clamp_min=a.clamp_min,
                          fuse_norm=not a.no_fuse_norm, norm_eps=a.norm_eps,
                          tie_word_embeddings=a.tie_word_embeddings, dtype=a.dtype,
                          max_position_embeddings=a.max_position_embeddings,
                          attn=attn_from_args(a))
        index = write_hf_gla(a.out, cfg, seed=a.seed, shards=a.shards, init_gain=a.init_gain)
    except HfLlamaError as e:
        print(f"hf_gla.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {vocab}, {len(index['weight_map'])} tensors, "
          f"{index['metadata']['total_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
