"""tools/hf_llama.py (the Hugging Face Llama folder writer) and tools/flatstate_ref/llama.py (the
float64 reference) against the committed folders in tests/data/hf_llama_tiny and their golden
vectors. Needs neither llama.cpp nor sentencepiece (the tokenizer is copied, not trained)."""
import json
import math
import os
import struct
import sys

import numpy as np
import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import hf_llama  # noqa: E402
import hf_llama_golden  # noqa: E402
from flatstate_ref.llama import HfLlama, load_hf_tensors, rope_inv_freq, rotate_half  # noqa: E402

DATA = os.path.normpath(os.path.join(TOOLS, "..", "tests", "data", "hf_llama_tiny"))
FOLDERS = [DATA, os.path.join(DATA, "llama3_bias_tied")]
# The flags each committed folder was written with (README.md there); the tokenizer is copied.
FOLDER_ARGS = {
    DATA: ["--vocab_size", "512", "--hidden_size", "96", "--intermediate_size", "256",
           "--num_hidden_layers", "3", "--num_attention_heads", "4",
           "--num_key_value_heads", "2", "--head_dim", "32", "--dtype", "bfloat16",
           "--shards", "2", "--seed", "1"],
    os.path.join(DATA, "llama3_bias_tied"): [
        "--hidden_size", "64", "--intermediate_size", "128", "--num_hidden_layers", "2",
        "--num_attention_heads", "4", "--num_key_value_heads", "2", "--head_dim", "0",
        "--rope_scaling", "llama3:8,1,4,64", "--attention_bias", "--mlp_bias",
        "--tie_word_embeddings", "--dtype", "bfloat16", "--shards", "2", "--seed", "2",
        "--init_gain", "3"],
}
CONFIG_KEYS = {"architectures", "model_type", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "rms_norm_eps", "rope_theta", "rope_scaling", "attention_bias", "mlp_bias",
               "tie_word_embeddings", "torch_dtype", "bos_token_id", "eos_token_id",
               "vocab_size", "max_position_embeddings", "hidden_act"}


def write(tmp_path, *args):
    out = str(tmp_path)
    assert hf_llama.main(["--out", out, "--tokenizer", "none", "--vocab_size", "64",
                          "--hidden_size", "32", "--intermediate_size", "48",
                          "--num_hidden_layers", "2", "--num_attention_heads", "4",
                          "--num_key_value_heads", "2", "--head_dim", "12"] + list(args)) == 0
    with open(os.path.join(out, "config.json")) as f:
        return out, json.load(f)


def check_layout(folder, config_keys=CONFIG_KEYS, arch="LlamaForCausalLM", model_type="llama"):
    """Everything a loader relies on: the index names every tensor of the config exactly once,
    each shard parses (header padded to 8, offsets contiguous in sorted-name order, sizes match
    shape x dtype), dtypes are torch_dtype's, total_size is the data bytes. (test_hf_qwen.py
    calls it with the Qwen families' keys.)"""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    assert config_keys <= set(cfg)
    assert cfg["architectures"] == [arch] and cfg["model_type"] == model_type
    assert cfg["hidden_act"] == "silu"
    with open(os.path.join(folder, "model.safetensors.index.json")) as f:
        index = json.load(f)
    assert set(index) == {"metadata", "weight_map"}
    shapes = hf_llama.tensor_shapes(cfg)
    wm = index["weight_map"]
    assert set(wm) == set(shapes)
    assert list(wm) == sorted(wm)
    shards = sorted(set(wm.values()))
    n = len(shards)
    assert shards == [f"model-{k:05d}-of-{n:05d}.safetensors" for k in range(1, n + 1)]
    on_disk = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    assert on_disk == shards
    st_dtype, _, esize = hf_llama.DTYPES[cfg["torch_dtype"]]
    total = 0
    for shard in shards:
        path = os.path.join(folder, shard)
        hn, header = hf_llama.read_safetensors_header(path)
        assert hn % 8 == 0
        assert header["__metadata__"] == {"format": "pt"}
        names = [k for k in header if k != "__metadata__"]
        assert names == sorted(names)
        assert set(names) == {k for k, v in wm.items() if v == shard}
        off = 0
        for name in names:
            info = header[name]
            assert info["dtype"] == st_dtype
            assert tuple(info["shape"]) == shapes[name]
            assert info["data_offsets"] == [off, off + esize * math.prod(shapes[name])]
            off = info["data_offsets"][1]
        assert os.path.getsize(path) == 8 + hn + off
        total += off
        assert set(hf_llama.read_safetensors(path)) == set(names)
    assert index["metadata"]["total_size"] == total
    return cfg, index


@pytest.mark.parametrize("args", [
    [],
    ["--attention_bias", "--mlp_bias", "--tie_word_embeddings", "--shards", "3"],
    ["--dtype", "float32", "--shards", "1", "--rope_scaling", "linear:2"],
    ["--dtype", "float16", "--rope_scaling", "llama3:8,1,4,32", "--head_dim", "0"],
])
def test_writer_layout(tmp_path, args):
    out, cfg = write(tmp_path, *args)
    check_layout(out)
    names = set(hf_llama.tensor_shapes(cfg))
    assert ("lm_head.weight" in names) != ("--tie_word_embeddings" in args)
    assert any(n.endswith("q_proj.bias") for n in names) == ("--attention_bias" in args)
    assert any(n.endswith("down_proj.bias") for n in names) == ("--mlp_bias" in args)
    assert cfg["head_dim"] == (8 if "--head_dim" in args else 12)
    assert not any(os.path.exists(os.path.join(out, f)) for f in hf_llama.TOKENIZER_FILES)


def test_tensor_names_are_transformers_names(tmp_path):
    _, cfg = write(tmp_path, "--attention_bias", "--mlp_bias")
    got = list(hf_llama.tensor_shapes(cfg))
    want = ["model.embed_tokens.weight"]
    for i in range(2):
        p = f"model.layers.{i}."
        for proj in "qkvo":
            want += [p + f"self_attn.{proj}_proj.weight", p + f"self_attn.{proj}_proj.bias"]
        for proj in ("gate", "up", "down"):
            want += [p + f"mlp.{proj}_proj.weight", p + f"mlp.{proj}_proj.bias"]
        want += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
    want += ["model.norm.weight", "lm_head.weight"]
    assert got == want
    s = hf_llama.tensor_shapes(cfg)
    assert s["model.layers.0.self_attn.q_proj.weight"] == (48, 32)   # heads * head_dim, hidden
    assert s["model.layers.0.self_attn.k_proj.weight"] == (24, 32)
    assert s["model.layers.0.self_attn.o_proj.weight"] == (32, 48)
    assert s["model.layers.0.mlp.down_proj.weight"] == (32, 48)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_stored_values_are_the_rounded_weights(tmp_path, dtype):
    out, cfg = write(tmp_path, "--dtype", dtype, "--seed", "5")
    want = hf_llama.random_weights(cfg, seed=5)
    got = load_hf_tensors(out)
    td = hf_llama.DTYPES[dtype][1]
    for n, t in want.items():
        assert torch.equal(got[n], t.to(td).to(torch.float64)), n


def test_writer_is_deterministic(tmp_path):
    a, _ = write(tmp_path / "a")
    b, _ = write(tmp_path / "b")
    for f in sorted(os.listdir(a)):
        with open(os.path.join(a, f), "rb") as fa, open(os.path.join(b, f), "rb") as fb:
            assert fa.read() == fb.read(), f


def test_writer_refuses_to_overwrite(tmp_path):
    write(tmp_path)
    assert hf_llama.main(["--out", str(tmp_path), "--tokenizer", "none"]) == 1


def test_bad_safetensors_offsets(tmp_path):
    path = str(tmp_path / "x.safetensors")
    hf_llama.write_safetensors(path, {"a": torch.ones(4)}, "float32")
    n, header = hf_llama.read_safetensors_header(path)
    header["a"]["data_offsets"] = [0, 20]
    hb = json.dumps(header).encode()
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"\0" * 16)
    with pytest.raises(hf_llama.HfLlamaError, match="bad data_offsets"):
        hf_llama.read_safetensors(path)


# ----------------------------------------------------------------------------------------------
# the reference's pieces
# ----------------------------------------------------------------------------------------------

def test_rope_scaling_inv_freq():
    base = {"hidden_size": 64, "num_attention_heads": 4, "head_dim": 16, "rope_theta": 10000.0}
    inv = rope_inv_freq(dict(base, rope_scaling=None))
    assert torch.allclose(inv, 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    lin = rope_inv_freq(dict(base, rope_scaling={"rope_type": "linear", "factor": 4.0}))
    assert torch.equal(lin, inv / 4.0)
    l3 = rope_inv_freq(dict(base, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}))
    wavelen = 2 * math.pi / inv
    for i in range(8):
        if wavelen[i] < 16:          # high frequency: kept
            assert l3[i] == inv[i]
        elif wavelen[i] > 64:        # low frequency: divided by factor
            assert torch.isclose(l3[i], inv[i] / 8)
        else:                        # in between: interpolated
            smooth = (64 / wavelen[i] - 1) / 3
            assert torch.isclose(l3[i], (1 - smooth) * inv[i] / 8 + smooth * inv[i])
    # the committed variant has all three regimes
    assert (wavelen < 16).any() and (wavelen > 64).any()
    assert ((wavelen >= 16) & (wavelen <= 64)).any()


def test_rotate_half_pairs_i_with_i_plus_half():
    """HF's rope on a head vector is a rotation of each pair (x_i, x_{i+hd/2}) by angle_i."""
    hd = 8
    x = torch.randn(hd, dtype=torch.float64)
    ang = torch.rand(hd // 2, dtype=torch.float64) * 3
    cos, sin = torch.cat((ang.cos(), ang.cos())), torch.cat((ang.sin(), ang.sin()))
    y = x * cos + rotate_half(x) * sin
    for i in range(hd // 2):
        a, b = x[i], x[i + hd // 2]
        assert torch.isclose(y[i], a * ang[i].cos() - b * ang[i].sin())
        assert torch.isclose(y[i + hd // 2], b * ang[i].cos() + a * ang[i].sin())


def test_gqa_equals_mha_with_repeated_kv_heads(tmp_path):
    """q head j reads kv head j // (heads / kv_heads): the same model with each kv head's rows
    repeated into a full multi-head k/v gives the same logits."""
    out, cfg = write(tmp_path, "--attention_bias", "--dtype", "float32")
    t = load_hf_tensors(out)
    gqa = HfLlama(cfg, dict(t)).logits([1, 5, 9, 20, 33, 7])
    hd, kv, rep = cfg["head_dim"], cfg["num_key_value_heads"], 2
    mha_cfg = dict(cfg, num_key_value_heads=kv * rep)
    mt = dict(t)
    for n in list(mt):
        if ".k_proj." in n or ".v_proj." in n:
            w = mt[n].reshape(kv, hd, *mt[n].shape[1:])
            mt[n] = w.repeat_interleave(rep, dim=0).reshape(kv * rep * hd, *mt[n].shape[1:])
    mha = HfLlama(mha_cfg, mt).logits([1, 5, 9, 20, 33, 7])
    assert torch.allclose(gqa, mha, atol=1e-12, rtol=0)


def test_causal_prefix_logits_do_not_depend_on_later_tokens(tmp_path):
    out, _ = write(tmp_path)
    m = HfLlama.load(out)
    a = m.logits([1, 4, 8, 15, 16, 23])
    b = m.logits([1, 4, 8, 42, 3, 3])
    assert torch.allclose(a[:3], b[:3], atol=1e-12, rtol=0)
    assert not torch.allclose(a[3], b[3])


# ----------------------------------------------------------------------------------------------
# the committed folders and their golden vectors
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("folder", FOLDERS)
def test_committed_folder_layout(folder):
    cfg, _ = check_layout(folder)
    assert cfg["vocab_size"] == hf_llama.tokenizer_model_vocab_size(
        os.path.join(folder, "tokenizer.model"))
    assert cfg["bos_token_id"] == 1 and cfg["eos_token_id"] == 2
    with open(os.path.join(folder, "tokenizer_config.json")) as f:
        tc = json.load(f)
    assert tc["bos_token"] == "<s>" and tc["eos_token"] == "</s>"


@pytest.mark.parametrize("folder", FOLDERS)
def test_writer_reproduces_committed_folder(tmp_path, folder):
    out = str(tmp_path)
    assert hf_llama.main(["--out", out, "--tokenizer", folder] + FOLDER_ARGS[folder]) == 0
    for f in sorted(os.listdir(folder)):
        if f.startswith("golden_") or f == "README.md" or os.path.isdir(os.path.join(folder, f)):
            continue
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
    got = logits[g["positions"]]
    assert torch.allclose(got, want, atol=1e-7, rtol=1e-8)
    assert m.greedy(g["prompt"], len(g["greedy"])) == g["greedy"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_llamacpp_golden_agrees_with_reference_golden(folder):
    """The committed llama.cpp vectors (made by tools/llamacpp_parity.sh) match the reference's
    within float32 rounding, and give the same greedy tokens."""
    with open(os.path.join(folder, "golden_reference.json")) as f:
        ref = json.load(f)
    with open(os.path.join(folder, "golden_llamacpp.json")) as f:
        cpp = json.load(f)
    assert cpp["prompt"] == ref["prompt"] and cpp["positions"] == ref["positions"]
    diff = np.abs(np.array(cpp["logits"]) - np.array(ref["logits"])).max()
    assert diff < 1e-3
    assert cpp["greedy"] == ref["greedy"]
    assert cpp["vs_reference"]["greedy_agree"] is True
    # the greedy path is not decided by rounding: every margin dwarfs the disagreement
    assert min(ref["greedy_top2_margins"]) > 20 * cpp["vs_reference"]["max_abs_diff_greedy_logits"]
