"""Float64 reference of the gated linear recurrence (kernels/gated_linear.h): GLA's per-key decay
and the per-head scalar decay of RetNet / Mamba-2, in both forms the C++ op runs.

    from flatstate_ref.gated_linear import recurrent, chunked
    o, S = recurrent(q, k, v, g, scale)            # token by token
    o2, S2 = chunked(q, k, v, g, scale, chunk=64)   # chunks aligned to absolute positions

Shapes (one sequence, float64 tensors): q, k [T, Hk, K]; v [T, Hv, V]; g [T, Hv, K] (per key)
or [T, Hv] (per head) log decays <= 0, or None; S [Hv, K, V] (default zeros). Value head h reads
key head h // (Hv // Hk). Per token:  S <- diag(exp(g_t)) S + k_t v_t^T;  o_t = S^T (q_t * scale).
The chunked form, with B_t the cumulative log decay inside the chunk, is
    o_t = (q_t exp(B_t))^T S_0 + sum_{s<=t} (sum_i q_t[i] k_s[i] exp(B_t[i] - B_s[i])) v_s
    S_L = diag(exp(B_L)) S_0 + sum_s (k_s exp(B_L - B_s)) v_s^T
(fla-org/flash-linear-attention fla/ops/gla/naive.py is the recurrent definition matched).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch


def _expand(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: Optional[torch.Tensor]):
    """q, k per value head [T, Hv, K]; g per value head and key [T, Hv, K]."""
    T, Hk, K = q.shape
    Hv = v.shape[1]
    if Hv % Hk != 0:
        raise ValueError(f"{Hv} value heads are not a multiple of {Hk} key heads")
    q = q.repeat_interleave(Hv // Hk, dim=1)
    k = k.repeat_interleave(Hv // Hk, dim=1)
    if g is None:
        g = torch.zeros(T, Hv, K, dtype=q.dtype)
    elif g.dim() == 2:
        g = g.unsqueeze(-1).expand(T, Hv, K)
    return q, k, g


def recurrent(q, k, v, g, scale: float, S: Optional[torch.Tensor] = None,
              pos0: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    del pos0  # the recurrent form has no grid
    q, k, g = _expand(q, k, v, g)
    T, Hv, K = q.shape
    V = v.shape[-1]
    S = torch.zeros(Hv, K, V, dtype=q.dtype) if S is None else S.clone()
    out = torch.zeros(T, Hv, V, dtype=q.dtype)
    for t in range(T):
        S = S * g[t].exp().unsqueeze(-1) + k[t].unsqueeze(-1) * v[t].unsqueeze(-2)
        out[t] = torch.einsum("hk,hkv->hv", q[t] * scale, S)
    return out, S


def chunked(q, k, v, g, scale: float, chunk: int = 64, S: Optional[torch.Tensor] = None,
            pos0: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    q, k, g = _expand(q, k, v, g)
    T, Hv, K = q.shape
    V = v.shape[-1]
    S = torch.zeros(Hv, K, V, dtype=q.dtype) if S is None else S.clone()
    out = torch.zeros(T, Hv, V, dtype=q.dtype)
    t0 = 0
    while t0 < T:
        L = min(T - t0, chunk - (pos0 + t0) % chunk)
        qc, kc, vc = q[t0:t0 + L] * scale, k[t0:t0 + L], v[t0:t0 + L]
        B = g[t0:t0 + L].cumsum(dim=0)                       # [L, Hv, K]
        inter = torch.einsum("thk,hkv->thv", qc * B.exp(), S)
        # pair weights exp(B_t - B_s) per key, s <= t
        diff = B.unsqueeze(1) - B.unsqueeze(0)               # [t, s, Hv, K]
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool)).view(L, L, 1, 1)
        w = torch.where(mask, diff, torch.full_like(diff, float("-inf"))).exp()
        scores = torch.einsum("thk,shk,tshk->tsh", qc, kc, w)
        out[t0:t0 + L] = inter + torch.einsum("tsh,shv->thv", scores, vc)
        BL = B[-1]                                           # [Hv, K]
        S = S * BL.exp().unsqueeze(-1) + torch.einsum(
            "shk,shv->hkv", kc * (BL.unsqueeze(0) - B).exp(), vc)
        t0 += L
    return out, S
