#!/usr/bin/env python3
"""Export a trained checkpoint (tools/train.py) to a model folder the C++ engine loads.

    /usr/bin/python3 tools/export.py --checkpoint build/train/linear_elu.pt \
        --name shakespeare-linear-elu [--models_dir models] [--force] \
        [--dtype float32|bfloat16|int8|int4]

writes models/<name>/
    config.json        ModelConfig.to_json(), sorted keys, indent 2; "torch_dtype" is the --dtype
    model.safetensors  written by hand (no safetensors package):
                         u64 little-endian header length N
                         N bytes of JSON header, padded with spaces so N % 8 == 0:
                           {"__metadata__": {"format": "pt"},
                            "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}, ...}
                         raw little-endian data, tensors in sorted-name order, contiguous,
                         offsets relative to the start of the data (8 + N); every tensor F32,
                         except with --dtype bfloat16 the layers' GEMM weights (attn.wqkv,
                         attn.wo, mlp.w1, mlp.w2: BF16_TENSORS), which are BF16: torch's
                         bfloat16 cast, round to nearest even (NaN/Inf are refused anyway);
                         with --dtype int8 / int4 each of those is two tensors, its quants
                         "<name>" (I8 [n, k], or U8 [n, ceil(k/2)] with two int4 quants per
                         byte) and its scales "<name>_scale" (F32 [n, ceil(k/32)]), quantised
                         per row and block of 32 by the engine's rule (quantize_blocks); the
                         F32 tensors (scales included) come first in sorted-name order, then
                         the 1-byte quants in sorted-name order, so every F32 stays aligned
    MODEL_CARD.md      architecture, attention kind, positional choice, parameters, training
                       command, wall time, losses, state (or KV) bytes

Tensor names are exactly FlatstateLM's state_dict names; anything missing or extra is an error.
An existing folder whose config.json describes a different model is never overwritten unless
--force.  load_exported(dir) reads a folder back into a FlatstateLM (also by hand).
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import sys
from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flatstate_ref.model import FlatstateLM, ModelConfig  # noqa: E402
from flatstate_tensors import GEMM_SUFFIXES, tensor_table  # noqa: E402
from model_card import model_card  # noqa: E402
from quant import (QMAX, QUANT_BLOCK, SCALE_SUFFIX, dequantize, pack_int4,  # noqa: E402,F401
                   quantize_blocks, unpack_int4)

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "MODEL_CARD.md"

# --dtype: the config's torch_dtype, the type of the layers' GEMM weights in model.safetensors.
DTYPES = ("float32", "bfloat16", "int8", "int4")
# int8 / int4: tools/quant.py (QUANT_BLOCK inputs per scale, "<name>" + SCALE_SUFFIX scales).
# The tensors --dtype bfloat16 stores as BF16 (name suffixes): the ones the engine multiplies
# with its weight types, the table's "gemm" entries (engine/arch/flatstate_tensors.json, read by
# tools/flatstate_tensors.py; docs/model-format.md). Norms, embeddings, lm_head, conv, gate and
# feature tensors stay F32.
BF16_TENSORS = GEMM_SUFFIXES


def is_bf16_tensor(name: str) -> bool:
    return name.startswith("layers.") and name.endswith(BF16_TENSORS)


class ExportError(Exception):
    """A user-facing error: printed as 'error: ...' by the command line, exit status 1."""


# ----------------------------------------------------------------------------------------------
# Tensor names
# ----------------------------------------------------------------------------------------------

def expected_tensor_names(cfg: ModelConfig) -> List[str]:
    """The exact state_dict names of FlatstateLM(cfg), in sorted order (the tensor table,
    engine/arch/flatstate_tensors.json, which the C++ loader reads too)."""
    return sorted(t.name for t in tensor_table(cfg))


def expected_shapes(cfg: ModelConfig) -> Dict[str, Tuple[int, ...]]:
    return {t.name: t.shape for t in tensor_table(cfg)}


def check_state_dict(cfg: ModelConfig, sd: Dict[str, torch.Tensor]) -> None:
    want = expected_tensor_names(cfg)
    got = sorted(sd.keys())
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    if missing or extra:
        raise ExportError(f"state_dict does not match a {cfg.attention_kind} FlatstateLM: "
                          f"missing {missing or 'none'}, unexpected {extra or 'none'}")
    # Cross-check against the module itself (catches drift between this list and model.py).
    with torch.random.fork_rng(devices=[]):
        ref_names = sorted(FlatstateLM(cfg).state_dict().keys()) if _small(cfg) else want
    if ref_names != want:
        raise ExportError(f"internal: expected tensor names {want} differ from "
                          f"FlatstateLM.state_dict() {ref_names}")
    shapes = expected_shapes(cfg)
    for n in want:
        t = sd[n]
        if tuple(t.shape) != shapes[n]:
            raise ExportError(f"tensor {n}: shape {tuple(t.shape)}, expected {shapes[n]}")
        if not t.is_floating_point():
            raise ExportError(f"tensor {n}: dtype {t.dtype} is not floating point")
        if not torch.isfinite(t).all():
            raise ExportError(f"tensor {n}: contains NaN or Inf")


def _small(cfg: ModelConfig) -> bool:
    """Building a throwaway FlatstateLM to cross-check names is cheap only for small models."""
    D, L, I = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size
    return L * (4 * D * D + 2 * D * I) <= 8_000_000


# ----------------------------------------------------------------------------------------------
# safetensors, by hand
# ----------------------------------------------------------------------------------------------

def bf16_bits(t: torch.Tensor) -> np.ndarray:
    """The nearest-even bf16 of each value (torch's float32 -> bfloat16 cast) as uint16 bits."""
    b = t.detach().to(torch.float32).contiguous().cpu().to(torch.bfloat16)
    return b.view(torch.int16).numpy().view(np.uint16)


def _stored_tensors(tensors: Dict[str, torch.Tensor],
                    dtype: str) -> "List[Tuple[str, str, List[int], bytes]]":
    """(name, safetensors dtype, shape, little-endian bytes) of every tensor the file holds, in
    file order."""
    wide: list = []
    narrow: list = []
    for n in sorted(tensors):
        t = tensors[n]
        if dtype == "bfloat16" and is_bf16_tensor(n):
            if t.numel() % 2:
                raise ExportError(f"tensor {n}: odd element count {t.numel()} would misalign the "
                                  f"F32 tensors after it")
            wide.append((n, "BF16", list(t.shape),
                         np.ascontiguousarray(bf16_bits(t), dtype="<u2").tobytes(order="C")))
            continue
        a = t.detach().to(torch.float32).contiguous().cpu().numpy()
        if dtype in QMAX and is_bf16_tensor(n):
            q, scale = quantize_blocks(a, QMAX[dtype])
            if dtype == "int4":
                q = pack_int4(q)
            wide.append((n + SCALE_SUFFIX, "F32", list(scale.shape),
                         np.ascontiguousarray(scale, dtype="<f4").tobytes(order="C")))
            narrow.append((n, "I8" if dtype == "int8" else "U8", list(q.shape),
                           np.ascontiguousarray(q).tobytes(order="C")))
            continue
        wide.append((n, "F32", list(t.shape),
                     np.ascontiguousarray(a, dtype="<f4").tobytes(order="C")))
    return sorted(wide) + sorted(narrow)


def write_safetensors(path: str, tensors: Dict[str, torch.Tensor],
                      dtype: str = "float32") -> None:
    """Sorted names, contiguous data, header padded to 8. Every tensor F32, except the
    BF16_TENSORS with dtype "bfloat16" (2 bytes each; their element counts are even, since
    hidden_size is, so every tensor still starts 4-byte aligned), and with "int8" / "int4" the
    BF16_TENSORS' quants and "<name>_scale" scales (module docstring), the 1-byte quants last."""
    if dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    if dtype in QMAX:
        for n, t in tensors.items():
            if n + SCALE_SUFFIX in tensors:
                raise ExportError(f"tensor {n + SCALE_SUFFIX} would clash with the scales of {n}")
            if is_bf16_tensor(n) and not torch.isfinite(t).all():
                raise ExportError(f"tensor {n}: contains NaN or Inf (no {dtype} scale holds it)")
    stored = _stored_tensors(tensors, dtype)
    header: "OrderedDict[str, object]" = OrderedDict()
    header["__metadata__"] = {"format": "pt"}
    off = 0
    for n, dt, shape, data in stored:
        header[n] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * ((-len(hb)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, _, _, data in stored:
            f.write(data)
    os.replace(tmp, path)


def read_safetensors_header(path: str) -> Tuple[int, dict]:
    """Returns (header_len N, header dict). Data starts at 8 + N."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ExportError(f"{path}: too short for a safetensors header")
        (n,) = struct.unpack("<Q", raw)
        if n > size - 8:
            raise ExportError(f"{path}: header length {n} exceeds file size {size}")
        header = json.loads(f.read(n).decode("utf-8"), object_pairs_hook=OrderedDict)
    return n, header


def _is_scale_of_gemm(name: str) -> bool:
    return name.endswith(SCALE_SUFFIX) and is_bf16_tensor(name[:-len(SCALE_SUFFIX)])


def read_safetensors(path: str, shapes: Optional[Dict[str, Tuple[int, ...]]] = None
                     ) -> "OrderedDict[str, torch.Tensor]":
    """Every tensor as float32: F32 as stored, BF16 (only the BF16_TENSORS may be) widened
    exactly, int8 / int4 quants (I8 / U8, only the BF16_TENSORS, each with its "<name>_scale")
    dequantised as float32(q) * scale (one float32 multiply, as the engine's f32 / bf16 and CUDA
    paths do), under the weight's name. A U8 row of c bytes holds 2c or 2c - 1 quants: `shapes`
    (expected_shapes) says which; without it k = 2c."""
    n, header = read_safetensors_header(path)
    base = 8 + n
    size = os.path.getsize(path)
    raw: "OrderedDict[str, Tuple[str, np.ndarray]]" = OrderedDict()
    sizes = {"F32": (4, "<f4"), "BF16": (2, "<u2"), "I8": (1, "i1"), "U8": (1, "u1")}
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = info.get("dtype")
            gemm = is_bf16_tensor(name)
            if not (dt == "F32" or (gemm and dt in ("BF16", "I8", "U8"))):
                want = "F32, BF16, I8 or U8" if gemm else "F32"
                raise ExportError(f"{path}: tensor {name}: dtype {dt}, want {want}")
            esize, np_dtype = sizes[dt]
            b, e = info["data_offsets"]
            shape = [int(s) for s in info["shape"]]
            count = int(np.prod(shape)) if shape else 1
            if e - b != esize * count or base + e > size or b < 0:
                raise ExportError(f"{path}: tensor {name}: bad data_offsets {[b, e]} for shape "
                                  f"{shape}")
            f.seek(base + b)
            raw[name] = (dt, np.frombuffer(f.read(e - b), dtype=np_dtype).reshape(shape))
    out: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    for name, (dt, arr) in raw.items():
        if _is_scale_of_gemm(name) and raw.get(name[:-len(SCALE_SUFFIX)], ("F32",))[0] in (
                "I8", "U8"):
            continue  # read with its quants
        if dt == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif dt in ("I8", "U8"):
            try:
                arr = dequantize(name, dt, arr, raw.get(name + SCALE_SUFFIX),
                                 (shapes or {}).get(name))
            except ValueError as e:
                raise ExportError(f"{path}: {e}")
        out[name] = torch.from_numpy(arr.astype(np.float32).copy())
    return out


def load_exported(model_dir: str) -> FlatstateLM:
    """models/<name>/ -> FlatstateLM (fp32 weights exactly as stored; BF16 ones widened, int8 /
    int4 ones dequantised), in eval mode."""
    cfg_path = os.path.join(model_dir, CONFIG_FILE)
    st_path = os.path.join(model_dir, WEIGHTS_FILE)
    for p in (cfg_path, st_path):
        if not os.path.isfile(p):
            raise ExportError(f"{p}: not found")
    with open(cfg_path) as f:
        cfg = ModelConfig.from_json(json.load(f))
    sd = read_safetensors(st_path, expected_shapes(cfg))
    check_state_dict(cfg, sd)
    model = FlatstateLM(cfg)
    model.load_state_dict(sd, strict=True)
    model.eval()
    return model


# ----------------------------------------------------------------------------------------------
# Export
# ----------------------------------------------------------------------------------------------

def _config_text(cfg_json: dict) -> str:
    return json.dumps(cfg_json, sort_keys=True, indent=2) + "\n"


def _check_overwrite(out_dir: str, cfg_json: dict, force: bool) -> None:
    if not os.path.exists(out_dir):
        return
    if not os.path.isdir(out_dir):
        raise ExportError(f"{out_dir} exists and is not a directory")
    if force:
        return
    cfg_path = os.path.join(out_dir, CONFIG_FILE)
    if not os.path.isfile(cfg_path):
        if os.listdir(out_dir):
            raise ExportError(f"{out_dir} exists, is not empty and has no {CONFIG_FILE}; "
                              f"refusing to overwrite it (pass --force to replace)")
        return
    try:
        with open(cfg_path) as f:
            old = json.load(f)
    except (OSError, ValueError) as e:
        raise ExportError(f"{cfg_path}: unreadable ({e}); refusing to overwrite "
                          f"(pass --force to replace)")
    new = json.loads(json.dumps(cfg_json))
    # torch_dtype is the storage of the same architecture (like retrained weights): no --force.
    old.pop("torch_dtype", None)
    new.pop("torch_dtype", None)
    if old != new:
        diff = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
        desc = ", ".join(f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in diff)
        raise ExportError(f"{out_dir} already holds a model with a different architecture "
                          f"({desc}); refusing to overwrite (pass --force to replace)")


def export_checkpoint(ckpt: dict, name: str, models_dir: str = "models",
                      force: bool = False, dtype: str = "float32") -> str:
    """ckpt: {"config": cfg.to_json(), "state_dict": ..., "record": ...}. Returns the folder.
    dtype "bfloat16" stores the BF16_TENSORS as BF16 and writes torch_dtype "bfloat16"; "int8" /
    "int4" store them quantised (quants plus "<name>_scale") with that torch_dtype."""
    if not name or "/" in name or name.startswith("."):
        raise ExportError(f"bad model name {name!r}")
    if dtype not in DTYPES:
        raise ExportError(f"dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    for key in ("config", "state_dict"):
        if key not in ckpt:
            raise ExportError(f"checkpoint has no {key!r} entry (keys: {sorted(ckpt)})")
    try:
        cfg = ModelConfig.from_json(ckpt["config"])
    except (TypeError, ValueError) as e:
        raise ExportError(f"checkpoint config invalid: {e}")
    cfg_json = cfg.to_json()
    cfg_json["torch_dtype"] = dtype
    sd = OrderedDict((k, v.detach().cpu()) for k, v in ckpt["state_dict"].items())
    check_state_dict(cfg, sd)
    record = dict(ckpt.get("record") or {})

    out_dir = os.path.join(models_dir, name)
    _check_overwrite(out_dir, cfg_json, force)
    os.makedirs(out_dir, exist_ok=True)

    st_path = os.path.join(out_dir, WEIGHTS_FILE)
    write_safetensors(st_path, sd, dtype)
    with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
        f.write(_config_text(cfg_json))
    nparams = record.get("params")
    if not isinstance(nparams, int):
        buffers = {"feature_proj"}           # fixed random projections (favor, gated)
        nparams = sum(v.numel() for k, v in sd.items() if k.rsplit(".", 1)[-1] not in buffers)
    with open(os.path.join(out_dir, CARD_FILE), "w") as f:
        ntensors = len(sd) + (sum(map(is_bf16_tensor, sd)) if dtype in QMAX else 0)  # + scales
        f.write(model_card(name, cfg, record, nparams, ntensors, os.path.getsize(st_path),
                           dtype))
    return out_dir


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--checkpoint", required=True, help="checkpoint .pt written by tools/train.py")
    p.add_argument("--name", required=True, help="model folder name, e.g. shakespeare-linear-elu")
    p.add_argument("--models_dir", default="models")
    p.add_argument("--force", action="store_true",
                   help="overwrite an existing folder even if its architecture differs")
    p.add_argument("--dtype", choices=DTYPES, default="float32",
                   help="bfloat16: store the layers' GEMM weights (attn.wqkv, attn.wo, mlp.w1, "
                        "mlp.w2) as BF16, rounded to nearest even; int8 / int4: store them "
                        "quantised per row and block of 32 (quants plus fp32 scales, the "
                        "engine's rule); everything else stays F32")
    a = p.parse_args(argv)
    try:
        if not os.path.isfile(a.checkpoint):
            raise ExportError(f"checkpoint file not found: {a.checkpoint}")
        try:
            ckpt = torch.load(a.checkpoint, map_location="cpu")
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a bad file
            raise ExportError(f"cannot read checkpoint {a.checkpoint}: {e}")
        if not isinstance(ckpt, dict):
            raise ExportError(f"checkpoint {a.checkpoint} is not a dict")
        out = export_checkpoint(ckpt, a.name, a.models_dir, a.force, a.dtype)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"exported {a.checkpoint} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
