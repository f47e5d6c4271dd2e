#!/usr/bin/env python3
"""Train one flatstate model on tiny Shakespeare (bytes; first 90 % train, last 10 % validation).

    /usr/bin/python3 tools/train.py --kind linear_elu --out /tmp/linear_elu.pt

Fixed seed, CPU, parallel form.  Prints progress and the validation loss in nats per byte.
The checkpoint (.pt) holds the config, the state dict and the training record; tools/export.py
turns it into models/<name>/.
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flatstate_ref.model import ATTENTION_KINDS, FlatstateLM, ModelConfig  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                            "data", "tinyshakespeare", "input.txt")


def load_splits(path):
    if not os.path.isfile(path):
        sys.exit(f"error: data file not found: {path} (pass --data)")
    with open(path, "rb") as f:
        data = torch.tensor(list(f.read()), dtype=torch.long)
    if data.numel() < 10000:
        sys.exit(f"error: data file {path} has only {data.numel()} bytes; need at least 10000")
    n = int(0.9 * data.numel())
    return data[:n], data[n:]


def _rel_paths(value: str) -> str:
    """Paths under the current directory in a PATH-like value, made relative (for the record)."""
    return ":".join(os.path.relpath(p) if p.startswith(os.getcwd() + os.sep) else p
                    for p in value.split(":"))


@torch.no_grad()
def evaluate(model, val, seq_len, max_windows=None):
    """Mean cross-entropy (nats/byte) over non-overlapping windows of the validation split."""
    model.eval()
    n = (val.numel() - 1) // seq_len
    if max_windows:
        n = min(n, max_windows)
    total, count = 0.0, 0
    for s in range(0, n, 16):
        idx = torch.arange(s, min(n, s + 16)) * seq_len
        x = torch.stack([val[i:i + seq_len] for i in idx])
        y = torch.stack([val[i + 1:i + 1 + seq_len] for i in idx])
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1), reduction="sum")
        total += loss.item()
        count += y.numel()
    model.train()
    return total / count


def train_model(model, train, val, a):
    """The shipped recipe (module docstring) on `model` (ids [B, T] -> logits [B, T, 256]) with
    the options in `a` (lr, weight_decay, seed, steps, warmup, batch, seq_len, eval_every):
    AdamW, warm-up then cosine to 10 %, gradient clip 1. Prints progress; returns (train-loss
    EMA, full validation loss, wall seconds). tools/train_gated_deltanet.py uses it too."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(a.seed)
    t0 = time.time()
    train_loss_ema = None
    for step in range(1, a.steps + 1):
        lr = a.lr * min(1.0, step / a.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / a.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        idx = torch.randint(0, train.numel() - a.seq_len - 1, (a.batch,), generator=gen)
        x = torch.stack([train[i:i + a.seq_len] for i in idx])
        y = torch.stack([train[i + 1:i + 1 + a.seq_len] for i in idx])
        loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        train_loss_ema = loss.item() if train_loss_ema is None else 0.95 * train_loss_ema + 0.05 * loss.item()
        if step % 50 == 0 or step == 1:
            el = time.time() - t0
            print(f"step {step}/{a.steps} loss {train_loss_ema:.4f} lr {lr:.2e} "
                  f"{el:.0f}s ({step * a.batch * a.seq_len / el:.0f} tok/s)", flush=True)
        if step % a.eval_every == 0 and step < a.steps:
            print(f"  val (64 windows) {evaluate(model, val, a.seq_len, 64):.4f} nats/byte", flush=True)
    wall = time.time() - t0
    val_loss = evaluate(model, val, a.seq_len)
    print(f"final: train_loss {train_loss_ema:.4f} val_loss {val_loss:.4f} nats/byte "
          f"wall {wall:.0f}s", flush=True)
    return train_loss_ema, val_loss, wall


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--kind", required=True, help="|".join(ATTENTION_KINDS))
    p.add_argument("--out", required=True, help="checkpoint path (.pt)")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--hidden_size", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--intermediate_size", type=int, default=512)
    p.add_argument("--conv_kernel_size", type=int, default=4)
    p.add_argument("--cosformer_horizon", type=int, default=1024)
    p.add_argument("--favor_num_features", type=int, default=64)
    p.add_argument("--window_size", type=int, default=64, help="window / hybrid: W")
    p.add_argument("--rfa_num_features", type=int, default=32,
                   help="gated: random frequency vectors R (feature size 2R)")
    p.add_argument("--hybrid_layout", default="alternate", help="hybrid: alternate | sum")
    p.add_argument("--seq_len", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight_decay", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eval_every", type=int, default=250)
    a = p.parse_args(argv)

    for name in ("seq_len", "batch", "steps", "threads", "eval_every"):
        if getattr(a, name) <= 0:
            sys.exit(f"error: --{name}={getattr(a, name)} must be > 0")
    if not (0 < a.lr < 1):
        sys.exit(f"error: --lr={a.lr} must be in (0, 1)")
    cfg = ModelConfig(attention_kind=a.kind, hidden_size=a.hidden_size,
                      num_hidden_layers=a.layers, num_attention_heads=a.heads,
                      intermediate_size=a.intermediate_size,
                      conv_kernel_size=(0 if a.kind in ("softmax", "window")
                                        else a.conv_kernel_size),
                      cosformer_horizon=a.cosformer_horizon,
                      favor_num_features=a.favor_num_features, window_size=a.window_size,
                      rfa_num_features=a.rfa_num_features, hybrid_layout=a.hybrid_layout)
    try:
        cfg.validate()
    except ValueError as e:
        sys.exit(f"error: {e}")

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    train, val = load_splits(a.data)
    model = FlatstateLM(cfg)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"kind={a.kind} params={nparams} train_bytes={train.numel()} val_bytes={val.numel()}",
          flush=True)
    train_loss_ema, val_loss, wall = train_model(model, train, val, a)
    record = {"train_loss": train_loss_ema, "val_loss": val_loss, "wall_seconds": wall,
              "params": nparams, "command": " ".join(["/usr/bin/python3", "tools/train.py"] +
                                                     (argv if argv is not None else sys.argv[1:])),
              "seed": a.seed, "steps": a.steps, "batch": a.batch, "seq_len": a.seq_len}
    env = " ".join(f"{k}={_rel_paths(os.environ[k])}"
                   for k in ("LD_LIBRARY_PATH", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
                   if os.environ.get(k))
    if env:
        record["environment"] = env
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    torch.save({"config": cfg.to_json(), "state_dict": model.state_dict(), "record": record}, a.out)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
