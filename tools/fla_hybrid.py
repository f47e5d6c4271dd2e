"""fla's hybrid softmax-attention layers in its Hugging Face configs (config key "attn"), for the
fla writers (tools/hf_gla.py, hf_gated_deltanet.py, hf_delta_net.py) and references.

Matched upstream (fla-org/flash-linear-attention, read at bc3b101d: fla/models/hybrid.py
normalize_hybrid_attention_config / get_hybrid_attention_spec, fla/layers/attn.py Attention,
fla/modules/rotary.py RotaryEmbedding): attn is null, one spec dict or a list of them; a spec is
{layers (required), num_heads (required), num_kv_heads (num_heads), qkv_bias (false),
window_size (null), rope_theta (10000.)}; a layer sits in at most one spec. Layer i of a spec is
fla's Attention(hidden_size, num_heads, num_kv_heads, qkv_bias, window_size, rope_theta) in
place of the family's mixer, its tensors (module order):

    model.layers.i.attn.q_proj.weight [D, D] (+ .bias [D] with qkv_bias)
    model.layers.i.attn.k_proj.weight [KV, D], .v_proj.weight [KV, D] (+ biases)
    model.layers.i.attn.o_proj.weight [D, D]                  (no bias)

with head_dim hd = D // num_heads, KV = num_kv_heads hd. This project refuses a window_size
(sliding windows over the paged K/V are not implemented) and specs that disagree on anything
but their layers (the engine's softmax layers share one shape).
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import List, Optional, Tuple

from hf_llama import HfLlamaError

SPEC_KEYS = ("layers", "num_heads", "num_kv_heads", "qkv_bias", "window_size", "rope_theta")


def attn_config(layers: List[int], num_heads: int, num_kv_heads: Optional[int] = None,
                qkv_bias: bool = False, rope_theta: float = 10000.0) -> "OrderedDict":
    """One spec as fla's config saves it after normalising (every key present)."""
    return OrderedDict([("layers", list(layers)), ("num_heads", num_heads),
                        ("num_kv_heads", num_kv_heads or num_heads), ("qkv_bias", qkv_bias),
                        ("window_size", None), ("rope_theta", rope_theta)])


def attn_spec(cfg: dict) -> Optional[dict]:
    """The normalised spec (its layers the union of every spec's) or None; raises HfLlamaError
    on what fla rejects or this project does not implement."""
    attn = cfg.get("attn")
    if attn is None:
        return None
    specs = [attn] if isinstance(attn, dict) else attn
    if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
        raise HfLlamaError(f"attn {attn!r}: a spec dict or a list of them")
    L, D = cfg["num_hidden_layers"], cfg["hidden_size"]
    layers: List[int] = []
    shape: Optional[Tuple] = None
    for s in specs:
        for key in ("layers", "num_heads"):
            if key not in s:
                raise HfLlamaError(f"attn: {key} is required")
        for i in s["layers"]:
            if not isinstance(i, int) or not 0 <= i < L or i in layers:
                raise HfLlamaError(f"attn layers: {i!r} out of range or repeated")
            layers.append(i)
        H = s["num_heads"]
        KV = s.get("num_kv_heads") or H
        if H % KV or D % H or (D // H) % 2:
            raise HfLlamaError(f"attn num_heads {H} / num_kv_heads {KV} for hidden_size {D}")
        if s.get("window_size") is not None:
            raise HfLlamaError(f"attn window_size {s['window_size']!r}: null only")
        theta = float(s.get("rope_theta", 10000.0))
        if not (math.isfinite(theta) and theta > 0):
            raise HfLlamaError(f"attn rope_theta {theta!r}")
        this = (H, KV, bool(s.get("qkv_bias", False)), theta)
        if shape is not None and this != shape:
            raise HfLlamaError("attn specs differ in num_heads / num_kv_heads / qkv_bias / "
                               "rope_theta")
        shape = this
    H, KV, bias, theta = shape if shape else (1, 1, False, 10000.0)
    return {"layers": sorted(layers), "H": H, "KV": KV, "hd": D // H, "qkv_bias": bias,
            "rope_theta": theta}


def is_attn_layer(cfg: dict, i: int) -> bool:
    spec = attn_spec(cfg)
    return spec is not None and i in spec["layers"]


def attn_shapes(cfg: dict, i: int) -> "OrderedDict[str, Tuple[int, ...]]":
    """Layer i's Attention tensors in module order (module docstring)."""
    s = attn_spec(cfg)
    D, KV = cfg["hidden_size"], s["KV"] * s["hd"]
    a = f"model.layers.{i}.attn."
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    for n, rows in (("q_proj", D), ("k_proj", KV), ("v_proj", KV)):
        out[a + n + ".weight"] = (rows, D)
        if s["qkv_bias"]:
            out[a + n + ".bias"] = (rows,)
    out[a + "o_proj.weight"] = (D, D)
    return out


def add_attn_args(ap) -> None:
    """The writers' hybrid flags: --attn_layers 1,3 --attn_num_heads H [--attn_num_kv_heads KV]
    [--attn_qkv_bias] [--attn_rope_theta 10000]."""
    ap.add_argument("--attn_layers", default="", help="e.g. 1,3: fla softmax layers (hybrid)")
    ap.add_argument("--attn_num_heads", type=int, default=2)
    ap.add_argument("--attn_num_kv_heads", type=int, default=None)
    ap.add_argument("--attn_qkv_bias", action="store_true")
    ap.add_argument("--attn_rope_theta", type=float, default=10000.0)


def attn_from_args(a) -> Optional["OrderedDict"]:
    if not a.attn_layers:
        return None
    return attn_config([int(x) for x in a.attn_layers.split(",")], a.attn_num_heads,
                       a.attn_num_kv_heads, a.attn_qkv_bias, a.attn_rope_theta)
