"""tools/train_gated_deltanet.py: the trainable float32 model computes what the float64 reference
(flatstate_ref/gated_deltanet.py) computes from the folder it writes, across a chunk boundary
and with grouped value heads; its parameters are the layout's tensors; the byte tokenizer maps
byte b to id b; a short training run lowers the loss and writes a loadable folder."""
import json
import os
import sys

import pytest
import torch

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, TOOLS)
import train_gated_deltanet as tg  # noqa: E402
from flatstate_ref.gated_deltanet import HfGatedDeltaNet  # noqa: E402


def _perturbed(cfg, seed):
    """A model whose decays, gates and norms are away from their initial values, so that every
    term of the rule matters."""
    torch.manual_seed(seed)
    m = tg.GatedDeltaNetLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if n.endswith(("A_log", "dt_bias", "norm.weight")):
                p.add_(0.3 * torch.randn_like(p))
            elif p.dim() == 2:
                p.mul_(8.0)
    return m


@pytest.mark.parametrize("heads,v_heads", [(2, 2), (1, 2)])
def test_trainable_model_equals_the_reference(tmp_path, heads, v_heads):
    cfg = tg.byte_config(hidden_size=32, layers=2, heads=heads, head_dim=8,
                         intermediate_size=48)
    cfg["num_v_heads"] = v_heads
    m = _perturbed(cfg, 7)
    ids = torch.randint(0, 256, (1, 150), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        got = m(ids)[0].double()
    out = str(tmp_path / "gdn")
    tg.write_folder(out, cfg, m, {"test": True})
    ref = HfGatedDeltaNet.load(out)
    want = ref.forward(ids[0].tolist())
    scale = want.abs().max().item()
    assert scale > 1.0
    assert (got - want).abs().max().item() < 2e-5 * scale
    # Token by token through the reference's recurrent form: the same function.
    st = ref.new_state()
    rows = [ref.forward([t], st, mode="recurrent") for t in ids[0, :70].tolist()]
    assert (torch.cat(rows) - want[:70]).abs().max().item() < 1e-9 * scale


def test_byte_tokenizer_maps_each_byte_to_itself(tmp_path):
    tg.write_byte_tokenizer(str(tmp_path))
    doc = json.load(open(tmp_path / "tokenizer.json", encoding="utf-8"))
    vocab = doc["model"]["vocab"]
    assert sorted(vocab.values()) == list(range(256))
    assert len(set(vocab)) == 256 and doc["model"]["merges"] == []
    assert vocab["A"] == ord("A") and vocab["\u0120"] == ord(" ")  # GPT-2's space stand-in
    assert vocab["\u010a"] == ord("\n")


def test_short_training_run_lowers_the_loss(tmp_path):
    data = tmp_path / "text.txt"
    data.write_bytes(b"to be or not to be, that is the question. " * 600)
    out = tmp_path / "model"
    tg.main(["--out", str(out), "--data", str(data), "--hidden_size", "32", "--layers", "1",
             "--heads", "2", "--head_dim", "8", "--intermediate_size", "48", "--steps", "30",
             "--warmup", "5", "--batch", "4", "--seq_len", "64", "--eval_every", "1000"])
    rec = json.load(open(out / "train_record.json"))
    assert rec["val_loss"] < 4.0  # uniform over 256 bytes is 5.55 nats
    for f in ("config.json", "tokenizer.json", "model.safetensors.index.json"):
        assert (out / f).exists()
    HfGatedDeltaNet.load(str(out))
    with pytest.raises(SystemExit):  # refuses to overwrite
        tg.main(["--out", str(out), "--data", str(data)])
