"""Sliding-window softmax attention (Longformer's local attention, causal): the token at absolute
position p attends to positions max(0, p - W + 1) .. p (itself included), W = window_size.

q and k arrive already rotated by RoPE at their absolute positions.  The decode state is a ring
of W keys and W values per layer: the key/value of position p lives in slot p mod W, so the
slots holding valid entries and their order follow from the session position alone (docs/kinds.md).

Three forms:  parallel (banded mask over the whole sequence, empty state), recurrent (token by
token through the ring), chunked (each chunk's queries against the ring's last min(P, W) keys
plus the chunk's own keys, banded mask, then the chunk's keys written into the ring).
"""
from __future__ import annotations

import math
from typing import Dict

import torch


def window_empty_state(W: int, H: int, hd: int, dtype=torch.float32) -> Dict[str, torch.Tensor]:
    return {"k": torch.zeros(W, H, hd, dtype=dtype), "v": torch.zeros(W, H, hd, dtype=dtype)}


def _band(qpos, kpos, W: int):
    """(Tq, Tk) bool: key position within the last W positions of the query position."""
    d = qpos[:, None] - kpos[None, :]
    return (d >= 0) & (d < W)


def _attend(q, k, v, allowed):
    """q (..., Tq, H, hd), k, v (..., Tk, H, hd), allowed (Tq, Tk) -> (..., Tq, H, hd)."""
    s = torch.einsum("...ihd,...jhd->...hij", q, k) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~allowed, float("-inf"))
    return torch.einsum("...hij,...jhd->...ihd", torch.softmax(s, -1), v)


def window_parallel(q, k, v, W: int):
    """Banded-mask form from an empty state (positions 0 .. T-1). (..., T, H, hd)."""
    pos = torch.arange(q.shape[-3])
    return _attend(q, k, v, _band(pos, pos, W))


def ring_past(state, P: int, W: int):
    """The ring's valid entries before position P, oldest first: (k, v, positions)."""
    n = min(P, W)
    positions = torch.arange(P - n, P)
    slots = positions % W
    return state["k"][slots], state["v"][slots], positions


def window_recurrent_step(state, q, k, v, p: int, W: int):
    """One token at absolute position p. q, k, v (H, hd). Writes slot p mod W, then attends to
    the min(p + 1, W) valid slots. Returns (H, hd)."""
    state["k"][p % W] = k
    state["v"][p % W] = v
    kk, vv, _ = ring_past(state, p + 1, W)
    s = torch.einsum("hd,jhd->hj", q, kk) / math.sqrt(q.shape[-1])
    return torch.einsum("hj,jhd->hd", torch.softmax(s, -1), vv)


def window_recurrent(q, k, v, p0: int, W: int, state=None):
    T, H, hd = q.shape
    if state is None:
        state = window_empty_state(W, H, hd, q.dtype)
    outs = [window_recurrent_step(state, q[t], k[t], v[t], p0 + t, W) for t in range(T)]
    return torch.stack(outs, 0), state


def window_chunked(q, k, v, p0: int, W: int, chunk: int, state=None):
    T, H, hd = q.shape
    if state is None:
        state = window_empty_state(W, H, hd, q.dtype)
    outs = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        P = p0 + s
        pk, pv, ppos = ring_past(state, P, W)
        kk = torch.cat([pk, k[s:e]], 0)
        vv = torch.cat([pv, v[s:e]], 0)
        qpos = torch.arange(P, P + e - s)
        outs.append(_attend(q[s:e], kk, vv, _band(qpos, torch.cat([ppos, qpos]), W)))
        last = qpos[-min(W, e - s):]                  # only the last W positions survive
        state["k"][last % W] = k[s:e][-len(last):]
        state["v"][last % W] = v[s:e][-len(last):]
    return torch.cat(outs, 0), state
