"""tools/hf_mamba2.py and tools/flatstate_ref/mamba2.py: the writer's exact upstream layout,
the SSD chunked scan equal to the per-token recurrence (1e-9, any split of the sequence), the
reference equal to an independent scalar loop and to flatstate_ref/gated_linear.py, the state
sizes, and the committed tests/data/hf_mamba2_tiny folder and its golden files."""
import json
import math
import os
import sys

import numpy as np
import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import hf_mamba2  # noqa: E402
from flatstate_ref import gated_linear  # noqa: E402
from flatstate_ref.llama import load_hf_tensors  # noqa: E402
from flatstate_ref.mamba2 import HfMamba2, causal_conv, ssd_chunked, ssd_recurrent  # noqa: E402

IDS = [1] + [int(x) for x in
             torch.randint(3, 512, (69,), generator=torch.Generator().manual_seed(5))]

# D 32, expand 2 -> I 64, head_dim 8 -> H 8, N 4, G 2 -> conv_dim 64 + 16 = 80, K 4
SMALL = dict(hidden_size=32, num_hidden_layers=2, expand=2, head_dim=8, state_size=4,
             n_groups=2, conv_kernel=4, chunk_size=16)
SMALL_TABLE = [
    ("backbone.embeddings.weight", (512, 32)),
    ("backbone.layers.0.norm.weight", (32,)),
    ("backbone.layers.0.mixer.conv1d.weight", (80, 1, 4)),
    ("backbone.layers.0.mixer.conv1d.bias", (80,)),
    ("backbone.layers.0.mixer.in_proj.weight", (64 + 80 + 8, 32)),
    ("backbone.layers.0.mixer.dt_bias", (8,)),
    ("backbone.layers.0.mixer.A_log", (8,)),
    ("backbone.layers.0.mixer.norm.weight", (64,)),
    ("backbone.layers.0.mixer.D", (8,)),
    ("backbone.layers.0.mixer.out_proj.weight", (32, 64)),
    ("backbone.layers.1.norm.weight", (32,)),
    ("backbone.layers.1.mixer.conv1d.weight", (80, 1, 4)),
    ("backbone.layers.1.mixer.conv1d.bias", (80,)),
    ("backbone.layers.1.mixer.in_proj.weight", (152, 32)),
    ("backbone.layers.1.mixer.dt_bias", (8,)),
    ("backbone.layers.1.mixer.A_log", (8,)),
    ("backbone.layers.1.mixer.norm.weight", (64,)),
    ("backbone.layers.1.mixer.D", (8,)),
    ("backbone.layers.1.mixer.out_proj.weight", (32, 64)),
    ("backbone.norm_f.weight", (32,)),
    ("lm_head.weight", (512, 32)),
]
CONFIG_KEYS = [
    "architectures", "bos_token_id", "chunk_size", "conv_kernel", "dtype", "eos_token_id",
    "expand", "head_dim", "hidden_act", "hidden_size", "initializer_range", "layer_norm_epsilon",
    "model_type", "n_groups", "num_heads", "num_hidden_layers", "pad_token_id",
    "rescale_prenorm_residual", "residual_in_fp32", "rms_norm", "state_size",
    "tie_word_embeddings", "time_step_floor", "time_step_limit", "time_step_max",
    "time_step_min", "time_step_rank", "transformers_version", "use_bias", "use_cache",
    "use_conv_bias", "vocab_size"]


def _write(tmp_path, name="m", seed=3, init_gain=2.0, **kw):
    out = str(tmp_path / name)
    args = dict(SMALL)
    args.update(kw)
    cfg = hf_mamba2.make_config(dtype="float32", **args)
    hf_mamba2.write_hf_mamba2(out, cfg, seed=seed, init_gain=init_gain)
    return out


def test_tensor_table_is_upstream():
    cfg = hf_mamba2.make_config(**SMALL)
    assert list(hf_mamba2.tensor_shapes(cfg).items()) == SMALL_TABLE
    b = hf_mamba2.tensor_shapes(hf_mamba2.make_config(use_bias=True, **SMALL))
    assert b["backbone.layers.0.mixer.in_proj.bias"] == (152,)
    assert b["backbone.layers.0.mixer.out_proj.bias"] == (32,)
    nb = hf_mamba2.tensor_shapes(hf_mamba2.make_config(use_conv_bias=False,
                                                       tie_word_embeddings=True, **SMALL))
    assert "backbone.layers.0.mixer.conv1d.bias" not in nb and "lm_head.weight" not in nb


def test_writer_round_trip(tmp_path):
    d = _write(tmp_path)
    with open(os.path.join(d, "config.json")) as f:
        text = f.read()
    cfg = json.loads(text)
    assert sorted(cfg) == sorted(CONFIG_KEYS)
    assert cfg["architectures"] == ["Mamba2ForCausalLM"] and cfg["model_type"] == "mamba2"
    assert cfg["num_heads"] * cfg["head_dim"] == cfg["expand"] * cfg["hidden_size"]
    assert cfg["time_step_limit"] == [0.0, math.inf] and "Infinity" in text
    assert cfg["time_step_rank"] == math.ceil(32 / 16)
    t = load_hf_tensors(d)
    assert {n: tuple(v.shape) for n, v in t.items()} == dict(SMALL_TABLE)
    drawn = hf_mamba2.random_weights(cfg, seed=3, init_gain=2.0)
    for n, v in drawn.items():
        assert torch.equal(t[n], v.to(torch.float64)), n
    # the draws: A = exp(A_log) in [0.5, 4], dt = softplus(dt_bias) in [0.01, 1]
    A = t["backbone.layers.0.mixer.A_log"].exp()
    dt = torch.nn.functional.softplus(t["backbone.layers.0.mixer.dt_bias"])
    assert A.min() >= 0.5 - 1e-6 and A.max() <= 4 + 1e-6
    assert dt.min() >= 0.01 - 1e-6 and dt.max() <= 1 + 1e-5
    with pytest.raises(Exception):
        hf_mamba2.make_config(vocab_size=500)          # llama.cpp would pad it to 512


@pytest.mark.parametrize("n_groups", [1, 2])
def test_chunked_equals_recurrent(tmp_path, n_groups):
    m = HfMamba2.load(_write(tmp_path, n_groups=n_groups))
    full = m.forward(IDS)                            # SSD, 16-token chunks, one call
    st = m.new_state()
    rows = torch.cat([m.forward([t], st, mode="recurrent") for t in IDS])
    assert (rows - full).abs().max().item() < 1e-9
    st2 = m.new_state()                              # split prefill off the chunk grid
    parts = torch.cat([m.forward(IDS[:21], st2), m.forward(IDS[21:50], st2),
                       m.forward(IDS[50:], st2)])
    assert (parts - full).abs().max().item() < 1e-9
    for a, b in zip(st["layers"], st2["layers"]):
        assert (a["conv"] - b["conv"]).abs().max().item() < 1e-12
        assert (a["ssm"] - b["ssm"]).abs().max().item() < 1e-9
    assert full.std().item() > 0.5                   # logits spread: not a degenerate model


def test_ssd_equals_gated_linear():
    """The Mamba-2 scan is the per-head scalar-decay linear recurrence of gated_linear.py with
    q = C, k = B (G key heads), v = dt x, g = dt A; its state is ours transposed."""
    g = torch.Generator().manual_seed(1)
    T, H, P, N, G = 37, 6, 5, 4, 3
    x = torch.randn(T, H, P, generator=g, dtype=torch.float64)
    dt = torch.rand(T, H, generator=g, dtype=torch.float64)
    A = -torch.rand(H, generator=g, dtype=torch.float64) * 3
    B = torch.randn(T, G, N, generator=g, dtype=torch.float64)
    C = torch.randn(T, G, N, generator=g, dtype=torch.float64)
    S0 = torch.randn(H, P, N, generator=g, dtype=torch.float64)
    y, S = ssd_recurrent(x, dt, A, B, C, S0)
    yc, Sc = ssd_chunked(x, dt, A, B, C, S0, chunk=8)
    o, Sg = gated_linear.recurrent(C, B, dt[..., None] * x, dt * A, 1.0,
                                   S=S0.transpose(1, 2).contiguous())
    assert (y - o).abs().max().item() < 1e-10 and (S - Sg.transpose(1, 2)).abs().max() < 1e-10
    assert (y - yc).abs().max().item() < 1e-10 and (S - Sc).abs().max().item() < 1e-10


def _naive_logits(cfg, t, ids, norm_groups=1):
    """Scalar loops in numpy, written from the module docstring's equations alone."""
    D, E = cfg["hidden_size"], cfg["layer_norm_epsilon"]
    I = cfg["expand"] * D
    H, P, N, G, K = cfg["num_heads"], cfg["head_dim"], cfg["state_size"], cfg["n_groups"], \
        cfg["conv_kernel"]
    lo, hi = cfg["time_step_limit"]
    w = {n: v.numpy() for n, v in t.items()}

    def rms(v, wt):
        return v / math.sqrt(float(np.mean(v * v)) + E) * wt

    def silu(v):
        return v / (1.0 + np.exp(-v))

    T = len(ids)
    h = np.array([w["backbone.embeddings.weight"][i] for i in ids])
    for li in range(cfg["num_hidden_layers"]):
        p = f"backbone.layers.{li}.mixer."
        xs_in = np.array([rms(h[s], w[f"backbone.layers.{li}.norm.weight"]) for s in range(T)])
        proj = xs_in @ w[p + "in_proj.weight"].T
        if p + "in_proj.bias" in w:
            proj = proj + w[p + "in_proj.bias"]
        conv_dim = I + 2 * G * N
        S = np.zeros((H, P, N))
        out = np.zeros((T, D))
        for s in range(T):
            z, dtr = proj[s, :I], proj[s, I + conv_dim:]
            xbc = np.zeros(conv_dim)
            for c in range(conv_dim):
                acc = w[p + "conv1d.bias"][c] if p + "conv1d.bias" in w else 0.0
                for j in range(K):
                    src = s - (K - 1) + j
                    if src >= 0:
                        acc += w[p + "conv1d.weight"][c, 0, j] * proj[src, I + c]
                xbc[c] = silu(acc)
            y = np.zeros(I)
            for hh in range(H):
                gi = hh // (H // G)
                d = dtr[hh] + w[p + "dt_bias"][hh]
                d = math.log1p(math.exp(d))
                d = min(max(d, lo), hi)
                a = -math.exp(w[p + "A_log"][hh])
                for pp in range(P):
                    xv = xbc[hh * P + pp]
                    acc = 0.0
                    for n in range(N):
                        Bv = xbc[I + gi * N + n]
                        Cv = xbc[I + G * N + gi * N + n]
                        S[hh, pp, n] = math.exp(d * a) * S[hh, pp, n] + d * xv * Bv
                        acc += S[hh, pp, n] * Cv
                    y[hh * P + pp] = acc + w[p + "D"][hh] * xv
            gy = y * silu(z)
            gs = I // norm_groups
            for k in range(norm_groups):
                seg = gy[k * gs:(k + 1) * gs]
                gy[k * gs:(k + 1) * gs] = seg / math.sqrt(float(np.mean(seg * seg)) + E)
            gy = gy * w[p + "norm.weight"]
            out[s] = w[p + "out_proj.weight"] @ gy
            if p + "out_proj.bias" in w:
                out[s] += w[p + "out_proj.bias"]
        h = h + out
    head = w.get("lm_head.weight", w["backbone.embeddings.weight"])
    return np.array([rms(h[s], w["backbone.norm_f.weight"]) @ head.T for s in range(T)])


@pytest.mark.parametrize("variant", [
    dict(), dict(use_bias=True, time_step_limit=(0.05, 0.6)),
    dict(tie_word_embeddings=True, use_conv_bias=False, n_groups=4)])
def test_reference_equals_naive_loop(tmp_path, variant):
    d = _write(tmp_path, num_hidden_layers=1, **variant)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t = load_hf_tensors(d)
    ids = IDS[:20]
    want = _naive_logits(cfg, t, ids)
    for mode in ("recurrent", "chunked"):
        got = HfMamba2(cfg, t).forward(ids, mode=mode).numpy()
        assert np.abs(got - want).max() < 1e-9, mode


def test_norm_groups_mamba_ssm_form(tmp_path):
    """norm_groups = n_groups is mamba_ssm's / llama.cpp's per-group gated norm: equal to the
    naive loop's per-group form, and different from transformers' whole-width one."""
    d = _write(tmp_path, num_hidden_layers=1)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t = load_hf_tensors(d)
    grouped = HfMamba2(cfg, t, norm_groups=2).forward(IDS[:12]).numpy()
    assert np.abs(grouped - _naive_logits(cfg, t, IDS[:12], norm_groups=2)).max() < 1e-9
    assert np.abs(grouped - HfMamba2(cfg, t).forward(IDS[:12]).numpy()).max() > 1e-3


def test_state_sizes_and_layout(tmp_path):
    d = _write(tmp_path)
    m = HfMamba2.load(d)
    # per layer (K-1) conv_dim + H P N = 3*80 + 8*8*4 floats
    assert m.state_floats() == 2 * (3 * 80 + 8 * 8 * 4)
    st = m.new_state()
    m.forward(IDS[:10], st)
    arrs = m.state_arrays(st)
    assert len(arrs) == 2
    for conv, ssm in arrs:
        assert conv.shape == (80, 3) and ssm.shape == (8, 8, 4)
        assert conv.dtype == np.float32 and conv.flags["C_CONTIGUOUS"]
    assert sum(c.size + s.size for c, s in arrs) == m.state_floats()
    # the conv state is the last K-1 conv inputs (xBC before the conv), oldest first
    prev = torch.zeros(80, 3, dtype=torch.float64)
    x = torch.arange(5 * 80, dtype=torch.float64).view(5, 80)
    _, new = causal_conv(x, prev, torch.ones(80, 1, 4, dtype=torch.float64), None)
    assert torch.equal(new, x[2:].T)


DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data"))
TINY = os.path.join(DATA, "hf_mamba2_tiny")
# tests/data/hf_mamba2_tiny's flags (its README.md; tools/llamacpp_parity.sh FAMILY=mamba2)
TINY_ARGS = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny"), "--hidden_size", "48",
             "--num_hidden_layers", "2", "--expand", "2", "--head_dim", "16",
             "--state_size", "16", "--n_groups", "1", "--conv_kernel", "4", "--chunk_size", "32",
             "--tie_word_embeddings", "--dtype", "bfloat16", "--seed", "0",
             "--init_gain", "3"]
needs_tiny = pytest.mark.skipif(not os.path.isdir(TINY), reason="no tests/data/hf_mamba2_tiny")


@needs_tiny
def test_writer_reproduces_committed_folder(tmp_path):
    out = str(tmp_path / "tiny")
    assert hf_mamba2.main(["--out", out] + TINY_ARGS) == 0
    assert sorted(os.listdir(out)) == sorted(
        f for f in os.listdir(TINY) if not f.startswith("golden_") and f != "README.md")
    for f in sorted(os.listdir(out)):
        with open(os.path.join(TINY, f), "rb") as fa, open(os.path.join(out, f), "rb") as fb:
            assert fa.read() == fb.read(), f


@needs_tiny
def test_reference_reproduces_golden():
    import hf_llama_golden
    with open(os.path.join(TINY, "golden_reference.json")) as f:
        g = json.load(f)
    assert g["prompt"] == hf_llama_golden.seeded_prompt(512, 80)
    m = HfMamba2.load(TINY)
    st = m.new_state()
    logits = m.forward(g["prompt"], st)
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-6, rtol=1e-7)
    for (conv, ssm), layer in zip(m.state_arrays(st), g["state_after_prompt"]):
        assert np.allclose(conv.ravel(), layer["conv"], atol=1e-6, rtol=1e-6)
        assert np.allclose(ssm.ravel(), layer["ssm"], atol=1e-6, rtol=1e-6)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]


@needs_tiny
def test_llamacpp_golden_agrees():
    with open(os.path.join(TINY, "golden_reference.json")) as f:
        ref = json.load(f)
    with open(os.path.join(TINY, "golden_llamacpp.json")) as f:
        cpp = json.load(f)
    vs = cpp["vs_reference"]
    assert cpp["prompt"] == ref["prompt"] and cpp["greedy"] == ref["greedy"]
    assert vs["greedy_agree"] is True
    span = ref["logit_max"] - ref["logit_min"]
    assert vs["max_abs_diff_prompt_logits"] < 1e-3 * span
    assert min(ref["greedy_top2_margins"]) > 20 * vs["max_abs_diff_greedy_logits"]
