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

Positional information for the linear kinds: a short causal depthwise convolution
(`conv_kernel_size` taps, "token shift") on the normalised attention input before the q/k/v
projection.  Its window (the last K-1 normalised inputs of the layer) is part of the recurrent
state.  Softmax uses RoPE and no convolution.

Every linear kind is computed by one core with three forms, which agree exactly in exact
arithmetic:  parallel (masked quadratic), recurrent (token by token), chunked (intra-chunk
masked product plus inter-chunk state).
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

ATTENTION_KINDS = ("softmax", "linear_elu", "cosformer", "cosine", "favor")
LINEAR_KINDS = ("linear_elu", "cosformer", "cosine", "favor")


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

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def is_linear(self) -> bool:
        return self.attention_kind in LINEAR_KINDS

    def feature_dim(self) -> int:
        """Size of phi(q), phi(k) per head: the first dimension of S."""
        k = self.attention_kind
        if k == "cosformer":
            return 2 * self.head_dim
        if k == "favor":
            return self.favor_num_features
        return self.head_dim

    def validate(self) -> None:
        def bad(name, why):
            raise ValueError(f"config value {name}={getattr(self, name)!r}: {why}")
        if self.attention_kind not in ATTENTION_KINDS:
            bad("attention_kind", f"must be one of {', '.join(ATTENTION_KINDS)}")
        if self.vocab_size != 256:
            bad("vocab_size", "the byte tokenizer needs exactly 256")
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "chunk_size", "cosformer_horizon",
                     "favor_num_features"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) <= 0:
                bad(name, "must be a positive integer")
        if self.hidden_size % self.num_attention_heads:
            bad("hidden_size", "must be divisible by num_attention_heads")
        if self.head_dim % 2:
            bad("hidden_size", "head_dim must be even (RoPE rotates pairs)")
        if not isinstance(self.conv_kernel_size, int) or self.conv_kernel_size < 0:
            bad("conv_kernel_size", "must be an integer >= 0 (0 = no convolution)")
        if self.attention_kind == "softmax" and self.conv_kernel_size:
            bad("conv_kernel_size", "softmax uses RoPE; set 0")
        for name in ("rms_norm_eps", "linear_eps", "rope_theta"):
            if not getattr(self, name) > 0:
                bad(name, "must be > 0")

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
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


# ----------------------------------------------------------------------------------------------
# The linear-attention core: three forms of one computation.
#
# Inputs per head (T tokens):  fq (T, H, F)  query features,  fk (T, H, F) key features already
# divided by exp(m_j),  m (T, H) the per-key log stabiliser (zeros for every kind but favor),
# v (T, H, Dv).  Key j seen from row i >= j weighs fk_j * exp(m_j - M_i), M_i = max_{j<=i} m_j.
# Output o_i = num_i / (den_i + eps) if use_den else num_i.
# State: S (H, F, Dv), z (H, F), M (H,)  -- all relative to the running max M.
# ----------------------------------------------------------------------------------------------

def empty_state(H: int, Fd: int, Dv: int, dtype=torch.float32) -> Dict[str, torch.Tensor]:
    return {"S": torch.zeros(H, Fd, Dv, dtype=dtype), "z": torch.zeros(H, Fd, dtype=dtype),
            "M": torch.full((H,), -math.inf, dtype=dtype)}


def _decay(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """exp(a - b) with exp(-inf - x) = 0 (b is finite whenever it is used)."""
    return torch.exp(a - b)


def linear_parallel(fq, fk, m, v, use_den: bool, eps: float):
    """Masked quadratic form. fq, fk (..., T, H, F); m (..., T, H); v (..., T, H, Dv)."""
    T = fq.shape[-3]
    Mi = torch.cummax(m, dim=-2).values                                  # (..., T, H)
    scores = torch.einsum("...ihf,...jhf->...hij", fq, fk)               # (..., H, T, T)
    mt, Mt = m.transpose(-1, -2), Mi.transpose(-1, -2)                   # (..., H, T)
    w = torch.exp(mt[..., None, :] - Mt[..., :, None])                   # (..., H, i, j)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    a = torch.where(mask, scores * w, torch.zeros((), dtype=fq.dtype))
    num = torch.einsum("...hij,...jhd->...ihd", a, v)
    if not use_den:
        return num
    den = a.sum(-1).transpose(-1, -2)                                     # (..., T, H)
    return num / (den[..., None] + eps)


def linear_recurrent_step(state, fq, fk, m, v, use_den: bool, eps: float):
    """One token. fq, fk (H, F); m (H,); v (H, Dv). Updates state in place; returns (H, Dv)."""
    M_new = torch.maximum(state["M"], m)
    scale = _decay(state["M"], M_new)
    kw = fk * torch.exp(m - M_new)[:, None]
    state["S"] = state["S"] * scale[:, None, None] + kw[:, :, None] * v[:, None, :]
    state["z"] = state["z"] * scale[:, None] + kw
    state["M"] = M_new
    num = torch.einsum("hf,hfd->hd", fq, state["S"])
    if not use_den:
        return num
    den = (fq * state["z"]).sum(-1)
    return num / (den[:, None] + eps)


def linear_recurrent(fq, fk, m, v, use_den, eps, state=None):
    H, Fd, Dv = fq.shape[1], fq.shape[2], v.shape[2]
    if state is None:
        state = empty_state(H, Fd, Dv, fq.dtype)
    outs = [linear_recurrent_step(state, fq[t], fk[t], m[t], v[t], use_den, eps)
            for t in range(fq.shape[0])]
    return torch.stack(outs, 0), state


def linear_chunked(fq, fk, m, v, use_den, eps, chunk: int, state=None):
    T, H, Fd = fq.shape
    Dv = v.shape[2]
    if state is None:
        state = empty_state(H, Fd, Dv, fq.dtype)
    outs = []
    for s in range(0, T, chunk):
        e = min(T, s + chunk)
        q, k, mm, vv = fq[s:e], fk[s:e], m[s:e], v[s:e]
        L = e - s
        Mi = torch.maximum(torch.cummax(mm, 0).values, state["M"][None, :])   # (L, H)
        inter = _decay(state["M"][None, :], Mi)                                # (L, H)
        num = torch.einsum("ihf,hfd->ihd", q, state["S"]) * inter[..., None]
        den = (q * state["z"][None]).sum(-1) * inter
        scores = torch.einsum("ihf,jhf->hij", q, k)
        w = torch.exp(mm.t()[:, None, :] - Mi.t()[:, :, None])
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool))
        a = torch.where(mask, scores * w, torch.zeros((), dtype=fq.dtype))
        num = num + torch.einsum("hij,jhd->ihd", a, vv)
        den = den + a.sum(-1).t()
        outs.append(num / (den[..., None] + eps) if use_den else num)
        M_last = Mi[-1]
        kw = k * torch.exp(mm - M_last[None, :])[..., None]                   # (L, H, F)
        scale = _decay(state["M"], M_last)
        state["S"] = state["S"] * scale[:, None, None] + torch.einsum("jhf,jhd->hfd", kw, vv)
        state["z"] = state["z"] * scale[:, None] + kw.sum(0)
        state["M"] = M_last
    return torch.cat(outs, 0), state


# ----------------------------------------------------------------------------------------------
# Feature maps: (q, k, v, positions) -> (fq, fk, m, v', use_den)
# ----------------------------------------------------------------------------------------------

def feature_map(cfg: ModelConfig, q, k, v, pos, cos_m=None, favor_w=None):
    """q, k, v: (T, H, hd); pos: (T,) 0-based absolute positions (int64)."""
    kind = cfg.attention_kind
    zeros_m = torch.zeros(q.shape[0], q.shape[1], dtype=q.dtype)
    if kind == "linear_elu":
        return F.elu(q) + 1, F.elu(k) + 1, zeros_m, v, True
    if kind == "cosformer":
        a = math.pi / (2 * cfg.cosformer_horizon)
        ang = (pos.to(q.dtype) * a)[:, None, None]
        c, s = torch.cos(ang), torch.sin(ang)
        rq, rk = F.relu(q), F.relu(k)
        return (torch.cat([rq * c, rq * s], -1), torch.cat([rk * c, rk * s], -1),
                zeros_m, v, True)
    if kind == "cosine":
        qn = q / torch.clamp(q.norm(dim=-1, keepdim=True), min=1e-6)
        kn = k / torch.clamp(k.norm(dim=-1, keepdim=True), min=1e-6)
        t = (pos + 1).to(q.dtype)[:, None]                                   # (T, 1)
        scale = torch.pow(t, -torch.sigmoid(cos_m.to(q.dtype))[None, :])     # (T, H)
        return qn, kn, zeros_m, v * scale[..., None], False
    if kind == "favor":
        hd = q.shape[-1]
        w = favor_w.to(q.dtype)                                              # (F, hd)
        qs, ks = q * hd ** -0.25, k * hd ** -0.25
        lq = torch.einsum("thd,fd->thf", qs, w) - 0.5 * (qs * qs).sum(-1, keepdim=True)
        lk = torch.einsum("thd,fd->thf", ks, w) - 0.5 * (ks * ks).sum(-1, keepdim=True)
        fq = torch.exp(lq - lq.max(-1, keepdim=True).values)
        mk = lk.max(-1).values                                               # (T, H)
        fk = torch.exp(lk - mk[..., None])
        return fq, fk, mk, v, True
    raise ValueError(kind)


def rope(x, pos, theta: float):
    """Rotate-half RoPE. x: (T, H, hd)."""
    hd = x.shape[-1]
    half = hd // 2
    inv = theta ** (-torch.arange(half, dtype=torch.float64) * 2.0 / hd)
    ang = pos.to(torch.float64)[:, None] * inv[None, :]                      # (T, half)
    c = torch.cos(ang).to(x.dtype)[:, None, :]
    s = torch.sin(ang).to(x.dtype)[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer_seed: int):
        super().__init__()
        self.cfg = cfg
        D, H = cfg.hidden_size, cfg.num_attention_heads
        self.wqkv = nn.Linear(D, 3 * D, bias=False)
        self.wo = nn.Linear(D, D, bias=False)
        if cfg.is_linear and cfg.conv_kernel_size > 0:
            w = torch.zeros(D, cfg.conv_kernel_size)
            w[:, -1] = 1.0                                  # starts as identity
            self.conv = nn.Parameter(w)
        else:
            self.conv = None
        if cfg.attention_kind == "cosine":
            self.decay_logit = nn.Parameter(torch.full((H,), 0.5))
        if cfg.attention_kind == "favor":
            g = torch.Generator().manual_seed(1000 + layer_seed)
            self.register_buffer("feature_proj", _orthogonal_features(
                cfg.favor_num_features, cfg.head_dim, g))

    def conv_apply(self, h, window: Optional[torch.Tensor]):
        """Causal depthwise conv over time. h (T, D); window (K-1, D) of earlier inputs."""
        K = self.cfg.conv_kernel_size
        if window is None:
            window = torch.zeros(K - 1, h.shape[1], dtype=h.dtype)
        full = torch.cat([window, h], 0)                                     # (K-1+T, D)
        T = h.shape[0]
        out = torch.zeros_like(h)
        for i in range(K):
            out = out + full[i:i + T] * self.conv[:, i].to(h.dtype)
        return out, full[-(K - 1):] if K > 1 else window

    def forward(self, h, pos, state=None, mode="parallel"):
        """h (T, D) one sequence (no batch dim, reference clarity over speed);
        state: dict for this layer or None (fresh). Returns (out, new_state)."""
        cfg = self.cfg
        T, D = h.shape
        H, hd = cfg.num_attention_heads, cfg.head_dim
        state = dict(state) if state is not None else {}
        if self.conv is not None:
            h, state["conv"] = self.conv_apply(h, state.get("conv"))
        qkv = F.linear(h, self.wqkv.weight.to(h.dtype)).view(T, 3, H, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        if cfg.attention_kind == "softmax":
            q, k = rope(q, pos, cfg.rope_theta), rope(k, pos, cfg.rope_theta)
            kc = torch.cat([state["k"], k], 0) if "k" in state else k
            vc = torch.cat([state["v"], v], 0) if "v" in state else v
            state["k"], state["v"] = kc, vc
            P = kc.shape[0]
            scores = torch.einsum("ihd,jhd->hij", q, kc) / math.sqrt(hd)
            qpos = pos[:, None]
            kpos = torch.arange(P)[None, :]
            scores = scores.masked_fill(~(kpos <= qpos)[None], float("-inf"))
            o = torch.einsum("hij,jhd->ihd", torch.softmax(scores, -1), vc)
        else:
            fq, fk, m, vv, use_den = feature_map(
                cfg, q, k, v, pos, getattr(self, "decay_logit", None),
                getattr(self, "feature_proj", None))
            eps = cfg.linear_eps
            lin = state.get("lin")
            if mode == "parallel":
                assert lin is None, "parallel form starts from an empty state"
                o = linear_parallel(fq, fk, m, vv, use_den, eps)
            elif mode == "recurrent":
                o, lin = linear_recurrent(fq, fk, m, vv, use_den, eps, _clone(lin))
            elif mode == "chunked":
                o, lin = linear_chunked(fq, fk, m, vv, use_den, eps, cfg.chunk_size, _clone(lin))
            else:
                raise ValueError(mode)
            state["lin"] = lin
        return F.linear(o.reshape(T, D), self.wo.weight.to(h.dtype)), state

    def forward_batched(self, h):
        """Training path: h (B, T, D), parallel form, fresh state."""
        cfg = self.cfg
        B, T, D = h.shape
        H, hd = cfg.num_attention_heads, cfg.head_dim
        pos = torch.arange(T)
        if self.conv is not None:
            K = cfg.conv_kernel_size
            hp = F.pad(h, (0, 0, K - 1, 0))
            h = sum(hp[:, i:i + T] * self.conv[:, i] for i in range(K))
        qkv = self.wqkv(h).view(B, T, 3, H, hd)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if cfg.attention_kind == "softmax":
            q = rope(q.reshape(B * T, H, hd), pos.repeat(B), cfg.rope_theta).view(B, T, H, hd)
            k = rope(k.reshape(B * T, H, hd), pos.repeat(B), cfg.rope_theta).view(B, T, H, hd)
            o = _sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        else:
            fq, fk, m, vv, use_den = feature_map(
                cfg, q.reshape(B * T, H, hd), k.reshape(B * T, H, hd),
                v.reshape(B * T, H, hd), pos.repeat(B), getattr(self, "decay_logit", None),
                getattr(self, "feature_proj", None))
            o = linear_parallel(fq.view(B, T, H, -1), fk.view(B, T, H, -1), m.view(B, T, H),
                                vv.view(B, T, H, hd), use_den, cfg.linear_eps)
        return self.wo(o.reshape(B, T, D))


def _sdpa(q, k, v):
    T = q.shape[2]
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
    return torch.softmax(s, -1) @ v


def _clone(lin):
    return None if lin is None else {k: v.clone() for k, v in lin.items()}


def _orthogonal_features(nf: int, d: int, g: torch.Generator) -> torch.Tensor:
    """Performer's orthogonal random features: blocks of d orthogonal rows, norms ~ chi(d)."""
    blocks, left = [], nf
    while left > 0:
        qm, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
        blocks.append(qm.t()[:min(d, left)])
        left -= d
    w = torch.cat(blocks, 0)
    norms = torch.randn(nf, d, generator=g).norm(dim=1, keepdim=True)
    return (w * norms).contiguous()


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
        holds 'pos' and per-layer dicts with 'conv' (K-1, D), 'lin' {S, z, M} or 'k','v'."""
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
    """fp32 recurrent state bytes per session for linear kinds (S, z, M, conv window)."""
    H, Fd, hd = cfg.num_attention_heads, cfg.feature_dim(), cfg.head_dim
    per_layer = H * (Fd * hd + Fd + 1) + max(cfg.conv_kernel_size - 1, 0) * cfg.hidden_size
    return 4 * cfg.num_hidden_layers * per_layer


def kv_bytes_per_token(cfg: ModelConfig) -> int:
    return 2 * cfg.num_hidden_layers * cfg.hidden_size * 4


def load_config(path: str) -> ModelConfig:
    with open(path) as f:
        return ModelConfig.from_json(json.load(f))
