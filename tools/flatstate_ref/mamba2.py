"""Float64 reference forward of a Hugging Face Mamba2ForCausalLM folder (model_type "mamba2"), as
tools/hf_mamba2.py writes it, with its recurrent state exposed.

    from flatstate_ref.mamba2 import HfMamba2
    m = HfMamba2.load("tests/data/hf_mamba2_tiny")
    logits = m.logits([1, 345, 22])                 # float64 [T, vocab]
    st = m.new_state(); m.forward([1, 345], st); m.forward([22], st)   # incremental
    conv, ssm = m.state_arrays(st)[0]               # layer 0 as the engine lays it out (float32)

    /usr/bin/python3 tools/flatstate_ref/mamba2.py DIR 1 345 22 --new 16     (greedy ids)

Matched upstream: huggingface/transformers modeling_mamba2.py (read at 020a37d2; Mamba2Mixer's
torch_forward, Mamba2Block, Mamba2Model, Mamba2ForCausalLM) done in float64. D hidden,
I = expand * D, H = num_heads, P = head_dim, N = state_size, G = n_groups, K = conv_kernel,
conv_dim = I + 2 G N, eps = layer_norm_epsilon (both norms):

    h = embeddings[ids]
    per layer:  h = h + mixer(rms(h) * norm.weight)           (residual_in_fp32: a float32
                                                                residual upstream; float64 here)
    logits = (rms(h) * norm_f.weight) lm_head^T              (embeddings when tie_word_embeddings)

    rms(x) = x / sqrt(mean(x^2) + eps)                       Mamba2RMSNorm: plain weight, not 1 + w

    mixer(x):
      z | xBC | dt = in_proj x (+ in_proj.bias with use_bias), widths I | conv_dim | H
      xBC = silu(causal depthwise conv1d(xBC) + conv1d.bias)    (bias with use_conv_bias)
          out[t, c] = sum_{j<K} w[c, 0, j] xBC[t - K + 1 + j, c]  (zeros before the sequence;
          the conv state holds the last K - 1 inputs, pre-activation)
      x | B | C = xBC, widths I | G N | G N;  x as [H, P], B and C as [G, N];
          head h reads group h // (H / G)
      dt = clamp(softplus(dt + dt_bias), time_step_limit[0], time_step_limit[1])   [H]
      A = -exp(A_log)                                                              [H]
      per token, head h (state S_h [P, N]):
          S_h = exp(dt_h A_h) S_h + dt_h x_h B_g^T
          y_h = S_h C_g + D_h x_h                       (D multiplies x after the conv and SiLU)
      y = y * silu(z)                                   (gate BEFORE the norm: norm_before_gate
                                                         false)
      y = rms(y) * mixer.norm.weight over the WHOLE I values (MambaRMSNormGated)
      out = out_proj y (+ out_proj.bias with use_bias)

The gated norm: transformers normalises over all I values at once whatever n_groups is;
mamba_ssm (RMSNormGated(group_size = I / G)) and llama.cpp (ssm_norm reshaped [G, I / G])
normalise each of the G groups of I / G values on its own. The two agree only for n_groups 1.
HfMamba2(..., norm_groups=G) gives the per-group form; the default (1) is transformers'.

Two forms of the scan, equal to rounding (tools/tests/test_hf_mamba2.py):
    "recurrent"  the per-token update above
    "chunked"    SSD (transformers' torch_forward, 'ssd naive'): chunks of chunk_size tokens from
                 the start of each forward call; with a_t = dt_t A and cum_t its running sum
                 inside the chunk (cum_0 = a_0),
                 y_t = exp(cum_t) S0 C_t + sum_{s<=t} exp(cum_t - cum_s) (C_t . B_s) dt_s x_s
                 S_L = exp(cum_L) S0 + sum_s exp(cum_L - cum_s) dt_s x_s B_s^T
State per layer (new_state): "conv" [conv_dim, K-1] (oldest column first; transformers'
conv_states [conv_dim, K] less its oldest column; llama.cpp's r_l), "ssm" [H, P, N] (transformers'
recurrent_states, llama.cpp's s_l).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as Fn

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOOLS = os.path.normpath(os.path.join(_HERE, ".."))
for _p in (_TOOLS, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from hf_llama import HfLlamaError  # noqa: E402
from flatstate_ref.llama import StatefulHfModel, greedy_main, rms_norm  # noqa: E402
from hf_mamba2 import dims, tensor_shapes  # noqa: E402

F64 = torch.float64


class Mamba2Error(HfLlamaError):
    pass


def causal_conv(x: torch.Tensor, prev: torch.Tensor, w: torch.Tensor,
                bias: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Depthwise causal conv1d, no activation. x [T, C]; prev [C, K-1] the inputs before x
    (oldest first); w [C, 1, K]. Returns (out [T, C], the new prev [C, K-1])."""
    K = w.shape[-1]
    xin = torch.cat([prev.T, x], 0)                  # [K-1+T, C]
    T = x.shape[0]
    out = sum(w[:, 0, j] * xin[j:j + T] for j in range(K))
    if bias is not None:
        out = out + bias
    return out, xin[xin.shape[0] - (K - 1):].T.contiguous()


def ssd_recurrent(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                  C: torch.Tensor, S: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """x [T, H, P], dt [T, H] (after softplus and clamp), A [H] (negative), B, C [T, G, N],
    S [H, P, N]. Returns (y [T, H, P] without the D term, final S). Token by token."""
    T, H, _ = x.shape
    G = B.shape[1]
    Bh = B.repeat_interleave(H // G, dim=1)          # [T, H, N]
    Ch = C.repeat_interleave(H // G, dim=1)
    S = S.clone()
    y = torch.zeros_like(x)
    for t in range(T):
        decay = torch.exp(dt[t] * A)                 # [H]
        S = S * decay[:, None, None] + (dt[t][:, None, None] * x[t][:, :, None]
                                        * Bh[t][:, None, :])
        y[t] = torch.einsum("hpn,hn->hp", S, Ch[t])
    return y, S


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, S: torch.Tensor, chunk: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """ssd_recurrent's result by the SSD chunk decomposition (module docstring)."""
    T, H, _ = x.shape
    G = B.shape[1]
    Bh = B.repeat_interleave(H // G, dim=1)
    Ch = C.repeat_interleave(H // G, dim=1)
    S = S.clone()
    y = torch.zeros_like(x)
    for t0 in range(0, T, chunk):
        L = min(chunk, T - t0)
        xc, dtc = x[t0:t0 + L], dt[t0:t0 + L]
        Bc, Cc = Bh[t0:t0 + L], Ch[t0:t0 + L]
        cum = torch.cumsum(dtc * A, dim=0)           # [L, H]
        # intra-chunk: pair (t, s), s <= t: exp(cum_t - cum_s) (C_t . B_s) dt_s
        seg = cum[:, None, :] - cum[None, :, :]      # [t, s, H]
        mask = torch.tril(torch.ones(L, L, dtype=torch.bool))[:, :, None]
        decay = torch.where(mask, seg, torch.full_like(seg, -float("inf"))).exp()
        cb = torch.einsum("thn,shn->tsh", Cc, Bc)
        w = cb * decay * dtc[None, :, :]
        y_diag = torch.einsum("tsh,shp->thp", w, xc)
        # the state entering the chunk
        y_off = torch.einsum("hpn,thn->thp", S, Cc) * cum.exp()[:, :, None]
        y[t0:t0 + L] = y_diag + y_off
        last = cum[-1]                               # [H]
        wts = (last[None, :] - cum).exp() * dtc      # [s, H]
        S = S * last.exp()[:, None, None] + torch.einsum("sh,shp,shn->hpn", wts, xc, Bc)
    return y, S


class HfMamba2(StatefulHfModel):
    STEP = {"mode": "recurrent"}

    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor], norm_groups: int = 1):
        if cfg.get("model_type") != "mamba2":
            raise Mamba2Error(f"model_type {cfg.get('model_type')!r}: want mamba2")
        if cfg.get("hidden_act", "silu") not in ("silu", "swish"):
            raise Mamba2Error(f"hidden_act {cfg.get('hidden_act')!r}: only silu")
        self.cfg = cfg
        self.t = dict(tensors)
        d = dims(cfg)
        if d["I"] != d["H"] * d["P"]:
            raise Mamba2Error(f"expand * hidden_size {d['I']} != num_heads * head_dim "
                              f"{d['H'] * d['P']}")
        if d["H"] % d["G"]:
            raise Mamba2Error(f"num_heads {d['H']} not a multiple of n_groups {d['G']}")
        if d["I"] % norm_groups:
            raise Mamba2Error(f"norm_groups {norm_groups} does not divide {d['I']}")
        want = tensor_shapes(cfg)
        have = set(self.t)
        if cfg.get("tie_word_embeddings"):
            have.discard("lm_head.weight")
        if have != set(want):
            raise Mamba2Error(f"tensors missing or extra: {sorted(have ^ set(want))}")
        for n, shape in want.items():
            if tuple(self.t[n].shape) != tuple(shape):
                raise Mamba2Error(f"{n}: shape {list(self.t[n].shape)}, want {list(shape)}")
        self.d = d
        self.norm_groups = norm_groups
        self.eps = float(cfg.get("layer_norm_epsilon", 1e-5))
        lim = cfg.get("time_step_limit") or (0.0, float("inf"))
        self.dt_lo, self.dt_hi = float(lim[0]), float(lim[1])
        self.chunk = int(cfg.get("chunk_size", 256))
        self.lm_head = self.t.get("lm_head.weight")
        if self.lm_head is None or cfg.get("tie_word_embeddings"):
            self.lm_head = self.t["backbone.embeddings.weight"]

    def new_state(self) -> dict:
        """pos, then per layer {"conv" [conv_dim, K-1], "ssm" [H, P, N]}, zeros."""
        d = self.d
        return {"pos": 0, "layers": [
            {"conv": torch.zeros(d["conv_dim"], d["K"] - 1, dtype=F64),
             "ssm": torch.zeros(d["H"], d["P"], d["N"], dtype=F64)}
            for _ in range(self.cfg["num_hidden_layers"])]}

    def state_arrays(self, state: dict) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per layer (conv [conv_dim, K-1], ssm [H, P, N]) as C-order float32 arrays: the
        engine's state bytes (np.ndarray.tobytes())."""
        return [(np.ascontiguousarray(st["conv"].numpy(), dtype=np.float32),
                 np.ascontiguousarray(st["ssm"].numpy(), dtype=np.float32))
                for st in state["layers"]]

    def state_floats(self) -> int:
        """float32 values of one sequence's state: L ((K-1) conv_dim + H P N)."""
        d = self.d
        return self.cfg["num_hidden_layers"] * ((d["K"] - 1) * d["conv_dim"] +
                                                d["H"] * d["P"] * d["N"])

    def gated_norm(self, y: torch.Tensor, z: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """rms(y * silu(z)) * w over groups of I / norm_groups values (1 group: transformers)."""
        g = y * Fn.silu(z)
        T, I = g.shape
        gg = g.view(T, self.norm_groups, I // self.norm_groups)
        gg = gg * torch.rsqrt(gg.pow(2).mean(-1, keepdim=True) + self.eps)
        return gg.reshape(T, I) * w

    def mixer(self, x: torch.Tensor, p: str, st: dict, mode: str) -> torch.Tensor:
        d = self.d
        T = x.shape[0]
        I, H, P, N, G = d["I"], d["H"], d["P"], d["N"], d["G"]
        proj = self._lin(x, p + "in_proj")
        z, xBC, dt = torch.split(proj, [I, d["conv_dim"], H], dim=-1)
        xBC, st["conv"] = causal_conv(xBC, st["conv"], self.t[p + "conv1d.weight"],
                                      self.t.get(p + "conv1d.bias"))
        xBC = Fn.silu(xBC)
        xs, B, C = torch.split(xBC, [I, G * N, G * N], dim=-1)
        xs = xs.reshape(T, H, P)
        B, C = B.reshape(T, G, N), C.reshape(T, G, N)
        dt = Fn.softplus(dt + self.t[p + "dt_bias"]).clamp(self.dt_lo, self.dt_hi)
        A = -torch.exp(self.t[p + "A_log"])
        if mode == "recurrent":
            y, st["ssm"] = ssd_recurrent(xs, dt, A, B, C, st["ssm"])
        elif mode == "chunked":
            y, st["ssm"] = ssd_chunked(xs, dt, A, B, C, st["ssm"], self.chunk)
        else:
            raise Mamba2Error(f"mode {mode!r}: recurrent or chunked")
        y = y + self.t[p + "D"][None, :, None] * xs
        y = self.gated_norm(y.reshape(T, I), z, self.t[p + "norm.weight"])
        return self._lin(y, p + "out_proj")

    def forward(self, ids: Sequence[int], state: Optional[dict] = None,
                mode: str = "chunked") -> torch.Tensor:
        """Logits [T, vocab] of ids continuing `state` (updated in place; a fresh one when
        None). mode "chunked" (SSD) or "recurrent"."""
        st = state if state is not None else self.new_state()
        h = self.t["backbone.embeddings.weight"][torch.as_tensor(list(ids), dtype=torch.long)]
        for i in range(self.cfg["num_hidden_layers"]):
            p = f"backbone.layers.{i}."
            x = rms_norm(h, self.t[p + "norm.weight"], self.eps)
            h = h + self.mixer(x, p + "mixer.", st["layers"][i], mode)
        st["pos"] += len(ids)
        return rms_norm(h, self.t["backbone.norm_f.weight"], self.eps) @ self.lm_head.T


def main(argv=None) -> int:
    return greedy_main(HfMamba2, argv)


if __name__ == "__main__":
    sys.exit(main())
