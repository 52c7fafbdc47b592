"""Reading the judge's verdict from its own output, strictly.

A reasoning model thinks first (``<think> ... </think>``), then answers. Only the answer counts: the
text after the last ``</think>`` (or the whole content when the server's reasoning parser already split
the reasoning off). The verdict must be the answer's last line, ``VERDICT: <n>`` (pointwise) or
``VERDICT: [n1, n2, ...]`` (group), in range; another verdict line that disagrees makes it ambiguous.
Anything else is unreadable and raises :class:`VerdictError`, which the judge retries.
"""

from __future__ import annotations

import json
import math
import re

_LINE = re.compile(r"^[*_`\s]*VERDICT\s*:\s*(.*?)[*_`\s]*$", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")


class VerdictError(ValueError):
    """The judge's output holds no single, well-formed, in-range verdict."""


def answer_part(content: str | None, finish_reason: str | None = None) -> str:
    """The judge's answer without its reasoning; raises when the reasoning never ended."""
    if finish_reason == "length":
        raise VerdictError("the judge's output was cut at max_tokens before its verdict")
    text = content or ""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        raise VerdictError("the judge's reasoning never ended (no </think>)")
    return text


def _verdict_value(content: str | None, finish_reason: str | None) -> str:
    lines = [ln for ln in answer_part(content, finish_reason).splitlines() if ln.strip()]
    found = [m.group(1).strip() for m in map(_LINE.match, lines) if m]
    if not found:
        raise VerdictError(f"no 'VERDICT:' line in the judge's answer: {_tail(lines)}")
    if not _LINE.match(lines[-1]):
        raise VerdictError(f"the verdict is not the last line of the judge's answer: {_tail(lines)}")
    if len(set(found)) > 1:
        raise VerdictError(f"ambiguous: the judge's answer holds different verdicts {found}")
    return found[-1]


def _in_range(value: float, lo: float, hi: float) -> float:
    if not (math.isfinite(value) and lo <= value <= hi):
        raise VerdictError(f"verdict {value:g} is outside {lo:g}..{hi:g}")
    return value


def parse_pointwise(content: str | None, lo: float, hi: float, finish_reason: str | None = None) -> float:
    """The grade in ``VERDICT: <n>``, a number from ``lo`` to ``hi``."""
    raw = _verdict_value(content, finish_reason)
    if not _NUMBER.match(raw):
        raise VerdictError(f"verdict {raw!r} is not a number")
    return _in_range(float(raw), lo, hi)


def parse_group(content: str | None, n: int, lo: float, hi: float, finish_reason: str | None = None) -> list[float]:
    """The ``n`` grades in ``VERDICT: [g1, ..., gn]``, each from ``lo`` to ``hi``."""
    raw = _verdict_value(content, finish_reason)
    try:
        grades = json.loads(raw)
    except ValueError:
        raise VerdictError(f"verdict {raw!r} is not a JSON list") from None
    if not isinstance(grades, list) or len(grades) != n:
        raise VerdictError(f"verdict {raw!r} is not a list of {n} grades")
    if not all(isinstance(g, (int, float)) and not isinstance(g, bool) for g in grades):
        raise VerdictError(f"verdict {raw!r} holds something other than numbers")
    return [_in_range(float(g), lo, hi) for g in grades]


def _tail(lines: list[str], limit: int = 160) -> str:
    text = "\n".join(lines[-3:])
    return repr(text if len(text) <= limit else "..." + text[-limit:])
