"""tools/flatstate_ref/gated_linear.py: the chunked form equals the recurrent one in float64."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from flatstate_ref import gated_linear  # noqa: E402


def inputs(T=70, Hk=2, Hv=4, K=8, V=6, per_key=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(T, Hk, K, generator=gen, dtype=torch.float64)
    k = torch.randn(T, Hk, K, generator=gen, dtype=torch.float64) * 0.3
    v = torch.randn(T, Hv, V, generator=gen, dtype=torch.float64)
    shape = (T, Hv, K) if per_key else (T, Hv)
    g = torch.log(0.5 + 0.5 * torch.rand(*shape, generator=gen, dtype=torch.float64))
    return q, k, v, g


def test_forms_agree_to_1e9():
    for per_key in (True, False):
        q, k, v, g = inputs(per_key=per_key)
        S0 = torch.randn(4, 8, 6, dtype=torch.float64) * 0.1
        o1, s1 = gated_linear.recurrent(q, k, v, g, 0.35, S0)
        for chunk, pos0 in ((16, 0), (64, 0), (16, 5)):
            o2, s2 = gated_linear.chunked(q, k, v, g, 0.35, chunk, S0, pos0=pos0)
            assert (o1 - o2).abs().max().item() < 1e-9
            assert (s1 - s2).abs().max().item() < 1e-9


def test_no_decay_and_grouped_heads():
    q, k, v, _ = inputs(Hk=1, Hv=3)
    o1, s1 = gated_linear.recurrent(q, k, v, None, 1.0)
    o2, s2 = gated_linear.chunked(q, k, v, None, 1.0, 32)
    assert (o1 - o2).abs().max().item() < 1e-9
    # value head h reads key head h // 3 = 0: head 0 and head 2 differ only through v
    expect0 = torch.einsum("tk,tv->kv", k[:, 0], v[:, 0])
    assert (s1[0] - expect0).abs().max().item() < 1e-9


def test_grouping_must_divide():
    q, k, v, g = inputs(Hk=3, Hv=4, per_key=False)
    try:
        gated_linear.recurrent(q, k, v, g, 1.0)
    except ValueError as e:
        assert "not a multiple of 3 key heads" in str(e)
    else:
        raise AssertionError("expected ValueError")
