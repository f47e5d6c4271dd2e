"""Float64 reference of fla's hybrid softmax-attention layer (fla/layers/attn.py Attention, read
at fla-org/flash-linear-attention bc3b101d; the spec keys: tools/fla_hybrid.py):

    q = q_proj x (+ bias), k = k_proj x (+ bias), v = v_proj x (+ bias)   [T, H | KV, hd]
    q, k = rope(q), rope(k) at absolute positions (fla RotaryEmbedding(dim=hd, base=rope_theta),
        not interleaved: rotate_half, inv_freq = theta^(-2i / hd))
    o = softmax(q k^T hd^-0.5, causal) v   (flash_attn_func: query head h reads K/V head
        h // (H / KV)), then o_proj (no bias)

The layer's state is its K and V rows so far ({"k": [n, KV, hd], "v": ...}, rotated keys).
"""
from __future__ import annotations

from typing import Dict

import torch

from flatstate_ref.llama import rotate_half

F64 = torch.float64


def new_attn_state(spec: dict) -> dict:
    return {"k": torch.zeros(0, spec["KV"], spec["hd"], dtype=F64),
            "v": torch.zeros(0, spec["KV"], spec["hd"], dtype=F64)}


def _lin(t: Dict[str, torch.Tensor], x: torch.Tensor, name: str) -> torch.Tensor:
    y = x @ t[name + ".weight"].T
    b = t.get(name + ".bias")
    return y if b is None else y + b


def _rope(x: torch.Tensor, positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    ang = positions[:, None].to(F64) * inv_freq[None, :]
    cos = torch.cat([ang.cos()] * 2, -1)[:, None, :]
    sin = torch.cat([ang.sin()] * 2, -1)[:, None, :]
    return x * cos + rotate_half(x) * sin


def fla_attention(t: Dict[str, torch.Tensor], spec: dict, x: torch.Tensor, p: str, st: dict,
                  pos: int) -> torch.Tensor:
    """The layer's output [T, D] for rows x [T, D] at positions pos.. (st updated); p is the
    layer's "model.layers.i.attn." prefix."""
    T, H, KV, hd = x.shape[0], spec["H"], spec["KV"], spec["hd"]
    q = _lin(t, x, p + "q_proj").view(T, H, hd)
    k = _lin(t, x, p + "k_proj").view(T, KV, hd)
    v = _lin(t, x, p + "v_proj").view(T, KV, hd)
    inv_freq = 1.0 / (spec["rope_theta"] ** (torch.arange(0, hd, 2, dtype=F64) / hd))
    positions = torch.arange(pos, pos + T)
    q, k = _rope(q, positions, inv_freq), _rope(k, positions, inv_freq)
    st["k"], st["v"] = torch.cat([st["k"], k]), torch.cat([st["v"], v])
    K_ = st["k"].repeat_interleave(H // KV, 1)
    V_ = st["v"].repeat_interleave(H // KV, 1)
    s = torch.einsum("thd,nhd->htn", q, K_) * hd ** -0.5
    mask = torch.arange(K_.shape[0])[None, :] > (torch.arange(T) + pos)[:, None]
    s = s.masked_fill(mask[None], -float("inf"))
    a = torch.einsum("htn,nhd->thd", torch.softmax(s, -1), V_).reshape(T, H * hd)
    return _lin(t, a, p + "o_proj")
