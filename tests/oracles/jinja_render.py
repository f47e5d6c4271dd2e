#!/usr/bin/env python3
"""Renders Jinja2 templates exactly as Hugging Face transformers renders chat templates.

The environment mirrors transformers' utils/chat_template_utils.py (_compile_jinja_template):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols
extension and a {% generation %} tag that renders its body, the tojson filter replaced by
json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...), and the globals
raise_exception (raises TemplateError) and strftime_now (datetime.now().strftime).

Usage: jinja_render.py CASES.json OUT.json
CASES.json: {"cases": [{"template": str, "context": {...}, "options": {...}?}, ...]}
  options (optional): trim_blocks, lstrip_blocks, keep_trailing_newline (Jinja2 Environment
  options; the transformers values are the defaults here).
OUT.json: [{"ok": true, "output": str} | {"ok": false, "error": str}, ...] in case order.
"""
import json
import signal
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationTag(Extension):
    """transformers' AssistantTracker without the mask bookkeeping: renders the body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


_ENVS = {}


def environment(options):
    key = (options.get("trim_blocks", True), options.get("lstrip_blocks", True),
           options.get("keep_trailing_newline", False))
    if key not in _ENVS:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=key[0], lstrip_blocks=key[1], keep_trailing_newline=key[2],
            extensions=[GenerationTag, jinja2.ext.loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = strftime_now
        _ENVS[key] = env
    return _ENVS[key]


class RenderTimeout(Exception):
    pass


def _timeout(signum, frame):
    raise RenderTimeout("render took longer than 5 s")


def main():
    signal.signal(signal.SIGALRM, _timeout)
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    results = []
    for case in cases:
        signal.alarm(5)  # fuzz-corpus inputs may loop for very long; the C++ side has limits
        try:
            template = environment(case.get("options", {})).from_string(case["template"])
            results.append({"ok": True, "output": template.render(**case["context"])})
        except Exception as e:  # every failure is an expected outcome to compare
            results.append({"ok": False, "error": f"{type(e).__name__}: {e}"})
        finally:
            signal.alarm(0)
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
