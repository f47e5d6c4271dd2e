"""Locates the generated flatstate.v1 stubs (built by CMake, never committed).

Order: the folder in $FLATSTATE_PYTHON_STUBS; whatever is already importable; then
<repo>/build*/python next to this package's checkout (first match, sorted).
"""
import glob
import importlib
import os
import sys

_ENV = "FLATSTATE_PYTHON_STUBS"


def _try_import():
    try:
        pb2 = importlib.import_module("flatstate.v1.inference_pb2")
        pb2_grpc = importlib.import_module("flatstate.v1.inference_pb2_grpc")
        return pb2, pb2_grpc
    except ImportError:
        return None


def load():
    """Returns (inference_pb2, inference_pb2_grpc); raises ImportError saying how to build them."""
    env = os.environ.get(_ENV)
    if env:
        if not os.path.isfile(os.path.join(env, "flatstate", "v1", "inference_pb2.py")):
            raise ImportError(f"{_ENV}={env} holds no flatstate/v1/inference_pb2.py")
        if env not in sys.path:
            sys.path.insert(0, env)
    found = _try_import()
    if found:
        return found
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for cand in sorted(glob.glob(os.path.join(repo, "build*", "python"))):
        if os.path.isfile(os.path.join(cand, "flatstate", "v1", "inference_pb2.py")):
            sys.path.insert(0, cand)
            found = _try_import()
            if found:
                return found
    raise ImportError(
        "flatstate_client: generated stubs not found. Build them with "
        "`cmake --build build --target flatstate_python_stubs` and set "
        f"{_ENV}=<build dir>/python (see clients/python/README.md)")
