"""Client: the flatstate.v1.Inference API (plus grpc.health.v1) over one gRPC channel.

Thread-safety: a Client may be shared by threads (gRPC channels and stubs are thread-safe).
Ownership: the Client owns its channel; close() it or use it as a context manager.
Failures: every RPC error is raised as FlatstateError(code, details), where code is a
grpc.StatusCode (e.g. RESOURCE_EXHAUSTED when a softmax KV pool is full, NOT_FOUND for an unknown
session, UNAUTHENTICATED for a missing/wrong token); generate() raises it while iterating.
Affinity: every call that names a session also sends it as the metadata "x-flatstate-session"
(SESSION_METADATA_KEY), so a proxy can route a session to one replica (docs/cluster.md); it is a
routing hint only, the server reads the request's session_id field.
"""
import grpc

from flatstate_client import _stubs

pb2, pb2_grpc = _stubs.load()

_HEALTH_CHECK = "/grpc.health.v1.Health/Check"

# The session-affinity metadata key; the C++ clients send the same (clients/common/
# session_metadata.h, whose rule this mirrors: a non-empty id of at most 512 printable ASCII
# characters is sent, anything else is not).
SESSION_METADATA_KEY = "x-flatstate-session"
_MAX_SESSION_ID = 512


def session_metadata(session_id):
    """[(SESSION_METADATA_KEY, session_id)] when session_id can be sent as ASCII metadata, else
    [] (no session, or an id the server will reject anyway)."""
    if (isinstance(session_id, str) and 0 < len(session_id) <= _MAX_SESSION_ID
            and all(" " <= ch <= "~" for ch in session_id)):
        return [(SESSION_METADATA_KEY, session_id)]
    return []


class FlatstateError(Exception):
    """An RPC failed; .code is the grpc.StatusCode, .details the server's message."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


def _wrap(err):
    return FlatstateError(err.code(), err.details())


def _bytes(value, field):
    """A bytes request field from str (encoded as UTF-8) or bytes-like (as is)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"{field}: expected str or bytes, got {type(value).__name__}")


def _sampling(temperature, top_k, top_p, seed):
    if temperature is None and top_k is None and top_p is None and seed is None:
        return None
    return pb2.SamplingParams(temperature=temperature or 0.0, top_k=top_k or 0,
                              top_p=top_p or 0.0, seed=seed or 0)


class Client:
    """Connects to target ("host:port").

    auth_token: sent as "authorization: Bearer <token>" (the server's --auth_token).
    tls: use TLS; root_certificates: PEM bytes, or a path to a PEM file (implies tls).
    timeout: default per-call deadline in seconds (None: no deadline).
    """

    def __init__(self, target="localhost:50051", *, auth_token=None, tls=False,
                 root_certificates=None, timeout=None, options=None):
        opts = list(options or []) + [("grpc.max_receive_message_length", 64 << 20),
                                      ("grpc.max_send_message_length", 64 << 20)]
        if isinstance(root_certificates, str):
            with open(root_certificates, "rb") as f:
                root_certificates = f.read()
        if tls or root_certificates is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=root_certificates)
            self._channel = grpc.secure_channel(target, creds, options=opts)
        else:
            self._channel = grpc.insecure_channel(target, options=opts)
        self._stub = pb2_grpc.InferenceStub(self._channel)
        self._metadata = [("authorization", f"Bearer {auth_token}")] if auth_token else []
        self._timeout = timeout
        self._health = self._channel.unary_unary(
            _HEALTH_CHECK, request_serializer=lambda b: b, response_deserializer=lambda b: b)

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _call(self, method, request, timeout, session_id=None):
        try:
            return method(request, metadata=self._metadata + session_metadata(session_id),
                          timeout=self._timeout if timeout is None else timeout)
        except grpc.RpcError as e:
            raise _wrap(e) from None

    # -- generation --------------------------------------------------------------------------
    def generate(self, prompt=None, *, prompt_tokens=None, model="", session_id="",
                 max_new_tokens=64, temperature=None, top_k=None, top_p=None, seed=None,
                 stop=None, timeout=None):
        """Streams GenerateResponse messages: token/text chunks, then a last one with
        finish_reason and usage. Without session_id a throwaway session is used.

        prompt and each stop string may be str (sent as UTF-8) or bytes; a prompt may be any
        bytes (one token per byte for byte-level models; a model without a readable tokenizer
        takes prompt_tokens only), a stop string must be valid UTF-8."""
        req = pb2.GenerateRequest(model=model, session_id=session_id,
                                  max_new_tokens=max_new_tokens,
                                  stop=[_bytes(s, "stop") for s in (stop or [])])
        if prompt:
            req.prompt = _bytes(prompt, "prompt")
        if prompt_tokens:
            req.prompt_tokens.extend(prompt_tokens)
        sampling = _sampling(temperature, top_k, top_p, seed)
        if sampling is not None:
            req.sampling.CopyFrom(sampling)
        stream = self._stub.Generate(req, metadata=self._metadata + session_metadata(session_id),
                                     timeout=self._timeout if timeout is None else timeout)
        try:
            for resp in stream:
                yield resp
        except grpc.RpcError as e:
            raise _wrap(e) from None
        finally:
            stream.cancel()  # no-op once finished; stops the server if the caller broke off

    def stream_text(self, prompt=None, **kwargs):
        """Like generate(), but yields only the non-empty text chunks."""
        for resp in self.generate(prompt, **kwargs):
            if resp.text:
                yield resp.text

    def generate_text(self, prompt=None, **kwargs):
        """Runs generate() to the end; returns (text, last response with usage)."""
        text, last = [], None
        for resp in self.generate(prompt, **kwargs):
            text.append(resp.text)
            last = resp
        return "".join(text), last

    # -- sessions ----------------------------------------------------------------------------
    def create_session(self, model="", *, temperature=None, top_k=None, top_p=None, seed=None,
                       timeout=None):
        req = pb2.CreateSessionRequest(model=model)
        sampling = _sampling(temperature, top_k, top_p, seed)
        if sampling is not None:
            req.sampling.CopyFrom(sampling)
        return self._call(self._stub.CreateSession, req, timeout)

    def get_session(self, session_id, *, timeout=None):
        return self._call(self._stub.GetSession, pb2.GetSessionRequest(session_id=session_id),
                          timeout, session_id)

    def delete_session(self, session_id, *, timeout=None):
        self._call(self._stub.DeleteSession, pb2.DeleteSessionRequest(session_id=session_id),
                   timeout, session_id)

    def checkpoint(self, session_id, *, timeout=None):
        """Returns a Checkpoint (inline .data and the .checkpoint_id saved on the server)."""
        return self._call(self._stub.CheckpointSession,
                          pb2.CheckpointSessionRequest(session_id=session_id), timeout,
                          session_id)

    def restore(self, data=None, *, checkpoint_id=None, timeout=None):
        """New session from checkpoint bytes (or a Checkpoint message) or a saved checkpoint_id."""
        if isinstance(data, pb2.Checkpoint):
            data = data.data
        if (data is None) == (checkpoint_id is None):
            raise ValueError("pass exactly one of data and checkpoint_id")
        req = (pb2.RestoreSessionRequest(data=data) if data is not None
               else pb2.RestoreSessionRequest(checkpoint_id=checkpoint_id))
        return self._call(self._stub.RestoreSession, req, timeout)

    # -- server ------------------------------------------------------------------------------
    def list_models(self, *, timeout=None):
        return list(self._call(self._stub.ListModels, pb2.ListModelsRequest(), timeout).models)

    def stats(self, *, timeout=None):
        return self._call(self._stub.GetStats, pb2.GetStatsRequest(), timeout)

    def health(self, *, timeout=5.0):
        """True iff grpc.health.v1 reports SERVING for the server (hand-decoded response)."""
        try:
            resp = self._health(b"", metadata=self._metadata, timeout=timeout)
        except grpc.RpcError:
            return False
        return resp == b"\x08\x01"  # field 1 (status) = SERVING
