"""tools/flatstate_ref/gated_delta.py: recurrent and chunked forms agree (float64, 1e-9), and
splitting a sequence (at chunk multiples or anywhere) gives the same outputs and state."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatstate_ref.gated_delta import (gated_delta_chunked, gated_delta_recurrent,  # noqa: E402
                                       l2norm)

F64 = torch.float64


def _inputs(T, Hk, Hv, dk, dv, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, Hk, dk, generator=gen, dtype=F64)
    k = torch.randn(T, Hk, dk, generator=gen, dtype=F64)
    v = torch.randn(T, Hv, dv, generator=gen, dtype=F64)
    g = -torch.nn.functional.softplus(torch.randn(T, Hv, generator=gen, dtype=F64)) * 0.5
    beta = torch.sigmoid(torch.randn(T, Hv, generator=gen, dtype=F64))
    s0 = torch.randn(Hv, dk, dv, generator=gen, dtype=F64) * 0.1
    return q, k, v, g, beta, s0


@pytest.mark.parametrize("Hk,Hv,l2", [(2, 2, True), (2, 4, True), (1, 3, True), (2, 4, False)])
def test_chunked_equals_recurrent(Hk, Hv, l2):
    q, k, v, g, beta, s0 = _inputs(150, Hk, Hv, 8, 6, seed=Hv)
    if not l2:  # without the in-kernel norm keep k small so the delta rule stays contractive
        k = l2norm(k)
    o_r, s_r = gated_delta_recurrent(q, k, v, g, beta, s0, use_l2norm=l2)
    o_c, s_c = gated_delta_chunked(q, k, v, g, beta, s0, use_l2norm=l2)
    assert (o_r - o_c).abs().max().item() < 1e-9
    assert (s_r - s_c).abs().max().item() < 1e-9
    assert o_r.abs().max().item() > 0.1


def test_grouped_heads_are_repeat_interleave():
    q, k, v, g, beta, _ = _inputs(20, 2, 4, 8, 6, seed=3)
    o, _ = gated_delta_recurrent(q, k, v, g, beta)
    o2, _ = gated_delta_recurrent(q.repeat_interleave(2, 1), k.repeat_interleave(2, 1), v, g, beta)
    assert torch.equal(o, o2)
    # value head 1 reads key head 0: changing key head 1 leaves value heads 0, 1 alone
    k2 = k.clone()
    k2[:, 1] += 1.0
    o3, _ = gated_delta_recurrent(q, k2, v, g, beta)
    assert torch.equal(o3[:, :2], o[:, :2]) and not torch.equal(o3[:, 2:], o[:, 2:])


@pytest.mark.parametrize("cut", [64, 128, 37, 100])
def test_split_equals_whole(cut):
    q, k, v, g, beta, s0 = _inputs(170, 2, 4, 8, 6, seed=7)
    o, s = gated_delta_chunked(q, k, v, g, beta, s0)
    o1, s1 = gated_delta_chunked(q[:cut], k[:cut], v[:cut], g[:cut], beta[:cut], s0)
    o2, s2 = gated_delta_chunked(q[cut:], k[cut:], v[cut:], g[cut:], beta[cut:], s1, start=cut)
    d = (torch.cat([o1, o2]) - o).abs().max().item()
    if cut % 64 == 0:
        assert torch.equal(torch.cat([o1, o2]), o) and torch.equal(s2, s)
    else:  # the first call ends on a partial chunk: equal to rounding
        assert d < 1e-12 and (s2 - s).abs().max().item() < 1e-12
    o_r, s_r = gated_delta_recurrent(q, k, v, g, beta, s0)
    assert (o_r - o).abs().max().item() < 1e-9
