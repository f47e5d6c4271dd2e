"""tools/export.py --dtype int8 | int4 (tools/quant.py): the stored quantised layout, its rounding
against the engine's rule, the reader, and the cross-language fixture tests/data/models/tiny-gated-q*
(docs/model-format.md, "Stored int8 and int4")."""
import json
import os
import struct
import sys
from collections import OrderedDict

import numpy as np
import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_export import TOOLS, export_cli, save_ckpt, tiny_model  # noqa: E402

import export  # noqa: E402  (on sys.path through test_export)
import make_random_model  # noqa: E402


# ---- int8 / int4: the stored quantised layout (docs/model-format.md "Stored int8 and int4") ----

def _ref_quantize(w: np.ndarray, qmax: int):
    """The engine's rule written out per element with float32 scalars (QuantizeBlockInt8 in
    kernels/cpu/gemm_int8.cc): per row and block of 32, scale = float32(max|x| / qmax), q =
    round-half-even(float32(x / scale)) clipped; an all-zero block has scale 0 and q 0."""
    n, k = w.shape
    q = np.zeros((n, k), dtype=np.int8)
    scales = np.zeros((n, -(-k // 32)), dtype=np.float32)
    for j in range(n):
        for b in range(0, k, 32):
            block = [np.float32(v) for v in w[j, b:b + 32]]
            amax = max(abs(v) for v in block)
            if amax == 0:
                continue
            scale = np.float32(amax / np.float32(qmax))
            scales[j, b // 32] = scale
            for t, v in enumerate(block):
                r = round(float(np.float32(v / scale)))    # Python's round: half to even
                q[j, b + t] = max(-qmax, min(qmax, r))
    return q, scales


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_quantize_blocks_is_the_engines_rule(dtype):
    qmax = export.QMAX[dtype]
    rng = np.random.default_rng(1)
    for n, k in [(1, 1), (3, 31), (4, 32), (5, 77), (2, 128)]:
        w = rng.normal(0, 0.05, (n, k)).astype(np.float32)
        if n >= 3 and k >= 8:
            w[1, :32] = 0                                   # an all-zero block
            w[2, :7] = [qmax, 2.5, -3.5, 0.5, -0.5, 1.5, -6.5]   # scale 1: exact halves
            w[2, 7:32] = 0.25
        q, s = export.quantize_blocks(w, qmax)
        rq, rs = _ref_quantize(w, qmax)
        assert q.dtype == np.int8 and s.dtype == np.float32
        assert np.array_equal(q, rq) and np.array_equal(s.view(np.uint32), rs.view(np.uint32))
        if n >= 3 and k >= 8:
            assert s[1, 0] == 0 and not q[1, :32].any()
            assert s[2, 0] == 1.0
            assert q[2, :8].tolist() == [qmax, 2, -4, 0, 0, 2, -6, 0]   # ties to even
    # int4 nibbles: low first, an odd k padded with 8 (a zero quant)
    q = np.array([[-7, 7, 0]], dtype=np.int8)
    assert export.pack_int4(q).tolist() == [[0x01 | 0xF0, 0x08 | 0x80]]
    assert np.array_equal(export.unpack_int4(export.pack_int4(q), 3), q)


def _header(raw: bytes):
    (n,) = struct.unpack("<Q", raw[:8])
    return n, json.loads(raw[8:8 + n].decode("utf-8").rstrip(" "), object_pairs_hook=OrderedDict)


@pytest.mark.parametrize("kind,dtype", [("linear_elu", "int8"), ("gated", "int8"),
                                        ("softmax", "int4"), ("hybrid", "int4")])
def test_quantised_export_layout_config_and_reload(kind, dtype, tmp_path):
    model = tiny_model(kind)
    ckpt = save_ckpt(model, tmp_path / "m.pt")
    assert export_cli(ckpt, "tiny", tmp_path / "models", "--dtype", dtype) == 0
    d = tmp_path / "models" / "tiny"
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["torch_dtype"] == dtype
    raw = (d / "model.safetensors").read_bytes()
    n, header = _header(raw)
    sd = model.state_dict()
    qmax = export.QMAX[dtype]
    gemm = {k for k in sd if export.is_bf16_tensor(k)}
    assert len(gemm) == 4 * model.cfg.num_hidden_layers
    assert set(header) - {"__metadata__"} == set(sd) | {k + "_scale" for k in gemm}
    entries = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
    off, seen_narrow = 0, False
    for (b, e), k in entries:                               # contiguous; F32 first, then quants
        assert b == off
        narrow = header[k]["dtype"] in ("I8", "U8")
        assert narrow or (not seen_narrow and (8 + n + b) % 4 == 0), k
        seen_narrow = seen_narrow or narrow
        off = e
    assert 8 + n + off == len(raw)
    loaded = export.load_exported(str(d)).state_dict()
    for k, v in sd.items():
        info = header[k]
        b, e = info["data_offsets"]
        data = raw[8 + n + b:8 + n + e]
        if k not in gemm:
            assert info["dtype"] == "F32"
            assert torch.equal(loaded[k], v), k
            continue
        rows, cols = v.shape
        q, s = _ref_quantize(v.numpy(), qmax)
        sinfo = header[k + "_scale"]
        assert sinfo["dtype"] == "F32" and sinfo["shape"] == [rows, -(-cols // 32)]
        sb, se = sinfo["data_offsets"]
        assert raw[8 + n + sb:8 + n + se] == s.astype("<f4").tobytes()
        if dtype == "int8":
            assert info["dtype"] == "I8" and info["shape"] == [rows, cols]
            assert data == q.tobytes()
        else:
            assert info["dtype"] == "U8" and info["shape"] == [rows, -(-cols // 2)]
            assert data == export.pack_int4(q).tobytes()
        deq = q.astype(np.float32) * np.repeat(s, 32, axis=1)[:, :cols]
        assert np.array_equal(loaded[k].numpy(), deq), k       # float32(q) * scale
    assert dtype in (d / "MODEL_CARD.md").read_text()
    row_bytes = (lambda k: k) if dtype == "int8" else (lambda k: -(-k // 2))
    want = sum(4 * v.numel() for k, v in sd.items() if k not in gemm) + sum(
        sd[k].shape[0] * (row_bytes(sd[k].shape[1]) + 4 * -(-sd[k].shape[1] // 32)) for k in gemm)
    assert len(raw) - 8 - n == want


def test_reader_refuses_bad_quants(tmp_path):
    model = tiny_model("linear_elu")
    path = str(tmp_path / "x.safetensors")
    export.write_safetensors(path, model.state_dict(), "int8")
    raw = bytearray(open(path, "rb").read())
    n, header = _header(bytes(raw))
    b, _ = header["layers.0.attn.wo.weight"]["data_offsets"]
    bad = bytearray(raw)
    bad[8 + n + b + 3] = 0x80                                  # quant -128
    open(path, "wb").write(bytes(bad))
    with pytest.raises(export.ExportError, match="layers.0.attn.wo.weight: quant -128 out of"):
        export.read_safetensors(path)
    header["layers.0.attn.wo.weight_scalf"] = header.pop("layers.0.attn.wo.weight_scale")
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + bytes(raw[8 + n:]))
    with pytest.raises(export.ExportError, match="wo.weight_scale: missing"):
        export.read_safetensors(path)
    sd = model.state_dict()
    sd["layers.0.mlp.w1.weight"][0, 0] = float("nan")
    with pytest.raises(export.ExportError, match="NaN or Inf"):
        export.write_safetensors(path, sd, "int4")


# The cross-language fixture of tests/engine/runtime/engine_stored_quant_test.cc
# (StoredQuantFixture): tests/data/models/tiny-gated-q (F32: make_random_model.py, gated,
# hidden 48, intermediate 75, with rows of exact halves at int8's and int4's scales and an
# all-zero block) and its --dtype int8 / int4 exports tiny-gated-q-int8 / -int4. Regenerate all
# three with
#   /usr/bin/python3 -c "import sys; sys.path[:0] = ['tools', 'tools/tests']; \
#       import test_export_quant as t; t.make_quant_fixture('tests/data/models')"
QUANT_FIXTURE = "tiny-gated-q"
DATA_MODELS = os.path.join(TOOLS, "..", "tests", "data", "models")


def _export_quant_fixture(models_dir: str, dtype: str) -> str:
    src = os.path.join(models_dir, QUANT_FIXTURE)
    cfg = json.loads(open(os.path.join(src, "config.json")).read())
    cfg.pop("torch_dtype", None)
    sd = export.read_safetensors(os.path.join(src, "model.safetensors"))
    record = {"random_init": True, "seed": 3,
              "note": f"{QUANT_FIXTURE} stored as {dtype} (tools/tests/test_export_quant.py)"}
    return export.export_checkpoint({"config": cfg, "state_dict": sd, "record": record},
                                    f"{QUANT_FIXTURE}-{dtype}", models_dir, True, dtype)


def make_quant_fixture(models_dir: str) -> None:
    assert make_random_model.main([
        "--name", QUANT_FIXTURE, "--kind", "gated", "--hidden_size", "48", "--layers", "2",
        "--heads", "2", "--intermediate_size", "75", "--rfa_num_features", "8",
        "--chunk_size", "16", "--std", "0.05", "--seed", "3", "--out_dir", models_dir,
        "--force"]) == 0
    path = os.path.join(models_dir, QUANT_FIXTURE, "model.safetensors")
    sd = export.read_safetensors(path)
    w = sd["layers.0.attn.wqkv.weight"]
    halves = [2.5, -3.5, 0.5, -0.5, 1.5, -6.5]
    w[0, :7] = torch.tensor([127.0] + halves) * 2 ** -7     # int8 scale 2^-7: exact halves
    w[1, :7] = torch.tensor([7.0] + halves) * 2 ** -4       # int4 scale 2^-4: exact halves
    w[2, :32] = 0                                           # an all-zero block
    export.write_safetensors(path, sd)
    for dtype in ("int8", "int4"):
        _export_quant_fixture(models_dir, dtype)


@pytest.mark.parametrize("dtype", ["int8", "int4"])
def test_quant_fixture_is_export_of_its_f32_model(dtype, tmp_path):
    """The checked-in int8 / int4 fixture is exactly what export.py writes today from the
    checked-in F32 one (so the C++ test compares the engine against this code's rounding)."""
    src = os.path.join(DATA_MODELS, QUANT_FIXTURE)
    models = tmp_path / "models"
    os.makedirs(models)
    for f in ("config.json", "model.safetensors"):
        os.makedirs(models / QUANT_FIXTURE, exist_ok=True)
        (models / QUANT_FIXTURE / f).write_bytes(open(os.path.join(src, f), "rb").read())
    out = _export_quant_fixture(str(models), dtype)
    fixture = os.path.join(DATA_MODELS, f"{QUANT_FIXTURE}-{dtype}")
    for f in ("config.json", "model.safetensors"):
        assert open(os.path.join(out, f), "rb").read() == open(os.path.join(fixture, f),
                                                               "rb").read(), f
    # The halves rows, the zero block and the odd k (mlp.w2: k = 75) are there.
    n, header = _header(open(os.path.join(fixture, "model.safetensors"), "rb").read())
    assert header["layers.0.mlp.w2.weight"]["shape"] == (
        [48, 75] if dtype == "int8" else [48, 38])
    f32 = export.read_safetensors(os.path.join(src, "model.safetensors"))
    q, s = export.quantize_blocks(f32["layers.0.attn.wqkv.weight"].numpy(), export.QMAX[dtype])
    assert s[2, 0] == 0 and s[0 if dtype == "int8" else 1, 0] == (
        2.0 ** -7 if dtype == "int8" else 2.0 ** -4)
    assert q[0 if dtype == "int8" else 1, 1:7].tolist() == [2, -4, 0, 0, 2, -6]
    reloaded = export.load_exported(fixture).state_dict()
    w2 = f32["layers.1.mlp.w2.weight"].numpy()
    q, s = export.quantize_blocks(w2, export.QMAX[dtype])
    assert np.array_equal(reloaded["layers.1.mlp.w2.weight"].numpy(),
                          q.astype(np.float32) * np.repeat(s, 32, axis=1)[:, :75])
