"""Dataset rows: JSONL or parquet, in rlf's layout or verl's, normalised to one shape.

rlf's layout: ``{"id", "env"?, "prompt": str | [messages], "ground_truth"?, "extra"?}``.
verl's layout is accepted as it is: ``prompt`` (messages), ``data_source`` (the environment),
``reward_model.ground_truth`` and ``extra_info``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlfcore.surrogates import first_lone
from rlfcore.types import Message

_ESCAPED_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
"""A ``\\uD800``-``\\uDFFF`` escape: half of a pair, or a lone surrogate."""


class DataError(ValueError):
    """A dataset file or row is not usable; the message names the file and line."""


@dataclass
class Row:
    id: str
    env: str | None
    prompt: list[Message]
    ground_truth: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)


def normalize_row(raw: dict[str, Any], index: int = 0, where: str = "row") -> Row:
    """One row in either layout to a :class:`Row`; ``where`` names it in errors."""
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected an object, got {type(raw).__name__}")
    prompt = raw.get("prompt", raw.get("messages", raw.get("question")))
    if isinstance(prompt, str):
        messages: list[Message] = [{"role": "user", "content": prompt}]
    elif isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) and "role" in m for m in prompt):
        messages = [dict(m) for m in prompt]
    else:
        raise DataError(f"{where}: 'prompt' must be a string or a list of messages with a 'role', got {prompt!r:.80}")
    reward_model = raw.get("reward_model")
    reward_model = reward_model if isinstance(reward_model, dict) else {}
    extra = raw.get("extra", raw.get("extra_info")) or {}
    if not isinstance(extra, dict):
        raise DataError(f"{where}: 'extra' must be an object, got {extra!r:.80}")
    ground_truth = raw.get("ground_truth", raw.get("answer", reward_model.get("ground_truth")))
    tolist = getattr(ground_truth, "tolist", None)
    if callable(tolist):  # numpy arrays from parquet
        ground_truth = tolist()
    row_id = raw.get("id", extra.get("id", extra.get("index", index)))
    return Row(
        id=str(row_id),
        env=raw.get("env") or raw.get("data_source"),
        prompt=messages,
        ground_truth=ground_truth,
        extra=dict(extra),
        raw=raw,
    )


def read_rows(path: str | Path, limit: int | None = None) -> list[Row]:
    """Read JSONL (``.jsonl``/``.json``) or parquet rows; errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no such dataset file: {path}")
    raws: Iterable[tuple[str, Any]]
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError as exc:
            raise DataError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from exc
        table = pq.read_table(path).to_pylist()
        raws = ((f"{path}: row {i}", r) for i, r in enumerate(table))
    else:
        raws = _jsonl(path)
    rows: list[Row] = []
    if limit is not None and limit < 1:
        return rows
    seen: set[str] = set()
    for i, (where, raw) in enumerate(raws):
        row = normalize_row(raw, i, where)
        if row.id in seen:
            raise DataError(f"{where}: duplicate id {row.id!r}")
        seen.add(row.id)
        rows.append(row)
        if limit is not None and len(rows) >= limit:
            break  # before the next line is read: `--limit` does not fail on a bad line past it
    return rows


def _jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                byte = raw[exc.start]
                raise DataError(f"{path}:{n}: not valid UTF-8 (byte 0x{byte:02x} at column {exc.start + 1})") from None
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except (json.JSONDecodeError, RecursionError) as exc:
                why = f"{exc.msg} (column {exc.colno})" if isinstance(exc, json.JSONDecodeError) else "nested too deep"
                raise DataError(f"{path}:{n}: not valid JSON: {why}") from None
            if (
                _ESCAPED_SURROGATE.search(line)
                and (at := first_lone(json.dumps(value, ensure_ascii=False))) is not None
            ):
                code = ord(json.dumps(value, ensure_ascii=False)[at])
                raise DataError(
                    f"{path}:{n}: holds a lone surrogate (U+{code:04X}): a \\u escape that is not a character; "
                    "no tokenizer or results file can take it"
                )
            yield f"{path}:{n}", value
