#!/usr/bin/env python3
"""Write a random-weight Qwen3.5 (dense) or dense Qwen3-Next folder in the Hugging Face layout.

    /usr/bin/python3 tools/hf_qwen35.py --out /tmp/q35 [--family qwen3_5|qwen3_5_vl|qwen3_next] \
        [--tokenizer train|none|DIR] [--vocab_size 512] [--hidden_size 64] \
        [--intermediate_size 128] [--num_hidden_layers 4] [--full_attention_interval 4] \
        [--num_attention_heads 4] [--num_key_value_heads 2] [--head_dim 32] \
        [--partial_rotary_factor 0.25] [--rope_theta 10000000] \
        [--linear_num_key_heads 2] [--linear_num_value_heads 4] [--linear_key_head_dim 16] \
        [--linear_value_head_dim 16] [--linear_conv_kernel_dim 4] [--tie_word_embeddings] \
        [--mtp] [--dtype bfloat16|float32] [--shards 1] [--seed 1] [--force]

Families (architectures[0], model_type):
    qwen3_5      Qwen3_5ForCausalLM, "qwen3_5_text": the text keys at the top of config.json,
                 tensors model.* (+ mtp.* with --mtp)
    qwen3_5_vl   Qwen3_5ForConditionalGeneration, "qwen3_5", as the published Qwen3.5
                 checkpoints: the text keys under "text_config" (model_type "qwen3_5_text"),
                 a "vision_config", image/video token ids; text tensors under
                 model.language_model.*, lm_head.weight at the top, plus a few vision tensors
                 (model.visual.*) and MTP tensors (mtp.*) a text loader must skip
    qwen3_next   Qwen3NextForCausalLM, "qwen3_next" with num_experts 0 (every MLP dense;
                 the published Qwen3-Next checkpoints are all MoE, which this does not write)

Text config keys (configuration_qwen3_5.py Qwen3_5TextConfig / configuration_qwen3_next.py):
attention_bias false, attention_dropout 0.0, bos/eos_token_id, dtype, full_attention_interval,
head_dim, hidden_act "silu", hidden_size, initializer_range, intermediate_size, layer_types
(["linear_attention", ..., "full_attention"]: every full_attention_interval-th layer full),
linear_conv_kernel_dim, linear_key_head_dim, linear_num_key_heads, linear_num_value_heads,
linear_value_head_dim, max_position_embeddings, model_type, num_attention_heads,
num_hidden_layers, num_key_value_heads, rms_norm_eps 1e-6, rope_parameters {"rope_type":
"default", "rope_theta", "partial_rotary_factor"; Qwen3.5 also "mrope_section" [11, 11, 10]
scaled to the rotary dims and "mrope_interleaved" true}, tie_word_embeddings, use_cache,
vocab_size; Qwen3.5 also attn_output_gate true, mtp_num_hidden_layers, mtp_use_dedicated_
embeddings false; Qwen3-Next also decoder_sparse_step 1, mlp_only_layers [], num_experts 0,
num_experts_per_tok, moe_intermediate_size, shared_expert_intermediate_size, norm_topk_prob,
output_router_logits, router_aux_loss_coef.

Tensors ([out, in] row-major; P = "model." or "model.language_model." for qwen3_5_vl;
Hk, Hv, dk, dv the linear_* heads and head dims, r = Hv / Hk, K the conv kernel, H, KV, hd the
attention heads and head_dim, D hidden, I intermediate, V vocab):

    P embed_tokens.weight                               [V, D]
    linear_attention layer i (P layers.i.linear_attn.):
      Qwen3.5:    in_proj_qkv.weight  [2 Hk dk + Hv dv, D]   rows q | k | v, head-major
                  in_proj_z.weight    [Hv dv, D]
                  in_proj_b.weight    [Hv, D]
                  in_proj_a.weight    [Hv, D]
      Qwen3-Next: in_proj_qkvz.weight [2 Hk dk + 2 Hv dv, D] per key head [q dk|k dk|v r dv|z r dv]
                  in_proj_ba.weight   [2 Hv, D]              per key head [b r | a r]
      conv1d.weight [2 Hk dk + Hv dv, 1, K]   dt_bias [Hv]   A_log [Hv]
      norm.weight [dv]  (gated RMSNorm, plain weight)   out_proj.weight [D, Hv dv]
    full_attention layer i (P layers.i.self_attn.):
      q_proj.weight [2 H hd, D] (per head: hd query rows then hd gate rows)
      k_proj.weight [KV hd, D]   v_proj.weight [KV hd, D]   o_proj.weight [D, H hd]
      q_norm.weight [hd]   k_norm.weight [hd]             (1 + w RMSNorms)
    every layer: P layers.i.mlp.{gate_proj,up_proj}.weight [I, D], mlp.down_proj.weight [D, I],
      P layers.i.input_layernorm.weight [D], post_attention_layernorm.weight [D]  (1 + w)
    P norm.weight [D] (1 + w)          lm_head.weight [V, D] (absent when tied)

Module order (the order tensors are drawn and sharded): embed, per layer (mixer tensors as
listed, then mlp gate/up/down, input_layernorm, post_attention_layernorm), norm, lm_head, then
vision, then MTP. Weights (torch.Generator(seed), float32, rounded to --dtype): embeddings N(0,1);
projections N(0, (gain/sqrt(fan_in))^2); lm_head N(0, (4/sqrt(D))^2); conv1d N(0, 1/K);
A_log log(U(0.05, 2)); dt_bias 0.5 N(0,1); 1+w norm weights 0.1 N(0,1) (stored zero-centred,
as upstream initialises them to 0); linear_attn.norm.weight 1 + 0.1 N(0,1); biases 0.1 N(0,1).
The tokenizer files are tools/hf_llama.py's (SentencePiece; the published checkpoints ship a
byte-level BPE tokenizer.json instead).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections import OrderedDict
from typing import List, Tuple

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_llama import (BOS_ID, DEFAULT_TEXT, DTYPES, EOS_ID, HfLlamaError,  # noqa: E402
                      draw_weights, start_folder, write_json, write_model_files)

FAMILIES = {
    "qwen3_5": ("Qwen3_5ForCausalLM", "qwen3_5_text"),
    "qwen3_5_vl": ("Qwen3_5ForConditionalGeneration", "qwen3_5"),
    "qwen3_next": ("Qwen3NextForCausalLM", "qwen3_next"),
}
TRANSFORMERS_VERSION = "5.0.0"
VISION = {"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2,
          "in_channels": 3, "patch_size": 4, "temporal_patch_size": 2, "spatial_merge_size": 2,
          "num_position_embeddings": 16}


def layer_types(n: int, interval: int) -> List[str]:
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]


def make_config(family: str = "qwen3_5", vocab_size: int = 512, hidden_size: int = 64,
                intermediate_size: int = 128, num_hidden_layers: int = 4,
                full_attention_interval: int = 4, num_attention_heads: int = 4,
                num_key_value_heads: int = 2, head_dim: int = 32,
                partial_rotary_factor: float = 0.25, rope_theta: float = 10000000.0,
                linear_num_key_heads: int = 2, linear_num_value_heads: int = 4,
                linear_key_head_dim: int = 16, linear_value_head_dim: int = 16,
                linear_conv_kernel_dim: int = 4, rms_norm_eps: float = 1e-6,
                tie_word_embeddings: bool = False, dtype: str = "bfloat16", mtp: bool = False,
                max_position_embeddings: int = 4096) -> dict:
    """config.json's dict (module docstring)."""
    if family not in FAMILIES:
        raise HfLlamaError(f"family {family!r}: want one of {', '.join(FAMILIES)}")
    if dtype not in DTYPES:
        raise HfLlamaError(f"dtype {dtype!r}")
    if linear_num_value_heads % linear_num_key_heads or num_attention_heads % num_key_value_heads:
        raise HfLlamaError("value heads / key heads and heads / kv heads must be whole")
    rd = int(head_dim * partial_rotary_factor)
    if rd % 2 or rd == 0:
        raise HfLlamaError(f"rotary dims head_dim * partial_rotary_factor = {rd}: want even > 0")
    arch, model_type = FAMILIES[family]
    rope = OrderedDict([("rope_type", "default"), ("rope_theta", rope_theta),
                        ("partial_rotary_factor", partial_rotary_factor)])
    if family != "qwen3_next":
        half = rd // 2  # mrope_section counts rotary frequency pairs (upstream [11, 11, 10] of 32)
        sec = [half // 3 + (half % 3 > 0), half // 3 + (half % 3 > 1), half // 3]
        rope["mrope_interleaved"] = True
        rope["mrope_section"] = sec
    t = OrderedDict([
        ("attention_bias", False), ("attention_dropout", 0.0),
        ("bos_token_id", BOS_ID), ("dtype", dtype), ("eos_token_id", EOS_ID),
        ("full_attention_interval", full_attention_interval), ("head_dim", head_dim),
        ("hidden_act", "silu"), ("hidden_size", hidden_size), ("initializer_range", 0.02),
        ("intermediate_size", intermediate_size),
        ("layer_types", layer_types(num_hidden_layers, full_attention_interval)),
        ("linear_conv_kernel_dim", linear_conv_kernel_dim),
        ("linear_key_head_dim", linear_key_head_dim),
        ("linear_num_key_heads", linear_num_key_heads),
        ("linear_num_value_heads", linear_num_value_heads),
        ("linear_value_head_dim", linear_value_head_dim),
        ("max_position_embeddings", max_position_embeddings),
        ("model_type", "qwen3_5_text" if family == "qwen3_5_vl" else model_type),
        ("num_attention_heads", num_attention_heads),
        ("num_hidden_layers", num_hidden_layers),
        ("num_key_value_heads", num_key_value_heads),
        ("rms_norm_eps", rms_norm_eps), ("rope_parameters", rope),
        ("tie_word_embeddings", bool(tie_word_embeddings)), ("use_cache", True),
        ("vocab_size", vocab_size),
    ])
    if family == "qwen3_next":
        t.update([("decoder_sparse_step", 1), ("mlp_only_layers", []), ("num_experts", 0),
                  ("num_experts_per_tok", 0), ("moe_intermediate_size", intermediate_size),
                  ("shared_expert_intermediate_size", 0), ("norm_topk_prob", True),
                  ("output_router_logits", False), ("router_aux_loss_coef", 0.001)])
    else:
        t.update([("attn_output_gate", True), ("mtp_num_hidden_layers", 1 if mtp else 0),
                  ("mtp_use_dedicated_embeddings", False)])
    t = OrderedDict(sorted(t.items()))
    if family != "qwen3_5_vl":
        return OrderedDict([("architectures", [arch])] + list(t.items()) +
                           [("transformers_version", TRANSFORMERS_VERSION)])
    vis = OrderedDict(sorted(list(VISION.items()) + [
        ("hidden_act", "gelu_pytorch_tanh"), ("initializer_range", 0.02),
        ("model_type", "qwen3_5_vision"), ("out_hidden_size", hidden_size)]))
    return OrderedDict([
        ("architectures", [arch]), ("image_token_id", vocab_size - 4),
        ("model_type", model_type), ("text_config", t),
        ("tie_word_embeddings", bool(tie_word_embeddings)),
        ("transformers_version", TRANSFORMERS_VERSION), ("video_token_id", vocab_size - 3),
        ("vision_config", vis), ("vision_end_token_id", vocab_size - 1),
        ("vision_start_token_id", vocab_size - 2),
    ])


def _text(cfg: dict) -> dict:
    return cfg.get("text_config") or cfg


def _decoder_layer(out, p: str, t: dict, kind: str, family: str) -> None:
    D, I = t["hidden_size"], t["intermediate_size"]
    if kind == "linear_attention":
        Hk, Hv = t["linear_num_key_heads"], t["linear_num_value_heads"]
        dk, dv = t["linear_key_head_dim"], t["linear_value_head_dim"]
        K = t["linear_conv_kernel_dim"]
        conv = 2 * Hk * dk + Hv * dv
        a = p + "linear_attn."
        if family == "qwen3_next":
            out[a + "in_proj_qkvz.weight"] = (conv + Hv * dv, D)
            out[a + "in_proj_ba.weight"] = (2 * Hv, D)
        else:
            out[a + "in_proj_qkv.weight"] = (conv, D)
            out[a + "in_proj_z.weight"] = (Hv * dv, D)
            out[a + "in_proj_b.weight"] = (Hv, D)
            out[a + "in_proj_a.weight"] = (Hv, D)
        out[a + "conv1d.weight"] = (conv, 1, K)
        out[a + "dt_bias"] = (Hv,)
        out[a + "A_log"] = (Hv,)
        out[a + "norm.weight"] = (dv,)
        out[a + "out_proj.weight"] = (D, Hv * dv)
    else:
        H, KV, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
        a = p + "self_attn."
        out[a + "q_proj.weight"] = (2 * H * hd, D)
        out[a + "k_proj.weight"] = (KV * hd, D)
        out[a + "v_proj.weight"] = (KV * hd, D)
        out[a + "o_proj.weight"] = (D, H * hd)
        out[a + "q_norm.weight"] = (hd,)
        out[a + "k_norm.weight"] = (hd,)
    out[p + "mlp.gate_proj.weight"] = (I, D)
    out[p + "mlp.up_proj.weight"] = (I, D)
    out[p + "mlp.down_proj.weight"] = (D, I)
    out[p + "input_layernorm.weight"] = (D,)
    out[p + "post_attention_layernorm.weight"] = (D,)


def tensor_shapes(cfg: dict, text_only: bool = False) -> "OrderedDict[str, Tuple[int, ...]]":
    """Every tensor's name and shape in module order (module docstring); text_only: without
    the vision and MTP tensors."""
    t = _text(cfg)
    family = "qwen3_next" if t["model_type"] == "qwen3_next" else (
        "qwen3_5_vl" if "text_config" in cfg else "qwen3_5")
    P = "model.language_model." if family == "qwen3_5_vl" else "model."
    D, V = t["hidden_size"], t["vocab_size"]
    out: "OrderedDict[str, Tuple[int, ...]]" = OrderedDict()
    out[P + "embed_tokens.weight"] = (V, D)
    for i, kind in enumerate(t["layer_types"]):
        _decoder_layer(out, f"{P}layers.{i}.", t, kind, family)
    out[P + "norm.weight"] = (D,)
    if not t["tie_word_embeddings"]:
        out["lm_head.weight"] = (V, D)
    if text_only:
        return out
    if family == "qwen3_5_vl":
        v = cfg["vision_config"]
        vh, vi, ps, tp = v["hidden_size"], v["intermediate_size"], v["patch_size"], \
            v["temporal_patch_size"]
        m = vh * v["spatial_merge_size"] ** 2
        q = "model.visual."
        out[q + "patch_embed.proj.weight"] = (vh, v["in_channels"], tp, ps, ps)
        out[q + "patch_embed.proj.bias"] = (vh,)
        out[q + "pos_embed.weight"] = (v["num_position_embeddings"], vh)
        for j in range(v["depth"]):
            b = f"{q}blocks.{j}."
            for n, s in (("norm1.weight", (vh,)), ("norm1.bias", (vh,)),
                         ("attn.qkv.weight", (3 * vh, vh)), ("attn.qkv.bias", (3 * vh,)),
                         ("attn.proj.weight", (vh, vh)), ("attn.proj.bias", (vh,)),
                         ("norm2.weight", (vh,)), ("norm2.bias", (vh,)),
                         ("mlp.linear_fc1.weight", (vi, vh)), ("mlp.linear_fc1.bias", (vi,)),
                         ("mlp.linear_fc2.weight", (vh, vi)), ("mlp.linear_fc2.bias", (vh,))):
                out[b + n] = s
        for n, s in (("merger.norm.weight", (vh,)), ("merger.norm.bias", (vh,)),
                     ("merger.linear_fc1.weight", (m, m)), ("merger.linear_fc1.bias", (m,)),
                     ("merger.linear_fc2.weight", (v["out_hidden_size"], m)),
                     ("merger.linear_fc2.bias", (v["out_hidden_size"],))):
            out[q + n] = s
    for j in range(t.get("mtp_num_hidden_layers", 0)):
        out["mtp.fc.weight"] = (D, 2 * D)
        out["mtp.pre_fc_norm_embedding.weight"] = (D,)
        out["mtp.pre_fc_norm_hidden.weight"] = (D,)
        _decoder_layer(out, f"mtp.layers.{j}.", t, "full_attention", family)
        out["mtp.norm.weight"] = (D,)
    return out


def _zero_centred(name: str) -> bool:
    """The 1 + w RMSNorm weights (every *norm.weight but linear_attn.norm and vision)."""
    return (name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight")
            and not name.startswith("model.visual."))


def random_weights(cfg: dict, seed: int = 1, init_gain: float = 1.0,
                   logit_gain: float = 4.0) -> "OrderedDict[str, torch.Tensor]":
    """float32 tensors drawn in module order from one seeded generator (module docstring)."""
    def scale(name: str, shape: Tuple[int, ...], r: torch.Tensor, g) -> torch.Tensor:
        if name.endswith("A_log"):
            return torch.log(0.05 + 1.95 * torch.rand(shape, generator=g, dtype=torch.float32))
        if name.endswith("dt_bias"):
            return 0.5 * r
        if name.endswith("conv1d.weight"):
            return r / math.sqrt(shape[-1])
        if _zero_centred(name):
            return 0.1 * r
        if name.endswith("norm.weight"):
            return 1.0 + 0.1 * r
        if name.endswith(".bias"):
            return 0.1 * r
        if name.endswith(("embed_tokens.weight", "pos_embed.weight")):
            return r
        if name == "lm_head.weight":
            return r * (logit_gain / math.sqrt(shape[1]))
        return r * (init_gain / math.sqrt(int(torch.tensor(shape[1:]).prod())))
    return draw_weights(tensor_shapes(cfg), seed, scale)


def write_hf_qwen35(out_dir: str, cfg: dict, seed: int = 1, shards: int = 1,
                    init_gain: float = 1.0) -> dict:
    """config.json, generation_config.json, the shards and the index. Returns the index."""
    os.makedirs(out_dir, exist_ok=True)
    t = _text(cfg)
    write_json(os.path.join(out_dir, "config.json"), cfg)
    write_json(os.path.join(out_dir, "generation_config.json"), OrderedDict([
        ("bos_token_id", t["bos_token_id"]), ("do_sample", False),
        ("eos_token_id", t["eos_token_id"]), ("transformers_version", TRANSFORMERS_VERSION)]))
    tensors = random_weights(cfg, seed=seed, init_gain=init_gain)
    return write_model_files(out_dir, cfg, tensors, shards, names=list(tensor_shapes(cfg)),
                             dtype=t["dtype"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", default="qwen3_5", choices=sorted(FAMILIES))
    ap.add_argument("--tokenizer", default="train")
    ap.add_argument("--text", default=DEFAULT_TEXT)
    ints = (("vocab_size", 512), ("hidden_size", 64), ("intermediate_size", 128),
            ("num_hidden_layers", 4), ("full_attention_interval", 4),
            ("num_attention_heads", 4), ("num_key_value_heads", 2), ("head_dim", 32),
            ("linear_num_key_heads", 2), ("linear_num_value_heads", 4),
            ("linear_key_head_dim", 16), ("linear_value_head_dim", 16),
            ("linear_conv_kernel_dim", 4), ("max_position_embeddings", 4096), ("shards", 1),
            ("seed", 1))
    for n, d in ints:
        ap.add_argument("--" + n, type=int, default=d)
    ap.add_argument("--partial_rotary_factor", type=float, default=0.25)
    ap.add_argument("--rope_theta", type=float, default=10000000.0)
    ap.add_argument("--rms_norm_eps", type=float, default=1e-6)
    ap.add_argument("--init_gain", type=float, default=1.0)
    ap.add_argument("--tie_word_embeddings", action="store_true")
    ap.add_argument("--mtp", action="store_true", help="add MTP tensors (qwen3_5_vl always)")
    ap.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args(argv)
    try:
        vocab = start_folder(a.out, a.force, a.tokenizer, a.vocab_size, a.text,
                             a.max_position_embeddings)
        kw = {n: getattr(a, n) for n, _ in ints if n not in ("vocab_size", "shards", "seed")}
        cfg = make_config(a.family, vocab_size=vocab, partial_rotary_factor=a.partial_rotary_factor,
                          rope_theta=a.rope_theta, rms_norm_eps=a.rms_norm_eps,
                          tie_word_embeddings=a.tie_word_embeddings, dtype=a.dtype,
                          mtp=a.mtp or a.family == "qwen3_5_vl", **kw)
        index = write_hf_qwen35(a.out, cfg, seed=a.seed, shards=a.shards, init_gain=a.init_gain)
    except HfLlamaError as e:
        print(f"hf_qwen35.py: {e}", file=sys.stderr)
        return 1
    print(f"wrote {a.out}: vocab {vocab}, {len(index['weight_map'])} tensors, "
          f"{index['metadata']['total_size']} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
