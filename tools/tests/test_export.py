"""tools/export.py, tools/golden.py and tools/make_random_model.py on tiny random models."""
import json
import os
import struct
import subprocess
import sys
from collections import OrderedDict

import numpy as np
import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import export  # noqa: E402
import golden  # noqa: E402
import make_random_model  # noqa: E402
from flatstate_ref.model import ATTENTION_KINDS, FlatstateLM, ModelConfig  # noqa: E402


def tiny_cfg(kind, hidden=16):
    return ModelConfig(attention_kind=kind, hidden_size=hidden, num_hidden_layers=2,
                       num_attention_heads=2, intermediate_size=32, chunk_size=8,
                       favor_num_features=12, cosformer_horizon=100, rfa_num_features=6,
                       window_size=6,
                       conv_kernel_size=0 if kind in ("softmax", "window") else 4)


def tiny_model(kind, hidden=16, seed=0):
    torch.manual_seed(seed)
    model = FlatstateLM(tiny_cfg(kind, hidden))
    with torch.no_grad():            # make every tensor non-trivial (norms, conv, decay_logit)
        for name, p in model.named_parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def save_ckpt(model, path):
    torch.save({"config": model.cfg.to_json(), "state_dict": model.state_dict(),
                "record": {"train_loss": 2.5, "val_loss": 2.6, "wall_seconds": 1.0,
                           "params": sum(p.numel() for p in model.parameters()),
                           "command": "fake", "seed": 0, "steps": 0, "batch": 1,
                           "seq_len": 8}}, path)
    return path


def export_cli(ckpt, name, models_dir, *extra):
    return export.main(["--checkpoint", str(ckpt), "--name", name,
                        "--models_dir", str(models_dir), *extra])


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_safetensors_layout_and_exact_reload(kind, tmp_path):
    model = tiny_model(kind)
    ckpt = save_ckpt(model, tmp_path / "m.pt")
    assert export_cli(ckpt, "tiny", tmp_path / "models") == 0
    d = tmp_path / "models" / "tiny"
    assert sorted(os.listdir(d)) == ["MODEL_CARD.md", "config.json", "model.safetensors"]

    # config.json: to_json(), sorted keys, indent 2
    text = (d / "config.json").read_text()
    assert text == json.dumps(model.cfg.to_json(), sort_keys=True, indent=2) + "\n"

    # safetensors, parsed by hand
    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0
    htext = raw[8:8 + n].decode("utf-8")
    body = htext.rstrip(" ")                              # padding: spaces only
    assert body.startswith("{") and body.endswith("}") and len(htext) - len(body) < 8
    header = json.loads(body, object_pairs_hook=OrderedDict)
    assert header["__metadata__"] == {"format": "pt"}
    names = [k for k in header if k != "__metadata__"]
    sd = model.state_dict()
    assert sorted(names) == sorted(sd.keys()) == export.expected_tensor_names(model.cfg)
    by_offset = sorted(names, key=lambda k: header[k]["data_offsets"][0])
    assert by_offset == sorted(names)                      # data in sorted-name order
    off = 0
    for k in by_offset:
        info = header[k]
        assert info["dtype"] == "F32"
        assert info["shape"] == list(sd[k].shape)
        b, e = info["data_offsets"]
        assert b == off and b % 4 == 0 and e - b == 4 * sd[k].numel()
        assert (8 + n + b) % 4 == 0
        data = torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.float32)
        assert torch.equal(data.view(sd[k].shape), sd[k])
        off = e
    assert 8 + n + off == len(raw)

    # reload: identical weights, identical logits
    loaded = export.load_exported(str(d))
    for k, v in sd.items():
        assert torch.equal(loaded.state_dict()[k], v), k
    toks = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(toks), loaded(toks))
        mode = "chunked" if model.cfg.is_recurrent else "parallel"
        a, _ = model.step(toks[0], None, mode)
        b, _ = loaded.double().step(toks[0], None, mode)
    assert torch.equal(a, b)

    card = (d / "MODEL_CARD.md").read_text()
    assert kind in card and "nats/byte" in card and "2.6000" in card
    assert ("KV cache" in card) if kind == "softmax" else ("Recurrent state" in card)


def test_refuses_different_architecture_unless_force(tmp_path, capsys):
    models = tmp_path / "models"
    a = save_ckpt(tiny_model("linear_elu", 16), tmp_path / "a.pt")
    b = save_ckpt(tiny_model("linear_elu", 32), tmp_path / "b.pt")
    c = save_ckpt(tiny_model("favor", 16), tmp_path / "c.pt")
    assert export_cli(a, "m", models) == 0
    before = (models / "m" / "model.safetensors").read_bytes()
    for other in (b, c):
        capsys.readouterr()
        assert export_cli(other, "m", models) != 0
        err = capsys.readouterr().err
        assert "different architecture" in err and "--force" in err
        assert (models / "m" / "model.safetensors").read_bytes() == before
    # same architecture (retrained weights): allowed without --force
    a2 = save_ckpt(tiny_model("linear_elu", 16, seed=5), tmp_path / "a2.pt")
    assert export_cli(a2, "m", models) == 0
    assert (models / "m" / "model.safetensors").read_bytes() != before
    # --force replaces
    assert export_cli(c, "m", models, "--force") == 0
    cfg = json.loads((models / "m" / "config.json").read_text())
    assert cfg["attention_kind"] == "favor"
    assert export.load_exported(str(models / "m")).cfg.attention_kind == "favor"


def test_missing_checkpoint_is_clear_error(tmp_path):
    missing = tmp_path / "nope.pt"
    r = subprocess.run([sys.executable, os.path.join(TOOLS, "export.py"), "--checkpoint",
                        str(missing), "--name", "x", "--models_dir", str(tmp_path / "models")],
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "checkpoint file not found" in r.stderr and str(missing) in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "models").exists()


def test_rejects_wrong_tensor_names(tmp_path, capsys):
    model = tiny_model("cosine")
    sd = model.state_dict()
    sd["extra.weight"] = torch.zeros(3)
    del sd["layers.1.attn.decay_logit"]
    torch.save({"config": model.cfg.to_json(), "state_dict": sd, "record": {}}, tmp_path / "x.pt")
    assert export_cli(tmp_path / "x.pt", "x", tmp_path / "models") != 0
    err = capsys.readouterr().err
    assert "layers.1.attn.decay_logit" in err and "extra.weight" in err


@pytest.mark.parametrize("kind", ATTENTION_KINDS)
def test_golden_on_tiny_model(kind, tmp_path):
    models = tmp_path / "models"
    model = tiny_model(kind)
    assert export_cli(save_ckpt(model, tmp_path / "m.pt"), "tiny-" + kind, models) == 0
    (models / "not-a-model").mkdir()                       # ignored: no config.json
    data = tmp_path / "input.txt"
    g = torch.Generator().manual_seed(0)
    data.write_bytes(bytes(torch.randint(32, 127, (20000,), generator=g).tolist()))
    out = tmp_path / "golden"
    assert golden.main(["--models_dir", str(models), "--out", str(out), "--data", str(data)]) == 0
    assert os.listdir(out) == [f"tiny-{kind}.json"]
    gf = json.loads((out / f"tiny-{kind}.json").read_text())
    assert set(gf) == {"model", "attention_kind", "chunk_size", "cases", "generator", "config"}
    assert gf["model"] == f"tiny-{kind}" and gf["attention_kind"] == kind
    assert gf["chunk_size"] == 8 and gf["generator"] == "tools/golden.py"
    assert gf["config"] == model.cfg.to_json()
    assert [c["name"] for c in gf["cases"]] == ["short", "long", "utf8"]
    cfg = model.cfg
    raw = data.read_bytes()
    start = int(0.9 * len(raw)) + 1000
    expected_prompts = {"short": list(b"ROMEO:\n"), "long": list(raw[start:start + 700]),
                        "utf8": list("Ünïcödé — ✓ KING HENRY:\n".encode("utf-8"))}
    ref = export.load_exported(str(models / f"tiny-{kind}")).double()
    for c in gf["cases"]:
        assert set(c) == {"name", "prompt_bytes", "logit_positions", "logits",
                          "greedy_tokens", "state"}
        n = len(c["prompt_bytes"])
        assert c["prompt_bytes"] == expected_prompts[c["name"]]
        assert c["logit_positions"] == sorted({0, 1, n // 2, n - 1})
        assert len(c["logits"]) == len(c["logit_positions"])
        assert all(len(r) == 256 for r in c["logits"])
        assert len(c["greedy_tokens"]) == 64 and all(0 <= t < 256 for t in c["greedy_tokens"])
        # the first greedy token is the argmax after the last prompt byte
        last = c["logits"][-1]
        assert c["greedy_tokens"][0] == last.index(max(last))
        if kind == "softmax":
            assert c["state"] == []
        else:
            assert [(s["layer"], s["head"]) for s in c["state"]] == [(0, 0), (0, 1), (1, 0),
                                                                      (1, 1)]
            for s in c["state"]:
                keys = {"layer", "head"}
                lin, win = cfg.layer_branches(s["layer"])
                if lin is not None:
                    keys |= {"S", "z"}
                    assert len(s["S"]) == cfg.feature_dim()
                    assert all(len(r) == cfg.head_dim for r in s["S"])
                    assert len(s["z"]) == cfg.feature_dim()
                if kind == "gated":
                    keys.add("mass")
                    assert 0.0 < s["mass"] <= 1.0
                if lin is not None and kind != "gated":
                    keys.add("M")
                    assert isinstance(s["M"], float)
                    if kind != "favor":
                        assert s["M"] == 0.0
                if win:
                    keys |= {"ring_k", "ring_v"}
                    for part in ("ring_k", "ring_v"):
                        assert len(s[part]) == cfg.window_size
                        assert all(len(r) == cfg.head_dim for r in s[part])
                assert set(s) == keys
        # independent check: the recurrent form over prompt + greedy[:-1] reproduces everything
        seq = torch.tensor(c["prompt_bytes"] + c["greedy_tokens"][:-1])
        mode = "recurrent" if cfg.is_recurrent else "parallel"
        with torch.no_grad():
            lg, _ = ref.step(seq, None, mode)
        for p, row in zip(c["logit_positions"], c["logits"]):
            assert (lg[p] - torch.tensor(row, dtype=torch.float64)).abs().max() < 1e-9
        assert lg[n - 1:].argmax(-1).tolist() == c["greedy_tokens"]


def test_make_random_model(tmp_path):
    rc = make_random_model.main(["--name", "rnd", "--kind", "favor", "--hidden_size", "32",
                                 "--layers", "2", "--heads", "2", "--out_dir", str(tmp_path)])
    assert rc == 0
    m = export.load_exported(str(tmp_path / "rnd"))
    assert m.cfg.intermediate_size == 128 and m.cfg.attention_kind == "favor"
    w = m.state_dict()["layers.0.attn.wqkv.weight"]
    assert 0.015 < w.std().item() < 0.025
    # fixed seed: a second run gives identical bytes
    rc = make_random_model.main(["--name", "rnd2", "--kind", "favor", "--hidden_size", "32",
                                 "--layers", "2", "--heads", "2", "--out_dir", str(tmp_path)])
    assert rc == 0
    assert ((tmp_path / "rnd" / "model.safetensors").read_bytes()
            == (tmp_path / "rnd2" / "model.safetensors").read_bytes())


def _rne_bf16_bits(a: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even fp32 -> bf16 bits, the C++ rule (Bf16FromFloat in
    kernels/cpu/gemm_bf16.cc): u + 0x7FFF + lsb, top half; a NaN keeps its top half, made quiet."""
    u = a.astype("<f4").view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan_bits = ((u >> 16) | 0x40).astype(np.uint16)
    return np.where(np.isnan(a), nan_bits, rounded)


def test_bf16_bits_are_the_engines_round_to_nearest_even():
    edge = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.0, 0.0, -0.0,
                     3.4028235e38, np.inf, -np.inf, 1e-40, -1e-45, 2 ** -133 * 3],
                    dtype=np.float32)
    rnd = np.random.default_rng(0).integers(0, 2 ** 32, 200000, dtype=np.uint64)
    rnd = rnd.astype(np.uint32).view(np.float32)
    rnd = rnd[np.isfinite(rnd)]                            # exports refuse NaN / Inf anyway
    for a in (edge, rnd):
        got = export.bf16_bits(torch.from_numpy(a.copy()))
        assert np.array_equal(got, _rne_bf16_bits(a))
    assert export.bf16_bits(torch.tensor([1 + 2 ** -8, 1 + 3 * 2 ** -8])).tolist() == [
        0x3F80, 0x3F82]                                    # ties go to the even neighbour


@pytest.mark.parametrize("kind", ["linear_elu", "softmax", "gated", "hybrid"])
def test_bfloat16_export_layout_config_and_reload(kind, tmp_path):
    model = tiny_model(kind)
    ckpt = save_ckpt(model, tmp_path / "m.pt")
    assert export_cli(ckpt, "tiny", tmp_path / "models", "--dtype", "bfloat16") == 0
    d = tmp_path / "models" / "tiny"
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["torch_dtype"] == "bfloat16"
    want_cfg = model.cfg.to_json()
    want_cfg["torch_dtype"] = "bfloat16"
    assert cfg == json.loads(json.dumps(want_cfg))

    raw = (d / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8").rstrip(" "))
    sd = model.state_dict()
    bf16_names = {k for k in sd if k.startswith("layers.") and k.endswith(
        (".attn.wqkv.weight", ".attn.wo.weight", ".mlp.w1.weight", ".mlp.w2.weight"))}
    assert len(bf16_names) == 4 * model.cfg.num_hidden_layers
    off = 0
    for k in sorted(sd):
        info = header[k]
        b, e = info["data_offsets"]
        assert b == off and (8 + n + b) % 4 == 0
        data = raw[8 + n + b:8 + n + e]
        if k in bf16_names:
            assert info["dtype"] == "BF16" and e - b == 2 * sd[k].numel()
            bits = np.frombuffer(data, dtype="<u2")
            assert np.array_equal(bits, _rne_bf16_bits(sd[k].numpy().ravel())), k
        else:                                              # norms, embed, lm_head, conv, gate...
            assert info["dtype"] == "F32" and e - b == 4 * sd[k].numel(), k
            assert torch.equal(torch.frombuffer(bytearray(data), dtype=torch.float32)
                               .view(sd[k].shape), sd[k])
        off = e
    assert 8 + n + off == len(raw)
    f32_bytes = 4 * sum(v.numel() for v in sd.values())
    assert len(raw) - 8 - n == f32_bytes - 2 * sum(sd[k].numel() for k in bf16_names)

    # Reload: the BF16 tensors widened exactly (torch's bf16 -> f32), the rest as exported.
    loaded = export.load_exported(str(d)).state_dict()
    for k, v in sd.items():
        want = v.to(torch.bfloat16).to(torch.float32) if k in bf16_names else v
        assert torch.equal(loaded[k], want), k
    card = (d / "MODEL_CARD.md").read_text()
    assert "bf16" in card


def test_dtype_change_needs_no_force_and_bad_dtype_fails(tmp_path, capsys):
    models = tmp_path / "models"
    ckpt = save_ckpt(tiny_model("linear_elu"), tmp_path / "a.pt")
    assert export_cli(ckpt, "m", models) == 0
    f32_size = (models / "m" / "model.safetensors").stat().st_size
    assert export_cli(ckpt, "m", models, "--dtype", "bfloat16") == 0   # same architecture
    assert (models / "m" / "model.safetensors").stat().st_size < f32_size
    assert json.loads((models / "m" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with pytest.raises(SystemExit):
        export_cli(ckpt, "m", models, "--dtype", "float16")
    assert "float16" in capsys.readouterr().err
    with pytest.raises(export.ExportError, match="float16"):
        export.export_checkpoint(torch.load(ckpt), "m", str(models), dtype="float16")


def test_reader_refuses_bf16_outside_the_gemm_weights(tmp_path):
    model = tiny_model("linear_elu")
    path = str(tmp_path / "x.safetensors")
    export.write_safetensors(path, model.state_dict(), "bfloat16")
    raw = bytearray(open(path, "rb").read())
    (n,) = struct.unpack("<Q", raw[:8])
    text = raw[8:8 + n].decode("utf-8")
    # Relabel the F32 norm as BF16 (same byte count needs twice the elements).
    header = json.loads(text, object_pairs_hook=OrderedDict)
    header["norm.weight"]["dtype"] = "BF16"
    header["norm.weight"]["shape"] = [2 * header["norm.weight"]["shape"][0]]
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + bytes(raw[8 + n:]))
    with pytest.raises(export.ExportError, match="norm.weight: dtype BF16, want F32"):
        export.read_safetensors(path)
