"""Built-in plugin ``rlf.parsers``: the tool-call formats the core knows, and the default parse hook.

Two formats: ``hermes`` (Hermes / Qwen3 ``<tool_call>{json}</tool_call>``, the default) and
``llama3-json`` (Llama 3.x JSON calls, ``{"name": ..., "parameters": {...}}``), the second mostly to
prove that a format is just a registered parser. Both tolerate the slips models commonly make when the
meaning stays unambiguous, and turn anything else into a call with ``error`` set and the exact text in
``raw``: the model then learns from an error result instead of from a guess.
"""

from __future__ import annotations

import json
import re
from typing import Any

from rlfcore.context import TurnContext
from rlfcore.hookspecs import hookimpl
from rlfcore.types import ToolCall, ToolCallParser

OPEN, CLOSE = "<tool_call>", "</tool_call>"
PYTHON_TAG = "<|python_tag|>"
LLAMA_END_TOKENS = ("<|eom_id|>", "<|eot_id|>")

# strict=False: models write real newlines and tabs inside argument strings (code, multi-line text).
_DECODER = json.JSONDecoder(strict=False)
_FENCE_OPEN = re.compile(r"```[A-Za-z0-9_-]*")
_NAME_HINT = re.compile(r'"name"\s*:\s*"([^"\\]*)"')
_SPACE = re.compile(r"\s*")
# A JSON string (possibly unclosed at the end) in the unrolled form, which never backtracks.
_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"?'
_JSON_TOKEN = re.compile(_STRING + r'|[\[\]{}]|[^\s\[\]{},:"0-9A-Za-z+.\-]', re.DOTALL)
_SCALAR = re.compile(r"[-+.0-9A-Za-z]*")
_PART = re.compile(f'(?:[^";]+|{_STRING})*', re.DOTALL)
_SEPARATORS = re.compile(r"[\s;]*")
_STRING_OR_TRAILING_COMMA = re.compile(f"({_STRING})|,(?=\\s*[}}\\]])", re.DOTALL)
MAX_CALLS = 100
"""Calls read from one message; the rest of the text is one more, error call. Each call costs an
executor run and a result in the prompt, so an unbounded count is a cost the model could run up."""
MAX_DEPTH = 100
"""Arrays and objects nested deeper than this in a call are an error call: the model's arguments are
rendered, validated and serialised recursively downstream, and deep ones would overflow the stack."""


class _Unreadable(ValueError):
    """A call's text is not a JSON value; the message says why."""


# --- Hermes / Qwen3 --------------------------------------------------------------------------------


def parse_hermes(text: str) -> list[ToolCall]:
    """Every ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` in ``text``, in order.

    Tolerated: whitespace around the JSON, a code fence inside the tags, ``arguments`` given as a
    JSON-encoded string (``""``: ``{}``), ``parameters`` instead of ``arguments``, no ``arguments`` at all (``{}``),
    trailing commas, raw control characters in strings, and a missing ``</tool_call>`` at the end of
    the text (generation stopped on it). A ``<tool_call>`` not closed before the next one is an error.
    Text outside the calls is the message content: ``raw`` spans the tags.
    """
    calls: list[ToolCall] = []
    closes = _NextClose(text)
    pos = text.find(OPEN)
    while pos != -1:
        if len(calls) == MAX_CALLS:
            calls.append(_too_many(text[pos:]))
            break
        call, end = _read_tagged(text, pos, closes)
        calls.append(call)
        pos = text.find(OPEN, end)
    return _numbered(calls)


class _NextClose:
    """The first ``</tool_call>`` at or after a position that only grows: the text is searched once
    overall, not once per ``<tool_call>`` (which made many unclosed tags quadratic)."""

    def __init__(self, text: str):
        self.text = text
        self.at: int | None = None  # not searched yet; then str.find's answer (-1: there is none)

    def after(self, i: int) -> int:
        if self.at is None or (self.at != -1 and self.at < i):
            self.at = self.text.find(CLOSE, i)
        return self.at


def _read_tagged(text: str, start: int, closes: _NextClose) -> tuple[ToolCall, int]:
    """The call opened at ``start`` and the index just past it."""
    body = start + len(OPEN)
    exact = _read_object_in_tag(text, body)
    if exact is not None:
        obj, end = exact
        return _to_call(obj, text[start:end]), end
    # Not a clean JSON object followed by the close tag: delimit the call by the tags instead.
    close, following = closes.after(body), text.find(OPEN, body)
    if following != -1 and (close == -1 or following < close):
        raw = text[start:following]
        reason = "<tool_call> is not closed by </tool_call> before the next <tool_call>"
        return _error(_name_hint(raw), reason, raw), following
    end = len(text) if close == -1 else close + len(CLOSE)
    raw = text[start:end]
    try:
        obj = _load(text[body : len(text) if close == -1 else close])
    except _Unreadable as exc:
        return _error(_name_hint(raw), str(exc), raw), end
    return _to_call(obj, raw), end


def _read_object_in_tag(text: str, i: int) -> tuple[Any, int] | None:
    """Decode the JSON right after ``<tool_call>`` so a ``</tool_call>`` inside a string cannot cut
    it; ``None`` unless the JSON is followed by the close tag or the end of the text."""
    i = _skip_space(text, i)
    fence = _FENCE_OPEN.match(text, i)
    if fence:
        i = _skip_space(text, fence.end())
    try:
        obj, n = _DECODER.raw_decode(text[i : _value_end(text, i)])
    except (ValueError, RecursionError):
        return None
    i += n
    i = _skip_space(text, i)
    if fence:
        if not text.startswith("```", i):
            return None
        i = _skip_space(text, i + 3)
    if text.startswith(CLOSE, i):
        return obj, i + len(CLOSE)
    return (obj, i) if i == len(text) else None


# --- Llama 3.x JSON --------------------------------------------------------------------------------


def parse_llama3_json(text: str) -> list[ToolCall]:
    """Llama 3.x JSON tool calls: the whole text, optionally after ``<|python_tag|>``, is one object
    ``{"name": ..., "parameters": {...}}`` or several separated by ``;``.

    Text that starts neither with ``<|python_tag|>`` nor with ``{`` is an ordinary answer (``[]``), and
    so is untagged text whose first part is valid JSON without a ``"name"``. A trailing
    ``<|eom_id|>``/``<|eot_id|>`` is ignored. The calls' ``raw`` substrings cover the tag and the
    separators, so removing them leaves only the surrounding whitespace and end token. Slips are
    tolerated as in :func:`parse_hermes` (``arguments`` for ``parameters``, string arguments, trailing
    commas, fences).
    Built-in tools' Python syntax (``brave_search.call(...)``) is not supported and reads as an error.
    """
    lead = len(text) - len(text.lstrip())
    tagged = text.startswith(PYTHON_TAG, lead)
    if not tagged and not text.startswith("{", lead):
        return []
    stop = _end_before_stop_tokens(text)
    parts = _split_calls(text, lead + len(PYTHON_TAG) if tagged else lead, stop)
    if not parts:
        return _numbered([_error("", f"nothing follows {PYTHON_TAG}", text[lead:stop])])
    calls: list[ToolCall] = []
    raw_start = lead
    for k, (start, end) in enumerate(parts):
        raw_end = stop if k == len(parts) - 1 else end  # the last call takes a trailing ";"
        raw = text[raw_start:raw_end]
        raw_start = raw_end
        if k == MAX_CALLS:
            calls.append(_too_many(raw))
            break
        try:
            obj = _load(text[start:end])
        except _Unreadable as exc:
            calls.append(_error(_name_hint(raw), str(exc), raw))
            continue
        if k == 0 and not tagged and not (isinstance(obj, dict) and "name" in obj):
            return []
        calls.append(_to_call(obj, raw))
    return _numbered(calls)


def _end_before_stop_tokens(text: str) -> int:
    stop = len(text.rstrip())
    for token in LLAMA_END_TOKENS:
        if text.endswith(token, 0, stop):
            return len(text[: stop - len(token)].rstrip())
    return stop


def _split_calls(text: str, start: int, stop: int) -> list[tuple[int, int]]:
    """Spans of ``text[start:stop]`` between ``;`` characters outside JSON strings, whitespace
    trimmed, blank ones dropped; past :data:`MAX_CALLS` spans, the rest is one more span."""
    spans: list[tuple[int, int]] = []
    pos = _end(_SEPARATORS, text, start, stop)
    while pos < stop:
        end = stop if len(spans) == MAX_CALLS else _end(_PART, text, pos, stop)
        part = text[pos:end]  # the parts are disjoint, so slicing them stays linear overall
        spans.append((pos, end - (len(part) - len(part.rstrip()))))
        pos = _end(_SEPARATORS, text, end, stop)
    return spans


# --- shared ----------------------------------------------------------------------------------------


def _load(body: str) -> Any:
    """The JSON value of one call's text, after the tolerated repairs, or :class:`_Unreadable`."""
    s = _unfenced(body.strip())
    if not s:
        raise _Unreadable("the tool call is empty")
    try:
        return _DECODER.decode(s)
    except RecursionError:
        raise _Unreadable(f"the tool call nests arrays or objects more than {MAX_DEPTH} deep") from None
    except ValueError as exc:
        repaired = _drop_trailing_commas(s)
        if repaired != s:
            try:
                return _DECODER.decode(repaired)
            except (ValueError, RecursionError):
                pass
        raise _Unreadable(f"the tool call is not valid JSON ({exc})") from None


def _unfenced(s: str) -> str:
    """``s`` without a code fence around it (```` ```json ... ``` ````), by index: a regex with lazy
    and greedy runs of whitespace backtracked cubically on an unclosed fence."""
    fence = _FENCE_OPEN.match(s)
    if fence is None or not s.endswith("```") or len(s) - 3 < fence.end():
        return s
    return s[fence.end() : len(s) - 3].strip()


def _to_call(obj: Any, raw: str) -> ToolCall:
    """A decoded JSON value as a call, or an error call naming what is wrong with it."""
    if not isinstance(obj, dict):
        return _error("", f'the tool call is a JSON {_kind(obj)}, not an object with "name" and "arguments"', raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        if name is None:
            return _error("", 'the tool call has no "name"', raw)
        return _error("", f'"name" must be a non-empty string, got {json.dumps(name)}', raw)
    if "arguments" in obj and "parameters" in obj:
        return _error(name, 'the tool call has both "arguments" and "parameters"; give one', raw)
    key = "parameters" if "parameters" in obj else "arguments"
    args = obj.get(key, {})
    if isinstance(args, str):
        try:
            args = _DECODER.decode(args) if args.strip() else {}
        except (ValueError, RecursionError) as exc:
            return _error(name, f'"{key}" is a string that is not valid JSON ({exc})', raw)
    if not isinstance(args, dict):
        return _error(name, f'"{key}" must be a JSON object, got {_kind(args)}', raw)
    problem = _unusable([name, args])
    if problem is not None:
        return _error(_name_hint(raw), problem, raw)
    return ToolCall(name=name, arguments=args, raw=raw)


def _unusable(obj: Any) -> str | None:
    """Why a decoded call cannot be passed on, or ``None``: nesting deeper than :data:`MAX_DEPTH`, or a
    lone surrogate (``"\\ud800"``), which is valid JSON but not Unicode, so it cannot be encoded
    as UTF-8 for a tool, a server or a results file."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError as exc:
                    return f"the tool call holds a lone surrogate (U+{ord(value[exc.start]):04X}), which is not valid Unicode"
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                return f"the tool call nests arrays or objects more than {MAX_DEPTH} deep"
            items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
            stack.extend((item, depth + 1) for item in items)
    return None


def _too_many(rest: str) -> ToolCall:
    return _error("", f"more than {MAX_CALLS} tool calls in one message; the rest was not read", rest)


def _error(name: str, reason: str, raw: str) -> ToolCall:
    return ToolCall(name=name, arguments={}, raw=raw, error=reason)


def _numbered(calls: list[ToolCall]) -> list[ToolCall]:
    for i, call in enumerate(calls):
        call.id = f"call_{i}"
    return calls


def _name_hint(raw: str) -> str:
    """The name an unreadable call seems to give, so its error result can say which tool it meant."""
    match = _NAME_HINT.search(raw)
    return match.group(1) if match else ""


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    kinds: dict[type, str] = {dict: "object", list: "array", str: "string"}
    return kinds.get(type(value), "number")


def _value_end(text: str, i: int) -> int:
    """An index at or past the end of the JSON value starting at ``i`` (where brackets balance, or
    where a character that cannot occur outside a string stops it), found without decoding.

    The value is then decoded on its own: a failing decode builds a ``JSONDecodeError`` that counts
    the lines before its position, so on the whole text each of many unclosed ``<tool_call>`` tags
    cost time in proportion to how far into the text it was.
    """
    if i >= len(text) or text[i] not in '[{"':
        return _end(_SCALAR, text, i)
    depth = 0
    for m in _JSON_TOKEN.finditer(text, i):
        ch = text[m.start()]
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH + 1:  # too deep to accept anyway; the fallback names the reason
                return m.end()
        elif ch in "]}":
            depth -= 1
        elif ch != '"':
            return m.start()
        if depth <= 0:
            return m.end()
    return len(text)


def _end(pattern: re.Pattern[str], text: str, pos: int, stop: int | None = None) -> int:
    """Where ``pattern``, one that also matches the empty string, stops matching at ``pos``."""
    match = pattern.match(text, pos, len(text) if stop is None else stop)
    assert match is not None  # every pattern given here matches the empty string
    return match.end()


def _skip_space(text: str, i: int) -> int:
    return _end(_SPACE, text, i)


def _drop_trailing_commas(s: str) -> str:
    """``s`` without commas that directly precede ``}`` or ``]`` outside strings: the one repair of
    invalid JSON whose meaning is never in doubt."""
    return _STRING_OR_TRAILING_COMMA.sub(lambda m: m.group(1) or "", s)


# --- hooks -----------------------------------------------------------------------------------------

PARSERS: dict[str, ToolCallParser] = {"hermes": parse_hermes, "llama3-json": parse_llama3_json}


@hookimpl
def register_parsers() -> dict[str, ToolCallParser]:
    return dict(PARSERS)


@hookimpl(trylast=True)
def parse_tool_calls(text: str, ctx: TurnContext) -> list[ToolCall]:
    """The default: the parser ``ctx.parser`` names, from the run's registry (the built-ins when the
    context has no runtime, as in a plugin's own unit tests)."""
    if ctx.runtime is not None:
        return ctx.runtime.parser(ctx.parser)(text)
    if ctx.parser not in PARSERS:
        raise KeyError(f"no tool-call parser named {ctx.parser!r}; built-in: {', '.join(sorted(PARSERS))}")
    return PARSERS[ctx.parser](text)
