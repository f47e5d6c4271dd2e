#!/usr/bin/env python3
"""Long-context curve: mean loss per byte position over the validation split cut into 4 KiB
sequences, for every shipped model (PyTorch reference, fp32 exported weights).

    /usr/bin/python3 tools/long_context_curve.py [--models_dir models] [--seq_len 4096]
        [--csv docs/data/long_context_curve.csv] [--plot docs/img/long_context_curve.png]

The validation split (last 10 % of the bytes of tiny Shakespeare) is cut into non-overlapping
sequences of seq_len + 1 bytes; each model reads the first seq_len bytes of a sequence from an
empty state and predicts the next byte at every position t = 0 .. seq_len-1.  The loss at
position t (cross-entropy in nats of byte t+1 given bytes 0..t) is averaged over the sequences
and over the position buckets [0, 64), [64, 256), [256, 1024), [1024, 4096), and over finer
log-spaced bins for the plot.  Forms: chunked (every constant-state kind; chunk_size from the
config), parallel (softmax), in float32 with one thread and no autograd.

The CSV has one row per (model, bucket) with kind, model, bucket, first and last position,
mean loss and the number of predictions, followed by the finer bins (bucket "bin").  The plot
is drawn with gnuplot (Debian's python3 has no matplotlib here); without gnuplot only the CSV and
the gnuplot script are written.  A second plot, <plot>_vs_window.png, shows every curve minus the
window model's (--reference): that model cannot see past W bytes, so the text's own difficulty
per position cancels and what remains is what a kind gains or loses from longer context.
"""
from __future__ import annotations

import os

if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export import load_exported  # noqa: E402
from golden import DEFAULT_DATA, flatstate_model_dirs  # noqa: E402

BUCKETS = [(0, 64), (64, 256), (256, 1024), (1024, 4096)]
BINS = [0, 8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096]


def validation_sequences(data_path: str, seq_len: int) -> torch.Tensor:
    with open(data_path, "rb") as f:
        data = f.read()
    val = torch.tensor(list(data[int(0.9 * len(data)):]), dtype=torch.long)
    n = (val.numel() - 1) // seq_len
    if n < 1:
        sys.exit(f"error: validation split of {data_path} shorter than {seq_len + 1} bytes")
    return torch.stack([val[i * seq_len:(i + 1) * seq_len + 1] for i in range(n)])


@torch.no_grad()
def position_losses(model, seqs: torch.Tensor) -> torch.Tensor:
    """(n_seqs, seq_len) per-position losses in nats."""
    mode = "chunked" if model.cfg.is_recurrent else "parallel"
    out = []
    for s in seqs:
        logits, _ = model.step(s[:-1], None, mode, dtype=torch.float32)
        out.append(F.cross_entropy(logits, s[1:], reduction="none"))
    return torch.stack(out)


def summarise(losses: torch.Tensor, edges):
    rows = []
    for lo, hi in edges:
        hi = min(hi, losses.shape[1])
        if lo >= hi:
            continue
        part = losses[:, lo:hi]
        rows.append((lo, hi, part.mean().item(), part.numel()))
    return rows


GNUPLOT = """set terminal pngcairo size 960,600 noenhanced
set output '{png}'
set title '{title}'
set xlabel 'byte position in the sequence (log scale; bin midpoints)'
set ylabel '{ylabel}'
set logscale x 2
set key outside right
set grid
{vlines}plot {plots}
"""


def write_plot(path_png: str, curves, window_sizes,
               title="Mean loss per byte position, tiny Shakespeare validation, 4 KiB sequences",
               ylabel="mean cross-entropy (nats/byte)") -> str:
    """curves: {model: [(mid, loss)]}. Writes <png>.gp (data inline) and runs gnuplot."""
    gp = os.path.splitext(path_png)[0] + ".gp"
    plots, data = [], []
    for name, pts in curves.items():
        plots.append(f"'-' using 1:2 with linespoints title '{name}'")
        data.append("\n".join(f"{x:g} {y:.6f}" for x, y in pts) + "\ne")
    vlines = "".join(f"set arrow from {w},graph 0 to {w},graph 1 nohead dt 2\n"
                     for w in sorted(set(window_sizes)))
    with open(gp, "w") as f:
        f.write(GNUPLOT.format(png=path_png, vlines=vlines, plots=", ".join(plots),
                               title=title, ylabel=ylabel))
        f.write("\n".join(data) + "\n")
    if shutil.which("gnuplot") is None:
        return f"gnuplot not found; wrote {gp} only"
    r = subprocess.run(["gnuplot", gp], capture_output=True, text=True)
    if r.returncode != 0:
        return f"gnuplot failed: {r.stderr.strip()}"
    return f"wrote {path_png} (script {gp})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models_dir", default="models")
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--seq_len", type=int, default=4096)
    p.add_argument("--max_seqs", type=int, default=0, help="0: every sequence")
    p.add_argument("--only", action="append", default=None, help="model names (repeatable)")
    p.add_argument("--csv", default=os.path.join("docs", "data", "long_context_curve.csv"))
    p.add_argument("--plot", default=os.path.join("docs", "img", "long_context_curve.png"))
    p.add_argument("--reference", default="shakespeare-window",
                   help="model whose curve is subtracted in <plot>_vs_window.png")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    if not os.path.isfile(a.data):
        sys.exit(f"error: data file not found: {a.data}")
    seqs = validation_sequences(a.data, a.seq_len)
    if a.max_seqs:
        seqs = seqs[:a.max_seqs]
    dirs = flatstate_model_dirs(a.models_dir)
    if a.only:
        dirs = [d for d in dirs if os.path.basename(d) in set(a.only)]
    if not dirs:
        sys.exit(f"error: no flatstate model folders in {a.models_dir}")
    bins = list(zip(BINS[:-1], BINS[1:]))
    rows, curves, windows = [], {}, []
    t_all = time.time()
    for d in dirs:
        name = os.path.basename(os.path.normpath(d))
        model = load_exported(d)
        t0 = time.time()
        losses = position_losses(model, seqs)
        kind = model.cfg.attention_kind
        for lo, hi, m, n in summarise(losses, BUCKETS):
            rows.append([kind, name, "bucket", lo, hi, f"{m:.4f}", n])
        fine = summarise(losses, bins)
        for lo, hi, m, n in fine:
            rows.append([kind, name, "bin", lo, hi, f"{m:.4f}", n])
        curves[name] = [((lo + hi) / 2 if lo else hi / 2, m) for lo, hi, m, _ in fine]
        if kind in ("window", "hybrid"):
            windows.append(model.cfg.window_size)
        print(f"{name:28s} " + "  ".join(f"[{lo},{hi}) {m:.4f}" for lo, hi, m, _ in
                                          summarise(losses, BUCKETS))
              + f"  ({time.time() - t0:.0f} s)", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(a.csv)), exist_ok=True)
    with open(a.csv, "w", newline="") as f:
        f.write(f"# tools/long_context_curve.py --seq_len {a.seq_len}"
                f"{' --max_seqs %d' % a.max_seqs if a.max_seqs else ''}: {len(seqs)} validation "
                f"sequences; {time.strftime('%Y-%m-%d')}, {platform.machine()}, torch "
                f"{torch.__version__}, 1 thread, float32, {time.time() - t_all:.0f} s\n")
        w = csv.writer(f)
        w.writerow(["kind", "model", "bucket", "first_position", "end_position",
                    "mean_loss_nats", "predictions"])
        w.writerows(rows)
    print(f"wrote {a.csv}")
    if a.plot:
        os.makedirs(os.path.dirname(os.path.abspath(a.plot)), exist_ok=True)
        print(write_plot(a.plot, curves, windows))
        ref = [n for n in curves if n == a.reference]
        if ref:
            # Minus the window model, which cannot see past W bytes: the content of each bin
            # cancels, what remains is what a kind gains (< 0) or loses from its longer context.
            base = dict(curves[ref[0]])
            delta = {n: [(x, y - base[x]) for x, y in pts] for n, pts in curves.items()
                     if n != ref[0]}
            path = os.path.splitext(a.plot)[0] + "_vs_window.png"
            print(write_plot(path, delta, windows,
                             title=f"Mean loss per byte position minus that of {ref[0]}",
                             ylabel="loss difference (nats/byte)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
