"""Built-in plugin ``rlf.family_parsers``: tool-call formats of real model families beyond Hermes.

- ``qwen3``: Qwen3's Hermes calls after a ``<think>`` block. A call written while thinking is part
  of the reasoning, not a request, so only the text after the last ``</think>`` is read (a turn that
  opened ``<think>`` and never closed it is still thinking: no calls).
- ``qwen3-coder``: Qwen3-Coder's XML calls,
  ``<tool_call>\\n<function=NAME>\\n<parameter=P>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``.
  Its template writes a string value as is, an object or array as JSON and anything else through
  Jinja's ``string`` (``2``, ``True``). So a parameter the tool's schema types as a string stays the
  text; any other is read back as JSON (or ``True``/``False``/``None``) when it reads as such.
  Re-rendering the call gives the same text. The schema comes from the turn's tools, through this
  module's ``parse_tool_calls`` (the bare parser, without a schema, reads every value as JSON first).

Llama 3.x JSON calls (``<|python_tag|>``, ``parameters``, ``<|eom_id|>``) are the built-in
``llama3-json`` parser of :mod:`rlfcore.builtins.parsers`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from rlfcore.builtins.parsers import parse_hermes
from rlfcore.context import TurnContext
from rlfcore.hookspecs import hookimpl
from rlfcore.types import ToolCall, ToolCallParser

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"

_CODER_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_CODER_FUNCTION = re.compile(r"\s*<function=([^>\n]*)>(.*?)(?:</function>\s*|\Z)", re.DOTALL)
_CODER_PARAMETER = re.compile(r"<parameter=([^>\n]*)>\n?(.*?)\n?</parameter>", re.DOTALL)
_PYTHON_LITERALS = {"True": True, "False": False, "None": None}


def parse_qwen3(text: str) -> list[ToolCall]:
    """Hermes calls in the answer part of a Qwen3 turn: after the last ``</think>``, if any."""
    if THINK_CLOSE in text:
        start = text.rindex(THINK_CLOSE) + len(THINK_CLOSE)
    elif THINK_OPEN in text:
        return []  # generation stopped while still thinking
    else:
        start = 0
    return parse_hermes(text[start:])


def parse_qwen3_coder(text: str, schemas: Mapping[str, dict[str, Any]] | None = None) -> list[ToolCall]:
    """Every ``<tool_call><function=NAME><parameter=P>…`` in ``text``, in order.

    ``schemas`` maps tool names to their JSON-schema ``parameters``: a parameter typed ``string``
    keeps its text (``"007"`` stays a string).

    A call with no ``<function=…>`` inside, or text left over between its parameters, comes back with
    ``error`` set and the exact text in ``raw``; a call cut off at the end of the text (generation
    stopped on ``</tool_call>``) is read as far as it is complete.
    """
    calls: list[ToolCall] = []
    for k, match in enumerate(_CODER_CALL.finditer(text)):
        raw, body = match.group(0), match.group(1)
        function = _CODER_FUNCTION.match(body)
        if function is None or not function.group(1).strip():
            calls.append(
                ToolCall(name="", arguments={}, id=f"call_{k}", raw=raw, error="no <function=NAME> in the tool call")
            )
            continue
        name, inner = function.group(1).strip(), function.group(2)
        properties = ((schemas or {}).get(name) or {}).get("properties") or {}
        arguments: dict[str, Any] = {}
        for parameter in _CODER_PARAMETER.finditer(inner):
            key, value = parameter.group(1).strip(), parameter.group(2)
            typed = (properties.get(key) or {}).get("type") if isinstance(properties, dict) else None
            arguments[key] = value if typed == "string" else _value(value)
        leftover = _CODER_PARAMETER.sub("", inner).strip()
        error = f"text outside <parameter=...> blocks: {leftover[:60]!r}" if leftover else None
        calls.append(
            ToolCall(name=name, arguments=arguments if error is None else {}, id=f"call_{k}", raw=raw, error=error)
        )
    return calls


def _value(text: str) -> Any:
    """A parameter's value as its template wrote it: JSON or a Python literal where it reads as one."""
    if text in _PYTHON_LITERALS:
        return _PYTHON_LITERALS[text]
    try:
        value = json.loads(text)
    except ValueError:
        return text
    # A JSON string value would have been written without quotes; quotes are part of the text.
    return text if isinstance(value, str) else value


PARSERS: dict[str, ToolCallParser] = {"qwen3": parse_qwen3, "qwen3-coder": parse_qwen3_coder}


@hookimpl
def register_parsers() -> dict[str, ToolCallParser]:
    return dict(PARSERS)


@hookimpl
def parse_tool_calls(text: str, ctx: TurnContext) -> list[ToolCall] | None:
    """``qwen3-coder`` with the turn's tool schemas, so string parameters stay strings; ``None``
    (the default parse hook) for every other parser."""
    if ctx.parser != "qwen3-coder" or (
        ctx.runtime is not None and ctx.runtime.parser(ctx.parser) is not parse_qwen3_coder
    ):
        return None
    return parse_qwen3_coder(text, {name: t.parameters for name, t in ctx.tools.items()})
