"""Float64 reference forward of fla's GLA: a Hugging Face folder of GLAForCausalLM (model_type
"gla") as tools/hf_gla.py writes it and flash-linear-attention saves it.

    from flatstate_ref.gla import HfGla
    m = HfGla.load("tests/data/hf_gla_tiny")
    logits = m.logits([1, 345, 22])                 # float64 [T, vocab]
    st = m.new_state(); m.forward([1, 345], st); m.forward([22], st)   # incremental

    /usr/bin/python3 tools/flatstate_ref/gla.py DIR 1 345 22 --new 16     (greedy ids)

Matched upstream (fla-org/flash-linear-attention, read at bc3b101d: fla/models/gla/
modeling_gla.py GLABlock / GLAModel, fla/layers/gla.py GatedLinearAttention, fla/modules
RMSNorm, FusedRMSNormGated, ShortConvolution, GatedMLP, fla/ops/gla/naive.py):

    h = embeddings[ids]
    per layer: h += GLA(rms(h, attn_norm));  h += mlp(rms(h, mlp_norm))
    logits = rms(h, norm) lm_head^T   (embeddings when tie_word_embeddings)
    rms(x, w) = x / sqrt(mean(x^2) + norm_eps) * w;  mlp(x) = down(silu(gate x) * up x)

GLA (H heads, kv heads H / G, dk, dv per head; flatstate_ref/gla.py keeps fla's order of ops):
    q = q_proj x, k = k_proj x, v = v_proj x   (k, v: H / G heads)
    use_short_conv: q, k, v = silu(depthwise causal conv1d(.)) each, its own window (K - 1 rows)
    gk = gk_proj.1(gk_proj.0 x)                [H / G heads of dk]
    k, gk, v repeated per group: head j reads kv head j // G   (einops '(h d) -> (h g) d')
    gk = logsigmoid(gk) / 16, then max(gk, clamp_min) when clamp_min is set
    o = gated linear recurrence: S <- diag(exp gk_t) S + k_t v_t^T, o_t = S^T (q_t dk^-0.5)
        (flatstate_ref/gated_linear.py: "recurrent" token by token, or "chunked" on the
        absolute 64-token grid; they agree to 1e-9)
    use_output_gate: o = rms_head(o, g_norm weight) * silu(g_proj x)   (swish gate)
    else:            o = rms_head(o, g_norm weight)
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
from hf_gla import GATE_LOW_RANK_DIM, resolved, tensor_shapes  # noqa: E402
from hf_llama import HfLlamaError  # noqa: E402
from flatstate_ref import gated_linear  # noqa: E402
from flatstate_ref.fla_attn import fla_attention, new_attn_state  # noqa: E402
from flatstate_ref.llama import StatefulHfModel, greedy_main, rms_norm  # noqa: E402
from flatstate_ref.qwen35 import causal_conv  # noqa: E402

F64 = torch.float64
GATE_LOGIT_NORMALIZER = 16  # fla's GatedLinearAttention default; GLABlock never overrides it
CHUNK = 64


class GlaError(HfLlamaError):
    pass


class HfGla(StatefulHfModel):
    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor]):
        if cfg.get("model_type") != "gla":
            raise GlaError(f"model_type {cfg.get('model_type')!r}: want gla")
        self.cfg = cfg
        self.s = resolved(cfg)
        self.t = tensors
        want = tensor_shapes(cfg)
        if set(tensors) != set(want):
            raise GlaError(f"tensors missing or extra: {sorted(set(tensors) ^ set(want))}")
        for n, shape in want.items():
            if tuple(tensors[n].shape) != tuple(shape):
                raise GlaError(f"{n}: shape {list(tensors[n].shape)}, want {list(shape)}")
        self.eps = float(cfg.get("norm_eps", 1e-6))
        self.gate = cfg.get("use_output_gate", True)
        self.clamp_min = cfg.get("clamp_min")
        self.lm_head = tensors.get("lm_head.weight")
        if self.lm_head is None or cfg.get("tie_word_embeddings"):
            self.lm_head = tensors["model.embeddings.weight"]
        assert GATE_LOW_RANK_DIM == 16

    def new_state(self) -> dict:
        """pos, then per layer {"S" [H, dk, dv]} and, with short convolutions, the windows
        {"q", "k", "v"} [K-1, width] of each projection's last inputs."""
        s = self.s
        layers = []
        for i in range(s["L"]):
            if self._is_attn(i):
                layers.append(new_attn_state(s["attn"]))
                continue
            st = {"S": torch.zeros(s["H"], s["dk"], s["dv"], dtype=F64)}
            if s["K"]:
                for n, w in (("q", s["Kw"]), ("k", s["Kw"] // s["G"]), ("v", s["Vw"] // s["G"])):
                    st[n] = torch.zeros(s["K"] - 1, w, dtype=F64)
            layers.append(st)
        return {"pos": 0, "layers": layers}

    def _is_attn(self, i: int) -> bool:
        return self.s["attn"] is not None and i in self.s["attn"]["layers"]

    def _conv(self, x: torch.Tensor, p: str, n: str, st: dict) -> torch.Tensor:
        if not self.s["K"]:
            return x
        y = Fn.silu(causal_conv(x, st[n], self.t[p + n + "_conv1d.weight"]))
        st[n] = torch.cat([st[n], x], 0)[x.shape[0]:]
        return y

    def _gla(self, x: torch.Tensor, p: str, st: dict, pos: int, mode: str) -> torch.Tensor:
        s = self.s
        T, H, G, dk, dv = x.shape[0], s["H"], s["G"], s["dk"], s["dv"]
        q = self._conv(self._lin(x, p + "q_proj"), p, "q", st).view(T, H, dk)
        k = self._conv(self._lin(x, p + "k_proj"), p, "k", st).view(T, H // G, dk)
        v = self._conv(self._lin(x, p + "v_proj"), p, "v", st).view(T, H // G, dv)
        gk = self._lin(self._lin(x, p + "gk_proj.0"), p + "gk_proj.1").view(T, H // G, dk)
        k, v, gk = (y.repeat_interleave(G, dim=1) for y in (k, v, gk))
        gk = Fn.logsigmoid(gk) / GATE_LOGIT_NORMALIZER
        if self.clamp_min is not None:
            gk = torch.clamp_min(gk, self.clamp_min)
        form = gated_linear.recurrent if mode == "recurrent" else gated_linear.chunked
        kw = {} if mode == "recurrent" else {"chunk": CHUNK}
        o, st["S"] = form(q, k, v, gk, dk ** -0.5, S=st["S"], pos0=pos, **kw)
        norm = self.t.get(p + "g_norm_swish_gate.weight")
        if norm is None:
            norm = self.t[p + "g_norm.weight"]
        o = rms_norm(o, norm, self.eps)
        if self.gate:
            o = o * Fn.silu(self._lin(x, p + "g_proj").view(T, H, dv))
        return self._lin(o.reshape(T, H * dv), p + "o_proj")

    def forward(self, ids: Sequence[int], state: Optional[dict] = None,
                mode: str = "chunked") -> torch.Tensor:
        """Logits [T, vocab] of ids continuing `state` (updated in place; a fresh one when
        None). mode "chunked" or "recurrent" for the GLA recurrence."""
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
                h = h + self._gla(x, p + "attn.", st["layers"][i], pos, mode)
            x = rms_norm(h, self.t[p + "mlp_norm.weight"], self.eps)
            m = Fn.silu(self._lin(x, p + "mlp.gate_proj")) * self._lin(x, p + "mlp.up_proj")
            h = h + self._lin(m, p + "mlp.down_proj")
        st["pos"] = pos + len(ids)
        return rms_norm(h, self.t["model.norm.weight"], self.eps) @ self.lm_head.T


def main(argv=None) -> int:
    return greedy_main(HfGla, argv)


if __name__ == "__main__":
    sys.exit(main())
