#!/usr/bin/env python3
"""Write a random-weight GGUF of flatstate's GPT-2-small width, for llama.cpp's llama-bench.

    /usr/bin/python3 tools/export_gguf.py --out /tmp/flatstate-llama/gpt2-small-f32.gguf

Only speed is compared (bench/compare_llamacpp.sh, docs/benchmarks.md "llama.cpp side by
side"), so the weights are random: the file has the shape of flatstate's GPT-2-small benchmark
model (tests/util/model_writer.cc Gpt2SmallConfig: 12 layers, d_model 768, 12 heads of 64, MLP
3072, byte vocabulary 256) in llama.cpp's `llama` architecture. Its SwiGLU MLP has three
768 x 3072 matrices where flatstate's GELU MLP has two, and its output matrix is separate from
the embedding, so it holds 113.7 M parameters against flatstate's 85.3 M. Every tensor is F32
(general.file_type 0); `llama-quantize in.gguf out.gguf BF16|Q8_0` makes the other types.
`tokenizer.ggml.model = "none"` with `llama.vocab_size = 256` loads without a tokenizer
(llama.cpp adds 256 dummy tokens; llama-bench draws random token ids).

The GGUF (version 3) is written here with struct, not with llama.cpp's gguf-py (read for the
format only: gguf-py/gguf/constants.py and gguf_writer.py in the llama.cpp tree):

    u32 magic "GGUF" | u32 version 3 | u64 tensor count | u64 metadata count
    metadata:   string key | u32 value type | value      (string = u64 byte length + UTF-8)
    tensor info: string name | u32 n_dims | u64 ne[n_dims] (ne[0] fastest: the reverse of the
                 row-major shape) | u32 ggml type (F32 = 0) | u64 offset into the data section
    zero padding to general.alignment (32), then the tensor data, each tensor at its offset
    (offsets multiples of 32), all little-endian.

read_gguf(path) parses a file's header and tensor infos back (the tests, and a check by hand).
"""
from __future__ import annotations

import argparse
import os
import struct
import sys
from dataclasses import dataclass
from typing import BinaryIO, Dict, List, Sequence, Tuple

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf-py's GGUFValueType.
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, \
    T_UINT64, T_INT64, T_FLOAT64 = range(13)
_SCALAR = {T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
           T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
           T_FLOAT64: "<d"}
# ggml_type ids and (block elements, block bytes) of the types this file reads back.
GGML_F32, GGML_F16, GGML_Q8_0, GGML_BF16 = 0, 1, 8, 30
GGML_BLOCK = {GGML_F32: (1, 4), GGML_F16: (1, 2), GGML_Q8_0: (32, 34), GGML_BF16: (1, 2)}


@dataclass
class LlamaShape:
    layers: int = 12
    d_model: int = 768
    heads: int = 12
    ffn: int = 3072
    vocab: int = 256
    context: int = 65536
    rms_eps: float = 1e-5
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads


def tensor_shapes(s: LlamaShape) -> List[Tuple[str, Tuple[int, ...]]]:
    """(name, row-major shape) of every tensor of the llama architecture, in file order."""
    d, f = s.d_model, s.ffn
    out = [("token_embd.weight", (s.vocab, d))]
    for i in range(s.layers):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (d,)), (p + "attn_q.weight", (d, d)),
                (p + "attn_k.weight", (d, d)), (p + "attn_v.weight", (d, d)),
                (p + "attn_output.weight", (d, d)), (p + "ffn_norm.weight", (d,)),
                (p + "ffn_gate.weight", (f, d)), (p + "ffn_up.weight", (f, d)),
                (p + "ffn_down.weight", (d, f))]
    out += [("output_norm.weight", (d,)), ("output.weight", (s.vocab, d))]
    return out


def num_parameters(s: LlamaShape) -> int:
    return sum(int(np.prod(shape)) for _, shape in tensor_shapes(s))


def metadata(s: LlamaShape, name: str) -> List[Tuple[str, int, object]]:
    """(key, value type, value) in file order."""
    a = "llama."
    return [
        ("general.architecture", T_STRING, "llama"),
        ("general.name", T_STRING, name),
        ("general.file_type", T_UINT32, 0),  # LLAMA_FTYPE_ALL_F32
        ("general.alignment", T_UINT32, ALIGNMENT),
        (a + "vocab_size", T_UINT32, s.vocab),
        (a + "context_length", T_UINT32, s.context),
        (a + "embedding_length", T_UINT32, s.d_model),
        (a + "block_count", T_UINT32, s.layers),
        (a + "feed_forward_length", T_UINT32, s.ffn),
        (a + "attention.head_count", T_UINT32, s.heads),
        (a + "attention.head_count_kv", T_UINT32, s.heads),
        (a + "attention.layer_norm_rms_epsilon", T_FLOAT32, s.rms_eps),
        (a + "rope.dimension_count", T_UINT32, s.head_dim),
        (a + "rope.freq_base", T_FLOAT32, s.rope_base),
        ("tokenizer.ggml.model", T_STRING, "none"),
    ]


def _string(v: str) -> bytes:
    b = v.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vtype: int, v: object) -> bytes:
    if vtype == T_STRING:
        return _string(str(v))
    if vtype == T_ARRAY:
        raise ValueError("arrays are not written by this tool")
    return struct.pack(_SCALAR[vtype], v)


def _pad(n: int) -> int:
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def write_gguf(f: BinaryIO, kvs: Sequence[Tuple[str, int, object]],
               tensors: Sequence[Tuple[str, np.ndarray]]) -> None:
    """Writes a GGUF with `kvs` and F32 `tensors` (name, array), in order, to `f`."""
    head = bytearray(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs)))
    for key, vtype, v in kvs:
        head += _string(key) + struct.pack("<I", vtype) + _value(vtype, v)
    offset = 0
    for name, arr in tensors:
        if arr.dtype != np.float32:
            raise ValueError(f"{name}: only F32 tensors are written, got {arr.dtype}")
        ne = tuple(reversed(arr.shape))
        head += _string(name) + struct.pack("<I", len(ne))
        head += struct.pack(f"<{len(ne)}Q", *ne) + struct.pack("<IQ", GGML_F32, offset)
        offset += arr.nbytes + _pad(arr.nbytes)
    head += b"\0" * _pad(len(head))
    f.write(head)
    for _, arr in tensors:
        f.write(np.ascontiguousarray(arr, dtype="<f4").tobytes())
        f.write(b"\0" * _pad(arr.nbytes))


def random_tensors(s: LlamaShape, seed: int, std: float = 0.02):
    """Yields (name, array): matrices ~ N(0, std^2), norms ones."""
    rng = np.random.default_rng(seed)
    for name, shape in tensor_shapes(s):
        if len(shape) == 1:
            yield name, np.ones(shape, dtype=np.float32)
        else:
            yield name, (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))


@dataclass
class TensorInfo:
    name: str
    ne: Tuple[int, ...]
    ggml_type: int
    offset: int


@dataclass
class GgufFile:
    version: int
    metadata: Dict[str, object]
    tensors: List[TensorInfo]
    data_start: int  # absolute file offset of the data section


def read_gguf(path: str) -> GgufFile:
    """Parses the header, metadata and tensor infos of a GGUF file (arrays read as lists)."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def take(fmt: str):
        nonlocal pos
        vals = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return vals if len(vals) > 1 else vals[0]

    def string() -> str:
        nonlocal pos
        n = take("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(vtype: int):
        if vtype == T_STRING:
            return string()
        if vtype == T_ARRAY:
            etype, n = take("<IQ")
            return [value(etype) for _ in range(n)]
        return take(_SCALAR[vtype])

    if buf[:4] != GGUF_MAGIC:
        raise ValueError(f"{path}: not a GGUF file (magic {buf[:4]!r})")
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    kv: Dict[str, object] = {}
    for _ in range(n_kv):
        key = string()
        kv[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        n_dims = take("<I")
        ne = tuple(struct.unpack_from(f"<{n_dims}Q", buf, pos))
        pos += 8 * n_dims
        gtype, offset = take("<IQ")
        infos.append(TensorInfo(name, ne, gtype, offset))
    align = int(kv.get("general.alignment", ALIGNMENT))
    data_start = pos + (align - pos % align) % align
    return GgufFile(version, kv, infos, data_start)


def tensor_bytes(t: TensorInfo) -> int:
    elems, nbytes = GGML_BLOCK[t.ggml_type]
    n = int(np.prod(t.ne))
    return n // elems * nbytes


def read_f32_tensor(path: str, g: GgufFile, name: str) -> np.ndarray:
    """One F32 tensor's data, in row-major shape (reverse of ne)."""
    t = next(t for t in g.tensors if t.name == name)
    if t.ggml_type != GGML_F32:
        raise ValueError(f"{name} is ggml type {t.ggml_type}, not F32")
    with open(path, "rb") as f:
        f.seek(g.data_start + t.offset)
        data = np.frombuffer(f.read(tensor_bytes(t)), dtype="<f4")
    return data.reshape(tuple(reversed(t.ne)))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", required=True, help="the .gguf file to write")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--d_model", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--ffn", type=int, default=3072)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--context", type=int, default=65536)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--name", default="flatstate-gpt2-small-width-llama")
    a = p.parse_args(argv)
    if a.d_model % a.heads:
        print("error: --d_model must be a multiple of --heads", file=sys.stderr)
        return 1
    s = LlamaShape(layers=a.layers, d_model=a.d_model, heads=a.heads, ffn=a.ffn, vocab=a.vocab,
                   context=a.context)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    tmp = a.out + ".tmp"
    with open(tmp, "wb") as f:
        write_gguf(f, metadata(s, a.name), list(random_tensors(s, a.seed)))
    os.replace(tmp, a.out)
    print(f"{a.out}: llama, {a.layers} layers, d_model {a.d_model}, {a.heads} heads, FFN {a.ffn}, "
          f"vocab {a.vocab}, {num_parameters(s):,} parameters, F32")
    return 0


if __name__ == "__main__":
    sys.exit(main())
