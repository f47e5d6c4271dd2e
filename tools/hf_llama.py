#!/usr/bin/env python3
"""Write a random-weight LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM folder in the
Hugging Face layout.

    /usr/bin/python3 tools/hf_llama.py --out /tmp/hf-llama-tiny [--family llama|qwen2|qwen3] \
        [--tokenizer train|none|<folder holding tokenizer.model>] [--vocab_size 512] \
        [--hidden_size 96] [--intermediate_size 256] [--num_hidden_layers 3] \
        [--num_attention_heads 4] [--num_key_value_heads 2] [--head_dim 32] \
        [--rope_theta 10000] [--rope_scaling none|linear:F|llama3:F,LOW,HIGH,ORIG] \
        [--attention_bias] [--mlp_bias] [--tie_word_embeddings] \
        [--dtype bfloat16|float32|float16] [--shards 2] [--seed 0] [--force]

The folder is what `transformers` writes for `LlamaForCausalLM.save_pretrained` (the files the C++
loader and llama.cpp's convert_hf_to_gguf.py read; written here by hand, no transformers or
safetensors package):

    config.json                      architectures ["LlamaForCausalLM"], model_type "llama",
                                     hidden_size, intermediate_size, num_hidden_layers,
                                     num_attention_heads, num_key_value_heads, head_dim,
                                     rms_norm_eps, rope_theta, rope_scaling (null, or
                                     {"rope_type": "linear", "factor"} or {"rope_type": "llama3",
                                     "factor", "low_freq_factor", "high_freq_factor",
                                     "original_max_position_embeddings"}), attention_bias,
                                     attention_dropout, mlp_bias, tie_word_embeddings,
                                     torch_dtype, bos_token_id, eos_token_id, vocab_size,
                                     max_position_embeddings, hidden_act "silu",
                                     initializer_range, pretraining_tp 1, use_cache,
                                     transformers_version
    generation_config.json           bos/eos ids, do_sample false
    model-0000K-of-0000N.safetensors the tensors, split into N shards in module order
    model.safetensors.index.json     {"metadata": {"total_size": bytes of tensor data},
                                      "weight_map": {tensor name: shard file}} (sorted names)
    tokenizer.model                  SentencePiece BPE model (Llama-2 style: <unk> 0, <s> 1,
    tokenizer_config.json            </s> 2, 256 byte-fallback pieces <0x00>..<0xFF> at 3..258,
    special_tokens_map.json          then merges, then characters), trained on tiny-Shakespeare with
                                     python3-sentencepiece (--tokenizer train), or copied from a
                                     folder that has one (--tokenizer DIR); --tokenizer none
                                     writes no tokenizer files (config's vocab_size is then
                                     --vocab_size as given)

Tensor names, exactly as transformers writes them ([out, in] row-major, the nn.Linear layout):

    model.embed_tokens.weight                         [vocab, hidden]
    model.layers.{i}.self_attn.q_proj.weight          [heads * head_dim, hidden]
    model.layers.{i}.self_attn.k_proj.weight          [kv_heads * head_dim, hidden]
    model.layers.{i}.self_attn.v_proj.weight          [kv_heads * head_dim, hidden]
    model.layers.{i}.self_attn.o_proj.weight          [hidden, heads * head_dim]
    model.layers.{i}.mlp.gate_proj.weight             [intermediate, hidden]
    model.layers.{i}.mlp.up_proj.weight               [intermediate, hidden]
    model.layers.{i}.mlp.down_proj.weight             [hidden, intermediate]
    model.layers.{i}.input_layernorm.weight           [hidden]
    model.layers.{i}.post_attention_layernorm.weight  [hidden]
    model.norm.weight                                 [hidden]
    lm_head.weight                                    [vocab, hidden]   (absent when tied)

plus "<proj>.bias" [out] after each q/k/v/o_proj weight with --attention_bias and after each
gate/up/down_proj weight with --mlp_bias (module order, as listed: the shards follow it).

--family qwen2 (Qwen2ForCausalLM, as the published Qwen2 / Qwen2.5 checkpoints):
    config.json keys: architectures ["Qwen2ForCausalLM"], model_type "qwen2", attention_dropout,
    bos_token_id, eos_token_id, hidden_act, hidden_size, initializer_range, intermediate_size,
    max_position_embeddings, max_window_layers (= num_hidden_layers), num_attention_heads,
    num_hidden_layers, num_key_value_heads, rms_norm_eps, rope_scaling, rope_theta,
    sliding_window (= max_position_embeddings), tie_word_embeddings, torch_dtype,
    transformers_version, use_cache, use_sliding_window false, vocab_size. No head_dim key
    (head_dim = hidden_size / heads; --head_dim must be 0 or that) and no attention_bias key:
    q_proj, k_proj, v_proj always carry ".bias" [out], o_proj never; no MLP biases.
--family qwen3 (Qwen3ForCausalLM, as the published Qwen3 checkpoints): the qwen2 keys plus
    head_dim (free, e.g. != hidden / heads) and attention_bias (false: no biases; true: q/k/v/o
    biases), sliding_window null; and per layer, after o_proj, two [head_dim] tensors
        model.layers.{i}.self_attn.q_norm.weight
        model.layers.{i}.self_attn.k_norm.weight
    the weights of an RMSNorm (eps = rms_norm_eps) over each head's head_dim values of q and k,
    applied after the projection and before RoPE (flatstate_ref/llama.py).
Both Qwen families' tokenizer files here are the SentencePiece ones above (the published
checkpoints ship a byte-level BPE tokenizer.json instead; tests/data/hf_qwen2_tiny/README.md).

q_proj / k_proj rows are in the Hugging Face order (each head's first half of dims then its
second half: the "rotate_half" RoPE pairing i <-> i + head_dim/2), not Meta's interleaved order.

Every tensor has --dtype (default bfloat16: float32 values rounded to nearest even). A shard is
a safetensors file: u64 little-endian header length N, N bytes of JSON ({"__metadata__":
{"format": "pt"}, name: {"dtype", "shape", "data_offsets"}}, padded with spaces to a multiple
of 8), then the tensors' bytes in sorted-name order.

Weights are seeded and deterministic (torch.Generator(seed), tensors drawn in module order):
embeddings N(0, 1); every projection N(0, (gain / sqrt(fan_in))^2) with --init_gain (1.0);
lm_head N(0, (logit_gain / sqrt(hidden))^2) with --logit_gain (4.0), so logits spread over a
few units and greedy decoding is not decided by rounding; norm weights (q_norm / k_norm
included) 1 + 0.1 N(0, 1); biases
0.1 N(0, 1).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import sys
import tempfile
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import ExportError  # noqa: E402  (tools/ is where this file lives)
from export import read_safetensors_header as export_read_safetensors_header  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEFAULT_TEXT = os.path.join(REPO, "..", "shared", "data", "tinyshakespeare", "input.txt")

# safetensors dtype name, torch dtype, bytes per element
DTYPES = {
    "float32": ("F32", torch.float32, 4),
    "bfloat16": ("BF16", torch.bfloat16, 2),
    "float16": ("F16", torch.float16, 2),
}
ST_DTYPES = {"F32": (np.dtype("<f4"), 4), "BF16": (np.dtype("<u2"), 2),
             "F16": (np.dtype("<f2"), 2)}

TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

# --family: architectures[0], model_type, the transformers_version written to config.json
FAMILIES = {
    "llama": ("LlamaForCausalLM", "llama", "4.46.0"),
    "qwen2": ("Qwen2ForCausalLM", "qwen2", "4.46.0"),
    "qwen3": ("Qwen3ForCausalLM", "qwen3", "4.51.0"),
}


class HfLlamaError(Exception):
    pass


# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------

def parse_rope_scaling(text: str) -> Optional[dict]:
    """"none" -> None; "linear:F" -> {"rope_type": "linear", "factor": F};
    "llama3:F,LOW,HIGH,ORIG" -> the Llama 3.1 dict (ORIG an int)."""
    if text in ("", "none"):
        return None
    kind, _, args = text.partition(":")
    vals = [a for a in args.split(",") if a]
    if kind == "linear" and len(vals) == 1:
        return {"rope_type": "linear", "factor": float(vals[0])}
    if kind == "llama3" and len(vals) == 4:
        return {"rope_type": "llama3", "factor": float(vals[0]),
                "low_freq_factor": float(vals[1]), "high_freq_factor": float(vals[2]),
                "original_max_position_embeddings": int(vals[3])}
    raise HfLlamaError(f"--rope_scaling {text!r}: want none, linear:F or llama3:F,LOW,HIGH,ORIG")


def make_config(vocab_size: int, hidden_size: int = 96, intermediate_size: int = 256,
                num_hidden_layers: int = 3, num_attention_heads: int = 4,
                num_key_value_heads: int = 2, head_dim: Optional[int] = 32,
                rms_norm_eps: float = 1e-5, rope_theta: float = 10000.0,
                rope_scaling: Optional[dict] = None, attention_bias: bool = False,
                mlp_bias: bool = False, tie_word_embeddings: bool = False,
                torch_dtype: str = "bfloat16", max_position_embeddings: int = 2048,
                bos_token_id: int = BOS_ID, eos_token_id: int = EOS_ID,
                family: str = "llama") -> dict:
    """config.json's dict, keys as transformers' LlamaConfig / Qwen2Config / Qwen3Config
    to_json_string writes them (family llama, qwen2, qwen3; module docstring)."""
    if head_dim is None:
        head_dim = hidden_size // num_attention_heads
    if num_attention_heads % num_key_value_heads:
        raise HfLlamaError(f"num_attention_heads {num_attention_heads} is not a multiple of "
                           f"num_key_value_heads {num_key_value_heads}")
    if head_dim % 2:
        raise HfLlamaError(f"head_dim {head_dim} is odd (RoPE rotates pairs)")
    if torch_dtype not in DTYPES:
        raise HfLlamaError(f"dtype {torch_dtype!r}: want one of {', '.join(DTYPES)}")
    if family != "llama":
        if family not in FAMILIES:
            raise HfLlamaError(f"family {family!r}: want one of {', '.join(FAMILIES)}")
        if mlp_bias:
            raise HfLlamaError(f"{family}: the MLP has no biases (no mlp_bias)")
        return _qwen_config(family, vocab_size, hidden_size, intermediate_size,
                            num_hidden_layers, num_attention_heads, num_key_value_heads,
                            head_dim, rms_norm_eps, rope_theta, rope_scaling, attention_bias,
                            tie_word_embeddings, torch_dtype, max_position_embeddings,
                            bos_token_id, eos_token_id)
    return OrderedDict([
        ("architectures", ["LlamaForCausalLM"]),
        ("attention_bias", bool(attention_bias)),
        ("attention_dropout", 0.0),
        ("bos_token_id", bos_token_id),
        ("eos_token_id", eos_token_id),
        ("head_dim", head_dim),
        ("hidden_act", "silu"),
        ("hidden_size", hidden_size),
        ("initializer_range", 0.02),
        ("intermediate_size", intermediate_size),
        ("max_position_embeddings", max_position_embeddings),
        ("mlp_bias", bool(mlp_bias)),
        ("model_type", "llama"),
        ("num_attention_heads", num_attention_heads),
        ("num_hidden_layers", num_hidden_layers),
        ("num_key_value_heads", num_key_value_heads),
        ("pretraining_tp", 1),
        ("rms_norm_eps", rms_norm_eps),
        ("rope_scaling", rope_scaling),
        ("rope_theta", rope_theta),
        ("tie_word_embeddings", bool(tie_word_embeddings)),
        ("torch_dtype", torch_dtype),
        ("transformers_version", "4.46.0"),
        ("use_cache", True),
        ("vocab_size", vocab_size),
    ])


def _qwen_config(family, vocab_size, hidden_size, intermediate_size, num_hidden_layers,
                 num_attention_heads, num_key_value_heads, head_dim, rms_norm_eps, rope_theta,
                 rope_scaling, attention_bias, tie_word_embeddings, torch_dtype,
                 max_position_embeddings, bos_token_id, eos_token_id) -> dict:
    """Qwen2 / Qwen3 config.json, the key set of the published Qwen2.5 / Qwen3 checkpoints
    (module docstring). Qwen2 writes no head_dim and no attention_bias (q/k/v always have
    biases, o_proj never); Qwen3 writes both."""
    arch, model_type, version = FAMILIES[family]
    if family == "qwen2":
        if head_dim != hidden_size // num_attention_heads:
            raise HfLlamaError(f"qwen2: head_dim {head_dim} must be hidden_size / heads = "
                               f"{hidden_size // num_attention_heads} (Qwen2 has no head_dim key)")
        if attention_bias:
            raise HfLlamaError("qwen2: q/k/v always have biases and o_proj none "
                               "(no attention_bias)")
    items = [
        ("architectures", [arch]),
        ("attention_bias", bool(attention_bias)),
        ("attention_dropout", 0.0),
        ("bos_token_id", bos_token_id),
        ("eos_token_id", eos_token_id),
        ("head_dim", head_dim),
        ("hidden_act", "silu"),
        ("hidden_size", hidden_size),
        ("initializer_range", 0.02),
        ("intermediate_size", intermediate_size),
        ("max_position_embeddings", max_position_embeddings),
        ("max_window_layers", num_hidden_layers),
        ("model_type", model_type),
        ("num_attention_heads", num_attention_heads),
        ("num_hidden_layers", num_hidden_layers),
        ("num_key_value_heads", num_key_value_heads),
        ("rms_norm_eps", rms_norm_eps),
        ("rope_scaling", rope_scaling),
        ("rope_theta", rope_theta),
        # Qwen2.5 checkpoints write the (unused) window as the context length, Qwen3 null
        ("sliding_window", max_position_embeddings if family == "qwen2" else None),
        ("tie_word_embeddings", bool(tie_word_embeddings)),
        ("torch_dtype", torch_dtype),
        ("transformers_version", version),
        ("use_cache", True),
        ("use_sliding_window", False),
        ("vocab_size", vocab_size),
    ]
    if family == "qwen2":
        items = [kv for kv in items if kv[0] not in ("attention_bias", "head_dim")]
    return OrderedDict(items)


def tensor_shapes(cfg: dict) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape, in module (state_dict) order."""
    D, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or D // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    model_type = cfg.get("model_type", "llama")
    if model_type == "qwen2":   # Qwen2Attention: bias on q/k/v, never on o_proj
        biased = ("q_proj", "k_proj", "v_proj")
    else:                       # Llama, Qwen3: attention_bias on all four
        biased = ("q_proj", "k_proj", "v_proj", "o_proj") if cfg.get("attention_bias") else ()
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out["model.embed_tokens.weight"] = (V, D)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for proj, shape in (("q_proj", (q, D)), ("k_proj", (kv, D)), ("v_proj", (kv, D)),
                            ("o_proj", (D, q))):
            out[p + f"self_attn.{proj}.weight"] = shape
            if proj in biased:
                out[p + f"self_attn.{proj}.bias"] = (shape[0],)
        if model_type == "qwen3":   # per-head RMSNorm of q and k (Qwen3Attention's q_norm, k_norm)
            out[p + "self_attn.q_norm.weight"] = (hd,)
            out[p + "self_attn.k_norm.weight"] = (hd,)
        for proj, shape in (("gate_proj", (I, D)), ("up_proj", (I, D)), ("down_proj", (D, I))):
            out[p + f"mlp.{proj}.weight"] = shape
            if cfg.get("mlp_bias"):
                out[p + f"mlp.{proj}.bias"] = (shape[0],)
        out[p + "input_layernorm.weight"] = (D,)
        out[p + "post_attention_layernorm.weight"] = (D,)
    out["model.norm.weight"] = (D,)
    if not cfg.get("tie_word_embeddings"):
        out["lm_head.weight"] = (V, D)
    return out


def random_weights(cfg: dict, seed: int = 0, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors, drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        if (name.endswith("layernorm.weight") or name == "model.norm.weight" or
                name.endswith("_norm.weight")):
            return 1.0 + 0.1 * r
        if name.endswith(".bias"):
            return 0.1 * r
        if name == "model.embed_tokens.weight":
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        return r * (init_gain / math.sqrt(shape[1]))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def draw_weights(shapes: "Dict[str, Tuple[int, ...]]", seed: int,
                 scale) -> "OrderedDict[str, torch.Tensor]":
    """One seeded torch.Generator; per tensor in the order of `shapes`, r = N(0, 1) float32 of
    its shape, then scale(name, shape, r, generator) (which may draw more) is the tensor."""
    g = torch.Generator().manual_seed(seed)
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, shape in shapes.items():
        r = torch.randn(shape, generator=g, dtype=torch.float32)
        out[name] = scale(name, shape, r, g)
    return out


# ----------------------------------------------------------------------------------------------
# safetensors, by hand
# ----------------------------------------------------------------------------------------------

def tensor_bytes(t: torch.Tensor, dtype: str) -> bytes:
    """Little-endian bytes of t cast to dtype (torch's round-to-nearest-even casts)."""
    st, td, _ = DTYPES[dtype]
    c = t.detach().to(torch.float32).contiguous().to(td)
    if st == "BF16":
        a = c.view(torch.int16).numpy().view(np.uint16).astype("<u2")
    elif st == "F16":
        a = c.numpy().astype("<f2")
    else:
        a = c.numpy().astype("<f4")
    return np.ascontiguousarray(a).tobytes(order="C")


def write_safetensors(path: str, tensors: "Dict[str, torch.Tensor]", dtype: str) -> int:
    """One shard: sorted names, contiguous data, header padded to 8. Returns data bytes."""
    st = DTYPES[dtype][0]
    header: "OrderedDict[str, object]" = OrderedDict()
    header["__metadata__"] = {"format": "pt"}
    blobs: List[bytes] = []
    off = 0
    for n in sorted(tensors):
        b = tensor_bytes(tensors[n], dtype)
        header[n] = {"dtype": st, "shape": list(tensors[n].shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return off


def read_safetensors_header(path: str) -> Tuple[int, dict]:
    """(N, header dict): the data starts at byte 8 + N. tools/export.py's reader, its errors
    raised as HfLlamaError."""
    try:
        return export_read_safetensors_header(path)
    except ExportError as e:
        raise HfLlamaError(str(e)) from e


def read_safetensors(path: str) -> "OrderedDict[str, Tuple[str, np.ndarray]]":
    """name -> (safetensors dtype, array as stored: F32 float32, F16 float16, BF16 uint16 bits)."""
    n, header = read_safetensors_header(path)
    base, size = 8 + n, os.path.getsize(path)
    out: "OrderedDict[str, Tuple[str, np.ndarray]]" = OrderedDict()
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = info["dtype"]
            if dt not in ST_DTYPES:
                raise HfLlamaError(f"{path}: tensor {name}: dtype {dt} not F32, BF16 or F16")
            np_dtype, esize = ST_DTYPES[dt]
            shape = [int(s) for s in info["shape"]]
            b, e = info["data_offsets"]
            count = int(np.prod(shape)) if shape else 1
            if b < 0 or e - b != esize * count or base + e > size:
                raise HfLlamaError(f"{path}: tensor {name}: bad data_offsets {[b, e]} for shape "
                                   f"{shape} {dt}")
            f.seek(base + b)
            out[name] = (dt, np.frombuffer(f.read(e - b), dtype=np_dtype).reshape(shape))
    return out


def to_float64(dt: str, arr: np.ndarray) -> np.ndarray:
    """A stored array widened exactly to float64."""
    if dt == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return arr.astype(np.float64)


def shard_names(names: List[str], sizes: Dict[str, int], shards: int) -> List[List[str]]:
    """Split names (module order) into `shards` consecutive runs of about equal bytes, none
    empty, as save_pretrained's max_shard_size does (it fills a shard, then starts the next)."""
    if shards < 1 or shards > len(names):
        raise HfLlamaError(f"--shards {shards}: want 1..{len(names)}")
    total = sum(sizes[n] for n in names)
    out: List[List[str]] = [[]]
    acc = 0
    for i, n in enumerate(names):
        left = len(names) - i
        need_new = (len(out) < shards and out[-1] and
                    (acc >= total * len(out) / shards or left == shards - len(out)))
        if need_new:
            out.append([])
        out[-1].append(n)
        acc += sizes[n]
    return out


def write_model_files(out_dir: str, cfg: dict, tensors: "Dict[str, torch.Tensor]",
                      shards: int, names: Optional[List[str]] = None,
                      dtype: Optional[str] = None) -> dict:
    """The shards and model.safetensors.index.json. Returns the index dict. names: every
    tensor in module order (default: tensor_shapes(cfg)); dtype: default cfg["torch_dtype"]."""
    dtype = dtype or cfg["torch_dtype"]
    esize = DTYPES[dtype][2]
    names = list(names) if names is not None else list(tensor_shapes(cfg))
    if sorted(names) != sorted(tensors):
        raise HfLlamaError(f"tensors {sorted(set(names) ^ set(tensors))} missing or extra")
    sizes = {n: tensors[n].numel() * esize for n in names}
    groups = shard_names(names, sizes, shards)
    weight_map: Dict[str, str] = {}
    total = 0
    for k, group in enumerate(groups):
        fname = f"model-{k + 1:05d}-of-{len(groups):05d}.safetensors"
        total += write_safetensors(os.path.join(out_dir, fname),
                                   {n: tensors[n] for n in group}, dtype)
        for n in group:
            weight_map[n] = fname
    index = OrderedDict([("metadata", {"total_size": total}),
                         ("weight_map", OrderedDict(sorted(weight_map.items())))])
    write_json(os.path.join(out_dir, "model.safetensors.index.json"), index)
    return index


def write_json(path: str, obj) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


# ----------------------------------------------------------------------------------------------
# tokenizer
# ----------------------------------------------------------------------------------------------

def train_tokenizer(out_dir: str, vocab_size: int, text_path: str) -> int:
    """Trains a Llama-2-style SentencePiece BPE model (byte fallback, <unk> <s> </s> at 0 1 2,
    identity normalisation, a dummy prefix) on text_path and writes out_dir/tokenizer.model.
    Needs python3-sentencepiece. Deterministic for a given input (one thread, no shuffling).
    Returns the vocabulary size."""
    import sentencepiece as spm  # Debian python3-sentencepiece; only needed here
    if not os.path.isfile(text_path):
        raise HfLlamaError(f"training text {text_path} not found (--text)")
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        # The model file records its trainer_spec, paths included: train on a copy named
        # input.txt into the prefix "tokenizer", both relative to a scratch folder, so the
        # bytes do not depend on where the text or the scratch folder lie.
        shutil.copyfile(text_path, os.path.join(tmp, "input.txt"))
        os.chdir(tmp)
        try:
            _train_in_cwd(spm, vocab_size)
        finally:
            os.chdir(cwd)
        shutil.copyfile(os.path.join(tmp, "tokenizer.model"),
                        os.path.join(out_dir, "tokenizer.model"))
        sp = spm.SentencePieceProcessor(model_file=os.path.join(tmp, "tokenizer.model"))
        return sp.vocab_size()


def _train_in_cwd(spm, vocab_size: int) -> None:
    """SentencePieceTrainer.train with the settings train_tokenizer documents."""
    spm.SentencePieceTrainer.train(
        input="input.txt", model_prefix="tokenizer", model_type="bpe", vocab_size=vocab_size,
        character_coverage=1.0, byte_fallback=True, split_digits=True,
        unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=-1,
        unk_piece="<unk>", bos_piece="<s>", eos_piece="</s>",
        normalization_rule_name="identity", add_dummy_prefix=True,
        remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        max_sentence_length=1 << 16, shuffle_input_sentence=False, num_threads=1,
        minloglevel=2)


def tokenizer_model_vocab_size(path: str) -> int:
    """Pieces in a SentencePiece model file, read from its protobuf without sentencepiece:
    ModelProto field 1 (pieces) is a repeated length-delimited field; count its records."""
    with open(path, "rb") as f:
        buf = f.read()
    pos, count = 0, 0

    def varint(p: int) -> Tuple[int, int]:
        v, shift = 0, 0
        while True:
            b = buf[p]
            p += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return v, p

    while pos < len(buf):
        key, pos = varint(pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = varint(pos)
        elif wire == 1:
            pos += 8
        elif wire == 2:
            ln, pos = varint(pos)
            pos += ln
        elif wire == 5:
            pos += 4
        else:
            raise HfLlamaError(f"{path}: not a SentencePiece model (wire type {wire})")
        if field == 1 and wire == 2:
            count += 1
    return count


def write_tokenizer_config(out_dir: str, max_len: int) -> None:
    """tokenizer_config.json and special_tokens_map.json as LlamaTokenizer writes them."""
    def added(content: str) -> dict:
        return OrderedDict([("content", content), ("lstrip", False), ("normalized", False),
                            ("rstrip", False), ("single_word", False), ("special", True)])
    cfg = OrderedDict([
        ("add_bos_token", True),
        ("add_eos_token", False),
        ("added_tokens_decoder", OrderedDict([(str(UNK_ID), added("<unk>")),
                                              (str(BOS_ID), added("<s>")),
                                              (str(EOS_ID), added("</s>"))])),
        ("bos_token", "<s>"),
        ("clean_up_tokenization_spaces", False),
        ("eos_token", "</s>"),
        ("legacy", False),
        ("model_max_length", max_len),
        ("pad_token", None),
        ("sp_model_kwargs", {}),
        ("spaces_between_special_tokens", False),
        ("tokenizer_class", "LlamaTokenizer"),
        ("unk_token", "<unk>"),
        ("use_default_system_prompt", False),
    ])
    write_json(os.path.join(out_dir, "tokenizer_config.json"), cfg)
    write_json(os.path.join(out_dir, "special_tokens_map.json"),
               OrderedDict([("bos_token", "<s>"), ("eos_token", "</s>"), ("unk_token", "<unk>")]))


def setup_tokenizer(out_dir: str, tokenizer: str, vocab_size: int, text: str,
                    max_len: int) -> int:
    """--tokenizer train (python3-sentencepiece on `text`), none, or a folder holding a
    tokenizer.model to copy; writes the tokenizer files into out_dir. Returns the vocabulary
    size (vocab_size as given for none)."""
    vocab = vocab_size
    if tokenizer == "train":
        vocab = train_tokenizer(out_dir, vocab_size, text)
    elif tokenizer != "none":
        src = os.path.join(tokenizer, "tokenizer.model")
        if not os.path.isfile(src):
            raise HfLlamaError(f"--tokenizer {tokenizer}: no tokenizer.model there")
        if os.path.abspath(src) != os.path.abspath(os.path.join(out_dir, "tokenizer.model")):
            shutil.copyfile(src, os.path.join(out_dir, "tokenizer.model"))
        vocab = tokenizer_model_vocab_size(src)
    if tokenizer != "none":
        write_tokenizer_config(out_dir, max_len)
    return vocab


# ----------------------------------------------------------------------------------------------
# the folder
# ----------------------------------------------------------------------------------------------

def write_hf_llama(out_dir: str, cfg: dict, seed: int = 0, shards: int = 2,
                   init_gain: float = 1.0, logit_gain: float = 4.0) -> dict:
    """config.json, generation_config.json, the shards and the index (tokenizer files are the
    caller's). Returns the index."""
    os.makedirs(out_dir, exist_ok=True)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("_from_model_config", True), ("bos_token_id", cfg["bos_token_id"]),
        ("do_sample", False), ("eos_token_id", cfg["eos_token_id"]),
        ("transformers_version", cfg["transformers_version"])]))
    tensors = random_weights(cfg, seed=seed, init_gain=init_gain, logit_gain=logit_gain)
    return write_model_files(out_dir, cfg, tensors, shards)


def start_folder(out_dir: str, force: bool, tokenizer: str, vocab_size: int, text: str,
                 max_len: int) -> int:
    """Checks out_dir (--force), creates it, writes the tokenizer files (setup_tokenizer).
    Returns the vocabulary size."""
    _check_out_dir(out_dir, force)
    os.makedirs(out_dir, exist_ok=True)
    return setup_tokenizer(out_dir, tokenizer, vocab_size, text, max_len)


def _check_out_dir(out_dir: str, force: bool) -> None:
    if os.path.exists(os.path.join(out_dir, "config.json")) and not force:
        raise HfLlamaError(f"{out_dir} already holds a model (--force to overwrite)")
    if force and os.path.isdir(out_dir):
        for f in os.listdir(out_dir):
            if f.endswith(".safetensors") or f.endswith(".safetensors.tmp"):
                os.remove(os.path.join(out_dir, f))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", default="llama", choices=sorted(FAMILIES),
                    help="LlamaForCausalLM, Qwen2ForCausalLM or Qwen3ForCausalLM")
    ap.add_argument("--tokenizer", default="train",
                    help="train (python3-sentencepiece), none, or a folder to copy "
                         "tokenizer.model from")
    ap.add_argument("--text", default=DEFAULT_TEXT, help="training text for --tokenizer train")
    ap.add_argument("--vocab_size", type=int, default=512)
    ap.add_argument("--hidden_size", type=int, default=96)
    ap.add_argument("--intermediate_size", type=int, default=256)
    ap.add_argument("--num_hidden_layers", type=int, default=3)
    ap.add_argument("--num_attention_heads", type=int, default=4)
    ap.add_argument("--num_key_value_heads", type=int, default=2)
    ap.add_argument("--head_dim", type=int, default=32,
                    help="0: hidden_size / heads (qwen2 needs 0 or that value)")
    ap.add_argument("--rms_norm_eps", type=float, default=1e-5)
    ap.add_argument("--rope_theta", type=float, default=10000.0)
    ap.add_argument("--rope_scaling", default="none")
    ap.add_argument("--max_position_embeddings", type=int, default=2048)
    ap.add_argument("--attention_bias", action="store_true")
    ap.add_argument("--mlp_bias", action="store_true")
    ap.add_argument("--tie_word_embeddings", action="store_true")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--shards", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--init_gain", type=float, default=1.0)
    ap.add_argument("--logit_gain", type=float, default=4.0)
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        vocab = start_folder(a.out, a.force, a.tokenizer, a.vocab_size, a.text,
                             a.max_position_embeddings)
        cfg = make_config(
            vocab, hidden_size=a.hidden_size, intermediate_size=a.intermediate_size,
            num_hidden_layers=a.num_hidden_layers, num_attention_heads=a.num_attention_heads,
            num_key_value_heads=a.num_key_value_heads, head_dim=a.head_dim or None,
            rms_norm_eps=a.rms_norm_eps, rope_theta=a.rope_theta,
            rope_scaling=parse_rope_scaling(a.rope_scaling), attention_bias=a.attention_bias,
            mlp_bias=a.mlp_bias, tie_word_embeddings=a.tie_word_embeddings,
            torch_dtype=a.dtype, max_position_embeddings=a.max_position_embeddings,
            family=a.family)
        index = write_hf_llama(a.out, cfg, seed=a.seed, shards=a.shards,
                               init_gain=a.init_gain, logit_gain=a.logit_gain)
    except HfLlamaError as e:
        print(f"hf_llama.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {vocab}, {len(index['weight_map'])} tensors, "
          f"{index['metadata']['total_size']} bytes in "
          f"{len(set(index['weight_map'].values()))} shard(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
