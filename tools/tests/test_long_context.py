"""tools/long_context_curve.py on tiny random models (CSV layout, buckets, plot script)."""
import csv
import os
import sys

import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import long_context_curve  # noqa: E402
from test_export import export_cli, save_ckpt, tiny_model  # noqa: E402


def test_curve_csv_and_plot(tmp_path):
    models = tmp_path / "models"
    for kind in ("window", "gated", "softmax"):
        assert export_cli(save_ckpt(tiny_model(kind), tmp_path / f"{kind}.pt"),
                          f"tiny-{kind}", models) == 0
    data = tmp_path / "input.txt"
    g = torch.Generator().manual_seed(0)
    data.write_bytes(bytes(torch.randint(32, 127, (30000,), generator=g).tolist()))
    out_csv, png = tmp_path / "c.csv", tmp_path / "img" / "c.png"
    rc = long_context_curve.main(["--models_dir", str(models), "--data", str(data),
                                  "--seq_len", "300", "--max_seqs", "2", "--csv", str(out_csv),
                                  "--plot", str(png), "--reference", "tiny-window"])
    assert rc == 0
    lines = out_csv.read_text().splitlines()
    assert lines[0].startswith("# tools/long_context_curve.py --seq_len 300 --max_seqs 2")
    rows = list(csv.reader(lines[1:]))
    assert rows[0] == ["kind", "model", "bucket", "first_position", "end_position",
                       "mean_loss_nats", "predictions"]
    buckets = [r for r in rows[1:] if r[2] == "bucket"]
    # 300 positions: buckets [0,64), [64,256), [256,300) per model, 2 sequences each
    assert [(r[1], r[3], r[4], r[6]) for r in buckets if r[1] == "tiny-gated"] == [
        ("tiny-gated", "0", "64", "128"), ("tiny-gated", "64", "256", "384"),
        ("tiny-gated", "256", "300", "88")]
    assert {r[0] for r in buckets} == {"window", "gated", "softmax"}
    assert all(float(r[5]) > 0 for r in rows[1:])
    assert (tmp_path / "img" / "c.gp").exists() and (tmp_path / "img" / "c_vs_window.gp").exists()
