#!/usr/bin/env python3
"""Write a random-weight RWKV-7 folder in the fla-hub Hugging Face layout (RWKV7ForCausalLM,
model_type "rwkv7", as flash-linear-attention's fla/models/rwkv7 saves it).

    /usr/bin/python3 tools/hf_rwkv7.py --out /tmp/rwkv7 [--vocab_size 512] [--hidden_size 64]
        [--head_dim 32] [--num_hidden_layers 2] [--intermediate_size 128]
        [--decay_low_rank_dim 16] [--a_low_rank_dim 16] [--v_low_rank_dim 8]
        [--gate_low_rank_dim 16] [--norm_eps 1e-5] [--fuse_norm] [--tie_word_embeddings]
        [--dtype bfloat16|float32] [--seed 1] [--init_gain 1] [--force]

config.json keys (fla/models/rwkv7/configuration_rwkv7.py RWKV7Config, read at
fla-org/flash-linear-attention bc3b101d, plus what PretrainedConfig.save_pretrained adds):
a_low_rank_dim, architectures ["RWKV7ForCausalLM"], attn null (no hybrid attention layers),
attn_mode "chunk", bos_token_id 0, decay_low_rank_dim, eos_token_id 0, fuse_cross_entropy,
fuse_linear_cross_entropy, fuse_norm, gate_low_rank_dim, head_dim, hidden_act "sqrelu",
hidden_ratio, hidden_size, initializer_range, intermediate_size, max_position_embeddings,
model_type "rwkv7", norm_bias true, norm_eps, norm_first true, num_heads (= hidden / head_dim),
num_hidden_layers, pad_token_id null, tie_word_embeddings, torch_dtype, transformers_version,
use_cache, use_l2warp, value_dim ([hidden_size] per layer), vocab_size. bos/eos are 0: the RWKV
World vocabulary's <|endoftext|> (llama.cpp's converter sets both to 0 whatever config says).

Tensors (module order, D hidden, H heads, N head_dim (H N = D), I intermediate, V vocab, Rw Ra
Rv Rg the decay / a / v / gate LoRA ranks; nn.Linear weights are [out, in]):

    model.embeddings.weight                       [V, D]
    per layer i (P = model.layers.i.):
      P pre_norm.weight, P pre_norm.bias          [D]        layer 0 only (norm_first)
      P attn_norm.weight, .bias                   [D]
      P attn.x_r .x_w .x_k .x_v .x_a .x_g         [1, 1, D]  token-shift mix coefficients
      P attn.k_k, P attn.k_a                      [D]
      P attn.r_k                                  [H, N]
      P attn.r_proj.weight .k_proj .v_proj        [D, D]     (value_dim = D)
      P attn.o_proj.weight                        [D, D]
      P attn.w_lora.lora.0.weight [Rw, D]   .lora.2.weight [D, Rw]   .lora.2.bias [D]
      P attn.v_lora.lora.0.weight [Rv, D]   .lora.2.weight [D, Rv]   .lora.2.bias [D]
                                                              (layers > 0 only)
      P attn.a_lora.lora.0.weight [Ra, D]   .lora.2.weight [D, Ra]   .lora.2.bias [D]
      P attn.g_lora.lora.0.weight [Rg, D]   .lora.2.weight [D, Rg]   (no bias)
      P attn.g_norm.weight, .bias                 [D]        GroupNorm, H groups
      P ffn_norm.weight, .bias                    [D]
      P ffn.x_k                                   [D]
      P ffn.key.weight                            [I, D]
      P ffn.value.weight                          [D, I]
    model.norm.weight, model.norm.bias            [D]
    lm_head.weight                                [V, D]     (absent when tied)

The single file is model.safetensors (save_pretrained with one shard), in --dtype. The
vocabulary is a synthetic rwkv_vocab_v20230424.txt (write_vocab: ids 1..V-1, the 256 single
bytes first as in the real file, then multi-byte pieces), in the World format that
engine/tokenizer/rwkv_world_tokenizer.h and llama.cpp's _set_vocab_rwkv_world read:
`<id> <Python repr of the str, or of the bytes when not UTF-8> <byte length>`.

Weights (torch.Generator(seed), float32 draws in module order, rounded to --dtype; g =
--init_gain): embeddings N(0,1); LayerNorm / g_norm weights 1 + 0.1 N, biases 0.1 N; x_* and
ffn.x_k U(0,1); k_k 0.7 + 0.1 N; k_a 1 + 0.2 N; r_k 0.5 N; r/k/v/o/key/value projections and
LoRA matrices N(0, (g/sqrt(fan_in))^2); w_lora bias 1.5 N; a_lora and v_lora biases N(0,1);
lm_head N(0, (4/sqrt(D))^2). (fla's own init zeroes o_proj, ffn.value and the LoRA down
matrices, which would make a random model's logits input-independent.)
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import OrderedDict
from typing import List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama import (DTYPES, HfLlamaError, _check_out_dir, draw_weights,  # noqa: E402
                      write_json, write_safetensors)

ARCH = "RWKV7ForCausalLM"
TRANSFORMERS_VERSION = "4.48.0"
VOCAB_FILE = "rwkv_vocab_v20230424.txt"
LERP = ("r", "w", "k", "v", "a", "g")


def make_config(vocab_size: int = 512, hidden_size: int = 64, head_dim: int = 32,
                num_hidden_layers: int = 2, intermediate_size: int = 128,
                decay_low_rank_dim: int = 16, a_low_rank_dim: int = 16, v_low_rank_dim: int = 8,
                gate_low_rank_dim: int = 16, norm_eps: float = 1e-5, fuse_norm: bool = False,
                tie_word_embeddings: bool = False, dtype: str = "bfloat16",
                max_position_embeddings: int = 4096) -> "OrderedDict":
    """config.json's dict (module docstring), keys sorted as save_pretrained writes them."""
    if dtype not in DTYPES:
        raise HfLlamaError(f"dtype {dtype!r}")
    if hidden_size % head_dim:
        raise HfLlamaError(f"hidden_size {hidden_size} not a multiple of head_dim {head_dim}")
    c = {
        "a_low_rank_dim": a_low_rank_dim, "architectures": [ARCH], "attn": None,
        "attn_mode": "chunk", "bos_token_id": 0, "decay_low_rank_dim": decay_low_rank_dim,
        "eos_token_id": 0, "fuse_cross_entropy": True, "fuse_linear_cross_entropy": False,
        "fuse_norm": bool(fuse_norm), "gate_low_rank_dim": gate_low_rank_dim,
        "head_dim": head_dim, "hidden_act": "sqrelu",
        "hidden_ratio": intermediate_size / hidden_size, "hidden_size": hidden_size,
        "initializer_range": 0.02, "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings, "model_type": "rwkv7",
        "norm_bias": True, "norm_eps": norm_eps, "norm_first": True,
        "num_heads": hidden_size // head_dim, "num_hidden_layers": num_hidden_layers,
        "pad_token_id": None, "tie_word_embeddings": bool(tie_word_embeddings),
        "torch_dtype": dtype, "transformers_version": TRANSFORMERS_VERSION, "use_cache": True,
        "use_l2warp": True, "v_low_rank_dim": v_low_rank_dim,
        "value_dim": [hidden_size] * num_hidden_layers, "vocab_size": vocab_size,
    }
    return OrderedDict(sorted(c.items()))


def resolved(cfg: dict) -> dict:
    """The sizes RWKV7Attention / RWKV7FeedForward derive from a config dict: head_dim,
    num_heads, intermediate_size (int(hidden * hidden_ratio) rounded up to a multiple of 32 when
    absent) and the four LoRA ranks (fla's defaults when null)."""
    D = cfg["hidden_size"]
    hd, nh = cfg.get("head_dim"), cfg.get("num_heads")
    if hd is None and nh is not None:
        hd = D // nh
    if hd is None:
        hd = 64
    nh = D // hd
    inter = cfg.get("intermediate_size")
    if inter is None:
        inter = int(D * (cfg.get("hidden_ratio") or 4))
        inter = 32 * ((inter + 31) // 32)
    factor = hd / 64

    def rank(key, mult, scaled):
        r = cfg.get(key)
        if r is None:
            r = max(32, int(round(mult * D ** 0.5 * (factor if scaled else 1) / 32) * 32))
        return int(r)
    vd = cfg.get("value_dim")
    for v in (vd if isinstance(vd, list) else [vd] if vd is not None else []):
        if v != D:
            raise HfLlamaError(f"value_dim {vd}: only value_dim == hidden_size is supported")
    return {"D": D, "N": hd, "H": nh, "I": int(inter), "V": cfg["vocab_size"],
            "L": cfg["num_hidden_layers"],
            "Rw": rank("decay_low_rank_dim", 2.5, True), "Ra": rank("a_low_rank_dim", 2.5, True),
            "Rv": rank("v_low_rank_dim", 1.7, True), "Rg": rank("gate_low_rank_dim", 5, False)}


def tensor_shapes(cfg: dict) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape in module order (module docstring)."""
    r = resolved(cfg)
    D, N, H, I, V = r["D"], r["N"], r["H"], r["I"], r["V"]
    nb = cfg.get("norm_bias", True)
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out["model.embeddings.weight"] = (V, D)

    def norm(name):
        out[name + ".weight"] = (D,)
        if nb:
            out[name + ".bias"] = (D,)
    for i in range(r["L"]):
        p = f"model.layers.{i}."
        if i == 0 and cfg.get("norm_first", True):
            norm(p + "pre_norm")
        norm(p + "attn_norm")
        a = p + "attn."
        for x in LERP:
            out[a + "x_" + x] = (1, 1, D)
        out[a + "k_k"] = (D,)
        out[a + "k_a"] = (D,)
        out[a + "r_k"] = (H, N)
        for n in ("r_proj", "k_proj", "v_proj", "o_proj"):
            out[a + n + ".weight"] = (D, D)
        for lora, rk, bias in (("w", "Rw", True), ("v", "Rv", True), ("a", "Ra", True),
                               ("g", "Rg", False)):
            if lora == "v" and i == 0:
                continue
            out[f"{a}{lora}_lora.lora.0.weight"] = (r[rk], D)
            out[f"{a}{lora}_lora.lora.2.weight"] = (D, r[rk])
            if bias:
                out[f"{a}{lora}_lora.lora.2.bias"] = (D,)
        out[a + "g_norm.weight"] = (D,)   # GroupNorm: weight and bias whatever norm_bias says
        out[a + "g_norm.bias"] = (D,)
        norm(p + "ffn_norm")
        out[p + "ffn.x_k"] = (D,)
        out[p + "ffn.key.weight"] = (I, D)
        out[p + "ffn.value.weight"] = (D, I)
    norm("model.norm")
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = (V, D)
    return out


def random_weights(cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        leaf = name.split(".")[-1]
        if name == "model.embeddings.weight":
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        if "norm." in name:
            return 1.0 + 0.1 * r if leaf == "weight" else 0.1 * r
        if leaf.startswith("x_"):
            return torch.rand(shape, generator=g, dtype=torch.float32)
        if leaf == "k_k":
            return 0.7 + 0.1 * r
        if leaf == "k_a":
            return 1.0 + 0.2 * r
        if leaf == "r_k":
            return 0.5 * r
        if name.endswith("w_lora.lora.2.bias"):
            return 1.5 * r
        if leaf == "bias":
            return r
        return r * (init_gain / math.sqrt(shape[1]))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def vocab_pieces(n: int, seed: int = 424) -> List[bytes]:
    """n distinct token byte strings: the 256 single bytes (byte b is id b + 1), then
    multi-byte pieces: ASCII words and word pieces, a few multi-byte UTF-8 characters and
    bytes strings that are not valid UTF-8 (as the real file has), deterministic."""
    if n < 256:
        raise HfLlamaError(f"vocabulary of {n} pieces: want at least the 256 single bytes")
    out: List[bytes] = [bytes([b]) for b in range(256)]
    seen = set(out)
    fixed = [b"\n\n", b"  ", b"    ", b"\r\n", b"the", b" the", b" and", b" of", b" to",
             b"ing", b"tion", b" a", b" in", "é".encode(), "中".encode(), "文".encode(),
             "’".encode(), "—".encode(), b"\xe6\x98", b"\xe4\xb8", b"\xff\xfe", b" '", b"''",
             b" b'", b"\\n", b"\\", b" 'x' 3", b"\"", b"'\"'"]
    g = torch.Generator().manual_seed(seed)
    letters = b"etaoinshrdlcumwfgypbvk"
    i = 0
    while len(out) < n:
        if i < len(fixed):
            p = fixed[i]
        else:
            ln = int(torch.randint(2, 7, (1,), generator=g))
            idx = torch.randint(0, len(letters), (ln,), generator=g).tolist()
            p = (b" " if int(torch.randint(0, 2, (1,), generator=g)) else b"") + \
                bytes(letters[j] for j in idx)
        i += 1
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def vocab_line(i: int, tok: bytes) -> str:
    """One line of rwkv_vocab_v20230424.txt: id, the Python repr (str when the bytes are valid
    UTF-8, else bytes), the byte length."""
    try:
        lit = repr(tok.decode("utf-8"))
    except UnicodeDecodeError:
        lit = repr(tok)
    return f"{i} {lit} {len(tok)}\n"


def write_vocab(out_dir: str, vocab_size: int) -> None:
    """rwkv_vocab_v20230424.txt with ids 1 .. vocab_size - 1 (id 0, <|endoftext|>, is not in the
    file, as in the real one)."""
    pieces = vocab_pieces(vocab_size - 1)
    with open(os.path.join(out_dir, VOCAB_FILE), "w", encoding="utf-8", newline="\n") as f:
        for i, p in enumerate(pieces, start=1):
            f.write(vocab_line(i, p))


def write_hf_rwkv7(out_dir: str, cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   vocab: bool = True) -> int:
    """config.json, generation_config.json, model.safetensors and (vocab) the vocabulary file.
    Returns the safetensors file's size."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("bos_token_id", cfg["bos_token_id"]), ("eos_token_id", cfg["eos_token_id"]),
        ("transformers_version", TRANSFORMERS_VERSION)]))
    tensors = random_weights(cfg, seed=seed, init_gain=init_gain)
    size = write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors,
                             cfg["torch_dtype"])
    if vocab:
        write_vocab(out_dir, cfg["vocab_size"])
    return size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ints = (("vocab_size", 512), ("hidden_size", 64), ("head_dim", 32),
            ("num_hidden_layers", 2), ("intermediate_size", 128), ("decay_low_rank_dim", 16),
            ("a_low_rank_dim", 16), ("v_low_rank_dim", 8), ("gate_low_rank_dim", 16),
            ("max_position_embeddings", 4096))
    for n, d in ints:
        ap.add_argument("--" + n, type=int, default=d)
    ap.add_argument("--norm_eps", type=float, default=1e-5)
    ap.add_argument("--fuse_norm", action="store_true",
                    help="config fuse_norm true (k_k l2 norm with eps 1e-6 inside the root)")
    ap.add_argument("--tie_word_embeddings", action="store_true")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init_gain", type=float, default=1.0)
    ap.add_argument("--no_vocab", action="store_true", help="skip rwkv_vocab_v20230424.txt")
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        _check_out_dir(a.out, a.force)
        cfg = make_config(norm_eps=a.norm_eps, fuse_norm=a.fuse_norm,
                          tie_word_embeddings=a.tie_word_embeddings, dtype=a.dtype,
                          **{n: getattr(a, n) for n, _ in ints})
        size = write_hf_rwkv7(a.out, cfg, seed=a.seed, init_gain=a.init_gain,
                              vocab=not a.no_vocab)
    except HfLlamaError as e:
        print(f"hf_rwkv7.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {a.vocab_size}, {len(tensor_shapes(cfg))} tensors, "
          f"{size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
