"""The gated delta rule in float64 torch: recurrent (token by token) and chunked (WY / UT form).

Shapes (one sequence, no batch): q, k [T, Hk, dk]; v [T, Hv, dv]; g, beta [T, Hv]; state
[Hv, dk, dv] (float64; zeros when None). Hv must be a multiple of Hk: value head h reads key head
h // (Hv / Hk) (transformers' repeat_interleave over dim 2, the grouped order of the Qwen3.5 /
Qwen3-Next checkpoints).

Per value head, per token t (the upstream definition: transformers
models/qwen3_next/modular_qwen3_next.py @ 043bb8dd, torch_recurrent_gated_delta_rule and
torch_chunk_gated_delta_rule, which Qwen3.5 imports; fla's gated_delta_rule/naive.py was not
in the index this was written from):

    l2 (optional, use_qk_l2norm_in_kernel):  q <- q / sqrt(sum q^2 + 1e-6), k likewise
    q <- q * dk^-0.5
    S <- exp(g_t) S                                   (g_t <= 0, a log decay)
    u_t = beta_t (v_t - S^T k_t)                      (the delta: what S predicts for k_t)
    S <- S + k_t u_t^T
    o_t = S^T q_t                                     [dv]

Chunked form (chunk C = 64, chunk boundaries on the absolute grid: a call starting at
position `start` first runs up to the next multiple of C, so splitting a sequence at multiples
of C, or anywhere, reproduces the same chunks as one call on the absolute grid). Inside a chunk
with S0 the state before it and G_t = sum_{s<=t} g_s (cumulated inside the chunk):

    A[t, s] = beta_t exp(G_t - G_s) (k_t . k_s)        s < t, else 0
    T = (I + A)^-1                                    (unit lower triangular: the UT transform)
    W = T (beta exp(G) * K),  U0 = T (beta * V)       (the WY representation)
    U = U0 - W S0                                     rows u_t of the recurrence
    o_t = exp(G_t) q_t^T S0 + sum_{s<=t} exp(G_t - G_s) (q_t . k_s) u_s
    S_end = exp(G_C) S0 + sum_s exp(G_C - G_s) k_s u_s^T
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

F64 = torch.float64
L2_EPS = 1e-6  # transformers l2norm / fla l2norm_fwd eps
CHUNK = 64


def l2norm(x: torch.Tensor, eps: float = L2_EPS) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (eps inside the root, as upstream)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _prepare(q, k, v, g, beta, use_l2norm: bool):
    """float64, grouped key heads expanded to the value heads, q scaled; returns head-major
    [Hv, T, *] tensors."""
    T, Hk, dk = q.shape
    Hv = v.shape[1]
    if Hv % Hk or k.shape != q.shape or v.shape[0] != T or g.shape != (T, Hv) or \
            beta.shape != (T, Hv):
        raise ValueError(f"shapes q {tuple(q.shape)} k {tuple(k.shape)} v {tuple(v.shape)} "
                         f"g {tuple(g.shape)} beta {tuple(beta.shape)}")
    q, k, v, g, beta = (x.to(F64) for x in (q, k, v, g, beta))
    if use_l2norm:
        q, k = l2norm(q), l2norm(k)
    if Hv != Hk:
        q = q.repeat_interleave(Hv // Hk, dim=1)
        k = k.repeat_interleave(Hv // Hk, dim=1)
    q = q * dk ** -0.5
    return (q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), g.transpose(0, 1),
            beta.transpose(0, 1))


def _state0(state: Optional[torch.Tensor], Hv: int, dk: int, dv: int) -> torch.Tensor:
    if state is None:
        return torch.zeros(Hv, dk, dv, dtype=F64)
    if state.shape != (Hv, dk, dv):
        raise ValueError(f"state {tuple(state.shape)}: want {(Hv, dk, dv)}")
    return state.to(F64).clone()


def gated_delta_recurrent(q, k, v, g, beta, state: Optional[torch.Tensor] = None,
                          use_l2norm: bool = True) -> Tuple[torch.Tensor, torch.Tensor]:
    """Token by token. Returns (o [T, Hv, dv], state [Hv, dk, dv]), float64."""
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_l2norm)
    Hv, T, dk = k.shape
    dv = v.shape[-1]
    S = _state0(state, Hv, dk, dv)
    out = torch.zeros(Hv, T, dv, dtype=F64)
    for t in range(T):
        S = S * torch.exp(g[:, t])[:, None, None]
        pred = torch.einsum("hkv,hk->hv", S, k[:, t])
        u = beta[:, t, None] * (v[:, t] - pred)
        S = S + k[:, t, :, None] * u[:, None, :]
        out[:, t] = torch.einsum("hkv,hk->hv", S, q[:, t])
    return out.transpose(0, 1).contiguous(), S


def _chunk(q, k, v, g, beta, S0):
    """One chunk, head-major [..., C, *] inputs (any leading dims: [Hv] here, [B, Hv] in
    tools/train_gated_deltanet.py) in their own dtype (module docstring)."""
    C = k.shape[-2]
    G = torch.cumsum(g, dim=-1)                                     # [..., C]
    diff = G[..., :, None] - G[..., None, :]                        # G_t - G_s
    causal = torch.ones(C, C, dtype=torch.bool).tril()              # s <= t
    decay = torch.where(causal, diff, torch.full_like(diff, -float("inf"))).exp()
    strict = torch.ones(C, C, dtype=torch.bool).tril(-1)
    A = beta[..., :, None] * decay * (k @ k.transpose(-1, -2)) * strict
    eye = torch.eye(C, dtype=k.dtype).expand_as(A)
    rhs = torch.cat([beta[..., None] * torch.exp(G)[..., None] * k, beta[..., None] * v], -1)
    sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    dk = k.shape[-1]
    W, U0 = sol[..., :dk], sol[..., dk:]
    U = U0 - W @ S0                                                 # [..., C, dv]
    o = torch.exp(G)[..., None] * (q @ S0) + ((q @ k.transpose(-1, -2)) * decay) @ U
    last = torch.exp(G[..., -1:] - G)                               # exp(G_C - G_s) [..., C]
    S = torch.exp(G[..., -1])[..., None, None] * S0 + (k * last[..., None]).transpose(-1, -2) @ U
    return o, S


def gated_delta_chunked(q, k, v, g, beta, state: Optional[torch.Tensor] = None,
                        use_l2norm: bool = True, chunk: int = CHUNK,
                        start: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Chunked WY/UT form on the absolute chunk grid: the call's first token sits at absolute
    position `start`. Returns (o [T, Hv, dv], state [Hv, dk, dv]), float64."""
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_l2norm)
    Hv, T, dk = k.shape
    dv = v.shape[-1]
    S = _state0(state, Hv, dk, dv)
    outs = []
    b = 0
    while b < T:
        e = min(T, b + chunk - (start + b) % chunk)
        o, S = _chunk(q[:, b:e], k[:, b:e], v[:, b:e], g[:, b:e], beta[:, b:e], S)
        outs.append(o)
        b = e
    out = torch.cat(outs, dim=1) if outs else torch.zeros(Hv, 0, dv, dtype=F64)
    return out.transpose(0, 1).contiguous(), S
