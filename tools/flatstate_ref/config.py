"""ModelConfig: the architecture of one flatstate model (config.json)."""
from __future__ import annotations

import dataclasses
import json
from typing import List, Optional, Tuple

ATTENTION_KINDS = ("softmax", "linear_elu", "cosformer", "cosine", "favor",
                   "gated", "window", "hybrid")
# Kinds computed by the shared linear core (S, z, M state) and nothing else.
LINEAR_KINDS = ("linear_elu", "cosformer", "cosine", "favor")
# Kinds added by issue 14 (constant state, own cores).
NEW_KINDS = ("gated", "window", "hybrid")
# Every kind with a constant-size per-session state (all but softmax).
RECURRENT_KINDS = LINEAR_KINDS + NEW_KINDS
# Kinds with the causal depthwise "token shift" convolution (when conv_kernel_size > 0).
CONV_KINDS = LINEAR_KINDS + ("gated", "hybrid")
HYBRID_LAYOUTS = ("sum", "alternate")

# Keys written to config.json only for the kinds that use them (so the config.json of the
# older kinds is byte-identical to what it was before these keys existed).
_KIND_ONLY_KEYS = {"window_size": ("window", "hybrid"), "rfa_num_features": ("gated",),
                   "hybrid_layout": ("hybrid",)}


@dataclasses.dataclass
class ModelConfig:
    attention_kind: str = "linear_elu"
    vocab_size: int = 256
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 512
    rms_norm_eps: float = 1e-5
    linear_eps: float = 1e-6
    conv_kernel_size: int = 4
    rope_theta: float = 10000.0
    max_position_embeddings: int = 1 << 20
    cosformer_horizon: int = 1024
    favor_num_features: int = 64
    chunk_size: int = 64
    window_size: int = 64          # W of window / hybrid: a token attends to the last W tokens
    rfa_num_features: int = 32     # R of gated: random frequency vectors; feature dim 2R
    hybrid_layout: str = "alternate"   # hybrid: "alternate" (shipped: window layers even,
    #                                    linear layers odd) | "sum" (both branches in every layer)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def is_linear(self) -> bool:
        """True for the kinds whose whole state is the shared linear core's {S, z, M}."""
        return self.attention_kind in LINEAR_KINDS

    @property
    def is_recurrent(self) -> bool:
        """True for every kind with a constant-size state (chunked prefill, recurrent decode)."""
        return self.attention_kind in RECURRENT_KINDS

    @property
    def has_conv(self) -> bool:
        return self.attention_kind in CONV_KINDS and self.conv_kernel_size > 0

    def feature_dim(self) -> int:
        """Size of phi(q), phi(k) per head: the first dimension of S (0: no S)."""
        k = self.attention_kind
        if k == "cosformer":
            return 2 * self.head_dim
        if k == "favor":
            return self.favor_num_features
        if k == "gated":
            return 2 * self.rfa_num_features
        if k in ("softmax", "window"):
            return 0
        return self.head_dim

    def layer_branches(self, i: int) -> Tuple[Optional[str], bool]:
        """(linear branch, window branch) of layer i.  The linear branch is None, a LINEAR_KINDS
        feature map name, or "gated"; the window branch is a sliding-window softmax."""
        k = self.attention_kind
        if k in LINEAR_KINDS or k == "gated":
            return k, False
        if k == "window":
            return None, True
        if k == "hybrid":
            if self.hybrid_layout == "sum":
                return "linear_elu", True
            return (None, True) if i % 2 == 0 else ("linear_elu", False)
        return None, False                      # softmax: full causal attention, KV cache

    def validate(self) -> None:
        def bad(name, why):
            raise ValueError(f"config value {name}={getattr(self, name)!r}: {why}")
        if self.attention_kind not in ATTENTION_KINDS:
            bad("attention_kind", f"must be one of {', '.join(ATTENTION_KINDS)}")
        if self.vocab_size != 256:
            bad("vocab_size", "the byte tokenizer needs exactly 256")
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "chunk_size", "cosformer_horizon",
                     "favor_num_features", "window_size", "rfa_num_features"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                bad(name, "must be a positive integer")
        if self.hidden_size % self.num_attention_heads:
            bad("hidden_size", "must be divisible by num_attention_heads")
        if self.head_dim % 2:
            bad("hidden_size", "head_dim must be even (RoPE rotates pairs)")
        if not isinstance(self.conv_kernel_size, int) or self.conv_kernel_size < 0:
            bad("conv_kernel_size", "must be an integer >= 0 (0 = no convolution)")
        if self.attention_kind in ("softmax", "window") and self.conv_kernel_size:
            bad("conv_kernel_size", f"{self.attention_kind} uses RoPE; set 0")
        if self.hybrid_layout not in HYBRID_LAYOUTS:
            bad("hybrid_layout", f"must be one of {', '.join(HYBRID_LAYOUTS)}")
        for name in ("rms_norm_eps", "linear_eps", "rope_theta"):
            if not getattr(self, name) > 0:
                bad(name, "must be > 0")

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        for key, kinds in _KIND_ONLY_KEYS.items():
            if self.attention_kind not in kinds:
                del d[key]
        d["model_type"] = "flatstate"
        d["architectures"] = ["FlatstateForCausalLM"]
        d["head_dim"] = self.head_dim
        d["torch_dtype"] = "float32"
        return d

    @staticmethod
    def from_json(d: dict) -> "ModelConfig":
        fields = {f.name for f in dataclasses.fields(ModelConfig)}
        cfg = ModelConfig(**{k: v for k, v in d.items() if k in fields})
        cfg.validate()
        return cfg


def load_config(path: str) -> ModelConfig:
    with open(path) as f:
        return ModelConfig.from_json(json.load(f))


def layer_state_floats(cfg: ModelConfig, i: int) -> List[Tuple[str, int]]:
    """The fp32 state of layer i, as (part, floats) in layout order (see docs/kinds.md)."""
    H, hd, D = cfg.num_attention_heads, cfg.head_dim, cfg.hidden_size
    lin, win = cfg.layer_branches(i)
    parts = []
    if lin == "gated":
        Fd = cfg.feature_dim()
        parts += [("S", H * Fd * hd), ("z", H * Fd), ("mass", H)]
    elif lin is not None:
        Fd = cfg.feature_dim() if cfg.attention_kind in LINEAR_KINDS else hd
        parts += [("S", H * Fd * hd), ("z", H * Fd), ("M", H)]
    if cfg.has_conv:
        parts.append(("conv", (cfg.conv_kernel_size - 1) * D))
    if win:
        parts += [("ring_k", cfg.window_size * D), ("ring_v", cfg.window_size * D)]
    return parts
