"""tools/compare_llamacpp_table.py on hand-made llama-bench and Google Benchmark outputs."""
import json
import os
import sys

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import compare_llamacpp_table  # noqa: E402


def llama_row(threads, n_prompt, n_gen, depth, samples):
    return {"model_type": "llama ?B F32", "model_n_params": 100_000_000, "n_threads": threads,
            "n_prompt": n_prompt, "n_gen": n_gen, "n_depth": depth,
            "avg_ts": sum(samples) / len(samples), "stddev_ts": 0.0, "samples_ts": samples}


def gb_row(name, ips, params=50_000_000, run_type="iteration"):
    return {"name": name, "run_type": run_type, "items_per_second": ips, "params": params}


def test_table_and_ratios(tmp_path, capsys):
    (tmp_path / "llama-F32-a.json").write_text(json.dumps([
        llama_row(1, 0, 64, 0, [40.0, 50.0]),
        llama_row(2, 512, 0, 0, [400.0, 380.0]),
        llama_row(2, 0, 32, 16384, [20.0, 10.0]),
    ]))
    (tmp_path / "flatstate-f32.json").write_text(json.dumps({"benchmarks": [
        gb_row("Decode/gpt2-small-linear_elu/f32/threads:1/batch:1/real_time", 90.0),
        gb_row("Decode/gpt2-small-linear_elu/f32/threads:1/batch:1/real_time", 100.0),
        gb_row("Decode/gpt2-small-linear_elu/f32/threads:1/batch:1/real_time", 1.0, run_type="aggregate"),
        gb_row("Decode/gpt2-small-linear_elu/f32/threads:1/batch:8/real_time", 900.0),
        gb_row("Prefill/gpt2-small-softmax/f32/threads:2/len:512/real_time", 200.0),
        gb_row("DecodeAtContext/gpt2-small-softmax/f32/threads:2/ctx:16384/real_time", 30.0),
        gb_row("Prefill/gpt2-small-softmax/f32/threads:1/len:512/real_time", 5.0),  # no peer
    ]}))
    assert compare_llamacpp_table.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # Median of the repetitions each: decode 95 vs 45 (2.11 per token, x 0.5 params = 1.06).
    assert "tok/s, median of 2 repetitions" in out
    assert "| f32 linear_elu vs F32 | 2.11 / 1.06 | - | - |" in out
    assert "| f32 softmax vs F32 | - | 0.51 / 0.26 | 2.00 / 1.00 |" in out
    assert compare_llamacpp_table.main([str(tmp_path), "--stat", "best"]) == 0
    out = capsys.readouterr().out
    # Fastest repetition each: decode 100 vs 50 (2.00 per token, x 0.5 params = 1.00).
    assert "| f32 linear_elu vs F32 | 2.00 / 1.00 | - | - |" in out
    assert "| f32 softmax vs F32 | - | 0.50 / 0.25 | 1.50 / 0.75 |" in out
    assert "pp512 1t" not in out  # a column only one engine measured is left out
    csv_text = (tmp_path / "table.csv").read_text()
    assert "flatstate,f32,linear_elu,decode 1t,100.000,95.000,2,50000000" in csv_text
    assert "llama.cpp,F32,,pp512 2t,400.000,390.000,2,100000000" in csv_text


def test_same_checkpoint_rows(tmp_path, capsys):
    # A same-checkpoint run (SAME_CHECKPOINT=1): flatstate's rows name the folder, and both sides
    # count the same parameters, so the ratios are per token only.
    (tmp_path / "llama-Q8_0-a.json").write_text(json.dumps([
        llama_row(2, 0, 64, 0, [40.0]),
        llama_row(2, 512, 0, 0, [400.0]),
    ]))
    (tmp_path / "flatstate-int8.json").write_text(json.dumps({"benchmarks": [
        gb_row("Decode/hf-llama.x/int8/threads:2/batch:1/real_time", 60.0, params=100_000_000),
        gb_row("Prefill/hf-llama.x/int8/threads:2/len:512/real_time", 500.0, params=100_000_000),
    ]}))
    assert compare_llamacpp_table.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| flatstate int8, hf-llama.x | 100.0 M | 60.0 | 500.0 |" in out
    assert "ratios per token (the same parameters" in out
    assert "| int8 hf-llama.x vs Q8_0 | 1.50 | 1.25 |" in out


def test_interleaved_rounds_are_pooled_and_probe_is_reported(tmp_path, capsys):
    # An interleaved run (bench/compare_llamacpp.sh, INTERLEAVE=1) writes one file per round.
    for i, (theirs, ours) in enumerate([(10.0, 30.0), (20.0, 10.0), (30.0, 20.0)], start=1):
        (tmp_path / f"llama-F32-decode-pp512.r{i}.json").write_text(json.dumps([
            llama_row(1, 0, 64, 0, [theirs])]))
        (tmp_path / f"flatstate-f32.r{i}.json").write_text(json.dumps({"benchmarks": [
            gb_row("Decode/hf-llama/f32/threads:1/batch:1/real_time", ours,
                   params=100_000_000)]}))
    (tmp_path / "flatstate-reference.json").write_text(json.dumps({"benchmarks": [
        {"name": "MemoryRead/avx2/streams:1/prefetch:0/threads:1/min_time:1.000/real_time",
         "bytes_per_second": 9e9},
        {"name": "MemoryRead/avx512/streams:4/prefetch:1/threads:1/min_time:1.000/real_time",
         "bytes_per_second": 12e9},
        {"name": "MemoryRead/avx2/streams:4/prefetch:1/threads:2/min_time:1.000/real_time",
         "bytes_per_second": 20e9},
    ]}))
    assert compare_llamacpp_table.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "tok/s, median of 3 repetitions" in out
    assert "| f32 hf-llama vs F32 | 1.00 |" in out  # medians 20 / 20 of the pooled rounds
    assert "- 1 thread: 12.0 GB/s (MemoryRead/avx512/streams:4/prefetch:1/threads:1)" in out
    assert "- 2 threads: 20.0 GB/s (MemoryRead/avx2/streams:4/prefetch:1/threads:2)" in out
