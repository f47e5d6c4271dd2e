"""The three forms of every linear kind agree in float64 (issue: 1e-9 at 1, C-1, C, C+1, 1000)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from flatstate_ref.model import (LINEAR_KINDS, FlatstateLM, ModelConfig,  # noqa: E402
                                 feature_map, linear_chunked, linear_parallel,
                                 linear_recurrent)

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
