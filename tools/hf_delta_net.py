#!/usr/bin/env python3
"""Write a random-weight DeltaNet folder in flash-linear-attention's Hugging Face layout
(DeltaNetForCausalLM, model_type "delta_net", as fla/models/delta_net saves it: the layout of
fla-hub/delta_net-1.3B-100B).

    /usr/bin/python3 tools/hf_delta_net.py --out /tmp/dn [--tokenizer train|none|DIR] \\
        [--vocab_size 512] [--hidden_size 64] [--num_hidden_layers 2] [--num_heads 4] \\
        [--expand_k 1] [--expand_v 1] [--hidden_ratio 4] [--intermediate_size N] \\
        [--conv_size 4] [--no_short_conv] [--use_gate] [--no_beta] [--allow_neg_eigval] \\
        [--qk_activation silu|identity] [--norm_eps 1e-6] [--tie_word_embeddings] \\
        [--dtype bfloat16|float32] [--shards 1] [--seed 1] [--init_gain 1] [--force] \\
        [--attn_layers 1 --attn_num_heads 4 [--attn_num_kv_heads 2] [--attn_qkv_bias]]

config.json keys (fla/models/delta_net/configuration_delta_net.py DeltaNetConfig, read at
fla-org/flash-linear-attention bc3b101d, plus what save_pretrained adds; sorted):
allow_neg_eigval, architectures ["DeltaNetForCausalLM"], attn (null, or a hybrid spec:
tools/fla_hybrid.py), attn_mode "chunk", attnres_block_size null, bos_token_id 1, conv_size,
eos_token_id 2, expand_k, expand_v, fuse_cross_entropy true, fuse_linear_cross_entropy false,
fuse_norm true, fuse_swiglu true, hidden_act "swish", hidden_ratio, hidden_size,
initializer_range 0.02, intermediate_size, max_position_embeddings, model_type "delta_net",
norm_eps, num_heads, num_hidden_layers, pad_token_id null, qk_activation, qk_norm "l2",
tie_word_embeddings, torch_dtype, transformers_version, use_beta, use_cache true, use_gate,
use_l2warp false, use_output_norm true, use_short_conv, vocab_size.

Tensors (fla/layers/delta_net.py DeltaNet's module order; D hidden, H = num_heads, Kw =
int(D expand_k), Vw = int(D expand_v), dv = Vw / H, K conv_size, I intermediate (as
tools/hf_gla.py), V vocab):

    model.embeddings.weight                          [V, D]
    per layer i (P = model.layers.i.):
      P attn_norm.weight                             [D]
      P attn.q_proj.weight, .k_proj.weight           [Kw, D]
      P attn.v_proj.weight                           [Vw, D]
      P attn.b_proj.weight                           [H, D]        (use_beta)
      P attn.q_conv1d.weight, .k_conv1d.weight       [Kw, 1, K]    (use_short_conv; no bias)
      P attn.v_conv1d.weight                         [Vw, 1, K]
      P attn.g_proj.weight                           [Vw, D]       (use_gate)
      P attn.o_norm.weight                           [dv]
      P attn.o_proj.weight                           [D, Vw]
      (a hybrid's attn layers: fla's Attention tensors instead, tools/fla_hybrid.py)
      P mlp_norm.weight                              [D]
      P mlp.gate_proj.weight, .up_proj.weight        [I, D];  P mlp.down_proj.weight [D, I]
    model.norm.weight                                [D]
    lm_head.weight                                   [V, D]  (absent when tied)

Weights (torch.Generator(seed), float32 draws in module order, rounded to --dtype; g =
--init_gain): embeddings N(0,1); norm weights 1 + 0.1 N; biases 0.5 N; projections
N(0, (g/sqrt(fan_in))^2); conv N(0, 1/K); lm_head N(0, (4/sqrt(D))^2). The tokenizer files are
tools/hf_llama.py's (SentencePiece).
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

ARCH = "DeltaNetForCausalLM"
TRANSFORMERS_VERSION = "4.53.0"
QK_ACTIVATIONS = ("silu", "identity")  # fla also has relu and elu (+1): not implemented here


def make_config(vocab_size: int = 512, hidden_size: int = 64, num_hidden_layers: int = 2,
                num_heads: int = 4, expand_k: float = 1.0, expand_v: float = 1.0,
                hidden_ratio: Optional[float] = 4, intermediate_size: Optional[int] = None,
                use_short_conv: bool = True, conv_size: int = 4, use_gate: bool = False,
                use_beta: bool = True, allow_neg_eigval: bool = False,
                qk_activation: str = "silu", norm_eps: float = 1e-6,
                tie_word_embeddings: bool = False, dtype: str = "bfloat16",
                max_position_embeddings: int = 2048,
                attn: Optional[dict] = None) -> "OrderedDict":
    """config.json's dict (module docstring), keys sorted as save_pretrained writes them."""
    if dtype not in DTYPES:
        raise HfLlamaError(f"dtype {dtype!r}")
    c = {
        "allow_neg_eigval": bool(allow_neg_eigval), "architectures": [ARCH], "attn": attn,
        "attn_mode": "chunk", "attnres_block_size": None, "bos_token_id": BOS_ID,
        "conv_size": conv_size, "eos_token_id": EOS_ID, "expand_k": expand_k,
        "expand_v": expand_v, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
        "fuse_norm": True, "fuse_swiglu": True, "hidden_act": "swish",
        "hidden_ratio": hidden_ratio, "hidden_size": hidden_size, "initializer_range": 0.02,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings, "model_type": "delta_net",
        "norm_eps": norm_eps, "num_heads": num_heads, "num_hidden_layers": num_hidden_layers,
        "pad_token_id": None, "qk_activation": qk_activation, "qk_norm": "l2",
        "tie_word_embeddings": bool(tie_word_embeddings), "torch_dtype": dtype,
        "transformers_version": TRANSFORMERS_VERSION, "use_beta": bool(use_beta),
        "use_cache": True, "use_gate": bool(use_gate), "use_l2warp": False,
        "use_output_norm": True, "use_short_conv": bool(use_short_conv),
        "vocab_size": vocab_size,
    }
    resolved(c)
    return OrderedDict(sorted(c.items()))


def resolved(cfg: dict) -> dict:
    """fla's derived sizes and switches: D, H, dk, dv, Kw, Vw, K (0: no short conv), I, V, L,
    gate, beta, beta_scale, qk_silu, attn. Raises HfLlamaError on what fla rejects or this
    project does not implement (qk_activation relu / elu, qk_norm sum, attnres_block_size,
    attn specs fla_hybrid.py refuses)."""
    D, H = cfg["hidden_size"], cfg.get("num_heads", 16)
    Kw = int(D * cfg.get("expand_k", 1.0))
    Vw = int(D * cfg.get("expand_v", 1.0))
    if Kw % H or Vw % H or Kw < H or Vw < H:
        raise HfLlamaError(f"key dim {Kw} / value dim {Vw} not divisible by num_heads {H}")
    act = cfg.get("qk_activation", "silu")
    if act not in QK_ACTIVATIONS:
        raise HfLlamaError(f"qk_activation {act!r}: {' or '.join(QK_ACTIVATIONS)} only")
    if cfg.get("qk_norm", "l2") != "l2":
        raise HfLlamaError(f"qk_norm {cfg.get('qk_norm')!r}: l2 only")
    if cfg.get("attnres_block_size") is not None:
        raise HfLlamaError(f"attnres_block_size = {cfg['attnres_block_size']!r}: null only")
    if cfg.get("hidden_act", "swish") != "swish":
        raise HfLlamaError(f"hidden_act {cfg.get('hidden_act')!r}: swish only")
    short_conv = cfg.get("use_short_conv", True)
    return {"D": D, "H": H, "dk": Kw // H, "dv": Vw // H, "Kw": Kw, "Vw": Vw,
            "K": cfg.get("conv_size", 4) if short_conv else 0, "I": mlp_size(cfg),
            "V": cfg["vocab_size"], "L": cfg["num_hidden_layers"],
            "gate": bool(cfg.get("use_gate", False)), "beta": bool(cfg.get("use_beta", True)),
            "beta_scale": 2.0 if cfg.get("allow_neg_eigval", False) else 1.0,
            "qk_silu": act == "silu", "attn": attn_spec(cfg)}


def tensor_shapes(cfg: dict) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape in module order (module docstring)."""
    s = resolved(cfg)
    D, Kw, Vw, H, K, I = s["D"], s["Kw"], s["Vw"], s["H"], s["K"], s["I"]
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out["model.embeddings.weight"] = (s["V"], D)
    for i in range(s["L"]):
        p = f"model.layers.{i}."
        a = p + "attn."
        out[p + "attn_norm.weight"] = (D,)
        if s["attn"] is not None and i in s["attn"]["layers"]:
            out.update(attn_shapes(cfg, i))
        else:
            out[a + "q_proj.weight"] = (Kw, D)
            out[a + "k_proj.weight"] = (Kw, D)
            out[a + "v_proj.weight"] = (Vw, D)
            if s["beta"]:
                out[a + "b_proj.weight"] = (H, D)
            if K:
                out[a + "q_conv1d.weight"] = (Kw, 1, K)
                out[a + "k_conv1d.weight"] = (Kw, 1, K)
                out[a + "v_conv1d.weight"] = (Vw, 1, K)
            if s["gate"]:
                out[a + "g_proj.weight"] = (Vw, D)
            out[a + "o_norm.weight"] = (s["dv"],)
            out[a + "o_proj.weight"] = (D, Vw)
        out[p + "mlp_norm.weight"] = (D,)
        out[p + "mlp.gate_proj.weight"] = (I, D)
        out[p + "mlp.up_proj.weight"] = (I, D)
        out[p + "mlp.down_proj.weight"] = (D, I)
    out["model.norm.weight"] = (D,)
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = (s["V"], D)
    return out


def random_weights(cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        if name.endswith("conv1d.weight"):
            return r / math.sqrt(shape[-1])
        if name.endswith("norm.weight"):
            return 1.0 + 0.1 * r
        if name.endswith(".bias"):
            return 0.5 * r
        if name == "model.embeddings.weight":
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        return r * (init_gain / math.sqrt(shape[1]))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def write_hf_delta_net(out_dir: str, cfg: dict, seed: int = 1, shards: int = 1,
                       init_gain: float = 1.0) -> dict:
    """config.json, generation_config.json, the shards and the index. Returns the index."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("_from_model_config", True), ("bos_token_id", cfg["bos_token_id"]),
        ("eos_token_id", cfg["eos_token_id"]), ("transformers_version", TRANSFORMERS_VERSION)]))
    tensors = random_weights(cfg, seed=seed, init_gain=init_gain)
    return write_model_files(out_dir, cfg, tensors, shards, names=list(tensor_shapes(cfg)))


def _num(x: float):
    return int(x) if float(x).is_integer() else x


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
    ap.add_argument("--intermediate_size", type=int, default=None)
    for n, d in (("hidden_ratio", 4.0), ("expand_k", 1.0), ("expand_v", 1.0),
                 ("norm_eps", 1e-6), ("init_gain", 1.0)):
        ap.add_argument("--" + n, type=float, default=d)
    ap.add_argument("--no_short_conv", action="store_true")
    ap.add_argument("--use_gate", action="store_true")
    ap.add_argument("--no_beta", action="store_true")
    ap.add_argument("--allow_neg_eigval", action="store_true")
    ap.add_argument("--qk_activation", default="silu", choices=QK_ACTIVATIONS)
    ap.add_argument("--tie_word_embeddings", action="store_true")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--force", action="store_true")
    add_attn_args(ap)
    a = ap.parse_args(argv)
    try:
        vocab = start_folder(a.out, a.force, a.tokenizer, a.vocab_size, a.text,
                             a.max_position_embeddings)
        cfg = make_config(vocab_size=vocab, hidden_size=a.hidden_size,
                          num_hidden_layers=a.num_hidden_layers, num_heads=a.num_heads,
                          expand_k=_num(a.expand_k), expand_v=_num(a.expand_v),
                          hidden_ratio=_num(a.hidden_ratio),
                          intermediate_size=a.intermediate_size,
                          use_short_conv=not a.no_short_conv, conv_size=a.conv_size,
                          use_gate=a.use_gate, use_beta=not a.no_beta,
                          allow_neg_eigval=a.allow_neg_eigval, qk_activation=a.qk_activation,
                          norm_eps=a.norm_eps, tie_word_embeddings=a.tie_word_embeddings,
                          dtype=a.dtype, max_position_embeddings=a.max_position_embeddings,
                          attn=attn_from_args(a))
        index = write_hf_delta_net(a.out, cfg, seed=a.seed, shards=a.shards,
                                   init_gain=a.init_gain)
    except HfLlamaError as e:
        print(f"hf_delta_net.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {vocab}, {len(index['weight_map'])} tensors, "
          f"{index['metadata']['total_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
