"""Float64 reference forward of fla's DeltaNet: a Hugging Face folder of DeltaNetForCausalLM
(model_type "delta_net") as tools/hf_delta_net.py writes it and flash-linear-attention saves it
(fla-hub/delta_net-1.3B-100B's layout).

    from flatstate_ref.delta_net import HfDeltaNet
    m = HfDeltaNet.load("tests/data/hf_delta_net_tiny")
    logits = m.logits([1, 345, 22])                 # float64 [T, vocab]

    /usr/bin/python3 tools/flatstate_ref/delta_net.py DIR 1 345 22 --new 16   (greedy ids)

Matched upstream (fla-org/flash-linear-attention, read at bc3b101d: fla/models/delta_net/
modeling_delta_net.py DeltaNetBlock / Model, fla/layers/delta_net.py DeltaNet, fla/ops/
delta_rule/naive.py delta_rule_recurrence, fla/modules RMSNorm, FusedRMSNormGated,
ShortConvolution, GatedMLP):

    h = embeddings[ids]
    per layer: h += DeltaNet(rms(h, attn_norm));  h += mlp(rms(h, mlp_norm))
    logits = rms(h, norm) lm_head^T   (embeddings when tie_word_embeddings)

DeltaNet (H = num_heads, dk = int(D expand_k) / H, dv = int(D expand_v) / H):
    use_short_conv: q = conv(q_proj x), k = conv(k_proj x), v = silu(conv(v_proj x)) (each its
        own depthwise causal conv, no bias; q_conv1d / k_conv1d take silu when qk_activation
        is silu); else q = q_proj x, k = k_proj x, v = silu(v_proj x)
    qk_activation silu: q, k = silu(q), silu(k) (inside the conv when there is one); identity:
        unchanged (fla's relu / elu are not implemented here)
    beta = sigmoid(b_proj x) (use_beta; else 1), times 2 when allow_neg_eigval
    o = delta rule = the gated delta rule with g = 0 (flatstate_ref/gated_delta.py: q, k
        L2-normalised with eps 1e-6 as fla's use_qk_l2norm_in_kernel for qk_norm l2, q * dk^-0.5;
        "recurrent" token by token or "chunked" (WY form on the absolute 64-token grid), equal
        to 1e-9)
    use_gate: o = rms_head(o, o_norm) * silu(g_proj x) (FusedRMSNormGated); else rms_head(o,
        o_norm) (fla's RMSNorm; DeltaNet takes use_output_norm in **kwargs, so o_norm always)
    out = o_proj o

Hybrid (config attn, tools/fla_hybrid.py): its layers run fla's softmax Attention instead
(flatstate_ref/fla_attn.py).
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
from hf_delta_net import resolved, tensor_shapes  # noqa: E402
from hf_llama import HfLlamaError  # noqa: E402
from flatstate_ref.fla_attn import fla_attention, new_attn_state  # noqa: E402
from flatstate_ref.gated_delta import gated_delta_chunked, gated_delta_recurrent  # noqa: E402
from flatstate_ref.llama import StatefulHfModel, greedy_main, rms_norm  # noqa: E402
from flatstate_ref.qwen35 import causal_conv  # noqa: E402

F64 = torch.float64


class DeltaNetError(HfLlamaError):
    pass


class HfDeltaNet(StatefulHfModel):
    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor]):
        if cfg.get("model_type") != "delta_net":
            raise DeltaNetError(f"model_type {cfg.get('model_type')!r}: want delta_net")
        self.cfg, self.s, self.t = cfg, resolved(cfg), tensors
        want = tensor_shapes(cfg)
        if set(tensors) != set(want):
            extra = sorted(set(tensors) ^ set(want))
            raise DeltaNetError(f"tensors missing or extra: {extra}")
        for n, shape in want.items():
            if tuple(tensors[n].shape) != tuple(shape):
                raise DeltaNetError(f"{n}: shape {list(tensors[n].shape)}, want {list(shape)}")
        self.eps = float(cfg.get("norm_eps", 1e-6))
        self.lm_head = tensors.get("lm_head.weight")
        if self.lm_head is None or cfg.get("tie_word_embeddings"):
            self.lm_head = tensors["model.embeddings.weight"]

    def _is_attn(self, i: int) -> bool:
        return self.s["attn"] is not None and i in self.s["attn"]["layers"]

    def new_state(self) -> dict:
        """pos, then per layer {"S" [H, dk, dv], "q" / "k" / "v" [K-1, width]: each short
        convolution's last inputs (none without them)}, or a softmax layer's {"k", "v"} rows."""
        s = self.s
        w = max(s["K"] - 1, 0)
        return {"pos": 0, "layers": [
            new_attn_state(s["attn"]) if self._is_attn(i) else
            {"S": torch.zeros(s["H"], s["dk"], s["dv"], dtype=F64),
             "q": torch.zeros(w, s["Kw"], dtype=F64), "k": torch.zeros(w, s["Kw"], dtype=F64),
             "v": torch.zeros(w, s["Vw"], dtype=F64)} for i in range(s["L"])]}

    def _in(self, x: torch.Tensor, p: str, n: str, st: dict, silu: bool) -> torch.Tensor:
        """n's projection, through its short convolution when there is one, then silu."""
        y = self._lin(x, p + n + "_proj")
        if self.s["K"]:
            prev = st[n]
            st[n] = torch.cat([prev, y], 0)[y.shape[0]:]
            y = causal_conv(y, prev, self.t[p + n + "_conv1d.weight"])
        return Fn.silu(y) if silu else y

    def _delta_net(self, x: torch.Tensor, p: str, st: dict, pos: int, mode: str) -> torch.Tensor:
        s = self.s
        T, H = x.shape[0], s["H"]
        q = self._in(x, p, "q", st, s["qk_silu"]).view(T, H, s["dk"])
        k = self._in(x, p, "k", st, s["qk_silu"]).view(T, H, s["dk"])
        v = self._in(x, p, "v", st, True).view(T, H, s["dv"])
        beta = torch.sigmoid(self._lin(x, p + "b_proj")) if s["beta"] else \
            torch.ones(T, H, dtype=F64)
        beta = beta * s["beta_scale"]
        g = torch.zeros(T, H, dtype=F64)  # no decay: DeltaNet
        if mode == "recurrent":
            o, st["S"] = gated_delta_recurrent(q, k, v, g, beta, st["S"])
        else:
            o, st["S"] = gated_delta_chunked(q, k, v, g, beta, st["S"], start=pos)
        o = rms_norm(o, self.t[p + "o_norm.weight"], self.eps)
        if s["gate"]:
            o = o * Fn.silu(self._lin(x, p + "g_proj").view(T, H, s["dv"]))
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
                h = h + self._delta_net(x, p + "attn.", st["layers"][i], pos, mode)
            x = rms_norm(h, self.t[p + "mlp_norm.weight"], self.eps)
            m = Fn.silu(self._lin(x, p + "mlp.gate_proj")) * self._lin(x, p + "mlp.up_proj")
            h = h + self._lin(m, p + "mlp.down_proj")
        st["pos"] = pos + len(ids)
        return rms_norm(h, self.t["model.norm.weight"], self.eps) @ self.lm_head.T


def main(argv=None) -> int:
    return greedy_main(HfDeltaNet, argv)


if __name__ == "__main__":
    sys.exit(main())
