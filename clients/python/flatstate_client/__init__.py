"""flatstate_client: a small Python client of the flatstate.v1.Inference gRPC API.

    from flatstate_client import Client
    with Client("localhost:50051") as c:
        for chunk in c.stream_text("ROMEO:", max_new_tokens=100):
            print(chunk, end="", flush=True)

Needs Debian's python3-grpcio and python3-protobuf and the stubs generated at build time
(clients/python/README.md).
"""
from flatstate_client.client import Client, FlatstateError, pb2

__all__ = ["Client", "FlatstateError", "pb2"]
