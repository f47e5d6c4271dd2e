"""tools/hf_rwkv7.py, tools/flatstate_ref/rwkv7.py and tools/rwkv7_from_pth.py: the three wkv
forms agree (and token-by-token decoding equals the full-sequence forward), the writer's tensor
names and shapes are fla-hub's, a BlinkDL .pth round trip gives the same logits, the state size
arithmetic, the synthetic World vocabulary's line format, and the golden folder reproduces."""
import ast
import json
import os
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import hf_rwkv7  # noqa: E402
import rwkv7_from_pth  # noqa: E402
from flatstate_ref.llama import load_hf_tensors  # noqa: E402
from flatstate_ref.rwkv7 import HfRwkv7  # noqa: E402

GOLDEN = os.path.join(TOOLS, "..", "tests", "data", "hf_rwkv7_tiny")
IDS = [0] + [int(x) for x in
             torch.randint(1, 512, (79,), generator=torch.Generator().manual_seed(5))]


def _write(tmp_path, name="m", **kw):
    out = str(tmp_path / name)
    kw.setdefault("dtype", "float32")
    hf_rwkv7.write_hf_rwkv7(out, hf_rwkv7.make_config(**kw), seed=3)
    return out


@pytest.mark.parametrize("fuse_norm", [False, True])
def test_forms_agree(tmp_path, fuse_norm):
    m = HfRwkv7.load(_write(tmp_path, num_hidden_layers=3, fuse_norm=fuse_norm))
    full = m.forward(IDS, mode="chunked")             # UT-form chunks of 64, one call
    rec = m.forward(IDS, mode="recurrent")
    assert (rec - full).abs().max().item() < 1e-10
    naive = m.forward(IDS[:24], mode="naive")          # per head, [value, key], scalar loops
    assert (naive - rec[:24]).abs().max().item() < 1e-10
    st = m.new_state()
    rows = [m.forward([t], st, mode="recurrent")[0] for t in IDS]
    assert (torch.stack(rows) - full).abs().max().item() < 1e-10
    st2 = m.new_state()                                # split prefill off the chunk grid
    parts = torch.cat([m.forward(IDS[:30], st2), m.forward(IDS[30:70], st2),
                       m.forward(IDS[70:], st2)])
    assert (parts - full).abs().max().item() < 1e-10
    for a, b in zip(st["layers"], st2["layers"]):      # the final states agree too
        for k in ("att_shift", "wkv", "ffn_shift"):
            assert (a[k] - b[k]).abs().max().item() < 1e-10
    assert full.std().item() > 0.5                     # logits spread


def test_state_shapes_and_bytes(tmp_path):
    m = HfRwkv7.load(_write(tmp_path, hidden_size=64, head_dim=16, num_hidden_layers=3))
    st = m.new_state()
    assert [tuple(s["wkv"].shape) for s in st["layers"]] == [(4, 16, 16)] * 3
    assert all(tuple(s["att_shift"].shape) == (64,) == tuple(s["ffn_shift"].shape)
               for s in st["layers"])
    # layers x (heads x head_dim^2 + 2 shift vectors x hidden) x 4 bytes
    assert m.state_bytes() == 3 * (4 * 16 * 16 * 4 + 2 * 64 * 4) == 13824


def test_config_keys():
    cfg = hf_rwkv7.make_config()
    assert list(cfg) == sorted(cfg)
    assert set(cfg) == {
        "a_low_rank_dim", "architectures", "attn", "attn_mode", "bos_token_id",
        "decay_low_rank_dim", "eos_token_id", "fuse_cross_entropy", "fuse_linear_cross_entropy",
        "fuse_norm", "gate_low_rank_dim", "head_dim", "hidden_act", "hidden_ratio",
        "hidden_size", "initializer_range", "intermediate_size", "max_position_embeddings",
        "model_type", "norm_bias", "norm_eps", "norm_first", "num_heads", "num_hidden_layers",
        "pad_token_id", "tie_word_embeddings", "torch_dtype", "transformers_version",
        "use_cache", "use_l2warp", "v_low_rank_dim", "value_dim", "vocab_size"}
    assert cfg["architectures"] == ["RWKV7ForCausalLM"] and cfg["model_type"] == "rwkv7"
    assert cfg["num_heads"] * cfg["head_dim"] == cfg["hidden_size"]
    # fla's defaults when the ranks / intermediate size are null
    r = hf_rwkv7.resolved({"hidden_size": 2048, "head_dim": 64, "num_hidden_layers": 24,
                           "vocab_size": 65536, "hidden_ratio": 4})
    assert (r["I"], r["Rw"], r["Ra"], r["Rv"], r["Rg"], r["H"]) == (8192, 128, 128, 64, 224, 32)


def test_tensor_names_and_shapes():
    cfg = hf_rwkv7.make_config(vocab_size=512, hidden_size=64, head_dim=32,
                               num_hidden_layers=2, intermediate_size=128,
                               decay_low_rank_dim=16, a_low_rank_dim=12, v_low_rank_dim=8,
                               gate_low_rank_dim=20)
    s = hf_rwkv7.tensor_shapes(cfg)
    layer = {
        "attn_norm.weight": (64,), "attn_norm.bias": (64,),
        "attn.x_r": (1, 1, 64), "attn.x_w": (1, 1, 64), "attn.x_k": (1, 1, 64),
        "attn.x_v": (1, 1, 64), "attn.x_a": (1, 1, 64), "attn.x_g": (1, 1, 64),
        "attn.k_k": (64,), "attn.k_a": (64,), "attn.r_k": (2, 32),
        "attn.r_proj.weight": (64, 64), "attn.k_proj.weight": (64, 64),
        "attn.v_proj.weight": (64, 64), "attn.o_proj.weight": (64, 64),
        "attn.w_lora.lora.0.weight": (16, 64), "attn.w_lora.lora.2.weight": (64, 16),
        "attn.w_lora.lora.2.bias": (64,),
        "attn.a_lora.lora.0.weight": (12, 64), "attn.a_lora.lora.2.weight": (64, 12),
        "attn.a_lora.lora.2.bias": (64,),
        "attn.g_lora.lora.0.weight": (20, 64), "attn.g_lora.lora.2.weight": (64, 20),
        "attn.g_norm.weight": (64,), "attn.g_norm.bias": (64,),
        "ffn_norm.weight": (64,), "ffn_norm.bias": (64,),
        "ffn.x_k": (64,), "ffn.key.weight": (128, 64), "ffn.value.weight": (64, 128),
    }
    want = {"model.embeddings.weight": (512, 64), "model.norm.weight": (64,),
            "model.norm.bias": (64,), "lm_head.weight": (512, 64),
            "model.layers.0.pre_norm.weight": (64,), "model.layers.0.pre_norm.bias": (64,),
            "model.layers.1.attn.v_lora.lora.0.weight": (8, 64),
            "model.layers.1.attn.v_lora.lora.2.weight": (64, 8),
            "model.layers.1.attn.v_lora.lora.2.bias": (64,)}
    for i in range(2):
        want.update({f"model.layers.{i}.{n}": sh for n, sh in layer.items()})
    assert dict(s) == want
    assert list(s)[:3] == ["model.embeddings.weight", "model.layers.0.pre_norm.weight",
                           "model.layers.0.pre_norm.bias"]
    tied = hf_rwkv7.tensor_shapes(hf_rwkv7.make_config(tie_word_embeddings=True))
    assert "lm_head.weight" not in tied


def _to_blinkdl(t):
    """fla-hub tensors -> a BlinkDL RWKV-v7 state dict (the inverse of rwkv7_from_pth, written
    from BlinkDL's parameter list: x_* [1,1,C]; w0/a0/v0, k_k, k_a, ffn.x_k [1,1,C]; w1/a1/v1/g1
    [C, R] (x @ w1); w2/a2/v2/g2 [R, C]; r_k [H, N]; receptance/key/value/output; ln_x; ln0 on
    block 0; layer 0 with a dummy v LoRA, as some checkpoints ship)."""
    sd = {"emb.weight": t["model.embeddings.weight"], "head.weight": t["lm_head.weight"],
          "ln_out.weight": t["model.norm.weight"], "ln_out.bias": t["model.norm.bias"]}
    L = 1 + max(int(n.split(".")[2]) for n in t if n.startswith("model.layers."))
    C = t["model.embeddings.weight"].shape[1]
    for i in range(L):
        q, b = f"model.layers.{i}.", f"blocks.{i}."
        if i == 0:
            sd[b + "ln0.weight"] = t[q + "pre_norm.weight"]
            sd[b + "ln0.bias"] = t[q + "pre_norm.bias"]
        for ln, nm in (("ln1", "attn_norm"), ("ln2", "ffn_norm")):
            sd[b + ln + ".weight"], sd[b + ln + ".bias"] = t[q + nm + ".weight"], t[q + nm + ".bias"]
        for c in "rwkvag":
            sd[b + "att.x_" + c] = t[q + "attn.x_" + c].reshape(1, 1, C)
        for c in "wavg":
            src = 1 if (c == "v" and i == 0) else i  # layer 0: a dummy copy of layer 1's
            lq = f"model.layers.{src}.attn.{c}_lora.lora."
            if c != "g":
                sd[f"{b}att.{c}0"] = t[lq + "2.bias"].reshape(1, 1, C)
            sd[f"{b}att.{c}1"] = t[lq + "0.weight"].t().contiguous()
            sd[f"{b}att.{c}2"] = t[lq + "2.weight"].t().contiguous()
        sd[b + "att.k_k"] = t[q + "attn.k_k"].reshape(1, 1, C)
        sd[b + "att.k_a"] = t[q + "attn.k_a"].reshape(1, 1, C)
        sd[b + "att.r_k"] = t[q + "attn.r_k"]
        for nat, fla in (("receptance", "r_proj"), ("key", "k_proj"), ("value", "v_proj"),
                         ("output", "o_proj")):
            sd[b + f"att.{nat}.weight"] = t[q + f"attn.{fla}.weight"]
        sd[b + "att.ln_x.weight"] = t[q + "attn.g_norm.weight"]
        sd[b + "att.ln_x.bias"] = t[q + "attn.g_norm.bias"]
        sd[b + "ffn.x_k"] = t[q + "ffn.x_k"].reshape(1, 1, C)
        sd[b + "ffn.key.weight"] = t[q + "ffn.key.weight"]
        sd[b + "ffn.value.weight"] = t[q + "ffn.value.weight"]
    return {n: x.to(torch.float32).clone() for n, x in sd.items()}


def test_pth_round_trip(tmp_path):
    src = _write(tmp_path, "src", num_hidden_layers=3, head_dim=16, a_low_rank_dim=12,
                 gate_low_rank_dim=20)
    pth = str(tmp_path / "model.pth")
    torch.save(_to_blinkdl(load_hf_tensors(src)), pth)
    out = str(tmp_path / "conv")
    assert rwkv7_from_pth.main([pth, out, "--dtype", "float32", "--norm_eps", "4e-5",
                                "--vocab", os.path.join(src, hf_rwkv7.VOCAB_FILE)]) == 0
    with open(os.path.join(src, "config.json")) as f:
        a = json.load(f)
    with open(os.path.join(out, "config.json")) as f:
        b = json.load(f)
    a["norm_eps"] = 4e-5
    assert a == b
    assert load_hf_tensors(out).keys() == load_hf_tensors(src).keys()
    ref = HfRwkv7.load(src)
    ref.eps = 4e-5
    got = HfRwkv7.load(out).logits(IDS[:20])
    assert torch.equal(got, ref.logits(IDS[:20]))


def test_vocab_lines(tmp_path):
    out = _write(tmp_path, vocab_size=400)
    with open(os.path.join(out, hf_rwkv7.VOCAB_FILE), encoding="utf-8") as f:
        lines = f.read().split("\n")
    assert lines[-1] == "" and len(lines) - 1 == 399
    seen = set()
    for n, line in enumerate(lines[:-1], start=1):
        parts = line.split(" ")                        # llama.cpp's _set_vocab_rwkv_world
        i, lit, ln = int(parts[0]), ast.literal_eval(" ".join(parts[1:-1])), int(parts[-1])
        tok = lit.encode("utf-8") if isinstance(lit, str) else lit
        assert i == n and len(tok) == ln and tok not in seen
        if n <= 256:
            assert tok == bytes([n - 1])
        seen.add(tok)
    assert any(line.split(" ")[1].startswith("b'") for line in lines[256:-1])


def test_golden_folder_reproduces(tmp_path):
    with open(os.path.join(GOLDEN, "config.json")) as f:
        cfg = json.load(f)
    out = str(tmp_path / "g")
    hf_rwkv7.write_hf_rwkv7(out, cfg, seed=3)
    for name in ("config.json", "model.safetensors", hf_rwkv7.VOCAB_FILE,
                 "generation_config.json"):
        with open(os.path.join(out, name), "rb") as f1, open(os.path.join(GOLDEN, name),
                                                              "rb") as f2:
            assert f1.read() == f2.read(), name
    with open(os.path.join(GOLDEN, "golden_reference.json")) as f:
        g = json.load(f)
    m = HfRwkv7.load(GOLDEN)
    full = m.logits(g["prompt"])
    for p, row in zip(g["positions"], g["logits"]):
        assert (full[p] - torch.tensor(row, dtype=torch.float64)).abs().max().item() < 1e-5
    assert m.greedy(g["prompt"], 64) == g["greedy"]
    with open(os.path.join(GOLDEN, "golden_llamacpp.json")) as f:
        c = json.load(f)
    assert c["greedy"] == g["greedy"] and c["vs_reference"]["greedy_agree"]
