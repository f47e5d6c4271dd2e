"""The shared linear-attention core (linear_elu, cosformer, cosine, favor and the linear branch of
hybrid): feature maps and the three forms (parallel, recurrent, chunked) of one computation."""
from __future__ import annotations

import math
from typing import Dict

import torch
import torch.nn.functional as F

from .config import ModelConfig


# ----------------------------------------------------------------------------------------------
# The linear-attention core: three forms of one computation.
#
# Inputs per head (T tokens):  fq (T, H, F)  query features,  fk (T, H, F) key features already
# divided by exp(m_j),  m (T, H) the per-key log stabiliser (zeros for every kind but favor),
# v (T, H, Dv).  Key j seen from row i >= j weighs fk_j * exp(m_j - M_i), M_i = max_{j<=i} m_j.
# Output o_i = num_i / (den_i + eps) if use_den else num_i.
# State: S (H, F, Dv), z (H, F), M (H,)  -- all relative to the running max M.
# ----------------------------------------------------------------------------------------------

def empty_state(H: int, Fd: int, Dv: int, dtype=torch.float32) -> Dict[str, torch.Tensor]:
    return {"S": torch.zeros(H, Fd, Dv, dtype=dtype), "z": torch.zeros(H, Fd, dtype=dtype),
            "M": torch.full((H,), -math.inf, dtype=dtype)}


def _decay(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """exp(a - b) with exp(-inf - x) = 0 (b is finite whenever it is used)."""
    return torch.exp(a - b)


def linear_parallel(fq, fk, m, v, use_den: bool, eps: float):
    """Masked quadratic form. fq, fk (..., T, H, F); m (..., T, H); v (..., T, H, Dv)."""
    T = fq.shape[-3]
    Mi = torch.cummax(m, dim=-2).values                                  # (..., T, H)
    scores = torch.einsum("...ihf,...jhf->...hij", fq, fk)               # (..., H, T, T)
    mt, Mt = m.transpose(-1, -2), Mi.transpose(-1, -2)                   # (..., H, T)
    w = torch.exp(mt[..., None, :] - Mt[..., :, None])                   # (..., H, i, j)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    a = torch.where(mask, scores * w, torch.zeros((), dtype=fq.dtype))
    num = torch.einsum("...hij,...jhd->...ihd", a, v)
    if not use_den:
        return num
    den = a.sum(-1).transpose(-1, -2)                                     # (..., T, H)
    return num / (den[..., None] + eps)


def linear_recurrent_step(state, fq, fk, m, v, use_den: bool, eps: float):
    """One token. fq, fk (H, F); m (H,); v (H, Dv). Updates state in place; returns (H, Dv)."""
    M_new = torch.maximum(state["M"], m)
    scale = _decay(state["M"], M_new)
    kw = fk * torch.exp(m - M_new)[:, None]
    state["S"] = state["S"] * scale[:, None, None] + kw[:, :, None] * v[:, None, :]
    state["z"] = state["z"] * scale[:, None] + kw
    state["M"] = M_new
    num = torch.einsum("hf,hfd->hd", fq, state["S"])
    if not use_den:
        return num
    den = (fq * state["z"]).sum(-1)
    return num / (den[:, None] + eps)


def linear_recurrent(fq, fk, m, v, use_den, eps, state=None):
    H, Fd, Dv = fq.shape[1], fq.shape[2], v.shape[2]
    if state is None:
        state = empty_state(H, Fd, Dv, fq.dtype)
    outs = [linear_recurrent_step(state, fq[t], fk[t], m[t], v[t], use_den, eps)
            for t in range(fq.shape[0])]
    return torch.stack(outs, 0), state


def linear_chunked(fq, fk, m, v, use_den, eps, chunk: int, state=None):
    T, H, Fd = fq.shape
    Dv = v.shape[2]
    if state is None:
        state = empty_state(H, Fd, Dv, fq.dtype)
    outs = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        q, k, mm, vv = fq[s:e], fk[s:e], m[s:e], v[s:e]
        L = e - s
        Mi = torch.maximum(torch.cummax(mm, 0).values, state["M"][None, :])   # (L, H)
        inter = _decay(state["M"][None, :], Mi)                                # (L, H)
        num = torch.einsum("ihf,hfd->ihd", q, state["S"]) * inter[..., None]
        den = (q * state["z"][None]).sum(-1) * inter
        scores = torch.einsum("ihf,jhf->hij", q, k)
        w = torch.exp(mm.t()[:, None, :] - Mi.t()[:, :, None])
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
        a = torch.where(mask, scores * w, torch.zeros((), dtype=fq.dtype))
        num = num + torch.einsum("hij,jhd->ihd", a, vv)
        den = den + a.sum(-1).t()
        outs.append(num / (den[..., None] + eps) if use_den else num)
        M_last = Mi[-1]
        kw = k * torch.exp(mm - M_last[None, :])[..., None]                   # (L, H, F)
        scale = _decay(state["M"], M_last)
        state["S"] = state["S"] * scale[:, None, None] + torch.einsum("jhf,jhd->hfd", kw, vv)
        state["z"] = state["z"] * scale[:, None] + kw.sum(0)
        state["M"] = M_last
    return torch.cat(outs, 0), state


# ----------------------------------------------------------------------------------------------
# Feature maps: (q, k, v, positions) -> (fq, fk, m, v', use_den)
# ----------------------------------------------------------------------------------------------

def feature_map(cfg: ModelConfig, q, k, v, pos, cos_m=None, favor_w=None, kind=None):
    """q, k, v: (T, H, hd); pos: (T,) 0-based absolute positions (int64).  kind: the feature map
    (default cfg.attention_kind; hybrid passes "linear_elu")."""
    kind = kind or cfg.attention_kind
    zeros_m = torch.zeros(q.shape[0], q.shape[1], dtype=q.dtype)
    if kind == "linear_elu":
        return F.elu(q) + 1, F.elu(k) + 1, zeros_m, v, True
    if kind == "cosformer":
        a = math.pi / (2 * cfg.cosformer_horizon)
        ang = (pos.to(q.dtype) * a)[:, None, None]
        c, s = torch.cos(ang), torch.sin(ang)
        rq, rk = F.relu(q), F.relu(k)
        return (torch.cat([rq * c, rq * s], -1), torch.cat([rk * c, rk * s], -1),
                zeros_m, v, True)
    if kind == "cosine":
        qn = q / torch.clamp(q.norm(dim=-1, keepdim=True), min=1e-6)
        kn = k / torch.clamp(k.norm(dim=-1, keepdim=True), min=1e-6)
        t = (pos + 1).to(q.dtype)[:, None]                                   # (T, 1)
        scale = torch.pow(t, -torch.sigmoid(cos_m.to(q.dtype))[None, :])     # (T, H)
        return qn, kn, zeros_m, v * scale[..., None], False
    if kind == "favor":
        hd = q.shape[-1]
        w = favor_w.to(q.dtype)                                              # (F, hd)
        qs, ks = q * hd ** -0.25, k * hd ** -0.25
        lq = torch.einsum("thd,fd->thf", qs, w) - 0.5 * (qs * qs).sum(-1, keepdim=True)
        lk = torch.einsum("thd,fd->thf", ks, w) - 0.5 * (ks * ks).sum(-1, keepdim=True)
        fq = torch.exp(lq - lq.max(-1, keepdim=True).values)
        mk = lk.max(-1).values                                               # (T, H)
        fk = torch.exp(lk - mk[..., None])
        return fq, fk, mk, v, True
    raise ValueError(kind)
