"""Lone surrogates: characters a Python ``str`` may hold but UTF-8 cannot encode.

They reach a run from outside: a JSON ``"\\ud800"`` escape (valid JSON, not Unicode) in a server's
answer or a data file, a path or a process's output decoded with ``surrogateescape``. Written as they
are, one of them makes a results file, a tokenizer or a server session fail for every trajectory, so
tool outputs are made valid text and JSON lines escape what is left.
"""

from __future__ import annotations

import json
import re
from typing import Any

_LONE = re.compile("[\ud800-\udfff]")


def first_lone(text: str) -> int | None:
    """The index of the first lone surrogate in ``text``, or ``None`` when it encodes as UTF-8."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def replaced(text: str) -> str:
    """``text`` with each lone surrogate replaced by U+FFFD, as a decoder with ``errors="replace"`` would."""
    return text if first_lone(text) is None else _LONE.sub("\ufffd", text)


def json_line(obj: Any) -> str:
    """One JSON line, UTF-8 text kept readable; a lone surrogate is written as its ``\\uXXXX`` escape, so
    the line encodes and ``json.loads`` gives the same string back."""
    text = json.dumps(obj, ensure_ascii=False)
    if first_lone(text) is not None:  # inside a JSON string literal, always: keys and values are strings
        text = _LONE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text + "\n"
