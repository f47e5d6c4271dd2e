"""Float64 reference forward of fla's Gated DeltaNet: a Hugging Face folder of
GatedDeltaNetForCausalLM (model_type "gated_deltanet") as tools/hf_gated_deltanet.py writes it
and flash-linear-attention saves it.

    from flatstate_ref.gated_deltanet import HfGatedDeltaNet
    m = HfGatedDeltaNet.load("tests/data/hf_gated_deltanet_tiny")
    logits = m.logits([1, 345, 22])                 # float64 [T, vocab]

    /usr/bin/python3 tools/flatstate_ref/gated_deltanet.py DIR 1 345 22 --new 16   (greedy ids)

Matched upstream (fla-org/flash-linear-attention, read at bc3b101d: fla/models/gated_deltanet/
modeling_gated_deltanet.py GatedDeltaNetBlock / Model, fla/layers/gated_deltanet.py
GatedDeltaNet, fla/ops/gated_delta_rule/{naive,gate,fused_recurrent}.py, fla/modules RMSNorm,
FusedRMSNormGated, ShortConvolution, GatedMLP):

    h = embeddings[ids]
    per layer: h += GDN(rms(h, attn_norm));  h += mlp(rms(h, mlp_norm))
    logits = rms(h, norm) lm_head^T   (embeddings when tie_word_embeddings)

GDN (Hk = num_heads, Hv = num_v_heads or Hk, dk = head_dim, dv = int(dk expand_v)):
    q = silu(conv(q_proj x)), k = silu(conv(k_proj x)), v = silu(conv(v_proj x))
        (each its own depthwise causal conv, conv_size taps, no bias, window of K - 1 inputs)
    beta = sigmoid(b_proj x);  g = -exp(A_log) softplus(a_proj x + dt_bias)   [Hv]
    o = gated delta rule (flatstate_ref/gated_delta.py: q, k L2-normalised with eps 1e-6 as
        fla's use_qk_l2norm_in_kernel, q * dk^-0.5, value head h reads key head h // (Hv/Hk)
        as fla's i_h = i_hv // (HV // H)); "recurrent" token by token or "chunked" (WY form on
        the absolute 64-token grid), equal to 1e-9
    o = rms_head(o, o_norm) * silu(g_proj x)   (FusedRMSNormGated, swish);  out = o_proj o

Hybrid (config attn, tools/fla_hybrid.py): its layers run fla's softmax Attention instead
(flatstate_ref/fla_attn.py), their state the rotated K and V rows.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, Optional, Sequence

import torch
import torch.nn.functional as Fn

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOOLS = os.path.normpath(os.path.join(_HERE, ".."))
for _p in (_TOOLS, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from hf_gated_deltanet import resolved, tensor_shapes  # noqa: E402
from hf_llama import HfLlamaError  # noqa: E402
from flatstate_ref.fla_attn import fla_attention, new_attn_state  # noqa: E402
from flatstate_ref.gated_delta import gated_delta_chunked, gated_delta_recurrent  # noqa: E402
from flatstate_ref.llama import StatefulHfModel, greedy_main, rms_norm  # noqa: E402
from flatstate_ref.qwen35 import causal_conv  # noqa: E402

F64 = torch.float64


class GatedDeltaNetError(HfLlamaError):
    pass


class HfGatedDeltaNet(StatefulHfModel):
    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor]):
        if cfg.get("model_type") != "gated_deltanet":
            raise GatedDeltaNetError(f"model_type {cfg.get('model_type')!r}: want gated_deltanet")
        self.cfg, self.s, self.t = cfg, resolved(cfg), tensors
        want = tensor_shapes(cfg)
        if set(tensors) != set(want):
            extra = sorted(set(tensors) ^ set(want))
            raise GatedDeltaNetError(f"tensors missing or extra: {extra}")
        for n, shape in want.items():
            if tuple(tensors[n].shape) != tuple(shape):
                raise GatedDeltaNetError(f"{n}: shape {list(tensors[n].shape)}, want {list(shape)}")
        self.eps = float(cfg.get("norm_eps", 1e-6))
        self.lm_head = tensors.get("lm_head.weight")
        if self.lm_head is None or cfg.get("tie_word_embeddings"):
            self.lm_head = tensors["model.embeddings.weight"]

    def new_state(self) -> dict:
        """pos, then per layer {"S" [Hv, dk, dv], "q" / "k" / "v" [K-1, width]: each short
        convolution's last inputs}, or a softmax layer's {"k", "v"} rows (fla_attn.py)."""
        s = self.s
        return {"pos": 0, "layers": [
            new_attn_state(s["attn"]) if self._is_attn(i) else
            {"S": torch.zeros(s["Hv"], s["dk"], s["dv"], dtype=F64),
             "q": torch.zeros(s["K"] - 1, s["Kw"], dtype=F64),
             "k": torch.zeros(s["K"] - 1, s["Kw"], dtype=F64),
             "v": torch.zeros(s["K"] - 1, s["Vw"], dtype=F64)} for i in range(s["L"])]}

    def _is_attn(self, i: int) -> bool:
        return self.s["attn"] is not None and i in self.s["attn"]["layers"]

    def _conv(self, x: torch.Tensor, p: str, n: str, st: dict) -> torch.Tensor:
        y = Fn.silu(causal_conv(x, st[n], self.t[p + n + "_conv1d.weight"]))
        st[n] = torch.cat([st[n], x], 0)[x.shape[0]:]
        return y

    def _gdn(self, x: torch.Tensor, p: str, st: dict, pos: int, mode: str) -> torch.Tensor:
        s = self.s
        T = x.shape[0]
        q = self._conv(self._lin(x, p + "q_proj"), p, "q", st).view(T, s["Hk"], s["dk"])
        k = self._conv(self._lin(x, p + "k_proj"), p, "k", st).view(T, s["Hk"], s["dk"])
        v = self._conv(self._lin(x, p + "v_proj"), p, "v", st).view(T, s["Hv"], s["dv"])
        beta = torch.sigmoid(self._lin(x, p + "b_proj"))
        g = -torch.exp(self.t[p + "A_log"]) * Fn.softplus(self._lin(x, p + "a_proj")
                                                          + self.t[p + "dt_bias"])
        if mode == "recurrent":
            o, st["S"] = gated_delta_recurrent(q, k, v, g, beta, st["S"])
        else:
            o, st["S"] = gated_delta_chunked(q, k, v, g, beta, st["S"], start=pos)
        gate = self._lin(x, p + "g_proj").view(T, s["Hv"], s["dv"])
        o = rms_norm(o, self.t[p + "o_norm.weight"], self.eps) * Fn.silu(gate)
        return self._lin(o.reshape(T, -1), p + "o_proj")

    def forward(self, ids: Sequence[int], state: Optional[dict] = None,
                mode: str = "chunked") -> torch.Tensor:
        """Logits [T, vocab] of ids continuing `state` (updated in place; a fresh one when
        None). mode "chunked" (WY form) or "recurrent" for the delta rule."""
        st = state if state is not None else self.new_state()
        pos = st["pos"]
        h = self.t["model.embeddings.weight"][torch.as_tensor(list(ids), dtype=torch.long)]
        for i in range(self.s["L"]):
            p = f"model.layers.{i}."
            x = rms_norm(h, self.t[p + "attn_norm.weight"], self.eps)
            if self._is_attn(i):
                h = h + fla_attention(self.t, self.s["attn"], x, p + "attn.", st["layers"][i],
                                      pos)
            else:
                h = h + self._gdn(x, p + "attn.", st["layers"][i], pos, mode)
            x = rms_norm(h, self.t[p + "mlp_norm.weight"], self.eps)
            m = Fn.silu(self._lin(x, p + "mlp.gate_proj")) * self._lin(x, p + "mlp.up_proj")
            h = h + self._lin(m, p + "mlp.down_proj")
        st["pos"] = pos + len(ids)
        return rms_norm(h, self.t["model.norm.weight"], self.eps) @ self.lm_head.T


def main(argv=None) -> int:
    return greedy_main(HfGatedDeltaNet, argv)


if __name__ == "__main__":
    sys.exit(main())
