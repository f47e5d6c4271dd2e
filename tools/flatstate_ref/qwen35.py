"""Float64 reference forward of the Qwen3.5 text model and of dense Qwen3-Next: a Hugging Face
folder of Qwen3_5ForCausalLM (model_type "qwen3_5_text"), Qwen3_5ForConditionalGeneration
(model_type "qwen3_5": the text part, weights under model.language_model.*, vision and MTP
tensors skipped) or Qwen3NextForCausalLM ("qwen3_next", dense only: num_experts 0), as
tools/hf_qwen35.py writes them.

    from flatstate_ref.qwen35 import HfQwen35
    m = HfQwen35.load("tests/data/hf_qwen35_tiny")
    logits = m.logits([1, 345, 22])                 # float64 [T, vocab]
    st = m.new_state(); m.forward([1, 345], st); m.forward([22], st)   # incremental

    /usr/bin/python3 tools/flatstate_ref/qwen35.py DIR 1 345 22 --new 16     (greedy ids)

Matched upstream (huggingface/transformers, read at commit 009e78d6 for qwen3_5/modular_qwen3_5.py
and 043bb8dd for qwen3_next/modular_qwen3_next.py; docs/kinds.md has the table):

    h = embed_tokens[ids]
    per layer i, by layer_types[i]:
        x = rms1(h, input_layernorm)
        linear_attention: h += GatedDeltaNet(x)       full_attention: h += GatedAttention(x)
        h += mlp(rms1(h, post_attention_layernorm)),  mlp(x) = down(silu(gate x) * up x)
    logits = rms1(h, norm) lm_head^T                  (embed_tokens when tie_word_embeddings)

    rms1(x, w) = x / sqrt(mean(x^2) + rms_norm_eps) * (1 + w)   (Qwen3NextRMSNorm =
        Gemma3RMSNorm, zero-centred: input/post_attention_layernorm, model.norm, q_norm, k_norm)
    rmsg(o, z, w) = o / sqrt(mean(o^2) + rms_norm_eps) * w * silu(z)  (Qwen3NextRMSNormGated,
        linear_attn.norm: a plain weight, NOT 1 + w; per value head over head_v_dim)

GatedDeltaNet (Hk = linear_num_key_heads, Hv = linear_num_value_heads, dk, dv their head dims,
r = Hv / Hk, key_dim = Hk dk, value_dim = Hv dv, conv_dim = 2 key_dim + value_dim, K =
linear_conv_kernel_dim):
    Qwen3.5:    qkv = in_proj_qkv x   rows [q: Hk*dk | k: Hk*dk | v: Hv*dv]   z = in_proj_z x
                b = in_proj_b x [Hv], a = in_proj_a x [Hv]
    Qwen3-Next: in_proj_qkvz x viewed [Hk, 2 dk + 2 r dv], each key head's block is
                [q dk | k dk | v r*dv | z r*dv]; in_proj_ba x viewed [Hk, 2 r], each [b r | a r];
                qkv = cat(all q, all k, all v) (value head kh*r + j), z, b, a likewise flattened
    qkv = silu(depthwise causal conv1d(qkv)): out[t, c] = sum_{j<K} w[c, 0, j] qkv[t - K + 1 + j, c]
          (zeros before the sequence; the conv state holds the last K - 1 inputs); no bias
    q, k, v = split(qkv, [key_dim, key_dim, value_dim]) as heads
    beta = sigmoid(b);  g = -exp(A_log) * softplus(a + dt_bias)
    o = gated delta rule (flatstate_ref/gated_delta.py; L2-normalised q, k; scale dk^-0.5;
        value head h reads key head h // r)
    out = out_proj(rmsg(o, z, linear_attn.norm))
GatedAttention (H heads, KV heads, head_dim hd, rd = int(hd * partial_rotary_factor)):
    q_proj x viewed [H, 2 hd]: each head's first hd rows are its query, next hd its output gate
    q = rms1(q, q_norm) per head; k = rms1(k_proj x, k_norm) per head; v = v_proj x
    RoPE on the first rd dims of each head only (rotate_half pairing i <-> i + rd/2 inside them,
        inv_freq_i = rope_theta^(-2i/rd)); dims rd.. pass through
    a = softmax(q k^T hd^-0.5 + causal) v (head j reads kv head j // (H/KV))
    out = o_proj(a * sigmoid(gate))
Qwen3.5's MRoPE (mrope_section, interleaved) equals plain RoPE for text, whose three position
rows are equal. Biases (attention_bias) are added where the tensors exist.
"""
from __future__ import annotations

import os
import sys
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as Fn

_HERE = os.path.dirname(os.path.abspath(__file__))
_TOOLS = os.path.normpath(os.path.join(_HERE, ".."))
for _p in (_TOOLS, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from hf_llama import HfLlamaError  # noqa: E402
from flatstate_ref.gated_delta import gated_delta_chunked, gated_delta_recurrent  # noqa: E402
from flatstate_ref.llama import StatefulHfModel, greedy_main, rms_norm, rotate_half  # noqa: E402
from hf_qwen35 import tensor_shapes  # noqa: E402

F64 = torch.float64
LINEAR, FULL = "linear_attention", "full_attention"
SKIP_PREFIXES = ("model.visual.", "visual.", "mtp.", "model.mtp.")


class Qwen35Error(HfLlamaError):
    pass


def text_config(cfg: dict) -> dict:
    """The text model's settings from a config.json dict (multimodal: its text_config), with
    family ("qwen3_5" / "qwen3_next"), layer_types, rope_theta and partial_rotary_factor
    resolved (rope_parameters first, then the legacy top-level keys)."""
    tc = dict(cfg.get("text_config") or cfg)
    mt = tc.get("model_type", cfg.get("model_type"))
    if mt in ("qwen3_5", "qwen3_5_text"):
        tc["family"] = "qwen3_5"
    elif mt == "qwen3_next":
        tc["family"] = "qwen3_next"
        moe = int(tc.get("num_experts", 0) or 0) > 0
        dense = set(tc.get("mlp_only_layers") or []) >= set(range(tc["num_hidden_layers"]))
        if moe and not dense:
            raise Qwen35Error("qwen3_next with num_experts > 0: MoE layers not supported "
                              "(dense only)")
    else:
        raise Qwen35Error(f"model_type {mt!r}: want qwen3_5, qwen3_5_text or qwen3_next")
    if tc.get("hidden_act", "silu") != "silu":
        raise Qwen35Error(f"hidden_act {tc.get('hidden_act')!r}: only silu")
    n = tc["num_hidden_layers"]
    if not tc.get("layer_types"):
        every = tc.get("full_attention_interval", 4)
        tc["layer_types"] = [FULL if (i + 1) % every == 0 else LINEAR for i in range(n)]
    if len(tc["layer_types"]) != n or set(tc["layer_types"]) - {LINEAR, FULL}:
        raise Qwen35Error(f"layer_types {tc['layer_types']}")
    rp = tc.get("rope_parameters") or tc.get("rope_scaling") or {}
    if rp.get("rope_type", "default") != "default":
        raise Qwen35Error(f"rope_type {rp.get('rope_type')!r}: only default")
    tc["rope_theta"] = float(rp.get("rope_theta", tc.get("rope_theta", 10000.0)))
    tc["partial_rotary_factor"] = float(rp.get("partial_rotary_factor",
                                               tc.get("partial_rotary_factor", 0.25)))
    tc.setdefault("head_dim", tc["hidden_size"] // tc["num_attention_heads"])
    return tc


def text_tensors(tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """model.language_model.* renamed model.*; vision and MTP tensors dropped."""
    out = {}
    for n, t in tensors.items():
        if n.startswith(SKIP_PREFIXES):
            continue
        if n.startswith("model.language_model."):
            n = "model." + n[len("model.language_model."):]
        out[n] = t
    return out


def rms1(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm: x / rms(x) * (1 + w)."""
    return rms_norm(x, 1.0 + w, eps)


def causal_conv(x: torch.Tensor, prev: torch.Tensor, w: torch.Tensor,
                bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Depthwise causal conv1d: x [T, C], prev [K-1, C] (the inputs before x), w [C, 1, K].
    out[t, c] = sum_j w[c, 0, j] * xin[t + j, c] over xin = cat(prev, x); no activation."""
    K = w.shape[-1]
    xin = torch.cat([prev, x], 0)
    T = x.shape[0]
    out = sum(w[:, 0, j] * xin[j:j + T] for j in range(K))
    return out + bias if bias is not None else out


class HfQwen35(StatefulHfModel):
    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor]):
        self.cfg = text_config(cfg)
        self.t = text_tensors(tensors)
        c = self.cfg
        want = text_tensors(tensor_shapes(cfg, text_only=True))
        have = set(self.t)
        if c.get("tie_word_embeddings"):
            have.discard("lm_head.weight")
        if have != set(want):
            raise Qwen35Error(f"tensors missing or extra: {sorted(have ^ set(want))}")
        for n, shape in want.items():
            if tuple(self.t[n].shape) != tuple(shape):
                raise Qwen35Error(f"{n}: shape {list(self.t[n].shape)}, want {list(shape)}")
        self.family = c["family"]
        self.eps = float(c.get("rms_norm_eps", 1e-6))
        self.H, self.KV, self.hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.Hk, self.Hv = c["linear_num_key_heads"], c["linear_num_value_heads"]
        self.dk, self.dv = c["linear_key_head_dim"], c["linear_value_head_dim"]
        self.K = c["linear_conv_kernel_dim"]
        if self.Hv % self.Hk or self.H % self.KV:
            raise Qwen35Error("linear value heads / key heads or heads / kv heads not whole")
        self.rd = int(self.hd * c["partial_rotary_factor"])
        self.inv_freq = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.rd, 2, dtype=F64)
                                                   / self.rd))
        self.lm_head = self.t.get("lm_head.weight")
        if self.lm_head is None or c.get("tie_word_embeddings"):
            self.lm_head = self.t["model.embed_tokens.weight"]

    def new_state(self) -> dict:
        """pos, then per layer: linear {"conv" [K-1, conv_dim], "S" [Hv, dk, dv]}, full
        {"k", "v" [n, KV, hd]} (post-norm, post-RoPE keys)."""
        conv_dim = 2 * self.Hk * self.dk + self.Hv * self.dv
        layers = []
        for lt in self.cfg["layer_types"]:
            if lt == LINEAR:
                layers.append({"conv": torch.zeros(self.K - 1, conv_dim, dtype=F64),
                               "S": torch.zeros(self.Hv, self.dk, self.dv, dtype=F64)})
            else:
                layers.append({"k": torch.zeros(0, self.KV, self.hd, dtype=F64),
                               "v": torch.zeros(0, self.KV, self.hd, dtype=F64)})
        return {"pos": 0, "layers": layers}

    def _linear_inputs(self, x: torch.Tensor, p: str):
        """(qkv [T, conv_dim] in conv channel order, z [T, Hv, dv], b [T, Hv], a [T, Hv])."""
        T = x.shape[0]
        r = self.Hv // self.Hk
        if self.family == "qwen3_5":
            return (self._lin(x, p + "in_proj_qkv"),
                    self._lin(x, p + "in_proj_z").view(T, self.Hv, self.dv),
                    self._lin(x, p + "in_proj_b"), self._lin(x, p + "in_proj_a"))
        qkvz = self._lin(x, p + "in_proj_qkvz").view(T, self.Hk, -1)
        q, k, v, z = torch.split(qkvz, [self.dk, self.dk, r * self.dv, r * self.dv], dim=-1)
        ba = self._lin(x, p + "in_proj_ba").view(T, self.Hk, 2 * r)
        b, a = ba[..., :r].reshape(T, self.Hv), ba[..., r:].reshape(T, self.Hv)
        qkv = torch.cat([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], -1)
        return qkv, z.reshape(T, self.Hv, self.dv), b, a

    def _linear(self, x, p, st, pos, mode):
        T = x.shape[0]
        qkv, z, b, a = self._linear_inputs(x, p)
        conv = Fn.silu(causal_conv(qkv, st["conv"], self.t[p + "conv1d.weight"],
                                   self.t.get(p + "conv1d.bias")))
        st["conv"] = torch.cat([st["conv"], qkv], 0)[qkv.shape[0]:]
        kd = self.Hk * self.dk
        q = conv[:, :kd].view(T, self.Hk, self.dk)
        k = conv[:, kd:2 * kd].view(T, self.Hk, self.dk)
        v = conv[:, 2 * kd:].view(T, self.Hv, self.dv)
        beta = torch.sigmoid(b)
        g = -torch.exp(self.t[p + "A_log"]) * Fn.softplus(a + self.t[p + "dt_bias"])
        if mode == "recurrent":
            o, st["S"] = gated_delta_recurrent(q, k, v, g, beta, st["S"])
        else:
            o, st["S"] = gated_delta_chunked(q, k, v, g, beta, st["S"], start=pos)
        o = rms_norm(o, self.t[p + "norm.weight"], self.eps) * Fn.silu(z)
        return self._lin(o.reshape(T, -1), p + "out_proj")

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        ang = positions[:, None].to(F64) * self.inv_freq[None, :]
        cos = torch.cat([ang.cos()] * 2, -1)[:, None, :]
        sin = torch.cat([ang.sin()] * 2, -1)[:, None, :]
        xr, xp = x[..., :self.rd], x[..., self.rd:]
        return torch.cat([xr * cos + rotate_half(xr) * sin, xp], -1)

    def _attention(self, x, p, st, pos):
        T, hd = x.shape[0], self.hd
        qg = self._lin(x, p + "q_proj").view(T, self.H, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:].reshape(T, self.H * hd)
        k = self._lin(x, p + "k_proj").view(T, self.KV, hd)
        v = self._lin(x, p + "v_proj").view(T, self.KV, hd)
        q = rms1(q, self.t[p + "q_norm.weight"], self.eps)
        k = rms1(k, self.t[p + "k_norm.weight"], self.eps)
        positions = torch.arange(pos, pos + T)
        q, k = self._rope(q, positions), self._rope(k, positions)
        st["k"], st["v"] = torch.cat([st["k"], k]), torch.cat([st["v"], v])
        rep = self.H // self.KV
        K_, V_ = st["k"].repeat_interleave(rep, 1), st["v"].repeat_interleave(rep, 1)
        s = torch.einsum("thd,nhd->htn", q, K_) * hd ** -0.5
        n = K_.shape[0]
        mask = torch.arange(n)[None, :] > (torch.arange(T) + pos)[:, None]
        s = s.masked_fill(mask[None], -float("inf"))
        a = torch.einsum("htn,nhd->thd", torch.softmax(s, -1), V_).reshape(T, self.H * hd)
        return self._lin(a * torch.sigmoid(gate), p + "o_proj")

    def forward(self, ids: Sequence[int], state: Optional[dict] = None,
                mode: str = "chunked") -> torch.Tensor:
        """Logits [T, vocab] of ids continuing `state` (updated in place; a fresh one when
        None). mode "chunked" (WY form) or "recurrent" for the delta rule."""
        st = state if state is not None else self.new_state()
        pos = st["pos"]
        h = self.t["model.embed_tokens.weight"][torch.as_tensor(list(ids), dtype=torch.long)]
        for i, lt in enumerate(self.cfg["layer_types"]):
            p = f"model.layers.{i}."
            x = rms1(h, self.t[p + "input_layernorm.weight"], self.eps)
            if lt == LINEAR:
                h = h + self._linear(x, p + "linear_attn.", st["layers"][i], pos, mode)
            else:
                h = h + self._attention(x, p + "self_attn.", st["layers"][i], pos)
            x = rms1(h, self.t[p + "post_attention_layernorm.weight"], self.eps)
            m = Fn.silu(self._lin(x, p + "mlp.gate_proj")) * self._lin(x, p + "mlp.up_proj")
            h = h + self._lin(m, p + "mlp.down_proj")
        st["pos"] = pos + len(ids)
        return rms1(h, self.t["model.norm.weight"], self.eps) @ self.lm_head.T


def main(argv=None) -> int:
    return greedy_main(HfQwen35, argv)


if __name__ == "__main__":
    sys.exit(main())
