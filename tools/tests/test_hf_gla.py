"""tools/hf_gla.py and tools/flatstate_ref/gla.py: fla's tensor names and shapes, token-by-token
decoding (the recurrent form) equal to the full-sequence chunked forward (1e-9) for every
option the reference takes, kv groups equal to the same model with k / v / gk rows repeated per
head (what the C++ loader does), and the committed golden folder reproduced."""
import json
import os
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import hf_gla  # noqa: E402
from flatstate_ref.gla import HfGla  # noqa: E402
from flatstate_ref.llama import load_hf_tensors  # noqa: E402
from hf_llama import HfLlamaError  # noqa: E402

IDS = [1] + [int(x) for x in
             torch.randint(3, 512, (79,), generator=torch.Generator().manual_seed(5))]

VARIANTS = {
    "fla_defaults": {},
    "kv_groups_conv": {"num_heads": 4, "num_kv_heads": 2, "use_short_conv": True},
    "no_gate_unfused_clamp": {"use_output_gate": False, "fuse_norm": False, "clamp_min": -0.02,
                              "tie_word_embeddings": True},
    "gate_unfused": {"fuse_norm": False, "expand_k": 1.0, "intermediate_size": 96},
    "hybrid": {"num_hidden_layers": 3, "use_short_conv": True, "num_kv_heads": 2,
               "attn": {"layers": [0, 2], "num_heads": 4, "num_kv_heads": 1, "qkv_bias": True}},
}


def _write(tmp_path, name, **kw):
    out = str(tmp_path / name)
    cfg = hf_gla.make_config(dtype="float32", **kw)
    hf_gla.write_hf_gla(out, cfg, seed=3)
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_token_by_token_equals_full_sequence(tmp_path, variant):
    m = HfGla.load(_write(tmp_path, variant, **VARIANTS[variant]))
    full = m.forward(IDS)                            # chunked form, one call
    st = m.new_state()
    rows = [m.forward([t], st, mode="recurrent")[0] for t in IDS]
    assert (torch.stack(rows) - full).abs().max().item() < 1e-9
    st = m.new_state()                               # split prefill off the chunk grid
    parts = torch.cat([m.forward(IDS[:30], st), m.forward(IDS[30:70], st),
                       m.forward(IDS[70:], st)])
    assert (parts - full).abs().max().item() < 1e-9
    assert full.std().item() > 0.5                   # logits spread: not a degenerate model


def test_names_and_shapes_as_fla():
    s = hf_gla.tensor_shapes(hf_gla.make_config(num_heads=4, num_kv_heads=2,
                                                use_short_conv=True))
    a = "model.layers.0.attn."
    assert s["model.embeddings.weight"] == (512, 64)
    assert s[a + "q_proj.weight"] == (32, 64)          # expand_k 0.5
    assert s[a + "k_proj.weight"] == (16, 64)          # 2 kv heads of dk 8
    assert s[a + "v_proj.weight"] == (32, 64)          # 2 kv heads of dv 16
    assert s[a + "g_proj.weight"] == (64, 64)
    assert s[a + "gk_proj.0.weight"] == (16, 64)
    assert s[a + "gk_proj.1.weight"] == (16, 16)
    assert s[a + "gk_proj.1.bias"] == (16,)
    assert s[a + "k_conv1d.weight"] == (16, 1, 4)
    assert s[a + "g_norm_swish_gate.weight"] == (16,)
    assert s["model.layers.0.mlp.gate_proj.weight"] == (256, 64)   # int(64*4*2/3) -> 256
    assert "lm_head.weight" in s
    u = hf_gla.tensor_shapes(hf_gla.make_config(use_output_gate=False))
    assert a + "g_norm.weight" in u and a + "g_proj.weight" not in u
    assert hf_gla.resolved(hf_gla.make_config(hidden_size=384, hidden_ratio=4))["I"] == 1024
    with pytest.raises(HfLlamaError):
        hf_gla.make_config(num_heads=3)
    cfg = dict(hf_gla.make_config())
    cfg["feature_map"] = "relu"
    with pytest.raises(HfLlamaError):
        hf_gla.resolved(cfg)


def test_kv_groups_equal_repeated_rows(tmp_path):
    d = _write(tmp_path, "gqa", num_heads=4, num_kv_heads=2, use_short_conv=True)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    t = load_hf_tensors(d)
    dk, dv, G = 8, 16, 2
    full_cfg = dict(cfg, num_kv_heads=None)
    ft = {}
    for n, w in t.items():
        rep = dk if n.endswith(("k_proj.weight", "k_conv1d.weight", "gk_proj.1.weight",
                                "gk_proj.1.bias")) else dv if n.endswith(
                                    ("v_proj.weight", "v_conv1d.weight")) else 0
        if rep:
            w = torch.cat([w[(j // G) * rep:(j // G + 1) * rep] for j in range(4)])
        ft[n] = w
    a, b = HfGla(cfg, t), HfGla(full_cfg, ft)
    assert (a.logits(IDS[:40]) - b.logits(IDS[:40])).abs().max().item() < 1e-12


DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data"))
TINY = os.path.join(DATA, "hf_gla_tiny")
# tests/data/hf_gla_tiny's flags (its README.md)
TINY_ARGS = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny"), "--hidden_size", "64",
             "--num_hidden_layers", "2", "--num_heads", "2", "--num_kv_heads", "1",
             "--use_short_conv", "--dtype", "bfloat16", "--seed", "6", "--init_gain", "1.5"]


# tests/data/hf_gla_nogate_tiny's (no output gate, unfused norm, clamp_min, no kv groups, tied)
NOGATE = os.path.join(DATA, "hf_gla_nogate_tiny")
NOGATE_ARGS = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny"), "--hidden_size", "32",
               "--num_hidden_layers", "2", "--num_heads", "2", "--expand_k", "1",
               "--no_output_gate", "--no_fuse_norm", "--clamp_min", "-0.05",
               "--tie_word_embeddings", "--dtype", "bfloat16", "--seed", "6", "--init_gain", "1.5"]
# tests/data/hf_gla_hybrid_tiny's (fla's attn layer 0, then GLA layers as hf_gla_tiny's)
HYBRID = os.path.join(DATA, "hf_gla_hybrid_tiny")
HYBRID_ARGS = ["--tokenizer", os.path.join(DATA, "hf_llama_tiny"), "--hidden_size", "64",
               "--num_hidden_layers", "3", "--num_heads", "2", "--num_kv_heads", "1",
               "--use_short_conv", "--intermediate_size", "128", "--dtype", "bfloat16",
               "--attn_layers", "0", "--attn_num_heads", "2", "--attn_num_kv_heads", "1",
               "--attn_rope_theta", "500", "--seed", "3", "--init_gain", "1.5"]
FOLDERS = [(TINY, TINY_ARGS), (NOGATE, NOGATE_ARGS), (HYBRID, HYBRID_ARGS)]


@pytest.mark.parametrize("folder,args", FOLDERS)
def test_writer_reproduces_committed_folder(tmp_path, folder, args):
    out = str(tmp_path / "tiny")
    assert hf_gla.main(["--out", out] + args) == 0
    assert sorted(os.listdir(out)) == sorted(
        f for f in os.listdir(folder) if not f.startswith("golden_") and f != "README.md")
    for f in sorted(os.listdir(out)):
        with open(os.path.join(folder, f), "rb") as fa, open(os.path.join(out, f), "rb") as fb:
            assert fa.read() == fb.read(), f


@pytest.mark.parametrize("folder", [TINY, NOGATE, HYBRID])
def test_reference_reproduces_golden(folder):
    import hf_llama_golden
    with open(os.path.join(folder, "golden_reference.json")) as f:
        g = json.load(f)
    assert g["prompt"] == hf_llama_golden.seeded_prompt(512, 80)
    m = HfGla.load(folder)
    logits = m.logits(g["prompt"])
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-6, rtol=1e-7)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]
