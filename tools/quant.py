"""The stored int8 / int4 layout of a model folder (docs/model-format.md, "Stored int8 and int4"):
the engine's quantisation rule in numpy, the int4 nibble packing, and dequantisation for readers.
Used by tools/export.py (--dtype int8 | int4, read_safetensors). No state.
"""
from typing import Optional, Tuple

import numpy as np

QUANT_BLOCK = 32                   # consecutive inputs per scale
SCALE_SUFFIX = "_scale"            # "<name>_scale": the scales of quantised weight <name>
QMAX = {"int8": 127, "int4": 7}    # the largest quant of each type


def quantize_blocks(w: np.ndarray, qmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """The engine's int8 / int4 rule (kernels/gemm.h QuantizeBlockInt8 / QuantizeBlockInt4) on a
    float32 matrix w [n, k], per row and block of QUANT_BLOCK consecutive inputs (the last one
    short): scale = max|w| / qmax in float32 and q = round-half-even(w / scale) clipped to
    [-qmax, qmax], all 0 (scale 0) for an all-zero block. Both steps are single float32
    operations (IEEE division, correctly rounded, then np.rint), as in C++. Returns (q int8
    [n, k], scales float32 [n, ceil(k / 32)]). w must be finite."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    n, k = w.shape
    nb = -(-k // QUANT_BLOCK)
    blocks = np.zeros((n, nb * QUANT_BLOCK), dtype=np.float32)
    blocks[:, :k] = w
    blocks = blocks.reshape(n, nb, QUANT_BLOCK)
    amax = np.abs(blocks).max(axis=2)
    scale = (amax / np.float32(qmax)).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1), scale).astype(np.float32)
    q = np.rint(blocks / safe[:, :, None])
    q = np.clip(q, -qmax, qmax)
    q[scale == 0] = 0
    q = q.reshape(n, nb * QUANT_BLOCK)[:, :k].astype(np.int8)
    return q, scale


def pack_int4(q: np.ndarray) -> np.ndarray:
    """int4 quants q [n, k] in [-7, 7] -> uint8 [n, ceil(k / 2)]: q[:, 2i] + 8 in the low nibble
    of byte i, q[:, 2i + 1] + 8 in the high one (an odd k's last high nibble is 8, a zero)."""
    n, k = q.shape
    nib = np.full((n, k + k % 2), 8, dtype=np.uint8)
    nib[:, :k] = (q.astype(np.int16) + 8).astype(np.uint8)
    return (nib[:, 0::2] | (nib[:, 1::2] << 4)).astype(np.uint8)


def unpack_int4(packed: np.ndarray, k: int) -> np.ndarray:
    """pack_int4's inverse: uint8 [n, ceil(k / 2)] -> int8 [n, k] (q = nibble - 8)."""
    nib = np.empty((packed.shape[0], 2 * packed.shape[1]), dtype=np.int16)
    nib[:, 0::2] = packed & 15
    nib[:, 1::2] = packed >> 4
    return (nib[:, :k] - 8).astype(np.int8)


def dequantize(name: str, dt: str, q: np.ndarray,
                scale: "Optional[Tuple[str, np.ndarray]]",
                shape: Optional[Tuple[int, ...]]) -> np.ndarray:
    """float32(q) * scale of a stored int8 (I8 [n, k]) / int4 (U8 [n, ceil(k / 2)]) weight, with
    the engine loader's checks (ValueError naming the tensor). scale: (its dtype, its array) or
    None; shape: the weight's [n, k], or None (k = 2 * columns for int4)."""
    where = f"tensor {name}"
    if q.ndim != 2:
        raise ValueError(f"{where}: quants must be a matrix, got shape {list(q.shape)}")
    k = shape[1] if shape is not None else (q.shape[1] * 2 if dt == "U8" else q.shape[1])
    if dt == "U8":
        if q.shape[1] != -(-k // 2):
            raise ValueError(f"{where}: U8 shape {list(q.shape)} does not hold k = {k}")
        if k % 2 and np.any((q[:, -1] >> 4) != 8):
            raise ValueError(f"{where}: an odd k's pad nibble must be 8")
        q = unpack_int4(q, k)
        bad = q == -8
    else:
        bad = q == -128
    if np.any(bad):
        raise ValueError(f"{where}: quant {int(q[bad][0])} out of range")
    if scale is None:
        raise ValueError(f"{where}{SCALE_SUFFIX}: missing (the scales of a {dt} weight)")
    s = scale[1]
    nb = -(-k // QUANT_BLOCK)
    if scale[0] != "F32" or list(s.shape) != [q.shape[0], nb]:
        raise ValueError(f"{where}{SCALE_SUFFIX}: want F32 [{q.shape[0]}, {nb}], got {scale[0]} "
                          f"{list(s.shape)}")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError(f"{where}{SCALE_SUFFIX}: scales must be finite and >= 0")
    per_input = np.repeat(s.astype(np.float32), QUANT_BLOCK, axis=1)[:, :k]
    return (q.astype(np.float32) * per_input).astype(np.float32)
