#!/usr/bin/env python3
"""Server smoke run of scripts/gpu_run.sh, and its check on another machine.

  run     For every model the server lists: a greedy session, a streamed generation of
          --tokens tokens, a checkpoint (saved as DIR/<model>.ckpt), then --continue_tokens more
          tokens. Writes DIR/smoke.json (per model: tokens, text, timings, checkpoint file,
          continuation token ids; the server's ListModels and GetStats before and after).
  verify  Restores every DIR/<model>.ckpt of a smoke.json on the server given (e.g. the CPU
          build here, for a run taken on the GPU) and continues it; the continuation's token
          ids must equal the recorded ones (greedy decoding: exact resume). Writes
          DIR/verify.json.

    PYTHONPATH=clients/python FLATSTATE_PYTHON_STUBS=<stubs> \\
        python3 scripts/gpu_server_smoke.py run --server localhost:PORT --dir OUT
    ... verify --server localhost:PORT --dir OUT

Exit status 0 when every model passed, 1 otherwise (each model is tried even if one fails).
"""
import argparse
import json
import os
import sys
import time

from google.protobuf import json_format

from flatstate_client import Client, FlatstateError


def _tokens(client, n, **kwargs):
    """Streams n tokens; returns (token ids, text, seconds, responses)."""
    ids, text, count = [], [], 0
    start = time.monotonic()
    for resp in client.generate(max_new_tokens=n, **kwargs):
        ids.extend(resp.token_ids)
        text.append(resp.text)
        count += 1
    return ids, "".join(text), time.monotonic() - start, count


def _as_dict(msg):
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def run(client, a):
    report = {"server": a.server, "prompt": a.prompt, "models": {}, "errors": []}
    report["list_models"] = [_as_dict(m) for m in client.list_models()]
    report["stats_before"] = _as_dict(client.stats())
    ok = True
    for info in report["list_models"]:
        name = info["name"]
        entry = report["models"].setdefault(name, {"ok": False})
        try:
            session = client.create_session(name, temperature=0.0)
            ids, text, secs, chunks = _tokens(client, a.tokens, prompt=a.prompt,
                                              session_id=session.session_id)
            entry.update(attention_kind=session.attention_kind, tokens=ids, text=text,
                         stream_chunks=chunks, seconds=round(secs, 4),
                         tokens_per_s=round(len(ids) / secs, 2) if secs > 0 else None)
            ckpt = client.checkpoint(session.session_id)
            path = os.path.join(a.dir, f"{name}.ckpt")
            with open(path, "wb") as f:
                f.write(ckpt.data)
            entry.update(checkpoint=os.path.basename(path), checkpoint_bytes=len(ckpt.data),
                         context_tokens=ckpt.context_tokens)
            cont, cont_text, _, _ = _tokens(client, a.continue_tokens,
                                            session_id=session.session_id)
            entry.update(continuation=cont, continuation_text=cont_text)
            client.delete_session(session.session_id)
            entry["ok"] = len(ids) == a.tokens and len(cont) == a.continue_tokens
        except (FlatstateError, OSError) as e:
            entry["error"] = str(e)
        print(f"smoke: {name}: {'ok' if entry['ok'] else 'FAILED'} "
              f"({entry.get('tokens_per_s')} tok/s) {entry.get('error', '')}", flush=True)
        ok = ok and entry["ok"]
    report["stats_after"] = _as_dict(client.stats())
    with open(os.path.join(a.dir, "smoke.json"), "w") as f:
        json.dump(report, f, indent=1)
    return ok


def verify(client, a):
    with open(os.path.join(a.dir, "smoke.json")) as f:
        smoke = json.load(f)
    served = {m.name: m.device for m in client.list_models()}
    result, ok = {"server": a.server, "models": {}}, True
    for name, entry in smoke["models"].items():
        out = result["models"].setdefault(name, {"ok": False, "device": served.get(name)})
        try:
            if "continuation" not in entry:
                raise ValueError(f"smoke run recorded no continuation: {entry.get('error')}")
            with open(os.path.join(a.dir, entry["checkpoint"]), "rb") as f:
                session = client.restore(f.read())
            cont, _, _, _ = _tokens(client, len(entry["continuation"]),
                                    session_id=session.session_id)
            client.delete_session(session.session_id)
            out.update(continuation=cont, ok=cont == entry["continuation"])
            if not out["ok"]:
                first = next(i for i, (x, y) in enumerate(zip(cont + [None],
                                                             entry["continuation"] + [None]))
                             if x != y)
                out["first_difference"] = first
        except (FlatstateError, OSError, ValueError) as e:
            out["error"] = str(e)
        print(f"verify: {name}: {'identical' if out['ok'] else 'DIFFERENT'} "
              f"{out.get('error', '')}", flush=True)
        ok = ok and out["ok"]
    with open(os.path.join(a.dir, "verify.json"), "w") as f:
        json.dump(result, f, indent=1)
    return ok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=["run", "verify"])
    p.add_argument("--server", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--prompt", default="ROMEO:\n")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--continue_tokens", type=int, default=32)
    p.add_argument("--timeout", type=float, default=120)
    a = p.parse_args(argv)
    os.makedirs(a.dir, exist_ok=True)
    with Client(a.server, timeout=a.timeout) as client:
        deadline = time.monotonic() + 30
        while not client.health():
            if time.monotonic() > deadline:
                print(f"smoke: server {a.server} not SERVING after 30 s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        ok = run(client, a) if a.mode == "run" else verify(client, a)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
