"""The tensor table of flatstate's own model format, read from engine/arch/flatstate_tensors.json.

The same file is compiled into the C++ engine (engine/arch/flatstate_tensors.h: the loader and the
test model writer read it), so the loader, the test writer and tools/export.py read one table.
The JSON's "_doc" describes its layout. Malformed table data is a programming error: ValueError
naming the entry (tools/tests/test_export.py loads the table for every shipped config).

    tensor_table(cfg)   -> [TableTensor(name, shape, gemm)] in the table's order
    GEMM_SUFFIXES       the per-layer GEMM weights' names after "layers.{i}" (".attn.wqkv.weight",
                        ...): the tensors stored as torch_dtype says; every other tensor is F32

cfg is a ModelConfig (tools/flatstate_ref/config.py) or anything with its fields. Per layer, a
softmax layer is one of the softmax kind, or one marked "softmax" in an optional cfg.layer_types
(the C++ config key; the Python ModelConfig has none, so its layers are all the kind's); a layer
runs the convolution when cfg.has_conv and it is not a softmax layer (C++ layer_has_conv).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, NamedTuple, Optional, Sequence, Tuple

TABLE_PATH = Path(__file__).resolve().parent.parent / "engine" / "arch" / "flatstate_tensors.json"

DIMENSIONS = ("vocab_size", "hidden_size", "num_attention_heads", "head_dim", "intermediate_size",
              "conv_kernel_size", "favor_num_features", "rfa_num_features")
ROLES = ("embed", "attn_norm", "conv", "wqkv", "wo", "decay_logit", "feature_proj",
         "feature_log_scale", "gate_weight", "gate_bias", "mlp_norm", "w1", "w2", "norm",
         "lm_head")
GEMM_ROLES = ("wqkv", "wo", "w1", "w2")
ATTENTION_KINDS = ("softmax", "linear_elu", "cosformer", "cosine", "favor", "gated", "window",
                   "hybrid")
SECTIONS = ("before_layers", "per_layer", "after_layers")


class TableTensor(NamedTuple):
    name: str
    shape: Tuple[int, ...]
    gemm: bool


def _extent(v, at: str) -> Tuple[int, Optional[str]]:
    """(factor, config dimension or None) of one shape entry."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1:
        return v, None
    if not isinstance(v, str):
        raise ValueError(f"{TABLE_PATH}: {at}: a dimension is an integer >= 1 or a string, "
                         f"not {v!r}")
    factor, star, dim = v.rpartition("*")
    if star and (not factor.isdigit() or int(factor) < 1):
        raise ValueError(f"{TABLE_PATH}: {at}: bad factor in {v!r}")
    if dim not in DIMENSIONS:
        raise ValueError(f"{TABLE_PATH}: {at}: unknown dimension {dim!r}")
    return int(factor or 1), dim


def _check_entry(e, at: str, per_layer: bool) -> dict:
    if not isinstance(e, dict):
        raise ValueError(f"{TABLE_PATH}: {at}: not an object")
    allowed = {"name", "role", "shape"} | ({"gemm", "conv", "kinds"} if per_layer else set())
    if set(e) - allowed or not {"name", "role", "shape"} <= set(e):
        raise ValueError(f"{TABLE_PATH}: {at}: keys {sorted(e)}, allowed {sorted(allowed)} "
                         f"(name, role and shape required)")
    if not isinstance(e["name"], str) or ("{i}" in e["name"]) != per_layer:
        raise ValueError(f"{TABLE_PATH}: {at}: name {e['name']!r}: per_layer names hold '{{i}}', "
                         f"the others do not")
    if e["role"] not in ROLES:
        raise ValueError(f"{TABLE_PATH}: {at}: unknown role {e['role']!r}")
    if not isinstance(e["shape"], list) or not e["shape"]:
        raise ValueError(f"{TABLE_PATH}: {at}: shape must be a non-empty list")
    shape = [_extent(d, at) for d in e["shape"]]
    gemm = e.get("gemm", False)
    if gemm is not (e["role"] in GEMM_ROLES) or (gemm and len(shape) != 2):
        raise ValueError(f"{TABLE_PATH}: {at}: gemm is true exactly for roles "
                         f"{', '.join(GEMM_ROLES)}, shape [n, k]")
    if not isinstance(e.get("conv", False), bool):
        raise ValueError(f"{TABLE_PATH}: {at}: conv must be true or false")
    kinds = e.get("kinds", [])
    if "kinds" in e and (not isinstance(kinds, list) or not kinds
                         or any(k not in ATTENTION_KINDS for k in kinds)):
        raise ValueError(f"{TABLE_PATH}: {at}: kinds {kinds!r}: a non-empty list of "
                         f"{', '.join(ATTENTION_KINDS)}")
    return {"name": e["name"], "shape": shape, "gemm": gemm, "conv": e.get("conv", False),
            "kinds": tuple(kinds)}


def load_table(path: Path = TABLE_PATH) -> dict:
    """The table's three sections, each a list of checked entries."""
    with open(path) as f:
        raw = json.load(f)
    if not isinstance(raw, dict) or set(raw) - set(SECTIONS) - {"_doc"} or \
            not set(SECTIONS) <= set(raw):
        raise ValueError(f"{path}: expected an object with {', '.join(SECTIONS)} (and _doc)")
    return {s: [_check_entry(e, f"{s}[{n}]", s == "per_layer") for n, e in enumerate(raw[s])]
            for s in SECTIONS}


TABLE = load_table()
GEMM_SUFFIXES: Tuple[str, ...] = tuple(e["name"].split("{i}", 1)[1]
                                       for e in TABLE["per_layer"] if e["gemm"])


def _softmax_layer(cfg, i: int) -> bool:
    layer_types: Optional[Sequence[str]] = getattr(cfg, "layer_types", None)
    if layer_types and i < len(layer_types) and layer_types[i] == "softmax":
        return True
    return cfg.attention_kind == "softmax"


def _in_layer(e: dict, cfg, i: int) -> bool:
    softmax = _softmax_layer(cfg, i)
    if e["conv"] and (softmax or not cfg.has_conv):
        return False
    return not e["kinds"] or (not softmax and cfg.attention_kind in e["kinds"])


def _tensor(e: dict, cfg, layer: Optional[int]) -> TableTensor:
    name = e["name"] if layer is None else e["name"].replace("{i}", str(layer))
    shape = tuple(f * (getattr(cfg, d) if d else 1) for f, d in e["shape"])
    return TableTensor(name, shape, e["gemm"])


def tensor_table(cfg) -> List[TableTensor]:
    """Every tensor of a model with config cfg, in the table's (the C++ loader's) order."""
    out = [_tensor(e, cfg, None) for e in TABLE["before_layers"]]
    for i in range(cfg.num_hidden_layers):
        out += [_tensor(e, cfg, i) for e in TABLE["per_layer"] if _in_layer(e, cfg, i)]
    out += [_tensor(e, cfg, None) for e in TABLE["after_layers"]]
    return out
