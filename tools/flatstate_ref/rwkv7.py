"""Float64 reference forward of RWKV-7 "Goose" in the fla-hub Hugging Face layout
(RWKV7ForCausalLM, model_type "rwkv7"; tools/hf_rwkv7.py writes such folders and lists the
tensors).

    from flatstate_ref.rwkv7 import HfRwkv7
    m = HfRwkv7.load("tests/data/hf_rwkv7_tiny")
    logits = m.logits([0, 345, 22])                          # float64 [T, vocab]
    st = m.new_state(); m.forward([0, 345], st); m.forward([22], st)    # incremental
    m.forward(ids, mode="recurrent" | "chunked" | "naive")   # three forms of the wkv recurrence

    /usr/bin/python3 tools/flatstate_ref/rwkv7.py DIR 0 345 22 --new 16     (greedy ids)

Matched upstream: fla-org/flash-linear-attention bc3b101d (fla/models/rwkv7/modeling_rwkv7.py,
fla/layers/rwkv7.py, fla/ops/rwkv7/fused_recurrent.py, gate_output_correction.py,
fused_k_update.py, fla/modules/token_shift.py, l2norm.py) and BlinkDL's RWKV-v7/rwkv_v7_numpy.py.

D = hidden_size, H = num_heads, N = head_dim (H N = D), eps = norm_eps (1e-5),
LN(x; w, b) = (x - mean x) / sqrt(var x + eps) * w + b (biased var, over D).

    h = LN(embeddings[ids]; layer 0 pre_norm)                  (the residual stream from here)
    per layer i:
        x = LN(h; attn_norm);  h += TimeMix_i(x)
        x = LN(h; ffn_norm);   h += ChannelMix_i(x)
    logits = LN(h; model.norm) lm_head^T                       (embeddings when tied)

TimeMix (all per token t; "per channel" vectors are [D], heads split D into H blocks of N):
    xp = x_{t-1} (the previous token's attn_norm output; the state's att_shift at t = 0,
         zeros in a new state);  d = xp - x
    xr, xw, xk, xv, xa, xg = x + d * x_r, ... x + d * x_g      (x_* are [1, 1, D], per channel)
    r = r_proj xr;  k = k_proj xk;  v = v_proj xv                            [D]
    lora_w(y) = W2 tanh(W1 y) + b;  lora_a(y) = W2 (W1 y) + b;  lora_v like lora_a;
        lora_g(y) = W2 sigmoid(W1 y) (no bias)      (W1 = lora.0.weight, W2 = lora.2.weight,
        b = lora.2.bias)
    logw = -exp(-0.5) sigmoid(lora_w(xw))   = -0.6065306597126334 sigmoid(...)   in (-0.607, 0)
    w = exp(logw)                                            decay per channel, in (0.545, 1)
    layer 0: v_first = v.   layer > 0: v = v + (v_first - v) sigmoid(lora_v(xv))  (torch.lerp)
    a = sigmoid(lora_a(xa))                                  in-context learning rate [D]
    g = lora_g(xg)                                           output gate [D]
    kk = normalize(k * k_k) per head (over N):  fuse_norm false: u / max(|u|, 1e-12)
         (F.normalize; BlinkDL and llama.cpp likewise); fuse_norm true: u / sqrt(|u|^2 + 1e-6)
         (fla's l2_norm)
    k = k * (1 + (a - 1) * k_a)                              (k.addcmul(k * (a - 1), k_a))
    per head, state S [N (key), N (value)] (fla's [H, K, V] orientation), from S_{t-1}:
        S_t = diag(w) S_{t-1} - (kk * a) (kk^T S_{t-1}) + k v^T
        o = S_t^T r                                          [N]   (scale 1)
      (BlinkDL / llama.cpp keep the transpose, [value, key]: S = S diag(w) - (S kk)(kk*a)^T
       + v k^T, o = S r.)
    o = GroupNorm(o; H groups, eps = N * norm_eps; g_norm weight, bias per channel)
        (per head: (o - mean) / sqrt(var + N eps) over its N channels)
    o = o + ((r * k * r_k).sum over each head's N) * v       (bonus; r_k [H, N]; k and v as
                                                              updated above)
    out = o_proj (o * g)
ChannelMix:
    xp = previous token's ffn_norm output (state ffn_shift);  xk = x + (xp - x) * ffn.x_k
    out = value(relu(key xk)^2)

State per layer (new_state): att_shift [D], wkv [H, N, N] ([head, key, value]), ffn_shift [D];
float32 bytes per layer: 4 (H N^2 + 2 D).

The three recurrence forms: "recurrent" (token loop, head-batched, fla orientation),
"chunked" (per chunk of 64 on the absolute grid: a unit lower-triangular solve for the
intermediate u_t = S_{t-1}^T (-kk_t), with the cumulative decay exp(sum log w) inside the chunk;
the generalized delta rule's WY/UT form) and "naive" (per head, per value row, BlinkDL's
[value, key] orientation, explicit scalar loops in Python floats).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Sequence

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOOLS = os.path.normpath(os.path.join(_HERE, ".."))
for _p in (_TOOLS, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from hf_llama import HfLlamaError  # noqa: E402
from flatstate_ref.llama import StatefulHfModel, greedy_main  # noqa: E402
from hf_rwkv7 import resolved, tensor_shapes  # noqa: E402

F64 = torch.float64
LOG_DECAY_SCALE = -0.6065306597126334  # -exp(-0.5)
CHUNK = 64


class Rwkv7Error(HfLlamaError):
    pass


def layer_norm(x: torch.Tensor, w: torch.Tensor, b: Optional[torch.Tensor], eps: float):
    m = x.mean(-1, keepdim=True)
    var = ((x - m) ** 2).mean(-1, keepdim=True)
    y = (x - m) / torch.sqrt(var + eps) * w
    return y if b is None else y + b


def l2_normalize(u: torch.Tensor, fused: bool) -> torch.Tensor:
    n2 = (u * u).sum(-1, keepdim=True)
    if fused:
        return u / torch.sqrt(n2 + 1e-6)
    return u / torch.clamp(torch.sqrt(n2), min=1e-12)


# ---------------------------------------------------------------------------------------------
# the wkv recurrence. Inputs head-major per token: r, logw, k, v, kk, a [T, H, N]; S [H, N, N]
# ([head, key, value]). Returns (o [T, H, N], S).
# ---------------------------------------------------------------------------------------------

def wkv_recurrent(r, logw, k, v, kk, a, S):
    S = S.clone()
    w = torch.exp(logw)
    out = torch.zeros_like(v)
    for t in range(r.shape[0]):
        u = torch.einsum("hkv,hk->hv", S, kk[t])                 # kk^T S      [H, V]
        S = w[t][:, :, None] * S - (kk[t] * a[t])[:, :, None] * u[:, None, :] \
            + k[t][:, :, None] * v[t][:, None, :]
        out[t] = torch.einsum("hkv,hk->hv", S, r[t])
    return out, S


def _wkv_chunk(r, logw, k, v, kk, a, S0):
    """One chunk, head-major [H, C, N] inputs. With b_t = kk_t * a_t, c_t = -kk_t and G_t the
    cumulative sum of logw up to and including t (G_0- = 0):
        S_t = e^{G_t} S0 + sum_{s<=t} e^{G_t - G_s} (b_s u_s^T + k_s v_s^T),  u_s = S_{s-1}^T c_s
    so u_t = (e^{G_{t-1}} c_t)^T S0 + sum_{s<t} [(b_s . e^{G_{t-1}-G_s} c_t) u_s
                                                 + (k_s . e^{G_{t-1}-G_s} c_t) v_s]
    a unit lower-triangular system for U; then o_t = S_t^T r_t likewise."""
    H, C, N = r.shape
    G = torch.cumsum(logw, 1)                                     # [H, C, N]
    Gprev = G - logw                                              # G_{t-1}
    c = -kk
    b = kk * a
    # E[h, t, s, n] = exp(Gprev_t - G_s) for s < t (masked), decay from s to t-1
    strict = torch.ones(C, C, dtype=torch.bool).tril(-1)
    incl = torch.ones(C, C, dtype=torch.bool).tril()
    dprev = Gprev[:, :, None, :] - G[:, None, :, :]
    dcur = G[:, :, None, :] - G[:, None, :, :]
    Eprev = torch.where(strict[None, :, :, None], dprev, torch.full_like(dprev, -float("inf"))).exp()
    Ecur = torch.where(incl[None, :, :, None], dcur, torch.full_like(dcur, -float("inf"))).exp()
    ct = c[:, :, None, :] * Eprev                                # [H, t, s, N]
    Lb = (ct * b[:, None, :, :]).sum(-1)                          # [H, t, s]
    Lk = (ct * k[:, None, :, :]).sum(-1)
    X = c * torch.exp(Gprev)                                      # [H, C, N]
    rhs = X @ S0 + Lk @ v                                         # [H, C, V]
    eye = torch.eye(C, dtype=F64).expand(H, C, C)
    U = torch.linalg.solve_triangular(eye - Lb, rhs, upper=False, unitriangular=True)
    rt = r[:, :, None, :] * Ecur                                  # [H, t, s, N]
    Mb = (rt * b[:, None, :, :]).sum(-1)
    Mk = (rt * k[:, None, :, :]).sum(-1)
    o = (r * torch.exp(G)) @ S0 + Mb @ U + Mk @ v
    last = torch.exp(G[:, -1:, :] - G)                            # [H, C, N] decay s -> end
    S = torch.exp(G[:, -1, :])[:, :, None] * S0 + (b * last).transpose(1, 2) @ U \
        + (k * last).transpose(1, 2) @ v
    return o, S


def wkv_chunked(r, logw, k, v, kk, a, S, start: int = 0, chunk: int = CHUNK):
    """Chunks of `chunk` tokens on the absolute grid (the call's first token is at `start`)."""
    hm = [x.transpose(0, 1) for x in (r, logw, k, v, kk, a)]
    T = r.shape[0]
    outs = []
    S = S.clone()
    b0 = 0
    while b0 < T:
        e = min(T, b0 + chunk - (start + b0) % chunk)
        o, S = _wkv_chunk(*[x[:, b0:e] for x in hm], S)
        outs.append(o)
        b0 = e
    out = torch.cat(outs, 1) if outs else torch.zeros(r.shape[1], 0, r.shape[2], dtype=F64)
    return out.transpose(0, 1).contiguous(), S


def wkv_naive(r, logw, k, v, kk, a, S):
    """Per head, BlinkDL's orientation M[value i][key j] = S[key j][value i], scalar loops."""
    import math
    T, H, N = r.shape
    L = [[[[float(S[h, j, i]) for j in range(N)] for i in range(N)] for h in range(H)]]
    M = L[0]
    rl, wl, kl, vl, kkl, al = (x.tolist() for x in (r, logw, k, v, kk, a))
    out = torch.zeros(T, H, N, dtype=F64)
    for t in range(T):
        for h in range(H):
            for i in range(N):
                row = M[h][i]
                sa = 0.0
                for j in range(N):
                    sa += row[j] * (-kkl[t][h][j])
                y = 0.0
                for j in range(N):
                    row[j] = row[j] * math.exp(wl[t][h][j]) + sa * kkl[t][h][j] * al[t][h][j] \
                        + vl[t][h][i] * kl[t][h][j]
                    y += row[j] * rl[t][h][j]
                out[t, h, i] = y
    Sn = torch.tensor([[[M[h][i][j] for i in range(N)] for j in range(N)] for h in range(H)],
                      dtype=F64)
    return out, Sn


# ---------------------------------------------------------------------------------------------

class HfRwkv7(StatefulHfModel):
    STEP = {"mode": "recurrent"}

    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor]):
        if cfg.get("model_type") != "rwkv7":
            raise Rwkv7Error(f"model_type {cfg.get('model_type')!r}: want rwkv7")
        if cfg.get("attn"):
            raise Rwkv7Error("attn (hybrid softmax-attention layers) is not supported")
        if cfg.get("hidden_act", "sqrelu") != "sqrelu":
            raise Rwkv7Error(f"hidden_act {cfg.get('hidden_act')!r}: only sqrelu")
        self.cfg = cfg
        self.r = resolved(cfg)
        want = tensor_shapes(cfg)
        self.t = {n: (x.reshape(-1) if n.endswith(tuple(".x_" + c for c in "rwkvag"))
                      and x.dim() == 3 else x) for n, x in tensors.items()}
        have = set(tensors)
        if cfg.get("tie_word_embeddings"):
            have.discard("lm_head.weight")
        if have != set(want):
            raise Rwkv7Error(f"tensors missing or extra: {sorted(have ^ set(want))}")
        for n, shape in want.items():
            if tuple(tensors[n].shape) != tuple(shape):
                raise Rwkv7Error(f"{n}: shape {list(tensors[n].shape)}, want {list(shape)}")
        self.eps = float(cfg.get("norm_eps", 1e-5))
        self.fused_l2 = bool(cfg.get("fuse_norm", True))
        self.D, self.H, self.N = self.r["D"], self.r["H"], self.r["N"]
        self.lm_head = self.t.get("lm_head.weight")
        if self.lm_head is None or cfg.get("tie_word_embeddings"):
            self.lm_head = self.t["model.embeddings.weight"]

    def new_state(self) -> dict:
        """pos, then per layer {"att_shift" [D], "wkv" [H, N (key), N (value)], "ffn_shift"
        [D]}, zeros."""
        return {"pos": 0, "layers": [
            {"att_shift": torch.zeros(self.D, dtype=F64),
             "wkv": torch.zeros(self.H, self.N, self.N, dtype=F64),
             "ffn_shift": torch.zeros(self.D, dtype=F64)} for _ in range(self.r["L"])]}

    def state_bytes(self) -> int:
        """float32 bytes of one sequence's state: layers x (H N^2 + 2 D) x 4."""
        return self.r["L"] * (self.H * self.N * self.N + 2 * self.D) * 4

    def _ln(self, x, name):
        return layer_norm(x, self.t[name + ".weight"], self.t.get(name + ".bias"), self.eps)

    def _lora(self, x, p, act):
        y = x @ self.t[p + ".lora.0.weight"].T
        if act is not None:
            y = act(y)
        y = y @ self.t[p + ".lora.2.weight"].T
        b = self.t.get(p + ".lora.2.bias")
        return y if b is None else y + b

    def _time_mix(self, x, p, st, v_first, pos, mode):
        T, H, N = x.shape[0], self.H, self.N
        t = self.t
        xp = torch.cat([st["att_shift"][None], x[:-1]], 0)
        st["att_shift"] = x[-1].clone()
        d = xp - x
        xr, xw, xk, xv, xa, xg = (x + d * t[p + "x_" + c] for c in "rwkvag")
        r = xr @ t[p + "r_proj.weight"].T
        logw = LOG_DECAY_SCALE * torch.sigmoid(self._lora(xw, p + "w_lora", torch.tanh))
        k = xk @ t[p + "k_proj.weight"].T
        v = xv @ t[p + "v_proj.weight"].T
        if v_first is None:
            v_first = v
        else:
            v = v + (v_first - v) * torch.sigmoid(self._lora(xv, p + "v_lora", None))
        a = torch.sigmoid(self._lora(xa, p + "a_lora", None))
        g = self._lora(xg, p + "g_lora", torch.sigmoid)
        kk = l2_normalize((k * t[p + "k_k"]).view(T, H, N), self.fused_l2)
        k = k * (1 + (a - 1) * t[p + "k_a"])
        hv = [z.view(T, H, N) for z in (r, logw, k, v, a)]
        r3, w3, k3, v3, a3 = hv
        if mode == "recurrent":
            o, st["wkv"] = wkv_recurrent(r3, w3, k3, v3, kk, a3, st["wkv"])
        elif mode == "chunked":
            o, st["wkv"] = wkv_chunked(r3, w3, k3, v3, kk, a3, st["wkv"], start=pos)
        elif mode == "naive":
            o, st["wkv"] = wkv_naive(r3, w3, k3, v3, kk, a3, st["wkv"])
        else:
            raise Rwkv7Error(f"mode {mode!r}")
        m = o.mean(-1, keepdim=True)
        var = ((o - m) ** 2).mean(-1, keepdim=True)
        on = ((o - m) / torch.sqrt(var + N * self.eps)).reshape(T, self.D)
        on = on * t[p + "g_norm.weight"] + t[p + "g_norm.bias"]
        bonus = (r3 * k3 * t[p + "r_k"]).sum(-1, keepdim=True) * v3
        out = (on + bonus.reshape(T, self.D)) * g
        return out @ t[p + "o_proj.weight"].T, v_first

    def _channel_mix(self, x, p, st):
        xp = torch.cat([st["ffn_shift"][None], x[:-1]], 0)
        st["ffn_shift"] = x[-1].clone()
        xk = x + (xp - x) * self.t[p + "ffn.x_k"]
        kk = torch.relu(xk @ self.t[p + "ffn.key.weight"].T) ** 2
        return kk @ self.t[p + "ffn.value.weight"].T

    def forward(self, ids: Sequence[int], state: Optional[dict] = None,
                mode: str = "chunked") -> torch.Tensor:
        """Logits [T, vocab] of ids continuing `state` (updated in place; a fresh one when
        None). mode: "chunked", "recurrent" or "naive" (module docstring)."""
        V = self.r["V"]
        for i in ids:
            if not 0 <= int(i) < V:
                raise Rwkv7Error(f"token id {i} out of range [0, {V})")
        st = state if state is not None else self.new_state()
        pos = st["pos"]
        h = self.t["model.embeddings.weight"][torch.as_tensor(list(ids), dtype=torch.long)]
        if "model.layers.0.pre_norm.weight" in self.t:
            h = self._ln(h, "model.layers.0.pre_norm")
        v_first = None
        for i in range(self.r["L"]):
            p = f"model.layers.{i}."
            ls = st["layers"][i]
            dx, v_first = self._time_mix(self._ln(h, p + "attn_norm"), p + "attn.", ls,
                                         v_first, pos, mode)
            h = h + dx
            h = h + self._channel_mix(self._ln(h, p + "ffn_norm"), p, ls)
        st["pos"] = pos + len(ids)
        return self._ln(h, "model.norm") @ self.lm_head.T


def main(argv=None) -> int:
    return greedy_main(HfRwkv7, argv)


if __name__ == "__main__":
    sys.exit(main())
