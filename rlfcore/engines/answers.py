"""Reading a server's answer at bounded cost: bytes capped, nesting capped, every field checked by path.

A served model is a remote program: its answer may be endless, huge, nested a million deep or of
another shape than the API's. Each of those is an :class:`EngineError` that names the field or the
limit, never a hang, a memory spike or a bare ``KeyError``.
"""

from __future__ import annotations

import email.utils
import json
import reprlib
import time
from datetime import timezone
from itertools import accumulate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

MAX_JSON_DEPTH = 100
"""Arrays and objects nested deeper than this are refused before parsing (the API's shapes need < 10)."""

ERROR_BODY_BYTES = 16 * 1024
"""Of an error answer, only this much is read: enough for the message it carries."""

_OPEN, _CLOSE = 1, 255  # ``[``/``{`` and ``]``/``}`` as signed bytes +1 and -1
_DEPTH_STEPS = bytes(_OPEN if c in b"[{" else _CLOSE if c in b"]}" else 0 for c in range(256))
_NOT_STRUCTURE = bytes(c for c in range(256) if c not in b'"[]{}')
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxdict, _SHORT.maxstring, _SHORT.maxother = 4, 8, 8, 300, 300
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number"}


class EngineError(RuntimeError):
    """A generation request failed for good: the message names the URL and what the server said."""


async def read_upto(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of a streamed body, and whether more followed (the rest is not read)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            chunks[-1] = chunk[: len(chunk) - (size - limit)]
            return b"".join(chunks), True
    return b"".join(chunks), False


def json_depth(text: bytes | str) -> int:
    """How deep arrays and objects nest in JSON text, found in linear time without parsing it."""
    data = text.encode(errors="surrogatepass") if isinstance(text, str) else text
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")  # left: every '"' opens or closes a string
    skeleton = plain.translate(None, _NOT_STRUCTURE)
    outside_strings = b"".join(skeleton.split(b'"')[::2])
    steps = memoryview(outside_strings.translate(_DEPTH_STEPS)).cast("b")
    return max(accumulate(steps), default=0)


def loads(data: bytes | str) -> Any:
    """The JSON value of ``data``; a ValueError when it is not JSON or nests deeper than MAX_JSON_DEPTH."""
    depth = json_depth(data)
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"arrays and objects nest {depth} deep, more than the {MAX_JSON_DEPTH} allowed")
    return json.loads(data)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds (it holds seconds or an HTTP date); None if unreadable."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)  # "-0000": UTC as well
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def typed(value: Any, kinds: tuple[type, ...], path: str, url: str) -> Any:
    """``value`` when it is one of ``kinds`` (a JSON boolean is no number); else an EngineError naming ``path``."""
    if isinstance(value, kinds) and (bool in kinds or not isinstance(value, bool)):
        return value
    wanted = " or ".join(_JSON_TYPES.get(k, "null") for k in kinds)
    raise EngineError(f"{url}: {path} should be {wanted}, got {_json_type(value)} {shown(value)}")


def first_choice(data: Any, url: str) -> dict[str, Any]:
    """``choices[0]`` of a completions or chat answer, checked to be an object."""
    choices = typed(data, (dict,), "the answer", url).get("choices")
    if not isinstance(choices, list) or not choices:
        raise EngineError(f"{url}: the answer has no choices[0]: {snippet(data)}")
    choice: dict[str, Any] = typed(choices[0], (dict,), "choices[0]", url)
    return choice


def snippet(value: Any, limit: int = 300) -> str:
    """``value`` as text, cut to ``limit`` characters for a message (a large value is never rendered whole)."""
    text = value if isinstance(value, str) else _SHORT.repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def shown(value: Any, limit: int = 80) -> str:
    """A wrong value as a message quotes it: strings in quotes, cut to ``limit`` characters."""
    return snippet(_SHORT.repr(value), limit)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return next((name for kind, name in _JSON_TYPES.items() if isinstance(value, kind)), type(value).__name__)
