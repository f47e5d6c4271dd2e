"""`gated`: Random Feature Attention with a data-dependent gate (RFA-Gate, Peng et al. 2021).

Per head h and token t (x_t the layer's normalised, convolved attention input):

    a_t   = w_g[h] . x_t + b_g[h]                      gate pre-activation (attn.gate)
    g_t   = sigmoid(a_t),   1 - g_t = sigmoid(-a_t)    (never computed as 1 - sigmoid(a_t))
    phi(x) = sqrt(1/R) [sin(u), cos(u)],   u = exp(l_h) * W (x / max(|x|, 1e-6))
             W (R, hd) the fixed random projection (attn.feature_proj), l_h a learned log
             scale per head (attn.feature_log_scale); phi(q).phi(k) estimates the Gaussian
             kernel exp(-exp(2 l_h) |q^ - k^|^2 / 2) of the unit vectors q^, k^.
    S_t = g_t S_{t-1} + (1 - g_t) phi(k_t) v_t^T       (F x hd per head, F = 2R)
    z_t = g_t z_{t-1} + (1 - g_t) phi(k_t)
    n_t = g_t n_{t-1} + (1 - g_t)                      the weight mass, = 1 - prod_{l<=t} g_l
    o_t = phi(q_t)^T S_t / max(phi(q_t) . z_t, eps * n_t)      eps = GATED_DEN_MIN

The random features are signed, so phi(q).z can be small or negative; the floor keeps the
division finite.  It is relative to the mass n_t (the sum of the weights of all keys so far):
phi(q).z / n_t is a weighted mean of kernel estimates in [-1, 1], whereas phi(q).z itself is as
small as 1 - g_0 at the first token, so an absolute floor would bias every early token of a
slowly decaying head.
Key j is seen from query i >= j with weight (1 - g_j) prod_{l=j+1..i} g_l
= exp(la_j + c_i - c_j), c the cumulative sum of the log gates lg = logsigmoid(a) and
la = logsigmoid(-a): every exponent is <= 0, so the chunked form (cumulative log gates within a
chunk, as GLA / fla chunk gated recurrences) never overflows.  State: S (H, F, hd), z (H, F),
n (H,) ("mass").
"""
from __future__ import annotations

from typing import Dict

import torch
import torch.nn.functional as F

# Floor of the denominator phi(q).z (the features are signed; see the module docstring).
GATED_DEN_MIN = 1e-2


def rfa_features(x, proj, log_scale):
    """x (..., T, H, hd); proj (R, hd); log_scale (H,) -> (..., T, H, 2R)."""
    xn = x / torch.clamp(x.norm(dim=-1, keepdim=True), min=1e-6)
    u = torch.einsum("...hd,rd->...hr", xn, proj.to(x.dtype))
    u = u * torch.exp(log_scale.to(x.dtype))[:, None]
    R = proj.shape[0]
    return torch.cat([torch.sin(u), torch.cos(u)], -1) * R ** -0.5


def gate_logs(a):
    """a (..., T, H) gate pre-activations -> (log g, log(1 - g)), both <= 0."""
    return F.logsigmoid(a), F.logsigmoid(-a)


def gated_empty_state(H: int, Fd: int, Dv: int, dtype=torch.float32) -> Dict[str, torch.Tensor]:
    return {"S": torch.zeros(H, Fd, Dv, dtype=dtype), "z": torch.zeros(H, Fd, dtype=dtype),
            "mass": torch.zeros(H, dtype=dtype)}


def _divide(num, den, mass, eps):
    return num / torch.maximum(den, eps * mass)[..., None]


def gated_parallel(fq, fk, lg, la, v, eps: float):
    """Masked quadratic form from an empty state. fq, fk (..., T, H, F); lg, la (..., T, H);
    v (..., T, H, Dv)."""
    T = fq.shape[-3]
    c = torch.cumsum(lg, dim=-2).transpose(-1, -2)                       # (..., H, T)
    lat = la.transpose(-1, -2)
    expo = c[..., :, None] - c[..., None, :] + lat[..., None, :]          # (..., H, i, j)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    w = torch.exp(torch.where(mask, expo, torch.full((), -float("inf"), dtype=fq.dtype)))
    a = torch.einsum("...ihf,...jhf->...hij", fq, fk) * w
    num = torch.einsum("...hij,...jhd->...ihd", a, v)
    den = a.sum(-1).transpose(-1, -2)                                     # (..., T, H)
    return _divide(num, den, w.sum(-1).transpose(-1, -2), eps)


def gated_recurrent_step(state, fq, fk, lg, la, v, eps: float):
    """One token. fq, fk (H, F); lg, la (H,); v (H, Dv). Updates state; returns (H, Dv)."""
    g, og = torch.exp(lg), torch.exp(la)
    kw = fk * og[:, None]
    state["S"] = state["S"] * g[:, None, None] + kw[:, :, None] * v[:, None, :]
    state["z"] = state["z"] * g[:, None] + kw
    state["mass"] = state["mass"] * g + og
    num = torch.einsum("hf,hfd->hd", fq, state["S"])
    den = (fq * state["z"]).sum(-1)
    return _divide(num, den, state["mass"], eps)


def gated_recurrent(fq, fk, lg, la, v, eps, state=None):
    H, Fd, Dv = fq.shape[1], fq.shape[2], v.shape[2]
    if state is None:
        state = gated_empty_state(H, Fd, Dv, fq.dtype)
    outs = [gated_recurrent_step(state, fq[t], fk[t], lg[t], la[t], v[t], eps)
            for t in range(fq.shape[0])]
    return torch.stack(outs, 0), state


def gated_chunked(fq, fk, lg, la, v, eps, chunk: int, state=None):
    """Chunks of `chunk` tokens: inter-chunk term from the carried state scaled by exp(c_i),
    intra-chunk masked product with weights exp(c_i - c_j + la_j), then the state update
    S <- exp(c_L) S + sum_j exp(c_L - c_j + la_j) phi(k_j) v_j^T (z, mass likewise).
    c: cumulative log gate within the chunk (inclusive)."""
    T, H, Fd = fq.shape
    Dv = v.shape[2]
    if state is None:
        state = gated_empty_state(H, Fd, Dv, fq.dtype)
    outs = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        q, k, vv = fq[s:e], fk[s:e], v[s:e]
        L = e - s
        c = torch.cumsum(lg[s:e], 0)                                      # (L, H)
        dec = torch.exp(c)                                                # (L, H), <= 1
        num = torch.einsum("ihf,hfd->ihd", q, state["S"]) * dec[..., None]
        den = (q * state["z"][None]).sum(-1) * dec
        mass = state["mass"][None] * dec
        expo = c.t()[:, :, None] - c.t()[:, None, :] + la[s:e].t()[:, None, :]   # (H, i, j)
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
        w = torch.exp(torch.where(mask, expo, torch.full((), -float("inf"), dtype=fq.dtype)))
        a = torch.einsum("ihf,jhf->hij", q, k) * w
        num = num + torch.einsum("hij,jhd->ihd", a, vv)
        den = den + a.sum(-1).t()
        mass = mass + w.sum(-1).t()
        outs.append(_divide(num, den, mass, eps))
        wl = torch.exp(c[-1][None, :] - c + la[s:e])                      # (L, H)
        kw = k * wl[..., None]                                            # (L, H, F)
        last = torch.exp(c[-1])                                           # (H,)
        state["S"] = state["S"] * last[:, None, None] + torch.einsum("jhf,jhd->hfd", kw, vv)
        state["z"] = state["z"] * last[:, None] + kw.sum(0)
        state["mass"] = state["mass"] * last + wl.sum(0)
    return torch.cat(outs, 0), state
