"""tools/hf_gated_deltanet.py and tools/flatstate_ref/gated_deltanet.py: fla's tensor names and
shapes, token-by-token decoding (the recurrent delta rule) equal to the full-sequence chunked WY
forward (1e-9), fla's separate q / k / v convolutions equal to one conv over q|k|v (what the C++
loader fuses), the hybrid with fla's attn layers, and the committed golden folders reproduced."""
import json
import os
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import fla_hybrid  # noqa: E402
import hf_gated_deltanet as hf_gdn  # noqa: E402
from flatstate_ref.gated_deltanet import HfGatedDeltaNet  # noqa: E402
from flatstate_ref.qwen35 import causal_conv  # noqa: E402
from hf_llama import HfLlamaError  # noqa: E402

IDS = [1] + [int(x) for x in
             torch.randint(3, 512, (79,), generator=torch.Generator().manual_seed(5))]

VARIANTS = {
    "mha": {},
    "gva_tied": {"num_v_heads": 4, "tie_word_embeddings": True, "expand_v": 1.5},
    "hybrid": {"num_hidden_layers": 3, "attn": fla_hybrid.attn_config([1], 4, 2, True)},
}


def _write(tmp_path, name, **kw):
    out = str(tmp_path / name)
    hf_gdn.write_hf_gated_deltanet(out, hf_gdn.make_config(dtype="float32", **kw), seed=3)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_token_by_token_equals_full_sequence(tmp_path, variant):
    m = HfGatedDeltaNet.load(_write(tmp_path, variant, **VARIANTS[variant]))
    full = m.forward(IDS)
    st = m.new_state()
    rows = [m.forward([t], st, mode="recurrent")[0] for t in IDS]
    assert (torch.stack(rows) - full).abs().max().item() < 1e-9
    st = m.new_state()
    parts = torch.cat([m.forward(IDS[:30], st), m.forward(IDS[30:70], st),
                       m.forward(IDS[70:], st)])
    assert (parts - full).abs().max().item() < 1e-9
    assert full.std().item() > 0.5


def test_names_and_shapes_as_fla():
    s = hf_gdn.tensor_shapes(hf_gdn.make_config(num_v_heads=4))
    a = "model.layers.1.attn."
    assert s[a + "q_proj.weight"] == (32, 64) and s[a + "k_proj.weight"] == (32, 64)
    assert s[a + "v_proj.weight"] == (128, 64)        # 4 value heads of 16 * 2
    assert s[a + "a_proj.weight"] == (4, 64) and s[a + "b_proj.weight"] == (4, 64)
    assert s[a + "A_log"] == (4,) and s[a + "dt_bias"] == (4,)
    assert s[a + "v_conv1d.weight"] == (128, 1, 4)
    assert s[a + "o_norm.weight"] == (32,)
    assert s[a + "g_proj.weight"] == (128, 64) and s[a + "o_proj.weight"] == (64, 128)
    for bad in ({"num_v_heads": 3}, {"expand_v": 1.03}):
        with pytest.raises(HfLlamaError):
            hf_gdn.make_config(**bad)
    cfg = dict(hf_gdn.make_config())
    cfg["use_gate"] = False
    with pytest.raises(HfLlamaError):
        hf_gdn.resolved(cfg)


def test_separate_convs_equal_one_fused_conv():
    g = torch.Generator().manual_seed(0)
    wq, wk, wv = (torch.randn(n, 1, 4, generator=g, dtype=torch.float64) for n in (8, 8, 16))
    xq, xk, xv = (torch.randn(10, n, generator=g, dtype=torch.float64) for n in (8, 8, 16))
    zeros = [torch.zeros(3, n, dtype=torch.float64) for n in (8, 8, 16)]
    sep = torch.cat([causal_conv(x, z, w) for x, z, w in zip((xq, xk, xv), zeros, (wq, wk, wv))],
                    -1)
    fused = causal_conv(torch.cat([xq, xk, xv], -1), torch.zeros(3, 32, dtype=torch.float64),
                        torch.cat([wq, wk, wv]))
    assert torch.equal(sep, fused)


DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data"))
TINY = os.path.join(DATA, "hf_gated_deltanet_tiny")
# tests/data/hf_gated_deltanet_tiny's flags (its README.md)
TINY_ARGS = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny"), "--hidden_size", "64",
             "--num_hidden_layers", "2", "--num_heads", "2", "--num_v_heads", "4",
             "--head_dim", "16", "--expand_v", "2", "--intermediate_size", "128",
             "--dtype", "bfloat16", "--seed", "1", "--init_gain", "1.5"]


def test_writer_reproduces_committed_folder(tmp_path):
    out = str(tmp_path / "tiny")
    assert hf_gdn.main(["--out", out] + TINY_ARGS) == 0
    assert sorted(os.listdir(out)) == sorted(
        f for f in os.listdir(TINY) if not f.startswith("golden_") and f != "README.md")
    for f in sorted(os.listdir(out)):
        with open(os.path.join(TINY, f), "rb") as fa, open(os.path.join(out, f), "rb") as fb:
            assert fa.read() == fb.read(), f


def test_reference_reproduces_golden():
    import hf_llama_golden
    with open(os.path.join(TINY, "golden_reference.json")) as f:
        g = json.load(f)
    assert g["prompt"] == hf_llama_golden.seeded_prompt(512, 80)
    m = HfGatedDeltaNet.load(TINY)
    logits = m.logits(g["prompt"])
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-6, rtol=1e-7)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]


HYBRID = os.path.join(DATA, "hf_gated_deltanet_hybrid_tiny")
# tests/data/hf_gated_deltanet_hybrid_tiny's flags (its README.md)
HYBRID_ARGS = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny"), "--hidden_size", "64",
               "--num_hidden_layers", "3", "--num_heads", "2", "--num_v_heads", "4",
               "--head_dim", "16", "--expand_v", "2", "--intermediate_size", "128",
               "--dtype", "bfloat16", "--attn_layers", "1", "--attn_num_heads", "4",
               "--attn_num_kv_heads", "2", "--attn_qkv_bias", "--seed", "4", "--init_gain", "1.5"]


def test_writer_reproduces_committed_hybrid_folder(tmp_path):
    out = str(tmp_path / "hybrid")
    assert hf_gdn.main(["--out", out] + HYBRID_ARGS) == 0
    with open(os.path.join(out, "config.json")) as f:
        attn = json.load(f)["attn"]
    assert attn == {"layers": [1], "num_heads": 4, "num_kv_heads": 2, "qkv_bias": True,
                    "window_size": None, "rope_theta": 10000.0}
    for f in sorted(os.listdir(out)):
        with open(os.path.join(HYBRID, f), "rb") as fa, open(os.path.join(out, f), "rb") as fb:
            assert fa.read() == fb.read(), f
    shapes = hf_gdn.tensor_shapes(hf_gdn.make_config(num_hidden_layers=3,
                                                     **{"attn": attn}))
    assert "model.layers.1.attn.A_log" not in shapes
    assert shapes["model.layers.1.attn.k_proj.bias"] == (32,)


def test_reference_reproduces_hybrid_golden():
    with open(os.path.join(HYBRID, "golden_reference.json")) as f:
        g = json.load(f)
    m = HfGatedDeltaNet.load(HYBRID)
    logits = m.logits(g["prompt"])
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-6, rtol=1e-7)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]
