"""The three forms of every linear kind agree in float64 (issue: 1e-9 at 1, C-1, C, C+1, 1000)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from flatstate_ref.model import (GATED_DEN_MIN, LINEAR_KINDS, NEW_KINDS,  # noqa: E402
                                 FlatstateLM, ModelConfig, feature_map, gated_chunked,
                                 gated_parallel, gated_recurrent, linear_chunked,
                                 linear_parallel, linear_recurrent, rfa_features, state_bytes,
                                 state_tensor_bytes, window_chunked, window_parallel,
                                 window_recurrent)
from flatstate_ref.gated import gate_logs  # noqa: E402

C = 16


def small_cfg(kind):
    return ModelConfig(attention_kind=kind, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, chunk_size=C,
                       favor_num_features=24, cosformer_horizon=300,
                       conv_kernel_size=0 if kind == "softmax" else 4)


def random_model(kind, seed=0):
    torch.manual_seed(seed)
    model = FlatstateLM(small_cfg(kind)).double()
    with torch.no_grad():     # larger weights than init so the attention is far from uniform
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(8.0)
            if name.endswith("decay_logit"):
                p.copy_(torch.randn_like(p))
    return model


@pytest.mark.parametrize("kind", LINEAR_KINDS)
@pytest.mark.parametrize("T", [1, C - 1, C, C + 1, 1000])
def test_core_forms_agree(kind, T):
    cfg = small_cfg(kind)
    g = torch.Generator().manual_seed(T)
    H, hd = 3, 8
    q, k, v = (torch.randn(T, H, hd, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    pos = torch.arange(T)
    cos_m = torch.randn(H, generator=g, dtype=torch.float64)
    w = torch.randn(24, hd, generator=g, dtype=torch.float64)
    fq, fk, m, vv, use_den = feature_map(cfg, q, k, v, pos, cos_m, w)
    par = linear_parallel(fq, fk, m, vv, use_den, cfg.linear_eps)
    rec, rs = linear_recurrent(fq, fk, m, vv, use_den, cfg.linear_eps)
    chk, cs = linear_chunked(fq, fk, m, vv, use_den, cfg.linear_eps, C)
    scale = par.abs().max().item() + 1.0
    assert (par - rec).abs().max().item() / scale < 1e-9
    assert (par - chk).abs().max().item() / scale < 1e-9
    for key in ("S", "z", "M"):
        assert torch.allclose(rs[key], cs[key], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind", LINEAR_KINDS)
@pytest.mark.parametrize("T", [1, C - 1, C, C + 1, 200])
def test_model_forms_agree(kind, T):
    model = random_model(kind)
    toks = torch.randint(0, 256, (T,), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        par, _ = model.step(toks, None, "parallel")
        rec, _ = model.step(toks, None, "recurrent")
        chk, _ = model.step(toks, None, "chunked")
    assert (par - rec).abs().max().item() < 1e-9
    assert (par - chk).abs().max().item() < 1e-9


@pytest.mark.parametrize("kind", ["softmax", *LINEAR_KINDS])
def test_split_continuation_equals_one_pass(kind):
    """Feeding a prompt in two pieces through the state equals one pass."""
    model = random_model(kind)
    toks = torch.randint(0, 256, (50,), generator=torch.Generator().manual_seed(3))
    mode = "recurrent" if kind != "softmax" else "parallel"
    with torch.no_grad():
        full, _ = model.step(toks, None, "chunked" if kind != "softmax" else "parallel")
        a, st = model.step(toks[:23], None, mode)
        b, _ = model.step(toks[23:], st, "chunked" if kind != "softmax" else "parallel")
    assert (torch.cat([a, b]) - full).abs().max().item() < 1e-9


@pytest.mark.parametrize("kind", ["softmax", *LINEAR_KINDS])
def test_training_path_matches_inference_path(kind):
    model = random_model(kind)
    toks = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        train = model(toks[None])[0].double()
        inf, _ = model.step(toks, None, "parallel", dtype=torch.float64)
    assert (train - inf).abs().max().item() < 1e-3   # float32 training path vs float64


def test_bad_config_names_value():
    with pytest.raises(ValueError, match="attention_kind"):
        ModelConfig(attention_kind="nope").validate()
    with pytest.raises(ValueError, match="hidden_size"):
        ModelConfig(hidden_size=130, num_attention_heads=4).validate()


# ----------------------------------------------------------------------------------------------
# Issue 14: gated, window, hybrid.
# ----------------------------------------------------------------------------------------------

W = 10                      # window_size of the small test models (C = 16 != W)
NEW_VARIANTS = [("gated", "sum"), ("window", "sum"), ("hybrid", "sum"), ("hybrid", "alternate")]
WINDOW_LENGTHS = [W - 1, W, W + 1, 2 * W + 1]


def new_cfg(kind, layout="sum", window=W):
    return ModelConfig(attention_kind=kind, hidden_size=32, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=64, chunk_size=C,
                       rfa_num_features=12, window_size=window, hybrid_layout=layout,
                       conv_kernel_size=0 if kind == "window" else 4)


def new_model(kind, layout="sum", seed=0, window=W):
    torch.manual_seed(seed)
    model = FlatstateLM(new_cfg(kind, layout, window)).double()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "embed" not in name:
                p.mul_(8.0)
            if name.endswith("gate.bias") or name.endswith("feature_log_scale"):
                p.copy_(torch.randn_like(p) * 2)
    return model


def _rel(a, b):
    return (a - b).abs().max().item() / (a.abs().max().item() + 1.0)


@pytest.mark.parametrize("T", [1, C - 1, C, C + 1, 1000])
def test_gated_core_forms_agree(T):
    g = torch.Generator().manual_seed(T)
    H, hd, R = 3, 8, 6
    q, k, v = (torch.randn(T, H, hd, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    proj = torch.randn(R, hd, generator=g, dtype=torch.float64)
    ls = torch.randn(H, generator=g, dtype=torch.float64)
    a = torch.randn(T, H, generator=g, dtype=torch.float64) * 4      # gates from ~0 to ~1
    fq, fk = rfa_features(q, proj, ls), rfa_features(k, proj, ls)
    lg, la = gate_logs(a)
    par = gated_parallel(fq, fk, lg, la, v, GATED_DEN_MIN)
    rec, rs = gated_recurrent(fq, fk, lg, la, v, GATED_DEN_MIN)
    chk, cs = gated_chunked(fq, fk, lg, la, v, GATED_DEN_MIN, C)
    assert _rel(par, rec) < 1e-9 and _rel(par, chk) < 1e-9
    for key in ("S", "z", "mass"):
        assert torch.allclose(rs[key], cs[key], rtol=1e-9, atol=1e-12)
    assert set(rs) == {"S", "z", "mass"}
    # the mass is 1 - prod(g): the sum of the weights of every key so far
    assert torch.allclose(rs["mass"], -torch.expm1(lg.sum(0)), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("window", [W, 24])
@pytest.mark.parametrize("T", [1, C - 1, C, C + 1, 1000, *WINDOW_LENGTHS, 24, 25, 49])
def test_window_core_forms_agree(T, window):
    g = torch.Generator().manual_seed(T)
    H, hd = 3, 8
    q, k, v = (torch.randn(T, H, hd, generator=g, dtype=torch.float64) * 2 for _ in range(3))
    par = window_parallel(q, k, v, window)
    rec, rs = window_recurrent(q, k, v, 0, window)
    chk, cs = window_chunked(q, k, v, 0, window, C)
    assert _rel(par, rec) < 1e-9 and _rel(par, chk) < 1e-9
    assert torch.equal(rs["k"], cs["k"]) and torch.equal(rs["v"], cs["v"])
    # ring layout: position p in slot p mod W, unwritten slots zero
    for p in range(T):
        if p >= T - window:
            assert torch.equal(rs["k"][p % window], k[p])
    for slot in range(T, window):
        assert not rs["k"][slot].any()
    # brute force: full softmax restricted to the last `window` keys
    for i in sorted({0, T // 2, T - 1}):
        lo = max(0, i - window + 1)
        s = torch.einsum("hd,jhd->hj", q[i], k[lo:i + 1]) / hd ** 0.5
        ref = torch.einsum("hj,jhd->hd", torch.softmax(s, -1), v[lo:i + 1])
        assert _rel(ref, par[i]) < 1e-12


@pytest.mark.parametrize("kind,layout", NEW_VARIANTS)
@pytest.mark.parametrize("T", [1, C - 1, C, C + 1, *WINDOW_LENGTHS, 1000])
def test_new_model_forms_agree(kind, layout, T):
    model = new_model(kind, layout)
    toks = torch.randint(0, 256, (T,), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        par, ps = model.step(toks, None, "parallel")
        rec, rs = model.step(toks, None, "recurrent")
        chk, cs = model.step(toks, None, "chunked")
    assert (par - rec).abs().max().item() < 1e-9
    assert (par - chk).abs().max().item() < 1e-9
    for a, b, c in zip(ps["layers"], rs["layers"], cs["layers"]):
        assert set(b) == set(c)
        for part in b:            # conv window, lin {S, z[, M]}, ring {k, v}
            x, y = b[part], c[part]
            for key in (x if isinstance(x, dict) else [None]):
                xx, yy = (x[key], y[key]) if key else (x, y)
                assert torch.allclose(xx, yy, rtol=1e-9, atol=1e-12), (part, key)
        if "ring" in b:           # the parallel form rebuilds the ring from the sequence
            assert torch.allclose(a["ring"]["k"], b["ring"]["k"], rtol=1e-9, atol=1e-12)
            assert torch.allclose(a["ring"]["v"], b["ring"]["v"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("kind,layout", NEW_VARIANTS)
@pytest.mark.parametrize("split", [1, W - 1, W, W + 1, C + 3, 2 * W + 1])
def test_new_split_continuation_equals_one_pass(kind, layout, split):
    model = new_model(kind, layout)
    toks = torch.randint(0, 256, (3 * W + 7,), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        full, _ = model.step(toks, None, "chunked")
        a, st = model.step(toks[:split], None, "recurrent")
        b, st = model.step(toks[split:split + 5], st, "chunked")
        c, _ = model.step(toks[split + 5:], st, "recurrent")
    assert (torch.cat([a, b, c]) - full).abs().max().item() < 1e-9


@pytest.mark.parametrize("kind,layout", NEW_VARIANTS)
def test_new_training_path_matches_inference_path(kind, layout):
    model = new_model(kind, layout)
    toks = torch.randint(0, 256, (40,), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        inf, _ = model.step(toks, None, "parallel", dtype=torch.float64)
        train = model.float()(toks[None])[0].double()
    assert (train - inf).abs().max().item() < 1e-3   # float32 training path vs float64


@pytest.mark.parametrize("kind,layout", [(k, "sum") for k in LINEAR_KINDS] + NEW_VARIANTS)
def test_state_size_constant_in_length(kind, layout):
    """The state after 10 and after 1000 tokens has the same tensors, sized state_bytes."""
    model = new_model(kind, layout) if kind in NEW_KINDS else random_model(kind)
    toks = torch.randint(0, 256, (1000,), generator=torch.Generator().manual_seed(9))
    sizes = []
    with torch.no_grad():
        for T in (10, 1000):
            _, st = model.step(toks[:T], None, "chunked")
            sizes.append(state_tensor_bytes(st))
    assert sizes[0] == sizes[1] == state_bytes(model.cfg)


def test_new_kinds_config_checks():
    with pytest.raises(ValueError, match="conv_kernel_size"):
        ModelConfig(attention_kind="window", conv_kernel_size=4).validate()
    with pytest.raises(ValueError, match="hybrid_layout"):
        ModelConfig(attention_kind="hybrid", hybrid_layout="nope").validate()
    with pytest.raises(ValueError, match="window_size"):
        ModelConfig(attention_kind="window", conv_kernel_size=0, window_size=0).validate()
    # the older kinds' config.json does not gain the new keys
    assert "window_size" not in ModelConfig(attention_kind="favor").to_json()
    assert ModelConfig(attention_kind="hybrid").to_json()["hybrid_layout"] == "alternate"
    assert "rfa_num_features" in ModelConfig(attention_kind="gated").to_json()
