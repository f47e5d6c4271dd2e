"""tools/export_gguf.py: a tiny GGUF written and its header parsed back (no llama.cpp needed)."""
import os
import struct
import sys

import numpy as np

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import export_gguf  # noqa: E402


def tiny_shape():
    return export_gguf.LlamaShape(layers=2, d_model=64, heads=4, ffn=96, vocab=32, context=128)


def test_tiny_gguf_header_round_trip(tmp_path):
    path = str(tmp_path / "tiny.gguf")
    assert export_gguf.main(["--out", path, "--layers", "2", "--d_model", "64", "--heads", "4",
                             "--ffn", "96", "--vocab", "32", "--context", "128"]) == 0
    raw = open(path, "rb").read()
    assert raw[:4] == b"GGUF"
    assert struct.unpack_from("<IQQ", raw, 4) == (3, 2 + 2 * 9 + 1, 15)

    g = export_gguf.read_gguf(path)
    assert g.version == 3
    md = g.metadata
    assert md["general.architecture"] == "llama"
    assert md["tokenizer.ggml.model"] == "none"
    assert md["general.file_type"] == 0
    assert md["llama.vocab_size"] == 32
    assert md["llama.block_count"] == 2
    assert md["llama.embedding_length"] == 64
    assert md["llama.feed_forward_length"] == 96
    assert md["llama.attention.head_count"] == 4
    assert md["llama.rope.dimension_count"] == 16
    assert abs(md["llama.attention.layer_norm_rms_epsilon"] - 1e-5) < 1e-12

    s = tiny_shape()
    expected = export_gguf.tensor_shapes(s)
    assert [t.name for t in g.tensors] == [n for n, _ in expected]
    for t, (_, shape) in zip(g.tensors, expected):
        assert t.ne == tuple(reversed(shape))  # ggml's ne[0] is the fastest-varying dimension
        assert t.ggml_type == export_gguf.GGML_F32
        assert t.offset % 32 == 0
    assert g.data_start % 32 == 0
    last = g.tensors[-1]
    assert len(raw) == g.data_start + last.offset + export_gguf.tensor_bytes(last)
    assert sum(int(np.prod(t.ne)) for t in g.tensors) == export_gguf.num_parameters(s)

    # The data round-trips: same seed, same values.
    ref = dict(export_gguf.random_tensors(s, 1234))
    for name in ("token_embd.weight", "blk.1.ffn_down.weight", "output_norm.weight"):
        np.testing.assert_array_equal(export_gguf.read_f32_tensor(path, g, name), ref[name])


def test_gpt2_small_width_parameter_count():
    # The 113.7 M: llama architecture at flatstate's GPT-2-small width.
    assert export_gguf.num_parameters(export_gguf.LlamaShape()) == 113_658_624
