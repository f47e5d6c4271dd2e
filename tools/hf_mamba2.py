#!/usr/bin/env python3
"""Write a random-weight Mamba2ForCausalLM folder (model_type "mamba2") in the Hugging Face layout.

    /usr/bin/python3 tools/hf_mamba2.py --out /tmp/m2 [--tokenizer train|none|DIR] \
        [--vocab_size 512] [--hidden_size 64] [--num_hidden_layers 2] [--expand 2] \
        [--head_dim 16] [--state_size 16] [--n_groups 1] [--conv_kernel 4] [--chunk_size 256] \
        [--layer_norm_epsilon 1e-5] [--time_step_limit 0,inf] [--no_conv_bias] [--use_bias] \
        [--tie_word_embeddings] [--dtype bfloat16|float32] [--shards 1] [--seed 1] \
        [--init_gain 1.0] [--force]

config.json: the fields of transformers' Mamba2Config (configuration_mamba2.py, the v5 dataclass
form, read at huggingface/transformers 020a37d2 with modeling_mamba2.py), sorted, with
architectures ["Mamba2ForCausalLM"], dtype and transformers_version "5.0.0" added as
save_pretrained does:
    bos_token_id 1, chunk_size, conv_kernel, eos_token_id 2, expand, head_dim, hidden_act "silu",
    hidden_size, initializer_range 0.1, layer_norm_epsilon, model_type "mamba2", n_groups,
    num_heads (= expand * hidden_size / head_dim, which Mamba2Config requires), num_hidden_layers,
    pad_token_id 0, rescale_prenorm_residual false, residual_in_fp32 true, rms_norm true,
    state_size, tie_word_embeddings, time_step_floor 1e-4, time_step_limit ([0.0, Infinity] by
    default: json.dumps writes the float inf as the bare token Infinity, as transformers' own
    to_json_string does), time_step_max 0.1, time_step_min 0.001, time_step_rank
    (ceil(hidden_size / 16), what "auto" resolves to), use_bias, use_cache true, use_conv_bias,
    vocab_size.
(layer_types is a property of the config, not a stored key.) llama.cpp's converter rounds
vocab_size up to a multiple of pad_vocab_size_multiple (default 16), so --vocab_size (or the
tokenizer's) must already be one: nothing is padded.

Tensors (module order, the order they are drawn and sharded; [out, in] row-major; D hidden,
I = expand * D, H = num_heads, P = head_dim (H P = I), N = state_size, G = n_groups,
conv_dim = I + 2 G N, K = conv_kernel, V vocab):

    backbone.embeddings.weight                  [V, D]
    per layer i (backbone.layers.{i}.):
      norm.weight                               [D]       RMSNorm, plain weight
      mixer.conv1d.weight                       [conv_dim, 1, K]   depthwise
      mixer.conv1d.bias                         [conv_dim]         (use_conv_bias)
      mixer.in_proj.weight                      [I + conv_dim + H, D]  rows z | xBC | dt
      mixer.in_proj.bias                        [I + conv_dim + H]     (use_bias)
      mixer.dt_bias                             [H]
      mixer.A_log                               [H]
      mixer.norm.weight                         [I]       gated RMSNorm weight
      mixer.D                                   [H]
      mixer.out_proj.weight                     [D, I]
      mixer.out_proj.bias                       [D]       (use_bias)
    backbone.norm_f.weight                      [D]
    lm_head.weight                              [V, D]    (absent when tied)

Weights (torch.Generator(seed), float32, rounded to --dtype), chosen for visible signal rather
than upstream's training init (A = 1..H, dt in [1e-3, 0.1], D = 1, which leaves the scan nearly
silent on random weights): embeddings N(0, 1); in_proj, out_proj N(0, (gain/sqrt(fan_in))^2);
lm_head N(0, (4/sqrt(D))^2); conv1d.weight N(0, 1/K); biases 0.1 N(0, 1); norm weights
1 + 0.1 N(0, 1); A_log = log(U(0.5, 4)); dt_bias = softplus^-1(dt), dt log-uniform in
[0.01, 1] (dt + log(-expm1(-dt)), as upstream inverts it); D = 1 + 0.5 N(0, 1).
Tokenizer files: tools/hf_llama.py's (SentencePiece; --tokenizer DIR copies DIR/tokenizer.model).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import OrderedDict
from typing import Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama import (BOS_ID, DEFAULT_TEXT, DTYPES, EOS_ID, UNK_ID, HfLlamaError,  # noqa: E402
                      draw_weights, start_folder, write_json, write_model_files)

ARCH, MODEL_TYPE = "Mamba2ForCausalLM", "mamba2"
TRANSFORMERS_VERSION = "5.0.0"
VOCAB_MULTIPLE = 16  # llama.cpp's Mamba2Model.set_vocab pads to this


def parse_limit(text: str) -> Tuple[float, float]:
    lo, _, hi = text.partition(",")
    return float(lo), float(hi)


def make_config(vocab_size: int = 512, hidden_size: int = 64, num_hidden_layers: int = 2,
                expand: int = 2, head_dim: int = 16, state_size: int = 16, n_groups: int = 1,
                conv_kernel: int = 4, chunk_size: int = 256, layer_norm_epsilon: float = 1e-5,
                time_step_limit: Tuple[float, float] = (0.0, float("inf")),
                use_conv_bias: bool = True, use_bias: bool = False,
                tie_word_embeddings: bool = False, dtype: str = "bfloat16") -> dict:
    """config.json's dict (module docstring)."""
    if dtype not in DTYPES:
        raise HfLlamaError(f"dtype {dtype!r}")
    inter = expand * hidden_size
    if inter % head_dim:
        raise HfLlamaError(f"expand * hidden_size = {inter} is not a multiple of head_dim "
                           f"{head_dim}")
    heads = inter // head_dim
    if heads % n_groups:
        raise HfLlamaError(f"num_heads {heads} is not a multiple of n_groups {n_groups}")
    if vocab_size % VOCAB_MULTIPLE:
        raise HfLlamaError(f"vocab_size {vocab_size}: want a multiple of {VOCAB_MULTIPLE} "
                           "(llama.cpp's converter would pad it)")
    c = OrderedDict(sorted([
        ("bos_token_id", BOS_ID), ("chunk_size", chunk_size), ("conv_kernel", conv_kernel),
        ("dtype", dtype), ("eos_token_id", EOS_ID), ("expand", expand), ("head_dim", head_dim),
        ("hidden_act", "silu"), ("hidden_size", hidden_size), ("initializer_range", 0.1),
        ("layer_norm_epsilon", layer_norm_epsilon), ("model_type", MODEL_TYPE),
        ("n_groups", n_groups), ("num_heads", heads), ("num_hidden_layers", num_hidden_layers),
        ("pad_token_id", UNK_ID), ("rescale_prenorm_residual", False),
        ("residual_in_fp32", True), ("rms_norm", True), ("state_size", state_size),
        ("tie_word_embeddings", bool(tie_word_embeddings)), ("time_step_floor", 1e-4),
        ("time_step_limit", [float(time_step_limit[0]), float(time_step_limit[1])]),
        ("time_step_max", 0.1), ("time_step_min", 0.001),
        ("time_step_rank", math.ceil(hidden_size / 16)), ("use_bias", bool(use_bias)),
        ("use_cache", True), ("use_conv_bias", bool(use_conv_bias)), ("vocab_size", vocab_size),
    ]))
    return OrderedDict([("architectures", [ARCH])] + list(c.items()) +
                       [("transformers_version", TRANSFORMERS_VERSION)])


def dims(cfg: dict) -> dict:
    """D, I, H, P, N, G, K, conv_dim, proj (in_proj rows) of a config dict."""
    D = cfg["hidden_size"]
    I = int(cfg.get("expand", 2) * D)
    P = cfg["head_dim"]
    H = cfg.get("num_heads") or I // P
    N, G, K = cfg["state_size"], cfg.get("n_groups", 1), cfg.get("conv_kernel", 4)
    conv = I + 2 * G * N
    return {"D": D, "I": I, "H": H, "P": P, "N": N, "G": G, "K": K, "conv_dim": conv,
            "proj": I + conv + H}


def tensor_shapes(cfg: dict) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape in module order (module docstring)."""
    d = dims(cfg)
    D, I, H, V = d["D"], d["I"], d["H"], cfg["vocab_size"]
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out["backbone.embeddings.weight"] = (V, D)
    for i in range(cfg["num_hidden_layers"]):
        p = f"backbone.layers.{i}."
        m = p + "mixer."
        out[p + "norm.weight"] = (D,)
        out[m + "conv1d.weight"] = (d["conv_dim"], 1, d["K"])
        if cfg.get("use_conv_bias", True):
            out[m + "conv1d.bias"] = (d["conv_dim"],)
        out[m + "in_proj.weight"] = (d["proj"], D)
        if cfg.get("use_bias", False):
            out[m + "in_proj.bias"] = (d["proj"],)
        out[m + "dt_bias"] = (H,)
        out[m + "A_log"] = (H,)
        out[m + "norm.weight"] = (I,)
        out[m + "D"] = (H,)
        out[m + "out_proj.weight"] = (D, I)
        if cfg.get("use_bias", False):
            out[m + "out_proj.bias"] = (D,)
    out["backbone.norm_f.weight"] = (D,)
    if not cfg.get("tie_word_embeddings", False):
        out["lm_head.weight"] = (V, D)
    return out


def random_weights(cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        if name.endswith("A_log"):
            return torch.log(0.5 + 3.5 * torch.rand(shape, generator=g, dtype=torch.float32))
        if name.endswith("dt_bias"):
            u = torch.rand(shape, generator=g, dtype=torch.float32)
            dt = torch.exp(u * (math.log(1.0) - math.log(0.01)) + math.log(0.01))
            return dt + torch.log(-torch.expm1(-dt))
        if name.endswith("mixer.D"):
            return 1.0 + 0.5 * r
        if name.endswith("conv1d.weight"):
            return r / math.sqrt(shape[-1])
        if name.endswith("norm.weight") or name.endswith("norm_f.weight"):
            return 1.0 + 0.1 * r
        if name.endswith(".bias"):
            return 0.1 * r
        if name == "backbone.embeddings.weight":
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        return r * (init_gain / math.sqrt(shape[1]))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def write_hf_mamba2(out_dir: str, cfg: dict, seed: int = 1, shards: int = 1,
                    init_gain: float = 1.0) -> dict:
    """config.json, generation_config.json, the shards and the index. Returns the index."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("bos_token_id", cfg["bos_token_id"]), ("do_sample", False),
        ("eos_token_id", cfg["eos_token_id"]), ("pad_token_id", cfg["pad_token_id"]),
        ("transformers_version", TRANSFORMERS_VERSION)]))
    tensors = random_weights(cfg, seed=seed, init_gain=init_gain)
    return write_model_files(out_dir, cfg, tensors, shards, names=list(tensor_shapes(cfg)),
                             dtype=cfg["dtype"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default="train")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ints = (("vocab_size", 512), ("hidden_size", 64), ("num_hidden_layers", 2), ("expand", 2),
            ("head_dim", 16), ("state_size", 16), ("n_groups", 1), ("conv_kernel", 4),
            ("chunk_size", 256), ("shards", 1), ("seed", 1))
    for n, d in ints:
        ap.add_argument("--" + n, type=int, default=d)
    ap.add_argument("--layer_norm_epsilon", type=float, default=1e-5)
    ap.add_argument("--time_step_limit", default="0,inf", help="LO,HI (dt clamp)")
    ap.add_argument("--init_gain", type=float, default=1.0)
    ap.add_argument("--no_conv_bias", action="store_true", help="use_conv_bias false")
    ap.add_argument("--use_bias", action="store_true", help="in_proj / out_proj biases")
    ap.add_argument("--tie_word_embeddings", action="store_true")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        vocab = start_folder(a.out, a.force, a.tokenizer, a.vocab_size, a.text, 4096)
        kw = {n: getattr(a, n) for n, _ in ints if n not in ("vocab_size", "shards", "seed")}
        cfg = make_config(vocab_size=vocab, layer_norm_epsilon=a.layer_norm_epsilon,
                          time_step_limit=parse_limit(a.time_step_limit),
                          use_conv_bias=not a.no_conv_bias, use_bias=a.use_bias,
                          tie_word_embeddings=a.tie_word_embeddings, dtype=a.dtype, **kw)
        index = write_hf_mamba2(a.out, cfg, seed=a.seed, shards=a.shards, init_gain=a.init_gain)
    except HfLlamaError as e:
        print(f"hf_mamba2.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {vocab}, {len(index['weight_map'])} tensors, "
          f"{index['metadata']['total_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
