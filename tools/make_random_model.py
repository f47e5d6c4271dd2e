#!/usr/bin/env python3
"""Write a random-weight flatstate model folder (for benchmarks; never committed).

    /usr/bin/python3 tools/make_random_model.py --name gpt2-small-linear --kind linear_elu \
        --hidden_size 768 --layers 12 --heads 12 --intermediate_size 3072 --out_dir /tmp/models

Same export code path as tools/export.py (config.json, hand-written model.safetensors,
MODEL_CARD.md).  Fixed seed; embedding and every projection matrix ~ N(0, 0.02) (FlatstateLM's
own initialisation); norms are ones, the conv starts as identity, cosine's decay_logit 0.5 and
favor's feature_proj is the model's fixed orthogonal random projection.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export import ExportError, export_checkpoint  # noqa: E402
from flatstate_ref.model import ATTENTION_KINDS, FlatstateLM, ModelConfig  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--name", required=True)
    p.add_argument("--kind", required=True, choices=ATTENTION_KINDS)
    p.add_argument("--hidden_size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate_size", type=int, default=None, help="default 4 * hidden")
    p.add_argument("--conv_kernel_size", type=int, default=4,
                   help="ignored (0) for softmax and window")
    p.add_argument("--window_size", type=int, default=64, help="window, hybrid")
    p.add_argument("--rfa_num_features", type=int, default=32, help="gated")
    p.add_argument("--hybrid_layout", default="alternate", help="hybrid: alternate | sum")
    p.add_argument("--cosformer_horizon", type=int, default=1024)
    p.add_argument("--favor_num_features", type=int, default=64)
    p.add_argument("--chunk_size", type=int, default=64)
    p.add_argument("--std", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out_dir", default="/tmp/models")
    p.add_argument("--force", action="store_true")
    p.add_argument("--dtype", default="float32",
                   help="float32 | bfloat16 | int8 | int4: how the layers' GEMM weights are "
                        "stored (tools/export.py --dtype)")
    a = p.parse_args(argv)
    cfg = ModelConfig(attention_kind=a.kind, hidden_size=a.hidden_size,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      intermediate_size=a.intermediate_size or 4 * a.hidden_size,
                      conv_kernel_size=0 if a.kind in ("softmax", "window")
                      else a.conv_kernel_size,
                      cosformer_horizon=a.cosformer_horizon,
                      favor_num_features=a.favor_num_features, chunk_size=a.chunk_size,
                      window_size=a.window_size, rfa_num_features=a.rfa_num_features,
                      hybrid_layout=a.hybrid_layout)
    try:
        cfg.validate()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    torch.manual_seed(a.seed)
    model = FlatstateLM(cfg)
    if a.std != 0.02:
        with torch.no_grad():
            for n, t in model.named_parameters():
                if n.endswith(".weight") and t.dim() == 2:
                    t.normal_(0.0, a.std)
    nparams = sum(t.numel() for t in model.parameters())
    record = {"random_init": True, "params": nparams, "seed": a.seed,
              "note": f"random initialisation, seed {a.seed}, N(0, {a.std:g}) matrices "
                      f"(tools/make_random_model.py)"}
    try:
        out = export_checkpoint({"config": cfg.to_json(), "state_dict": model.state_dict(),
                                 "record": record}, a.name, a.out_dir, a.force, a.dtype)
    except ExportError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({a.kind}, {nparams:,} parameters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
