"""tools/export.py's tensor table is engine/arch/flatstate_tensors.json, read by
tools/flatstate_tensors.py, the file the C++ loader embeds: checked against the hand-written
tables it replaced (export.py's own, and a port of the C++ FlatstateTensorTable with layer_types,
order included) and against the shipped models' files."""
import dataclasses
import glob
import json
import os
import sys

import pytest

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REPO = os.path.join(TOOLS, "..")
sys.path.insert(0, TOOLS)
import export  # noqa: E402
import flatstate_tensors  # noqa: E402
from flatstate_ref.model import ATTENTION_KINDS, ModelConfig  # noqa: E402


# ---- the hand-written tables, as they were (compare against these, do not edit them) ----------

LEGACY_BF16_TENSORS = (".attn.wqkv.weight", ".attn.wo.weight", ".mlp.w1.weight",
                       ".mlp.w2.weight")


def legacy_expected_tensor_names(cfg):
    names = ["embed.weight", "norm.weight", "lm_head.weight"]
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        names += [p + "attn_norm.weight", p + "attn.wqkv.weight", p + "attn.wo.weight",
                  p + "mlp_norm.weight", p + "mlp.w1.weight", p + "mlp.w2.weight"]
        if cfg.has_conv:
            names.append(p + "attn.conv")
        if cfg.attention_kind == "cosine":
            names.append(p + "attn.decay_logit")
        if cfg.attention_kind in ("favor", "gated"):
            names.append(p + "attn.feature_proj")
        if cfg.attention_kind == "gated":
            names += [p + "attn.feature_log_scale", p + "attn.gate.weight", p + "attn.gate.bias"]
    return sorted(names)


def legacy_expected_shapes(cfg):
    D, H, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    shapes = {"embed.weight": (cfg.vocab_size, D), "norm.weight": (D,),
              "lm_head.weight": (cfg.vocab_size, D)}
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        shapes.update({p + "attn_norm.weight": (D,), p + "attn.wqkv.weight": (3 * D, D),
                       p + "attn.wo.weight": (D, D), p + "mlp_norm.weight": (D,),
                       p + "mlp.w1.weight": (cfg.intermediate_size, D),
                       p + "mlp.w2.weight": (D, cfg.intermediate_size),
                       p + "attn.conv": (D, cfg.conv_kernel_size),
                       p + "attn.decay_logit": (H,),
                       p + "attn.feature_proj": (cfg.favor_num_features
                                                 if cfg.attention_kind == "favor"
                                                 else cfg.rfa_num_features, hd),
                       p + "attn.feature_log_scale": (H,), p + "attn.gate.weight": (H, D),
                       p + "attn.gate.bias": (H,)})
    names = set(legacy_expected_tensor_names(cfg))
    return {k: v for k, v in shapes.items() if k in names}


def legacy_cpp_table(cfg, layer_types=None):
    """engine/arch/flatstate_arch.cc's hand-written FlatstateTensorTable, ported: (name, shape)
    in its order; layer_types[i] == "softmax" marks a softmax layer (no conv, no kind tensors)."""
    D, H, hd = cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim
    F, K, V = cfg.intermediate_size, cfg.conv_kernel_size, cfg.vocab_size
    t = [("embed.weight", (V, D))]
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        softmax = cfg.attention_kind == "softmax" or bool(layer_types and
                                                          layer_types[i] == "softmax")
        t.append((p + "attn_norm.weight", (D,)))
        if cfg.has_conv and not softmax:
            t.append((p + "attn.conv", (D, K)))
        t += [(p + "attn.wqkv.weight", (3 * D, D)), (p + "attn.wo.weight", (D, D))]
        if softmax:
            pass
        elif cfg.attention_kind == "cosine":
            t.append((p + "attn.decay_logit", (H,)))
        elif cfg.attention_kind == "favor":
            t.append((p + "attn.feature_proj", (cfg.favor_num_features, hd)))
        elif cfg.attention_kind == "gated":
            t += [(p + "attn.feature_proj", (cfg.rfa_num_features, hd)),
                  (p + "attn.feature_log_scale", (H,)), (p + "attn.gate.weight", (H, D)),
                  (p + "attn.gate.bias", (H,))]
        t += [(p + "mlp_norm.weight", (D,)), (p + "mlp.w1.weight", (F, D)),
              (p + "mlp.w2.weight", (D, F))]
    return t + [("norm.weight", (D,)), ("lm_head.weight", (V, D))]


# ---- configs ----------------------------------------------------------------------------------

def shipped_configs():
    paths = sorted(glob.glob(os.path.join(REPO, "models", "*", "config.json")) +
                   glob.glob(os.path.join(REPO, "tests", "data", "models", "*", "config.json")))
    out = []
    for p in paths:
        with open(p) as f:
            cfg = json.load(f)
        if cfg.get("model_type") == "flatstate":  # models/ also ships a Hugging Face folder
            out.append((p, ModelConfig.from_json(cfg)))
    assert len(out) >= 12
    return out


def small_configs():
    out = []
    for kind in ATTENTION_KINDS:
        for conv in ((0,) if kind in ("softmax", "window") else (0, 1, 3)):
            for layout in (("alternate", "sum") if kind == "hybrid" else ("alternate",)):
                out.append(ModelConfig(attention_kind=kind, hidden_size=24, num_hidden_layers=3,
                                       num_attention_heads=3, intermediate_size=40,
                                       conv_kernel_size=conv, favor_num_features=10,
                                       rfa_num_features=6, hybrid_layout=layout))
    return out


@dataclasses.dataclass
class LayerTypesConfig(ModelConfig):
    """A ModelConfig with the C++ config key layer_types (the Python one has none)."""
    layer_types: tuple = ()


# ---- tests ------------------------------------------------------------------------------------

def test_export_table_equals_the_hand_written_one_for_every_config():
    for what, cfg in shipped_configs() + [(repr(c), c) for c in small_configs()]:
        assert export.expected_tensor_names(cfg) == legacy_expected_tensor_names(cfg), what
        assert export.expected_shapes(cfg) == legacy_expected_shapes(cfg), what
        assert [(t.name, t.shape) for t in flatstate_tensors.tensor_table(cfg)] == \
            legacy_cpp_table(cfg), what


def test_export_table_gemm_tensors_are_the_bf16_ones():
    assert export.BF16_TENSORS == LEGACY_BF16_TENSORS
    for _, cfg in shipped_configs():
        for t in flatstate_tensors.tensor_table(cfg):
            assert export.is_bf16_tensor(t.name) == t.gemm == t.name.endswith(
                LEGACY_BF16_TENSORS), t.name


@pytest.mark.parametrize("kind", ["linear_elu", "cosformer", "cosine", "favor"])
def test_export_table_layer_types(kind):
    for types in (("recurrent", "softmax", "recurrent"), ("softmax", "recurrent", "softmax"),
                  ("softmax",) * 3, ("recurrent",) * 3):
        for conv in (0, 4):
            cfg = LayerTypesConfig(attention_kind=kind, hidden_size=24, num_hidden_layers=3,
                                   num_attention_heads=3, intermediate_size=40,
                                   conv_kernel_size=conv, favor_num_features=10,
                                   layer_types=types)
            got = [(t.name, t.shape) for t in flatstate_tensors.tensor_table(cfg)]
            assert got == legacy_cpp_table(cfg, types), (kind, types, conv)
            assert export.expected_tensor_names(cfg) == sorted(n for n, _ in got)
    softmax_layer = [t.name for t in flatstate_tensors.tensor_table(LayerTypesConfig(
        attention_kind="cosine", num_hidden_layers=2, layer_types=("softmax", "recurrent")))
        if t.name.startswith("layers.0.")]
    assert "layers.0.attn.conv" not in softmax_layer
    assert "layers.0.attn.decay_logit" not in softmax_layer


def test_export_table_matches_the_shipped_files():
    """Every float32 folder's model.safetensors holds exactly the table's tensors and shapes."""
    checked = 0
    for path, cfg in shipped_configs():
        with open(path) as f:
            if json.load(f).get("torch_dtype", "float32") != "float32":
                continue
        _, header = export.read_safetensors_header(os.path.join(os.path.dirname(path),
                                                                "model.safetensors"))
        header.pop("__metadata__", None)
        assert {k: tuple(v["shape"]) for k, v in header.items()} == export.expected_shapes(cfg)
        checked += 1
    assert checked >= 8


@pytest.mark.parametrize("bad,why", [
    ({"role": "wqkv"}, "unknown role"),
    ({"shape": ["2*hidden"]}, "unknown dimension"),
    ({"shape": ["*hidden_size"]}, "bad factor"),
    ({"shape": ["0*hidden_size", 1]}, "bad factor"),
    ({"gemm": False}, "gemm is true exactly"),
    ({"kinds": ["nope"]}, "kinds"),
    ({"extra": 1}, "keys"),
])
def test_export_table_malformed_is_refused(tmp_path, bad, why):
    with open(flatstate_tensors.TABLE_PATH) as f:
        table = json.load(f)
    entry = next(e for e in table["per_layer"] if e["role"] == "w1")
    entry.update(bad)
    if bad.get("role") == "wqkv":
        entry["role"] = "wqk"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(table))
    with pytest.raises(ValueError, match=why):
        flatstate_tensors.load_table(p)
