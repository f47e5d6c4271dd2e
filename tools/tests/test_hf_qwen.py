"""tools/hf_llama.py --family qwen2 / qwen3 (Qwen2ForCausalLM, Qwen3ForCausalLM folders) and the
float64 reference (tools/flatstate_ref/llama.py) on them, against the committed folders
tests/data/hf_qwen2_tiny and tests/data/hf_qwen3_tiny and their golden vectors. Needs neither
llama.cpp nor sentencepiece (the tokenizer is copied from tests/data/hf_llama_tiny)."""
import json
import os
import sys

import numpy as np
import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = os.path.join(HERE, "..")
sys.path.insert(0, TOOLS)
sys.path.insert(0, HERE)
import hf_llama  # noqa: E402
import hf_llama_golden  # noqa: E402
from flatstate_ref.llama import HfLlama, load_hf_tensors, rms_norm  # noqa: E402
from test_hf_llama import check_layout  # noqa: E402

DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data"))
LLAMA_TOKENIZER = os.path.join(DATA, "hf_llama_tiny")
QWEN2 = os.path.join(DATA, "hf_qwen2_tiny")
QWEN3 = os.path.join(DATA, "hf_qwen3_tiny")
FOLDERS = [QWEN2, QWEN3]
# The flags each committed folder was written with (its README.md; tools/llamacpp_parity.sh
# FAMILY=qwen2 / qwen3 defaults); the tokenizer is copied from tests/data/hf_llama_tiny.
FOLDER_ARGS = {
    QWEN2: ["--family", "qwen2", "--hidden_size", "64", "--intermediate_size", "192",
            "--num_hidden_layers", "2", "--num_attention_heads", "4",
            "--num_key_value_heads", "2", "--head_dim", "0", "--rope_theta", "1000000",
            "--rms_norm_eps", "1e-6", "--tie_word_embeddings", "--dtype", "bfloat16",
            "--shards", "2", "--seed", "7", "--init_gain", "3"],
    QWEN3: ["--family", "qwen3", "--hidden_size", "96", "--intermediate_size", "256",
            "--num_hidden_layers", "3", "--num_attention_heads", "6",
            "--num_key_value_heads", "2", "--head_dim", "24", "--rope_theta", "1000000",
            "--rms_norm_eps", "1e-6", "--dtype", "bfloat16", "--shards", "2", "--seed", "20",
            "--init_gain", "1"],
}
# config.json keys exactly (the published Qwen2.5 / Qwen3 checkpoints' sets)
QWEN2_KEYS = {"architectures", "attention_dropout", "bos_token_id", "eos_token_id", "hidden_act",
              "hidden_size", "initializer_range", "intermediate_size",
              "max_position_embeddings", "max_window_layers", "model_type",
              "num_attention_heads", "num_hidden_layers", "num_key_value_heads",
              "rms_norm_eps", "rope_scaling", "rope_theta", "sliding_window",
              "tie_word_embeddings", "torch_dtype", "transformers_version", "use_cache",
              "use_sliding_window", "vocab_size"}
QWEN3_KEYS = QWEN2_KEYS | {"attention_bias", "head_dim"}
FAMILY = {"qwen2": (QWEN2_KEYS, "Qwen2ForCausalLM"), "qwen3": (QWEN3_KEYS, "Qwen3ForCausalLM")}


def write(tmp_path, family, *args, head_dim="12"):
    out = str(tmp_path)
    assert hf_llama.main(["--out", out, "--family", family, "--tokenizer", "none",
                          "--vocab_size", "64", "--hidden_size", "32", "--intermediate_size",
                          "48", "--num_hidden_layers", "2", "--num_attention_heads", "4",
                          "--num_key_value_heads", "2", "--head_dim", head_dim] + list(args)) == 0
    with open(os.path.join(out, "config.json")) as f:
        return out, json.load(f)


def check_family_layout(folder):
    with open(os.path.join(folder, "config.json")) as f:
        family = json.load(f)["model_type"]
    keys, arch = FAMILY[family]
    cfg, index = check_layout(folder, keys, arch, family)
    assert set(cfg) == keys
    assert cfg["use_sliding_window"] is False
    assert cfg["max_window_layers"] == cfg["num_hidden_layers"]
    return cfg, index


# ----------------------------------------------------------------------------------------------
# the writer
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("args", [[], ["--tie_word_embeddings", "--shards", "3"],
                                  ["--dtype", "float32", "--shards", "1"]])
def test_qwen2_layout(tmp_path, args):
    out, cfg = write(tmp_path, "qwen2", *args, head_dim="0")
    check_family_layout(out)
    assert "head_dim" not in cfg and "attention_bias" not in cfg
    assert cfg["sliding_window"] == cfg["max_position_embeddings"]
    names = list(hf_llama.tensor_shapes(cfg))
    assert ("lm_head.weight" in names) != ("--tie_word_embeddings" in args)
    s = hf_llama.tensor_shapes(cfg)
    for i in range(2):
        p = f"model.layers.{i}.self_attn."
        assert s[p + "q_proj.bias"] == (32,) and s[p + "k_proj.bias"] == (16,)
        assert s[p + "v_proj.bias"] == (16,)
        assert p + "o_proj.bias" not in s
    assert not any("_norm." in n or "mlp" in n and n.endswith(".bias") for n in names)


def test_qwen2_tensor_names_are_transformers_names(tmp_path):
    _, cfg = write(tmp_path, "qwen2", head_dim="0")
    want = ["model.embed_tokens.weight"]
    for i in range(2):
        p = f"model.layers.{i}."
        for proj in "qkv":
            want += [p + f"self_attn.{proj}_proj.weight", p + f"self_attn.{proj}_proj.bias"]
        want += [p + "self_attn.o_proj.weight"]
        want += [p + f"mlp.{proj}_proj.weight" for proj in ("gate", "up", "down")]
        want += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    want += ["model.norm.weight", "lm_head.weight"]
    assert list(hf_llama.tensor_shapes(cfg)) == want


@pytest.mark.parametrize("args", [[], ["--attention_bias", "--tie_word_embeddings"],
                                  ["--dtype", "float16", "--shards", "3"]])
def test_qwen3_layout(tmp_path, args):
    out, cfg = write(tmp_path, "qwen3", *args)
    check_family_layout(out)
    assert cfg["head_dim"] == 12 and cfg["sliding_window"] is None
    assert cfg["attention_bias"] == ("--attention_bias" in args)
    s = hf_llama.tensor_shapes(cfg)
    for i in range(2):
        p = f"model.layers.{i}.self_attn."
        assert s[p + "q_proj.weight"] == (48, 32) and s[p + "k_proj.weight"] == (24, 32)
        assert s[p + "o_proj.weight"] == (32, 48)
        assert s[p + "q_norm.weight"] == (12,) and s[p + "k_norm.weight"] == (12,)
        for proj in "qkvo":
            assert (p + f"{proj}_proj.bias" in s) == ("--attention_bias" in args)


def test_qwen3_tensor_names_are_transformers_names(tmp_path):
    _, cfg = write(tmp_path, "qwen3")
    want = ["model.embed_tokens.weight"]
    for i in range(2):
        p = f"model.layers.{i}."
        want += [p + f"self_attn.{proj}_proj.weight" for proj in "qkvo"]
        want += [p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"]
        want += [p + f"mlp.{proj}_proj.weight" for proj in ("gate", "up", "down")]
        want += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    want += ["model.norm.weight", "lm_head.weight"]
    assert list(hf_llama.tensor_shapes(cfg)) == want


@pytest.mark.parametrize("family,args", [
    ("qwen2", ["--head_dim", "12"]),          # Qwen2 has no head_dim key: hidden / heads only
    ("qwen2", ["--head_dim", "0", "--attention_bias"]),
    ("qwen2", ["--head_dim", "0", "--mlp_bias"]),
    ("qwen3", ["--mlp_bias"]),
])
def test_writer_refuses(tmp_path, family, args):
    assert hf_llama.main(["--out", str(tmp_path), "--family", family, "--tokenizer", "none",
                          "--hidden_size", "32", "--num_attention_heads", "4"] + args) == 1


def test_llama_family_is_the_default(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    base = ["--tokenizer", "none", "--hidden_size", "32", "--intermediate_size", "48",
            "--num_hidden_layers", "1", "--head_dim", "8"]
    assert hf_llama.main(["--out", str(a)] + base) == 0
    assert hf_llama.main(["--out", str(b), "--family", "llama"] + base) == 0
    for f in sorted(os.listdir(a)):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


# ----------------------------------------------------------------------------------------------
# the reference
# ----------------------------------------------------------------------------------------------

def test_qwen3_q_norm_is_per_head_before_rope(tmp_path):
    """Scaling one q head's and one kv head's projection rows changes nothing (each head is
    RMS-normalised after the projection), while the same scaling in a Llama-style model (no
    q_norm/k_norm) does; and the result is the per-head rmsnorm, then rope."""
    out, cfg = write(tmp_path, "qwen3", "--dtype", "float32", "--rms_norm_eps", "1e-12")
    t = load_hf_tensors(out)
    ids = [1, 5, 9, 20, 33, 7, 7, 40]
    base = HfLlama(cfg, dict(t)).logits(ids)
    hd = cfg["head_dim"]
    scaled = dict(t)
    for L in range(cfg["num_hidden_layers"]):
        for proj, head in (("q_proj", 3), ("k_proj", 1)):
            n = f"model.layers.{L}.self_attn.{proj}.weight"
            w = scaled[n].clone()
            w[head * hd:(head + 1) * hd] *= 7.0
            scaled[n] = w
    assert torch.allclose(HfLlama(cfg, scaled).logits(ids), base, atol=1e-9, rtol=0)
    # the same model read as a Llama (no q_norm / k_norm) sees the scaling
    llama_cfg = dict(cfg, model_type="llama")
    drop = ("q_norm.weight", "k_norm.weight")
    plain = {n: v for n, v in t.items() if not n.endswith(drop)}
    plain_scaled = {n: v for n, v in scaled.items() if not n.endswith(drop)}
    assert not torch.allclose(HfLlama(llama_cfg, plain).logits(ids),
                              HfLlama(llama_cfg, plain_scaled).logits(ids), atol=1e-3, rtol=0)
    # rmsnorm is over the last (head_dim) axis with weight [head_dim]
    x = torch.randn(2, 3, hd, dtype=torch.float64)
    w = 1 + 0.1 * torch.randn(hd, dtype=torch.float64)
    y = rms_norm(x, w, 1e-6)
    assert torch.allclose(y, x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w)


def test_qwen2_biases_are_used(tmp_path):
    out, cfg = write(tmp_path, "qwen2", "--dtype", "float32", head_dim="0")
    t = load_hf_tensors(out)
    ids = [1, 5, 9, 20, 33]
    zero = {n: (torch.zeros_like(v) if n.endswith(".bias") else v) for n, v in t.items()}
    assert not torch.allclose(HfLlama(cfg, t).logits(ids), HfLlama(cfg, zero).logits(ids))


def test_reference_refuses_sliding_window_and_unknown_type(tmp_path):
    out, cfg = write(tmp_path, "qwen2", head_dim="0")
    t = load_hf_tensors(out)
    with pytest.raises(hf_llama.HfLlamaError, match="use_sliding_window"):
        HfLlama(dict(cfg, use_sliding_window=True), t)
    with pytest.raises(hf_llama.HfLlamaError, match="model_type"):
        HfLlama(dict(cfg, model_type="mistral"), t)
    with pytest.raises(hf_llama.HfLlamaError, match="missing or extra"):
        HfLlama(dict(cfg, model_type="qwen3", attention_bias=False), t)


# ----------------------------------------------------------------------------------------------
# the committed folders and their golden vectors
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", FOLDERS)
def test_committed_folder_layout(folder):
    cfg, index = check_family_layout(folder)
    assert cfg["vocab_size"] == hf_llama.tokenizer_model_vocab_size(
        os.path.join(folder, "tokenizer.model"))
    assert cfg["bos_token_id"] == 1 and cfg["eos_token_id"] == 2
    assert len(set(index["weight_map"].values())) == 2 and cfg["torch_dtype"] == "bfloat16"
    assert cfg["num_key_value_heads"] < cfg["num_attention_heads"]   # GQA
    if folder == QWEN2:
        assert cfg["tie_word_embeddings"] and "lm_head.weight" not in index["weight_map"]
    else:
        assert cfg["head_dim"] != cfg["hidden_size"] // cfg["num_attention_heads"]
        assert "lm_head.weight" in index["weight_map"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_writer_reproduces_committed_folder(tmp_path, folder):
    out = str(tmp_path)
    assert hf_llama.main(["--out", out, "--tokenizer", LLAMA_TOKENIZER] +
                         FOLDER_ARGS[folder]) == 0
    assert sorted(os.listdir(out)) == sorted(
        f for f in os.listdir(folder) if not f.startswith("golden_") and f != "README.md")
    for f in sorted(os.listdir(out)):
        with open(os.path.join(folder, f), "rb") as fa, open(os.path.join(out, f), "rb") as fb:
            assert fa.read() == fb.read(), f


@pytest.mark.parametrize("folder", FOLDERS)
def test_reference_reproduces_golden(folder):
    with open(os.path.join(folder, "golden_reference.json")) as f:
        g = json.load(f)
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    assert g["prompt"] == hf_llama_golden.seeded_prompt(cfg["vocab_size"])
    m = HfLlama.load(folder)
    logits = m.logits(g["prompt"])
    want = torch.tensor(g["logits"], dtype=torch.float64)
    assert torch.allclose(logits[g["positions"]], want, atol=1e-7, rtol=1e-8)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_llamacpp_golden_agrees_with_reference_golden(folder):
    with open(os.path.join(folder, "golden_reference.json")) as f:
        ref = json.load(f)
    with open(os.path.join(folder, "golden_llamacpp.json")) as f:
        cpp = json.load(f)
    assert cpp["prompt"] == ref["prompt"] and cpp["positions"] == ref["positions"]
    diff = np.abs(np.array(cpp["logits"]) - np.array(ref["logits"])).max()
    assert diff < 1e-3
    assert cpp["greedy"] == ref["greedy"]
    assert cpp["vs_reference"]["greedy_agree"] is True
    assert min(ref["greedy_top2_margins"]) > 20 * cpp["vs_reference"]["max_abs_diff_greedy_logits"]
