"""A stored trajectory made safe to render: the fields the pages read present and of a type they can
show, long strings cut, so a malformed or huge record gives a readable page, not a 500 or a page of
hundreds of megabytes. The whole line stays one click away (``/raw``)."""

from __future__ import annotations

import json
from typing import Any

FIELD_CHARS = 20_000  # a string field longer than this is cut on the page
LINE_BYTES = 8 << 20  # a line longer than this is not parsed for a page at all


def too_big(record_id: str, length: int) -> dict[str, Any]:
    """What a page shows for a line over :data:`LINE_BYTES`."""
    return {
        "id": record_id,
        "error": f"this record is {length / 1e6:.1f} MB, too big to show here: open the raw line",
        "ground_truth": None,
        "messages": [],
        "ui_cut": 1,
    }


def shown(record: Any, max_chars: int = FIELD_CHARS) -> dict[str, Any]:
    """``record`` with every string over ``max_chars`` cut (``ui_cut`` counts them) and the fields the
    templates read given a type they can render."""
    if not isinstance(record, dict):
        return {"error": f"the line is JSON but not an object ({type(record).__name__})", "messages": [], "ui_cut": 0}
    cut = 0

    def clip(value: Any) -> Any:
        nonlocal cut
        if isinstance(value, str) and len(value) > max_chars:
            cut += 1
            return f"{value[:max_chars]}… [{len(value) - max_chars:,} more characters: open the raw line]"
        if isinstance(value, list):
            return [clip(v) for v in value]
        if isinstance(value, dict):
            return {str(k): clip(v) for k, v in value.items()}
        return value

    out: dict[str, Any] = {str(k): clip(v) for k, v in record.items()}
    out.setdefault("ground_truth", None)
    mismatch = out.get("template_mismatch")
    if mismatch is not None and not isinstance(mismatch, str):
        out["template_mismatch"] = clip(json.dumps(mismatch, default=str))
    for key in ("messages",):
        if not isinstance(out.get(key), list):
            out[key] = []
    for key in ("reward_components", "tool_error_kinds", "extra"):
        if out.get(key) is not None and not isinstance(out[key], dict):
            out[key] = {"(value)": out[key]}
    out["ui_cut"] = cut
    return out
