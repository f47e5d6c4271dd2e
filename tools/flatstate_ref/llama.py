"""Float64 reference forward of a Hugging Face LlamaForCausalLM, Qwen2ForCausalLM or
Qwen3ForCausalLM folder (tools/hf_llama.py's, or any folder of that layout with F32/BF16/F16
safetensors shards; the family is config.json's model_type: llama, qwen2, qwen3).

    from flatstate_ref.llama import HfLlama
    m = HfLlama.load("tests/data/hf_llama_tiny")
    logits = m.logits([1, 345, 22])          # torch.float64 [T, vocab]
    ids = m.greedy([1, 345, 22], 64)         # 64 argmax continuations

or from the shell (prints the greedy continuation):

    /usr/bin/python3 tools/flatstate_ref/llama.py tests/data/hf_llama_tiny 1 345 22 --new 16

The maths is transformers' modeling_llama.py (LlamaForCausalLM, eager attention) done in float64
instead of the checkpoint's dtype, every weight widened exactly from its stored type:

    h = embed_tokens[ids]
    per layer:  x = rmsnorm(h) * input_layernorm
                q, k, v = x q_proj^T (+b), x k_proj^T (+b), x v_proj^T (+b)   split into heads
                qwen3 only: q, k = rmsnorm(q) * q_norm, rmsnorm(k) * k_norm   per head, over
                          its head_dim values, eps rms_norm_eps, weights [head_dim] shared by
                          all heads of a layer; after the projection (and bias), before RoPE
                q, k = rope(q), rope(k)          rotate_half pairing: dim i with i + head_dim/2
                q head j reads kv head j // (heads / kv_heads)          (repeat_kv)
                a = softmax(q k^T / sqrt(head_dim) + causal mask) v
                h = h + a o_proj^T (+b)
                x = rmsnorm(h) * post_attention_layernorm
                h = h + (silu(x gate^T (+b)) * (x up^T (+b))) down^T (+b)
    logits = (rmsnorm(h) * norm) lm_head^T       (embed_tokens when tie_word_embeddings)

    rmsnorm(x) = x / sqrt(mean(x^2) + rms_norm_eps)
    rope: inv_freq_i = rope_theta^(-2i/head_dim), i < head_dim/2, rescaled by rope_scaling as
      modeling_rope_utils.py does: "linear" divides every inv_freq by factor; "llama3"
      (_compute_llama3_parameters) with wavelen = 2 pi / inv_freq, low = orig / low_freq_factor,
      high = orig / high_freq_factor: wavelen < high keeps inv_freq, wavelen > low divides it by
      factor, in between smooth = (orig / wavelen - low_freq_factor) / (high_freq_factor -
      low_freq_factor) and inv_freq ((1 - smooth) / factor + smooth); attention_factor 1.
      angle(p, i) = p * inv_freq_i; cos/sin repeat over both halves of the head;
      rope(x) = x cos + rotate_half(x) sin, rotate_half(x) = cat(-x[half:], x[:half]).

Qwen2 (modeling_qwen2.py) is this with q/k/v biases and no o_proj bias (the tensors decide:
a ".bias" present is added), head_dim = hidden / heads; Qwen3 (modeling_qwen3.py) adds the
q_norm / k_norm step (Qwen3Attention.forward: q_norm(q_proj(x).view(..., head_dim)), then
apply_rotary_pos_emb). Neither uses a sliding window while use_sliding_window is false (the
only setting accepted here).

transformers computes inv_freq in float32; here it is float64 (the angle differs by ~1e-7
relative, far below what the float32 engines round anyway).
"""
from __future__ import annotations

import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

import torch

_TOOLS = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
if _TOOLS not in sys.path:
    sys.path.insert(0, _TOOLS)
from hf_llama import HfLlamaError, read_safetensors, tensor_shapes, to_float64  # noqa: E402

F64 = torch.float64
FAMILY_TYPES = ("llama", "qwen2", "qwen3")  # config.json model_type values


def load_hf_tensors(model_dir: str) -> Dict[str, torch.Tensor]:
    """Every tensor of the folder as float64, through model.safetensors.index.json when there
    is one (every name it maps must be in its shard, and no shard may hold others), else
    model.safetensors."""
    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    out: Dict[str, torch.Tensor] = {}
    if os.path.isfile(index_path):
        with open(index_path, encoding="utf-8") as f:
            weight_map = json.load(f)["weight_map"]
        for shard in sorted(set(weight_map.values())):
            stored = read_safetensors(os.path.join(model_dir, shard))
            want = {n for n, s in weight_map.items() if s == shard}
            if set(stored) != want:
                raise HfLlamaError(f"{shard}: holds {sorted(set(stored) ^ want)} contrary to "
                                   f"the index")
            for n, (dt, arr) in stored.items():
                out[n] = torch.from_numpy(to_float64(dt, arr))
    else:
        for n, (dt, arr) in read_safetensors(os.path.join(model_dir, "model.safetensors")).items():
            out[n] = torch.from_numpy(to_float64(dt, arr))
    return out


def rope_inv_freq(cfg: dict) -> torch.Tensor:
    """inv_freq [head_dim / 2], float64, after rope_scaling (module docstring)."""
    hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    base = float(cfg.get("rope_theta", 10000.0))
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=F64) / hd))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / float(rs["factor"])
    if kind == "llama3":
        factor = float(rs["factor"])
        lo, hi = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        orig = float(rs["original_max_position_embeddings"])
        low_wavelen, high_wavelen = orig / lo, orig / hi
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (orig / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise HfLlamaError(f"rope_scaling type {kind!r} not supported (default, linear, llama3)")


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class HfModel:
    """A Hugging Face folder's float64 model: cls(config.json dict, float64 tensors by name)."""
    t: Dict[str, torch.Tensor]

    @classmethod
    def load(cls, model_dir: str):
        with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
            cfg = json.load(f)
        return cls(cfg, load_hf_tensors(model_dir))

    def _lin(self, x: torch.Tensor, name: str) -> torch.Tensor:
        """x W^T (+ b when the folder has name.bias)."""
        y = x @ self.t[name + ".weight"].T
        b = self.t.get(name + ".bias")
        return y if b is None else y + b


class StatefulHfModel(HfModel):
    """A model whose forward(ids, state=None, **step) runs on a recurrent state from
    new_state(): the logits of a fresh state, and greedy decoding one token at a time on it."""
    STEP: Dict[str, str] = {}  # forward's keyword arguments for greedy's one-token steps

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        return self.forward(ids)

    def greedy(self, ids: Sequence[int], n: int) -> List[int]:
        """n argmax continuations, decoded one token at a time on the state."""
        st = self.new_state()
        row = self.forward(ids, st)[-1]
        out: List[int] = []
        for _ in range(n):
            out.append(int(torch.argmax(row)))
            row = self.forward([out[-1]], st, **self.STEP)[-1]
        return out


def greedy_main(cls, argv=None) -> int:
    """The references' command line: MODEL_DIR IDS... [--new N] prints N greedy ids."""
    import argparse
    ap = argparse.ArgumentParser(description="greedy continuation under the float64 reference")
    ap.add_argument("model_dir")
    ap.add_argument("ids", type=int, nargs="+")
    ap.add_argument("--new", type=int, default=16)
    a = ap.parse_args(argv)
    print(" ".join(str(i) for i in cls.load(a.model_dir).greedy(a.ids, a.new)))
    return 0


class HfLlama(HfModel):
    def __init__(self, cfg: dict, tensors: Dict[str, torch.Tensor]):
        if cfg.get("hidden_act", "silu") != "silu":
            raise HfLlamaError(f"hidden_act {cfg.get('hidden_act')!r}: only silu")
        if cfg.get("model_type", "llama") not in FAMILY_TYPES:
            raise HfLlamaError(f"model_type {cfg.get('model_type')!r}: want one of "
                               f"{', '.join(FAMILY_TYPES)}")
        if cfg.get("use_sliding_window"):
            raise HfLlamaError("use_sliding_window true is not supported")
        want = tensor_shapes(cfg)
        have = set(tensors)
        if cfg.get("tie_word_embeddings"):
            have.discard("lm_head.weight")  # transformers ignores a tied copy on load
        if have != set(want):
            raise HfLlamaError(f"tensors missing or extra: {sorted(have ^ set(want))}")
        for n, shape in want.items():
            if tuple(tensors[n].shape) != tuple(shape):
                raise HfLlamaError(f"{n}: shape {list(tensors[n].shape)}, want {list(shape)}")
        self.cfg = cfg
        self.t = tensors
        self.hd = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
        self.inv_freq = rope_inv_freq(cfg)

    def hidden(self, ids: Sequence[int], positions: Optional[Sequence[int]] = None
               ) -> torch.Tensor:
        """Final-norm hidden states [T, hidden], float64."""
        cfg, t = self.cfg, self.t
        V = cfg["vocab_size"]
        for i in ids:
            if not 0 <= int(i) < V:
                raise HfLlamaError(f"token id {i} out of range [0, {V})")
        T = len(ids)
        H, KV, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], self.hd
        eps = float(cfg["rms_norm_eps"])
        pos = torch.tensor(list(range(T)) if positions is None else list(positions), dtype=F64)
        ang = pos[:, None] * self.inv_freq[None, :]
        cos = torch.cat((ang.cos(), ang.cos()), dim=-1)  # [T, hd]
        sin = torch.cat((ang.sin(), ang.sin()), dim=-1)
        mask = torch.full((T, T), float("-inf"), dtype=F64).triu(1)
        h = t["model.embed_tokens.weight"][torch.tensor([int(i) for i in ids])]
        for L in range(cfg["num_hidden_layers"]):
            p = f"model.layers.{L}."
            x = rms_norm(h, t[p + "input_layernorm.weight"], eps)
            q = self._lin(x, p + "self_attn.q_proj").view(T, H, hd).transpose(0, 1)
            k = self._lin(x, p + "self_attn.k_proj").view(T, KV, hd).transpose(0, 1)
            v = self._lin(x, p + "self_attn.v_proj").view(T, KV, hd).transpose(0, 1)
            if p + "self_attn.q_norm.weight" in t:   # qwen3: per-head RMSNorm before RoPE
                q = rms_norm(q, t[p + "self_attn.q_norm.weight"], eps)
                k = rms_norm(k, t[p + "self_attn.k_norm.weight"], eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = H // KV
            k = k.repeat_interleave(rep, dim=0)  # q head j -> kv head j // rep
            v = v.repeat_interleave(rep, dim=0)
            s = (q @ k.transpose(1, 2)) / math.sqrt(hd) + mask
            a = torch.softmax(s, dim=-1) @ v  # [H, T, hd]
            h = h + self._lin(a.transpose(0, 1).reshape(T, H * hd), p + "self_attn.o_proj")
            x = rms_norm(h, t[p + "post_attention_layernorm.weight"], eps)
            g = self._lin(x, p + "mlp.gate_proj")
            u = self._lin(x, p + "mlp.up_proj")
            h = h + self._lin(torch.nn.functional.silu(g) * u, p + "mlp.down_proj")
        return rms_norm(h, t["model.norm.weight"], eps)

    def logits(self, ids: Sequence[int]) -> torch.Tensor:
        """Logits [T, vocab], float64, one row per position of ids."""
        head = (self.t["model.embed_tokens.weight"] if self.cfg.get("tie_word_embeddings")
                else self.t["lm_head.weight"])
        return self.hidden(ids) @ head.T

    def greedy(self, ids: Sequence[int], n: int) -> List[int]:
        """n argmax tokens continuing ids (the whole sequence recomputed each step; the lowest
        id wins a tie, as torch.argmax does)."""
        seq = [int(i) for i in ids]
        out: List[int] = []
        for _ in range(n):
            nxt = int(torch.argmax(self.logits(seq)[-1]))
            out.append(nxt)
            seq.append(nxt)
        return out


def top2_margin(row: torch.Tensor) -> float:
    """Top-1 minus top-2 logit of one row."""
    v = torch.topk(row, 2).values
    return float(v[0] - v[1])


def main(argv=None) -> int:
    return greedy_main(HfLlama, argv)


if __name__ == "__main__":
    sys.exit(main())
