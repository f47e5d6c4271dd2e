"""MODEL_CARD.md text of an exported model folder (used by tools/export.py)."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flatstate_ref.model import ModelConfig, kv_bytes_per_token, state_bytes  # noqa: E402


def _fmt_bytes(n: int) -> str:
    if n >= 1 << 20:
        return f"{n} ({n / (1 << 20):.2f} MiB)"
    if n >= 1 << 10:
        return f"{n} ({n / (1 << 10):.1f} KiB)"
    return str(n)


POSITIONAL = {
    "softmax": "RoPE (rotate-half, theta = {rope_theta:g}) on q and k; no convolution; KV cache.",
    "window": ("RoPE (rotate-half, theta = {rope_theta:g}) on q and k; no convolution; the keys "
               "are kept rotated in a ring of the last {window_size} positions."),
    "linear": ("short causal depthwise convolution ('token shift') of {conv_kernel_size} taps on "
               "the normalised attention input before the q/k/v projection; its window (the last "
               "{km1} normalised inputs) is part of the recurrent state."),
}

FEATURES = {
    "softmax": "causal scaled dot-product softmax attention",
    "linear_elu": "linear attention, phi(x) = elu(x) + 1, output num / (den + eps)",
    "cosformer": ("cosFormer: phi = ReLU with cos(pi/2 (i-j)/M) re-weighting, features "
                  "[phi cos, phi sin] (F = 2 head_dim), fixed horizon M = {cosformer_horizon}; "
                  "past M the weight of old tokens turns negative (untrained region, quality "
                  "degrades, nothing breaks numerically)"),
    "cosine": ("Cottention: L2-normalised q and k, no denominator, values scaled by "
               "t^(-sigmoid(m_h)) with one learned m per head (decay_logit)"),
    "favor": ("Performer FAVOR+ positive random features, F = {favor_num_features}, fixed "
              "orthogonal projection stored as feature_proj, causal running-max stabiliser M"),
    "gated": ("RFA-Gate (Peng et al. 2021): random Fourier features sqrt(1/R) [sin(u), cos(u)], "
              "u = exp(feature_log_scale) * feature_proj (x / |x|), R = {rfa_num_features} fixed "
              "orthogonal frequency vectors (F = 2R), per-head gate g = sigmoid(gate(x)): "
              "S <- g S + (1-g) phi(k) v^T, z and the weight mass n likewise, output "
              "num / max(den, 0.01 n) (docs/kinds.md)"),
    "window": ("sliding-window causal softmax (Longformer's local attention): each token attends "
               "to the last W = {window_size} tokens, itself included (docs/kinds.md)"),
    "hybrid": ("linear attention plus a short window, in the spirit of Based (Arora et al. 2024): "
               "elu+1 linear attention over all past tokens and sliding-window softmax (RoPE) "
               "over the last W = {window_size} tokens, layout `{hybrid_layout}` (alternate: "
               "window layers at even indices, linear layers at odd ones; sum: both branches "
               "on shared q, k, v in every layer, outputs added) (docs/kinds.md)"),
}


def model_card(name: str, cfg: ModelConfig, record: dict, nparams: int, ntensors: int,
               st_bytes: int, dtype: str = "float32") -> str:
    kind = cfg.attention_kind
    storage = {"float32": "fp32",
               "bfloat16": "layer GEMM weights bf16 (torch_dtype bfloat16), the rest fp32",
               "int8": "layer GEMM weights int8 with an fp32 scale per row and block of 32 "
                       "(torch_dtype int8), the rest fp32",
               "int4": "layer GEMM weights int4, two per byte, with an fp32 scale per row and "
                       "block of 32 (torch_dtype int4), the rest fp32"}[dtype]
    fmt = dict(vars(cfg))
    fmt["km1"] = max(cfg.conv_kernel_size - 1, 0)
    pos = POSITIONAL[kind if kind in ("softmax", "window") else "linear"].format(**fmt)
    if cfg.is_recurrent and kind != "window" and cfg.conv_kernel_size == 0:
        pos = "none (conv_kernel_size = 0)" + (
            "; cosFormer's cos/sin re-weighting is its only positional signal"
            if kind == "cosformer" else "")
    elif kind == "cosformer":
        pos += " Plus cosFormer's cos/sin position re-weighting (horizon M above)."
    elif kind == "cosine":
        pos += " Plus the per-head t^(-sigmoid(m)) value scaling."
    if kind == "hybrid":
        pos += (" Plus RoPE (rotate-half, theta = {rope_theta:g}) on q and k of the window "
                "attention.".format(**fmt))
    elif kind == "gated":
        pos += " Plus the gate's decay, which weighs recent tokens more."
    if kind == "window":
        mem = (f"Recurrent state per session: {_fmt_bytes(state_bytes(cfg))} fp32 (a ring of "
               f"the last {cfg.window_size} keys and values per layer), constant in sequence "
               f"length.")
    elif kind == "hybrid":
        parts = ("window layers: the conv window and a ring of the last "
                 f"{cfg.window_size} keys and values; linear layers: S, z, M per head and the "
                 "conv window" if cfg.hybrid_layout == "alternate" else
                 "S, z, M of the linear branch, the conv window and a ring of the last "
                 f"{cfg.window_size} keys and values, per layer")
        mem = (f"Recurrent state per session: {_fmt_bytes(state_bytes(cfg))} fp32 ({parts}), "
               f"constant in sequence length.")
    elif kind == "gated":
        mem = (f"Recurrent state per session: {_fmt_bytes(state_bytes(cfg))} fp32 "
               f"(S {cfg.feature_dim()}x{cfg.head_dim}, z {cfg.feature_dim()} and the weight mass n "
               f"per head, plus the conv window), constant in sequence length.")
    elif cfg.is_linear:
        mem = (f"Recurrent state per session: {_fmt_bytes(state_bytes(cfg))} fp32 "
               f"(S {cfg.feature_dim()}x{cfg.head_dim}, z {cfg.feature_dim()}, M per head, "
               f"plus the conv window), constant in sequence length.")
    else:
        mem = f"KV cache: {_fmt_bytes(kv_bytes_per_token(cfg))} fp32 per token (grows with length)."

    def num(key, fmt_s="{:.4f}"):
        v = record.get(key)
        return fmt_s.format(v) if isinstance(v, (int, float)) else "n/a"

    trained = record.get("command") is not None and not record.get("random_init")
    lines = [
        f"# {name}",
        "",
        "flatstate byte-level (256-id vocabulary) decoder-only language model"
        + (" trained on tiny Shakespeare (first 90 % train, last 10 % validation)."
           if trained else " with RANDOM weights (not trained; for benchmarks only)."),
        "",
        "## Architecture",
        "",
        f"- attention kind: `{kind}` - " + FEATURES[kind].format(**fmt),
        f"- positional information: {pos}",
        f"- hidden_size {cfg.hidden_size}, layers {cfg.num_hidden_layers}, heads "
        f"{cfg.num_attention_heads} (head_dim {cfg.head_dim}), intermediate_size "
        f"{cfg.intermediate_size}, RMSNorm (eps {cfg.rms_norm_eps:g}), exact-GELU MLP, untied "
        f"lm_head, chunk_size {cfg.chunk_size}",
        f"- parameters: {nparams:,} ({ntensors} tensors in model.safetensors, "
        f"{_fmt_bytes(st_bytes)} on disk, {storage})",
        f"- {mem}",
        "",
        "## Training",
        "",
    ]
    if trained:
        wall = record.get("wall_seconds")
        lines += [
            f"- command: `{record.get('command')}`",
            f"- seed {record.get('seed', 'n/a')}, steps {record.get('steps', 'n/a')}, batch "
            f"{record.get('batch', 'n/a')}, seq_len {record.get('seq_len', 'n/a')}",
            f"- wall time: {wall:.0f} s" if isinstance(wall, (int, float)) else "- wall time: n/a",
        ] + ([f"- environment: {record['environment']}"] if record.get("environment") else []) + [
            f"- final train loss (EMA): {num('train_loss')} nats/byte",
            f"- final validation loss (full validation split): {num('val_loss')} nats/byte",
            f"- reproduce: `scripts/train_all.sh {kind}` (trains, then re-exports this folder; "
            f"see docs/models.md)",
        ]
    else:
        lines += ["- not trained: " + record.get("note", "random initialisation") + "."]
    lines += ["", f"Files: config.json, model.safetensors ({storage}, sorted tensor names"
              f"{', the 1-byte quants last' if dtype in ('int8', 'int4') else ''}), "
              "this card.",
              "Exported by tools/export.py.", ""]
    return "\n".join(lines)
