"""PyTorch reference of the flatstate model family (the executable specification).

One decoder-only model over a byte vocabulary (256 ids):

    x = embed[tokens]
    for each layer:  x = x + attn(norm1(x));  x = x + mlp(norm2(x))
    logits = lm_head(norm(x))

Norms are RMSNorm (weight only).  The MLP is w2(gelu(w1(h))) with the exact (erf) GELU.
The attention kind is `config.attention_kind`:

  softmax     causal scaled dot-product attention, RoPE (rotate-half) on q and k.
  linear_elu  phi(x) = elu(x) + 1 (Katharopoulos et al.).
  cosformer   phi = ReLU, with the cos(pi/2 * (i - j) / M) re-weighting decomposed into
              a cos part and a sin part.  We concatenate [phi(x) cos(a i), phi(x) sin(a i)]
              into one feature vector of size 2*head_dim, so the two S and two z of the paper
              are stored as one S of shape (2*hd, hd) and one z of size 2*hd.
              M (`cosformer_horizon`) is fixed in the config.  Past M the weight of a token
              j < i - M becomes negative (cos of an angle over pi/2): the model was never
              trained there and quality degrades; nothing breaks numerically.
  cosine      Cottention: q and k L2-normalised, no denominator, values scaled by
              t^(-sigmoid(m_h)) (t = 1-based position of the value), one learned m per head.
  favor       Performer FAVOR+ positive random features with a fixed projection W (F x hd)
              stored in the weights:  phi(x) = exp(W x' - |x'|^2 / 2),  x' = x * hd^(-1/4).
              The stabiliser is causal: queries subtract their own max over features (this
              cancels exactly in num/den), keys are held relative to a running max M_t of
              the per-key feature max; when M grows, S and z are rescaled by exp(M_old - M_new).

  gated       RFA-Gate (Peng et al. 2021): random Fourier features sin/cos of a fixed random
              projection of the L2-normalised q, k, with a per-head data-dependent gate
              g = sigmoid(w_g.x + b_g): S <- g S + (1-g) phi(k) v^T, z likewise (gated.py).
  window      sliding-window softmax (Longformer's local attention): each token attends to
              the last `window_size` tokens, itself included; RoPE; ring-buffer state (window.py).
  hybrid      an elu+1 linear-attention branch over all past tokens plus a sliding-window
              softmax branch (RoPE) over the last `window_size` tokens, in the spirit of Based
              (Arora et al. 2024); `hybrid_layout` "alternate" (the default and the shipped
              model) uses window layers (even) and linear layers (odd), "sum" puts both in
              every layer and adds their outputs.
  docs/kinds.md is the exact specification of the three kinds added by issue 14.

Positional information for the linear kinds: a short causal depthwise convolution
(`conv_kernel_size` taps, "token shift") on the normalised attention input before the q/k/v
projection.  Its window (the last K-1 normalised inputs of the layer) is part of the recurrent
state.  Softmax and window use RoPE and no convolution; gated has the convolution; hybrid has
the convolution and RoPE on its window branch.

Every kind but softmax is computed by cores with three forms, which agree exactly in exact
arithmetic:  parallel (masked quadratic), recurrent (token by token), chunked (intra-chunk
masked product plus inter-chunk state).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .attention import Attention, _orthogonal_features, rope  # noqa: F401 (re-exported)
from .config import (ATTENTION_KINDS, CONV_KINDS, HYBRID_LAYOUTS, LINEAR_KINDS,  # noqa: F401
                     NEW_KINDS, RECURRENT_KINDS, ModelConfig, layer_state_floats, load_config)
from .gated import (GATED_DEN_MIN, gated_chunked, gated_parallel,  # noqa: F401
                    gated_recurrent, rfa_features)
from .linear import (empty_state, feature_map, linear_chunked, linear_parallel,  # noqa: F401
                     linear_recurrent, linear_recurrent_step)
from .window import window_chunked, window_parallel, window_recurrent  # noqa: F401

__all__ = [  # this module re-exports the reference's public names
    "ATTENTION_KINDS", "CONV_KINDS", "HYBRID_LAYOUTS", "LINEAR_KINDS", "NEW_KINDS",
    "RECURRENT_KINDS", "ModelConfig", "layer_state_floats", "load_config", "Attention", "rope",
    "_orthogonal_features", "GATED_DEN_MIN", "gated_chunked", "gated_parallel",
    "gated_recurrent", "rfa_features", "empty_state", "feature_map", "linear_chunked",
    "linear_parallel", "linear_recurrent", "linear_recurrent_step", "window_chunked",
    "window_parallel", "window_recurrent", "RMSNorm", "MLP", "Block", "FlatstateLM",
    "state_bytes", "state_tensor_bytes", "kv_bytes_per_token"]


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.w2 = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x):
        return F.linear(F.gelu(F.linear(x, self.w1.weight.to(x.dtype))), self.w2.weight.to(x.dtype))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, i: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(cfg, i)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)


class FlatstateLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([Block(cfg, i) for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.apply(self._init)

    @staticmethod
    def _init(mod):
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, std=0.02)
        elif isinstance(mod, nn.Embedding):
            nn.init.normal_(mod.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Training path: tokens (B, T) -> logits (B, T, V), parallel form."""
        x = self.embed(tokens)
        for blk in self.layers:
            x = x + blk.attn.forward_batched(blk.attn_norm(x))
            x = x + blk.mlp(blk.mlp_norm(x))
        return self.lm_head(self.norm(x))

    def step(self, tokens: torch.Tensor, state: Optional[dict], mode: str,
             dtype=torch.float64) -> Tuple[torch.Tensor, dict]:
        """Inference path for one sequence: tokens (T,) continuing `state` (None: fresh).
        mode: parallel | recurrent | chunked.  Returns (logits (T, V), new state).  The state
        holds 'pos' and per-layer dicts with 'conv' (K-1, D), 'lin' ({S, z, M}; gated {S, z}),
        'ring' {k, v} (W, H, hd) for window branches, or the growing 'k', 'v' of softmax."""
        state = state or {"pos": 0, "layers": [None] * len(self.layers)}
        T = tokens.shape[0]
        pos = torch.arange(state["pos"], state["pos"] + T)
        x = self.embed.weight.to(dtype)[tokens]
        new_layers = []
        for blk, ls in zip(self.layers, state["layers"]):
            h = _rms(x, blk.attn_norm.weight.to(dtype), self.cfg.rms_norm_eps)
            a, ls = blk.attn.forward(h, pos, ls, mode)
            x = x + a
            x = x + blk.mlp(_rms(x, blk.mlp_norm.weight.to(dtype), self.cfg.rms_norm_eps))
            new_layers.append(ls)
        logits = F.linear(_rms(x, self.norm.weight.to(dtype), self.cfg.rms_norm_eps),
                          self.lm_head.weight.to(dtype))
        return logits, {"pos": state["pos"] + T, "layers": new_layers}


def _rms(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def state_bytes(cfg: ModelConfig) -> int:
    """fp32 per-session state bytes of a constant-state kind (docs/kinds.md): S, z, M per head
    (gated: S, z), the conv window and the window ring, summed over layers."""
    if not cfg.is_recurrent:
        raise ValueError(f"{cfg.attention_kind} has no constant-size state (KV cache)")
    return 4 * sum(n for i in range(cfg.num_hidden_layers) for _, n in layer_state_floats(cfg, i))


def state_tensor_bytes(state: dict) -> int:
    """Bytes of every tensor in a FlatstateLM.step state (4 per element, as in fp32)."""
    n = 0
    for ls in state["layers"]:
        for part in (ls or {}).values():
            for t in (part.values() if isinstance(part, dict) else [part]):
                n += 4 * t.numel()
    return n


def kv_bytes_per_token(cfg: ModelConfig) -> int:
    return 2 * cfg.num_hidden_layers * cfg.hidden_size * 4
