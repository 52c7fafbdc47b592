"""A request's query and form values read as numbers and override lists, each wrong one a 400 (or 404)
that names the parameter."""

from __future__ import annotations

import shlex

from starlette.exceptions import HTTPException
from starlette.requests import Request


def int_param(request: Request, key: str, default: int) -> int:
    """``?key=N`` as a whole number of at least 0; ``default`` when absent or empty."""
    raw = request.query_params.get(key)
    if raw is None or raw == "":
        return default
    try:
        return max(0, int(raw))
    except ValueError:
        raise HTTPException(400, f"{key} must be a whole number, not {raw!r}") from None


def index_param(request: Request, key: str, n: int) -> int:
    """``?key=N`` as the index of one of ``n`` samples; 404 past the end."""
    i = int_param(request, key, 0)
    if i >= n:
        raise HTTPException(404, f"{key}={i}: the file holds {n} samples")
    return i


def number(raw: str | None) -> float | None:
    """A filter's bound: None when blank, else a float (ValueError naming the text when it is not one)."""
    if raw is None or raw.strip() == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"not a number: {raw!r}") from None


def split_overrides(raw: str) -> list[str]:
    """A form's overrides split as a shell would, or at whitespace when their quotes do not close."""
    try:
        return shlex.split(raw)
    except ValueError:
        return raw.split()
