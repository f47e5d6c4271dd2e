"""tools/hf_qwen35.py and tools/flatstate_ref/qwen35.py: the writer's layouts, token-by-token
decoding equal to the full-sequence forward (1e-9), the multimodal layout's text part equal to
the text-only one, and Qwen3-Next's interleaved in_proj_qkvz / in_proj_ba equal to Qwen3.5's
split projections once permuted."""
import json
import os
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import hf_qwen35  # noqa: E402
from flatstate_ref.llama import load_hf_tensors  # noqa: E402
from flatstate_ref.qwen35 import HfQwen35  # noqa: E402

IDS = [1] + [int(x) for x in
             torch.randint(3, 512, (79,), generator=torch.Generator().manual_seed(5))]


def _write(tmp_path, family, **kw):
    out = str(tmp_path / family)
    cfg = hf_qwen35.make_config(family, dtype="float32", mtp=family == "qwen3_5_vl", **kw)
    hf_qwen35.write_hf_qwen35(out, cfg, seed=3)
    return out


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_next"])
def test_token_by_token_equals_full_sequence(tmp_path, family):
    m = HfQwen35.load(_write(tmp_path, family, num_hidden_layers=4))
    full = m.forward(IDS)                            # chunked WY form, one call
    st = m.new_state()
    rows = [m.forward([t], st, mode="recurrent")[0] for t in IDS]
    assert (torch.stack(rows) - full).abs().max().item() < 1e-9
    st = m.new_state()                               # split prefill off the chunk grid
    parts = torch.cat([m.forward(IDS[:30], st), m.forward(IDS[30:70], st),
                       m.forward(IDS[70:], st)])
    assert (parts - full).abs().max().item() < 1e-9
    assert full.std().item() > 0.5                   # logits spread: not a degenerate model


def test_multimodal_layout_text_part(tmp_path):
    text = HfQwen35.load(_write(tmp_path, "qwen3_5"))
    vl_dir = _write(tmp_path, "qwen3_5_vl")
    with open(os.path.join(vl_dir, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    assert cfg["text_config"]["model_type"] == "qwen3_5_text"
    names = set(load_hf_tensors(vl_dir))
    assert "model.language_model.layers.0.linear_attn.in_proj_qkv.weight" in names
    assert any(n.startswith("model.visual.") for n in names)
    assert any(n.startswith("mtp.") for n in names)
    vl = HfQwen35.load(vl_dir)
    assert torch.equal(vl.logits(IDS[:20]), text.logits(IDS[:20]))


def test_shapes_per_layer_type():
    cfg = hf_qwen35.make_config("qwen3_5", num_hidden_layers=4)
    s = hf_qwen35.tensor_shapes(cfg)
    assert s["model.layers.0.linear_attn.in_proj_qkv.weight"] == (2 * 2 * 16 + 4 * 16, 64)
    assert s["model.layers.0.linear_attn.conv1d.weight"] == (128, 1, 4)
    assert s["model.layers.0.linear_attn.norm.weight"] == (16,)
    assert s["model.layers.3.self_attn.q_proj.weight"] == (2 * 4 * 32, 64)
    assert "model.layers.3.linear_attn.A_log" not in s
    assert "model.layers.0.self_attn.q_proj.weight" not in s
    n = hf_qwen35.tensor_shapes(hf_qwen35.make_config("qwen3_next"))
    assert n["model.layers.0.linear_attn.in_proj_qkvz.weight"] == (2 * 2 * 16 + 2 * 4 * 16, 64)
    assert n["model.layers.0.linear_attn.in_proj_ba.weight"] == (8, 64)


def _to_next(t35, cfg):
    """Qwen3.5 split projections -> Qwen3-Next interleaved ones (per key head blocks)."""
    Hk, Hv, dk, dv = 2, 4, 16, 16
    r = Hv // Hk
    out = {}
    for n, w in t35.items():
        if n.endswith("in_proj_qkv.weight"):
            p = n[:-len("in_proj_qkv.weight")]
            q, k, v = w[:Hk * dk], w[Hk * dk:2 * Hk * dk], w[2 * Hk * dk:]
            z = t35[p + "in_proj_z.weight"]
            blocks = []
            for h in range(Hk):
                blocks += [q[h * dk:(h + 1) * dk], k[h * dk:(h + 1) * dk],
                           v[h * r * dv:(h + 1) * r * dv], z[h * r * dv:(h + 1) * r * dv]]
            out[p + "in_proj_qkvz.weight"] = torch.cat(blocks)
            b, a = t35[p + "in_proj_b.weight"], t35[p + "in_proj_a.weight"]
            out[p + "in_proj_ba.weight"] = torch.cat(
                [x for h in range(Hk) for x in (b[h * r:(h + 1) * r], a[h * r:(h + 1) * r])])
        elif not n.endswith(("in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight")):
            out[n] = w
    return out


def test_qwen3_next_interleaving_matches_qwen35(tmp_path):
    d = _write(tmp_path, "qwen3_5")
    t35 = load_hf_tensors(d)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    m35 = HfQwen35(cfg, t35)
    ncfg = hf_qwen35.make_config("qwen3_next", dtype="float32")
    mnext = HfQwen35(ncfg, _to_next(t35, ncfg))
    assert (m35.logits(IDS[:24]) - mnext.logits(IDS[:24])).abs().max().item() == 0.0


DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data"))
TINY = os.path.join(DATA, "hf_qwen35_tiny")
# tests/data/hf_qwen35_tiny's flags (its README.md; tools/llamacpp_parity.sh FAMILY=qwen35)
TINY_ARGS = ["--family", "qwen3_5", "--tokenizer", os.path.join(DATA, "hf_llama_tiny"),
             "--hidden_size", "32", "--intermediate_size", "48", "--num_hidden_layers", "4",
             "--num_attention_heads", "2", "--num_key_value_heads", "1", "--head_dim", "32",
             "--linear_num_key_heads", "2", "--linear_num_value_heads", "4",
             "--linear_key_head_dim", "16", "--linear_value_head_dim", "16",
             "--tie_word_embeddings", "--dtype", "bfloat16", "--seed", "6", "--init_gain", "1.5"]


def test_writer_reproduces_committed_folder(tmp_path):
    out = str(tmp_path / "tiny")
    assert hf_qwen35.main(["--out", out] + TINY_ARGS) == 0
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
    m = HfQwen35.load(TINY)
    logits = m.logits(g["prompt"])
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-6, rtol=1e-7)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]


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
