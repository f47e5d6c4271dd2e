#!/usr/bin/env python3
"""Streams a generation on a session, checkpoints it, restores the checkpoint twice (inline
bytes and saved checkpoint_id) and continues each copy, checking that all three continuations
have identical token ids (greedy decoding: exact resume). Token ids, not text, are compared: a
session holds back the bytes of an incomplete UTF-8 character between calls and a checkpoint
does not carry them, so text can differ at the first character after a restore when the model
emits non-ASCII bytes (random-weight models do).

    FLATSTATE_PYTHON_STUBS=build/python PYTHONPATH=clients/python \
        /usr/bin/python3 clients/python/examples/stream_checkpoint_restore.py \
        --server localhost:50051 --prompt "ROMEO:"

Exit status 0 when the continuations match, 1 otherwise.
"""
import argparse
import sys

from flatstate_client import Client, FlatstateError


def continue_session(client, session_id, n):
    """Returns (token ids, text) of n more tokens on the session."""
    tokens, text = [], []
    for resp in client.generate(session_id=session_id, max_new_tokens=n):
        tokens.extend(resp.token_ids)
        text.append(resp.text)
    return tokens, "".join(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server", default="localhost:50051")
    p.add_argument("--model", default="", help="default: the server's default model")
    p.add_argument("--prompt", default="ROMEO:\n")
    p.add_argument("--max_new_tokens", type=int, default=64)
    p.add_argument("--continue_tokens", type=int, default=48)
    p.add_argument("--auth_token", default=None)
    p.add_argument("--tls_ca", default=None, help="PEM roots (enables TLS)")
    a = p.parse_args(argv)

    with Client(a.server, auth_token=a.auth_token, root_certificates=a.tls_ca,
                timeout=120) as client:
        try:
            session = client.create_session(a.model, temperature=0.0)
            print(f"session {session.session_id} on {session.model} ({session.attention_kind})")
            print("--- streaming:")
            sys.stdout.write(a.prompt)
            for chunk in client.stream_text(a.prompt, session_id=session.session_id,
                                            max_new_tokens=a.max_new_tokens):
                sys.stdout.write(chunk)
                sys.stdout.flush()
            print()
            ckpt = client.checkpoint(session.session_id)
            print(f"--- checkpoint {ckpt.checkpoint_id}: {len(ckpt.data)} bytes at "
                  f"{ckpt.context_tokens} tokens of context")
            original = continue_session(client, session.session_id, a.continue_tokens)
            from_bytes = client.restore(ckpt)
            from_id = client.restore(checkpoint_id=ckpt.checkpoint_id)
            copies = [continue_session(client, s.session_id, a.continue_tokens)
                      for s in (from_bytes, from_id)]
            print(f"--- continuation (original session):\n{original[1]}")
            for s in (session, from_bytes, from_id):
                client.delete_session(s.session_id)
        except FlatstateError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    ok = all(c[0] == original[0] for c in copies)
    print(f"--- restored from bytes and from checkpoint_id: "
          f"{'identical' if ok else 'DIFFERENT'} continuations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
