"""The pages' Jinja environment: the filters that format numbers and durations, and the globals every
page reads (the poll interval, the CSRF token htmx sends, whether the UI is read-only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from starlette.templating import Jinja2Templates

TEMPLATES = Path(__file__).parent / "templates"
_HOUR = 3600


def templates(poll_ms: int, csrf: str, read_only: bool) -> Jinja2Templates:
    """The templates of one app, its settings in their globals."""
    out = Jinja2Templates(directory=str(TEMPLATES))
    out.env.filters["num"] = num
    out.env.filters["dur"] = dur
    out.env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False, default=str)
    out.env.globals["poll_ms"] = poll_ms
    out.env.globals["example"] = example_arguments
    out.env.globals["csrf"] = csrf
    out.env.globals["read_only"] = read_only
    return out


def example_arguments(schema: Any) -> str:
    """A JSON object to start the tool form from: each property's default, else a placeholder of its type."""
    placeholders = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    out = {}
    for name, given in props.items():
        spec = given if isinstance(given, dict) else {}
        out[name] = spec["default"] if "default" in spec else placeholders.get(str(spec.get("type")), "")
    return json.dumps(out, ensure_ascii=False)


def num(v: Any, digits: int = 3) -> str:
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else "–"


def dur(seconds: Any) -> str:
    if not isinstance(seconds, (int, float)):
        return "–"
    s = int(seconds)
    return f"{s // _HOUR}h{s % _HOUR // 60:02d}m" if s >= _HOUR else f"{s // 60}m{s % 60:02d}s"
