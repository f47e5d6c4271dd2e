#!/usr/bin/env python3
"""Live-server tests of clients/python (flatstate_client). Run by python_client_test.sh, which
starts flatstate-server (random models ci-linear-elu and ci-softmax, --auth_token) and sets
FLATSTATE_SERVER, FLATSTATE_AUTH_TOKEN, FLATSTATE_PYTHON_STUBS and PYTHONPATH."""
import os
import subprocess
import sys
import threading
import unittest
from concurrent import futures

import grpc

from flatstate_client import Client, FlatstateError, pb2
from flatstate_client.client import SESSION_METADATA_KEY, pb2_grpc

SERVER = os.environ["FLATSTATE_SERVER"]
TOKEN = os.environ["FLATSTATE_AUTH_TOKEN"]
ROOT = os.environ["FLATSTATE_SOURCE_DIR"]
LINEAR, SOFTMAX = "ci-linear-elu", "ci-softmax"


def token_ids(client, **kwargs):
    out = []
    for resp in client.generate(**kwargs):
        out.extend(resp.token_ids)
    return out


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(SERVER, auth_token=TOKEN, timeout=60)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()

    def test_health(self):
        self.assertTrue(self.c.health())

    def test_list_models_and_stats(self):
        models = {m.name: m for m in self.c.list_models()}
        self.assertEqual(models[LINEAR].attention_kind, "linear_elu")
        self.assertEqual(models[SOFTMAX].attention_kind, "softmax")
        self.assertGreater(models[LINEAR].state_bytes_per_session, 0)
        self.assertEqual(models[SOFTMAX].kv_bytes_per_token, 2 * 2 * 64 * 4)
        stats = self.c.stats()
        self.assertGreater(stats.rss_bytes, 0)
        self.assertGreater(stats.kv_blocks_total, 0)

    def test_generate_streams_then_finishes(self):
        msgs = list(self.c.generate("Hello", model=LINEAR, max_new_tokens=12))
        last = msgs[-1]
        self.assertEqual(last.finish_reason, pb2.LENGTH)
        self.assertEqual(last.usage.generated_tokens, 12)
        self.assertEqual(last.usage.prompt_tokens, 5)
        self.assertEqual(sum(len(m.token_ids) for m in msgs), 12)
        text = "".join(self.c.stream_text("Hello", model=SOFTMAX, max_new_tokens=8))
        self.assertIsInstance(text, str)

    def test_session_lifecycle(self):
        s = self.c.create_session(LINEAR, temperature=0.0)
        self.assertEqual(s.model, LINEAR)
        _, last = self.c.generate_text("abc", session_id=s.session_id, max_new_tokens=4)
        self.assertEqual(last.session_id, s.session_id)
        got = self.c.get_session(s.session_id)
        self.assertEqual(got.context_tokens, last.usage.context_tokens)
        self.assertGreater(got.state_bytes, 0)
        self.c.delete_session(s.session_id)
        with self.assertRaises(FlatstateError) as e:
            self.c.get_session(s.session_id)
        self.assertEqual(e.exception.code, grpc.StatusCode.NOT_FOUND)

    def test_checkpoint_restore_continues_exactly(self):
        for model in (LINEAR, SOFTMAX):
            with self.subTest(model=model):
                s = self.c.create_session(model, temperature=0.0)
                token_ids(self.c, prompt="To be, or not", session_id=s.session_id,
                          max_new_tokens=10)
                ck = self.c.checkpoint(s.session_id)
                self.assertGreater(len(ck.data), 0)
                self.assertEqual(ck.model, model)
                want = token_ids(self.c, session_id=s.session_id, max_new_tokens=16)
                r1 = self.c.restore(ck.data)
                r2 = self.c.restore(checkpoint_id=ck.checkpoint_id)
                for r in (r1, r2):
                    self.assertEqual(r.context_tokens, ck.context_tokens)
                    self.assertEqual(token_ids(self.c, session_id=r.session_id,
                                               max_new_tokens=16), want)
                for sid in (s.session_id, r1.session_id, r2.session_id):
                    self.c.delete_session(sid)

    def test_prompt_and_stop_accept_str_and_bytes(self):
        # Any bytes are a prompt, one token per byte; str is sent as UTF-8.
        _, last = self.c.generate_text(b"\xff\xfe", model=LINEAR, max_new_tokens=2)
        self.assertEqual(last.usage.prompt_tokens, 2)
        _, last = self.c.generate_text("h\u00e9llo", model=LINEAR, max_new_tokens=2)
        self.assertEqual(last.usage.prompt_tokens, 6)
        _, last = self.c.generate_text(bytearray(b"abc"), model=LINEAR, max_new_tokens=2)
        self.assertEqual(last.usage.prompt_tokens, 3)
        # The same greedy continuation whether the stop string is str or bytes (messages may
        # coalesce tokens differently, so compare the token sequences).
        s1 = token_ids(self.c, prompt="To be", model=LINEAR, max_new_tokens=8, stop=["\n\n"])
        s2 = token_ids(self.c, prompt=b"To be", model=LINEAR, max_new_tokens=8, stop=[b"\n\n"])
        self.assertGreater(len(s1), 0)
        self.assertEqual(s1, s2)
        with self.assertRaises(FlatstateError) as e:
            list(self.c.generate("x", model=LINEAR, max_new_tokens=1, stop=["ok", b"\xff"]))
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("stop[1]", e.exception.details)
        with self.assertRaises(TypeError):
            list(self.c.generate(42, model=LINEAR, max_new_tokens=1))

    def test_errors(self):
        with self.assertRaises(FlatstateError) as e:
            list(self.c.generate("x", max_new_tokens=0))
        self.assertEqual(e.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(ValueError):
            self.c.restore()
        with Client(SERVER) as anonymous:
            with self.assertRaises(FlatstateError) as e:
                anonymous.list_models()
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)
        with Client(SERVER, auth_token="wrong") as wrong:
            with self.assertRaises(FlatstateError) as e:
                list(wrong.generate("x", max_new_tokens=1))
            self.assertEqual(e.exception.code, grpc.StatusCode.UNAUTHENTICATED)

    def test_example_script(self):
        example = os.path.join(ROOT, "clients", "python", "examples",
                               "stream_checkpoint_restore.py")
        r = subprocess.run([sys.executable, example, "--server", SERVER, "--auth_token", TOKEN,
                            "--model", LINEAR, "--max_new_tokens", "24",
                            "--continue_tokens", "16"],
                           capture_output=True, text=True, timeout=120, check=False)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("identical continuations", r.stdout)


class _RecordingServicer(pb2_grpc.InferenceServicer):
    """A fake Inference service: answers minimal messages and records, per method, the value of
    the x-flatstate-session metadata (None when absent) of every call."""

    def __init__(self):
        self.seen = []
        self._lock = threading.Lock()

    def _record(self, method, context):
        values = [v for k, v in context.invocation_metadata() if k == SESSION_METADATA_KEY]
        with self._lock:
            self.seen.append((method, values[0] if len(values) == 1 else values or None))

    def Generate(self, request, context):
        self._record("Generate", context)
        yield pb2.GenerateResponse(session_id=request.session_id, finish_reason=pb2.LENGTH)

    def CreateSession(self, request, context):
        self._record("CreateSession", context)
        return pb2.Session(session_id="0" * 32)

    def GetSession(self, request, context):
        self._record("GetSession", context)
        return pb2.Session(session_id=request.session_id)

    def DeleteSession(self, request, context):
        self._record("DeleteSession", context)
        return pb2.DeleteSessionResponse()

    def CheckpointSession(self, request, context):
        self._record("CheckpointSession", context)
        return pb2.Checkpoint(checkpoint_id="c")

    def ListModels(self, request, context):
        self._record("ListModels", context)
        return pb2.ListModelsResponse()


class SessionMetadataTest(unittest.TestCase):
    """Every call that names a session carries x-flatstate-session (proxy affinity,
    docs/cluster.md); calls without one carry none. Checked against a fake server."""

    def test_session_calls_carry_the_affinity_metadata(self):
        servicer = _RecordingServicer()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pb2_grpc.add_InferenceServicer_to_server(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            sid = "0123456789abcdef0123456789abcdef"
            with Client(f"127.0.0.1:{port}", auth_token="t", timeout=10) as c:
                list(c.generate("x", session_id=sid, max_new_tokens=1))
                c.get_session(sid)
                c.checkpoint(sid)
                c.delete_session(sid)
                list(c.generate("x", max_new_tokens=1))  # throwaway session: nothing to route
                c.create_session()
                c.list_models()
                # An id that cannot be ASCII metadata is not sent (the server rejects the
                # request's field itself); the call still goes out.
                c.get_session("bad\nid")
        finally:
            server.stop(None)
        self.assertEqual(servicer.seen, [
            ("Generate", sid), ("GetSession", sid), ("CheckpointSession", sid),
            ("DeleteSession", sid), ("Generate", None), ("CreateSession", None),
            ("ListModels", None), ("GetSession", None)])


if __name__ == "__main__":
    unittest.main(verbosity=2)
