"""tools/hf_delta_net.py and tools/flatstate_ref/delta_net.py: fla's tensor names and shapes for
every option, token-by-token decoding (the recurrent delta rule) equal to the full-sequence
chunked WY forward (1e-9), the delta rule equal to fla's naive recurrence written out here
(fla/ops/delta_rule/naive.py delta_rule_recurrence), the hybrid's fla Attention layers, refusals,
and the committed golden folders reproduced."""
import json
import os
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import fla_hybrid  # noqa: E402
import hf_delta_net as hf_dn  # noqa: E402
from flatstate_ref.delta_net import HfDeltaNet  # noqa: E402
from flatstate_ref.gated_delta import gated_delta_chunked, gated_delta_recurrent, l2norm  # noqa
from hf_llama import HfLlamaError  # noqa: E402

IDS = [1] + [int(x) for x in
             torch.randint(3, 512, (79,), generator=torch.Generator().manual_seed(5))]

VARIANTS = {
    "hub": {},
    "options": {"use_gate": True, "use_short_conv": False, "use_beta": False,
                "allow_neg_eigval": True, "qk_activation": "identity", "expand_k": 0.5,
                "tie_word_embeddings": True},
    "conv_identity": {"qk_activation": "identity", "num_heads": 2, "expand_v": 2},
    "hybrid": {"attn": fla_hybrid.attn_config([0], 4, 2, True, 500.0)},
}


def _write(tmp_path, name, **kw):
    out = str(tmp_path / name)
    hf_dn.write_hf_delta_net(out, hf_dn.make_config(dtype="float32", **kw), seed=3)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_token_by_token_equals_full_sequence(tmp_path, variant):
    m = HfDeltaNet.load(_write(tmp_path, variant, **VARIANTS[variant]))
    full = m.forward(IDS)
    st = m.new_state()
    rows = [m.forward([t], st, mode="recurrent")[0] for t in IDS]
    assert (torch.stack(rows) - full).abs().max().item() < 1e-9
    st = m.new_state()
    parts = torch.cat([m.forward(IDS[:30], st), m.forward(IDS[30:70], st),
                       m.forward(IDS[70:], st)])
    assert (parts - full).abs().max().item() < 1e-9
    assert full.std().item() > 0.5


def test_delta_rule_is_fla_naive_recurrence():
    # fla's delta_rule_recurrence (on l2-normalised q, k as use_qk_l2norm_in_kernel), written
    # out: q * dk^-0.5; v_t <- beta_t (v_t - S^T k_t); S <- S + k_t v_t^T; o_t = S^T q_t.
    g = torch.Generator().manual_seed(1)
    T, H, dk, dv = 70, 3, 8, 5
    q, k = (torch.randn(T, H, dk, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(T, H, dv, generator=g, dtype=torch.float64)
    beta = 2 * torch.sigmoid(torch.randn(T, H, generator=g, dtype=torch.float64))
    qn, kn = l2norm(q) * dk ** -0.5, l2norm(k)
    S = torch.zeros(H, dk, dv, dtype=torch.float64)
    want = torch.zeros(T, H, dv, dtype=torch.float64)
    for t in range(T):
        u = (v[t] - (S * kn[t][..., None]).sum(-2)) * beta[t][:, None]
        S = S + kn[t][..., None] * u[:, None, :]
        want[t] = torch.einsum("hd,hdm->hm", qn[t], S)
    zero = torch.zeros(T, H, dtype=torch.float64)
    rec, s_rec = gated_delta_recurrent(q, k, v, zero, beta)
    chk, s_chk = gated_delta_chunked(q, k, v, zero, beta, start=5)
    assert (rec - want).abs().max().item() < 1e-12
    assert (chk - want).abs().max().item() < 1e-9
    assert (s_chk - S).abs().max().item() < 1e-9 and (s_rec - S).abs().max().item() < 1e-12


def test_names_and_shapes_as_fla():
    s = hf_dn.tensor_shapes(hf_dn.make_config(expand_v=2))
    a = "model.layers.1.attn."
    assert s[a + "q_proj.weight"] == (64, 64) and s[a + "k_proj.weight"] == (64, 64)
    assert s[a + "v_proj.weight"] == (128, 64) and s[a + "b_proj.weight"] == (4, 64)
    assert s[a + "q_conv1d.weight"] == (64, 1, 4) and s[a + "v_conv1d.weight"] == (128, 1, 4)
    assert s[a + "o_norm.weight"] == (32,) and s[a + "o_proj.weight"] == (64, 128)
    assert a + "g_proj.weight" not in s and "model.layers.0.attn.A_log" not in s
    o = hf_dn.tensor_shapes(hf_dn.make_config(**VARIANTS["options"]))
    assert o[a + "g_proj.weight"] == (64, 64) and o[a + "q_proj.weight"] == (32, 64)
    assert a + "b_proj.weight" not in o and a + "q_conv1d.weight" not in o
    assert "lm_head.weight" not in o
    h = hf_dn.tensor_shapes(hf_dn.make_config(**VARIANTS["hybrid"]))
    b = "model.layers.0.attn."
    assert h[b + "q_proj.weight"] == (64, 64) and h[b + "q_proj.bias"] == (64,)
    assert h[b + "k_proj.weight"] == (32, 64) and h[b + "v_proj.bias"] == (32,)
    assert h[b + "o_proj.weight"] == (64, 64) and b + "o_proj.bias" not in h
    assert b + "b_proj.weight" not in h and a + "b_proj.weight" in h
    bad = ({"qk_activation": "relu"}, {"qk_activation": "elu"}, {"num_heads": 5},
           {"attn": fla_hybrid.attn_config([0], 4) | {"window_size": 16}},
           {"attn": fla_hybrid.attn_config([2], 4)}, {"attn": fla_hybrid.attn_config([0], 3)})
    for kw in bad:
        with pytest.raises(HfLlamaError):
            hf_dn.make_config(**kw)
    cfg = dict(hf_dn.make_config())
    cfg["qk_norm"] = "sum"
    with pytest.raises(HfLlamaError):
        hf_dn.resolved(cfg)


def test_attention_layer_is_causal_softmax_with_rope():
    # The hybrid's softmax layer on its own: attending over [prefix; x] one call at a time
    # equals one call over the whole sequence, and a rotation of both q and k by the same
    # position offset leaves the scores unchanged (RoPE is relative).
    from flatstate_ref.fla_attn import fla_attention, new_attn_state
    cfg = hf_dn.make_config(dtype="float32", **VARIANTS["hybrid"])
    spec = fla_hybrid.attn_spec(cfg)
    g = torch.Generator().manual_seed(2)
    t = {n: torch.randn(s, generator=g, dtype=torch.float64) * 0.2
         for n, s in fla_hybrid.attn_shapes(cfg, 0).items()}
    x = torch.randn(12, 64, generator=g, dtype=torch.float64)
    p = "model.layers.0.attn."
    whole = fla_attention(t, spec, x, p, new_attn_state(spec), 0)
    st = new_attn_state(spec)
    steps = torch.cat([fla_attention(t, spec, x[i:i + 1], p, st, i) for i in range(12)])
    assert (steps - whole).abs().max().item() < 1e-12
    assert st["k"].shape == (12, 2, 16)
    # the first row attends to itself only: o_proj(v_0 repeated over the groups)
    v0 = (x[:1] @ t[p + "v_proj.weight"].T + t[p + "v_proj.bias"]).view(1, 2, 16)
    first = v0.repeat_interleave(2, 1).reshape(1, 64) @ t[p + "o_proj.weight"].T
    assert (whole[:1] - first).abs().max().item() < 1e-12


DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data"))
# tests/data/hf_delta_net_tiny and hf_delta_net_variant_tiny's flags (their README.md)
FOLDERS = {
    "hf_delta_net_tiny": ["--hidden_size", "64", "--num_hidden_layers", "2", "--num_heads", "4",
                          "--expand_v", "2", "--intermediate_size", "128", "--dtype", "bfloat16",
                          "--seed", "6", "--init_gain", "1.5"],
    "hf_delta_net_variant_tiny": ["--hidden_size", "64", "--num_hidden_layers", "2",
                                  "--num_heads", "2", "--expand_k", "0.5", "--expand_v", "1",
                                  "--intermediate_size", "128", "--dtype", "bfloat16",
                                  "--use_gate", "--no_short_conv", "--no_beta",
                                  "--allow_neg_eigval", "--qk_activation", "identity",
                                  "--seed", "2", "--init_gain", "1.5"],
}


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_writer_reproduces_committed_folder(tmp_path, name):
    tiny = os.path.join(DATA, name)
    out = str(tmp_path / "tiny")
    args = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny")] + FOLDERS[name]
    assert hf_dn.main(["--out", out] + args) == 0
    assert sorted(os.listdir(out)) == sorted(
        f for f in os.listdir(tiny) if not f.startswith("golden_") and f != "README.md")
    for f in sorted(os.listdir(out)):
        with open(os.path.join(tiny, f), "rb") as fa, open(os.path.join(out, f), "rb") as fb:
            assert fa.read() == fb.read(), f


@pytest.mark.parametrize("name", sorted(FOLDERS))
def test_reference_reproduces_golden(name):
    import hf_llama_golden
    tiny = os.path.join(DATA, name)
    with open(os.path.join(tiny, "golden_reference.json")) as f:
        g = json.load(f)
    assert g["prompt"] == hf_llama_golden.seeded_prompt(512, 80)
    m = HfDeltaNet.load(tiny)
    logits = m.logits(g["prompt"])
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-6, rtol=1e-7)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]
