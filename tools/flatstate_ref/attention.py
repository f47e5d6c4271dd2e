"""The attention block of every kind: projections, token-shift convolution, RoPE and the per-kind
cores (linear.py, gated.py, window.py) in their three forms."""
from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import gated as _gated
from .config import ModelConfig
from .gated import (gate_logs, gated_chunked, gated_parallel, gated_recurrent,
                    rfa_features)
from .linear import feature_map, linear_chunked, linear_parallel, linear_recurrent
from .window import window_chunked, window_parallel, window_recurrent


def rope(x, pos, theta: float):
    """Rotate-half RoPE. x: (T, H, hd)."""
    hd = x.shape[-1]
    half = hd // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2.0 / hd)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]                      # (T, half)
    c = torch.cos(ang).to(x.dtype)[:, None, :]
    s = torch.sin(ang).to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def gate_bias_init(H: int) -> torch.Tensor:
    """Initial gate biases: g = sigmoid(b) from 0.73 (b = 1) to 0.99 (b = 5), spread over heads
    so that the heads start with memories of about 4 to 150 tokens."""
    return torch.linspace(1.0, 5.0, H) if H > 1 else torch.full((1,), 3.0)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_seed: int):
        super().__init__()
        self.cfg = cfg
        self.lin_kind, self.win = cfg.layer_branches(layer_seed)
        D, H = cfg.hidden_size, cfg.num_attention_heads
        self.wqkv = nn.Linear(D, 3 * D, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        if cfg.has_conv:
            w = torch.zeros(D, cfg.conv_kernel_size)
            w[:, -1] = 1.0                                  # starts as identity
            self.conv = nn.Parameter(w)
        else:
            self.conv = None
        if cfg.attention_kind == "cosine":
            self.decay_logit = nn.Parameter(torch.full((H,), 0.5))
        if cfg.attention_kind in ("favor", "gated"):
            g = torch.Generator().manual_seed(1000 + layer_seed)
            nf = cfg.favor_num_features if cfg.attention_kind == "favor" else cfg.rfa_num_features
            self.register_buffer("feature_proj", _orthogonal_features(nf, cfg.head_dim, g))
        if cfg.attention_kind == "gated":
            self.feature_log_scale = nn.Parameter(torch.zeros(H))
            self.gate = nn.Linear(D, H, bias=True)
            with torch.no_grad():
                self.gate.bias.copy_(gate_bias_init(H))

    def conv_apply(self, h, window: Optional[torch.Tensor]):
        """Causal depthwise conv over time. h (T, D); window (K-1, D) of earlier inputs."""
        K = self.cfg.conv_kernel_size
        if window is None:
            window = torch.zeros(K - 1, h.shape[1], dtype=h.dtype)
        full = torch.cat([window, h], 0)                                     # (K-1+T, D)
        T = h.shape[0]
        out = torch.zeros_like(h)
        for i in range(K):
            out = out + full[i:i + T] * self.conv[:, i].to(h.dtype)
        return out, full[-(K - 1):] if K > 1 else window

    def _gated_inputs(self, h, q, k):
        """-> phi(q), phi(k), log g, log(1 - g); h (..., D), q, k (..., H, hd)."""
        fq = rfa_features(q, self.feature_proj, self.feature_log_scale)
        fk = rfa_features(k, self.feature_proj, self.feature_log_scale)
        a = F.linear(h, self.gate.weight.to(h.dtype), self.gate.bias.to(h.dtype))
        lg, la = gate_logs(a)
        return fq, fk, lg, la

    def forward(self, h, pos, state=None, mode="parallel"):
        """h (T, D) one sequence (no batch dim, reference clarity over speed); pos (T,) absolute
        positions; state: dict for this layer or None (fresh). Returns (out, new_state)."""
        cfg = self.cfg
        T, D = h.shape
        H, hd = cfg.num_attention_heads, cfg.head_dim
        state = dict(state) if state is not None else {}
        if mode not in ("parallel", "recurrent", "chunked"):
            raise ValueError(mode)
        if self.conv is not None:
            h, state["conv"] = self.conv_apply(h, state.get("conv"))
        qkv = F.linear(h, self.wqkv.weight.to(h.dtype)).view(T, 3, H, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        if cfg.attention_kind == "softmax":
            q, k = rope(q, pos, cfg.rope_theta), rope(k, pos, cfg.rope_theta)
            kc = torch.cat([state["k"], k], 0) if "k" in state else k
            vc = torch.cat([state["v"], v], 0) if "v" in state else v
            state["k"], state["v"] = kc, vc
            P = kc.shape[0]
            scores = torch.einsum("ihd,jhd->hij", q, kc) / math.sqrt(hd)
            qpos = pos[:, None]
            kpos = torch.arange(P)[None, :]
            scores = scores.masked_fill(~(kpos <= qpos)[None], float("-inf"))
            o = torch.einsum("hij,jhd->ihd", torch.softmax(scores, -1), vc)
            return F.linear(o.reshape(T, D), self.wo.weight.to(h.dtype)), state
        o = torch.zeros(T, H, hd, dtype=h.dtype)
        if self.lin_kind == "gated":
            fq, fk, lg, la = self._gated_inputs(h, q, k)
            lin, eps = _clone(state.get("lin")), _gated.GATED_DEN_MIN
            if mode == "parallel":
                assert lin is None, "parallel form starts from an empty state"
                o = o + gated_parallel(fq, fk, lg, la, v, eps)
            elif mode == "recurrent":
                r, lin = gated_recurrent(fq, fk, lg, la, v, eps, lin)
                o = o + r
            else:
                r, lin = gated_chunked(fq, fk, lg, la, v, eps, cfg.chunk_size, lin)
                o = o + r
            state["lin"] = lin
        elif self.lin_kind is not None:
            fq, fk, m, vv, use_den = feature_map(
                cfg, q, k, v, pos, getattr(self, "decay_logit", None),
                getattr(self, "feature_proj", None), kind=self.lin_kind)
            eps = cfg.linear_eps
            lin = _clone(state.get("lin"))
            if mode == "parallel":
                assert lin is None, "parallel form starts from an empty state"
                o = o + linear_parallel(fq, fk, m, vv, use_den, eps)
            elif mode == "recurrent":
                r, lin = linear_recurrent(fq, fk, m, vv, use_den, eps, lin)
                o = o + r
            else:
                r, lin = linear_chunked(fq, fk, m, vv, use_den, eps, cfg.chunk_size, lin)
                o = o + r
            state["lin"] = lin
        if self.win:
            qr, kr = rope(q, pos, cfg.rope_theta), rope(k, pos, cfg.rope_theta)
            ring, W, p0 = _clone(state.get("ring")), cfg.window_size, int(pos[0])
            if mode == "parallel":
                assert ring is None and p0 == 0, "parallel form starts from an empty state"
                o = o + window_parallel(qr, kr, v, W)
                ring = _ring_from_sequence(kr, v, W)
            elif mode == "recurrent":
                r, ring = window_recurrent(qr, kr, v, p0, W, ring)
                o = o + r
            else:
                r, ring = window_chunked(qr, kr, v, p0, W, cfg.chunk_size, ring)
                o = o + r
            state["ring"] = ring
        return F.linear(o.reshape(T, D), self.wo.weight.to(h.dtype)), state

    def forward_batched(self, h):
        """Training path: h (B, T, D), parallel form, fresh state."""
        cfg = self.cfg
        B, T, D = h.shape
        H, hd = cfg.num_attention_heads, cfg.head_dim
        pos = torch.arange(T)
        if self.conv is not None:
            K = cfg.conv_kernel_size
            hp = F.pad(h, (0, 0, K - 1, 0))
            h = sum(hp[:, i:i + T] * self.conv[:, i] for i in range(K))
        qkv = self.wqkv(h).view(B, T, 3, H, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]

        def roped(x):
            return rope(x.reshape(B * T, H, hd), pos.repeat(B), cfg.rope_theta).view(B, T, H, hd)

        if cfg.attention_kind == "softmax":
            q, k = roped(q), roped(k)
            o = _sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
            return self.wo(o.reshape(B, T, D))
        o = 0
        if self.lin_kind == "gated":
            fq, fk, lg, la = self._gated_inputs(h, q, k)
            o = o + gated_parallel(fq, fk, lg, la, v, _gated.GATED_DEN_MIN)
        elif self.lin_kind is not None:
            fq, fk, m, vv, use_den = feature_map(
                cfg, q.reshape(B * T, H, hd), k.reshape(B * T, H, hd),
                v.reshape(B * T, H, hd), pos.repeat(B), getattr(self, "decay_logit", None),
                getattr(self, "feature_proj", None), kind=self.lin_kind)
            o = o + linear_parallel(fq.view(B, T, H, -1), fk.view(B, T, H, -1),
                                    m.view(B, T, H), vv.view(B, T, H, hd), use_den,
                                    cfg.linear_eps)
        if self.win:
            o = o + window_parallel(roped(q), roped(k), v, cfg.window_size)
        return self.wo(o.reshape(B, T, D))


def _ring_from_sequence(k, v, W: int):
    """The ring after a parallel pass over positions 0 .. T-1 (slot p mod W)."""
    T, H, hd = k.shape
    ring = {"k": torch.zeros(W, H, hd, dtype=k.dtype), "v": torch.zeros(W, H, hd, dtype=k.dtype)}
    last = torch.arange(max(0, T - W), T)
    ring["k"][last % W] = k[last]
    ring["v"][last % W] = v[last]
    return ring


def _sdpa(q, k, v):
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
    return torch.softmax(s, -1) @ v


def _clone(st):
    return None if st is None else {k: v.clone() for k, v in st.items()}


def _orthogonal_features(nf: int, d: int, g: torch.Generator) -> torch.Tensor:
    """Performer's orthogonal random features: blocks of d orthogonal rows, norms ~ chi(d)."""
    blocks, left = [], nf
    while left > 0:
        qm, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
        blocks.append(qm.t()[:min(d, left)])
        left -= d
    w = torch.cat(blocks, 0)
    norms = torch.randn(nf, d, generator=g).norm(dim=1, keepdim=True)
    return (w * norms).contiguous()
