"""Dataset rows: JSONL or parquet, in rlf's layout or verl's, normalised to one shape.

rlf's layout: ``{"id", "env"?, "prompt": str | [messages], "ground_truth"?, "extra"?}``.
verl's layout is accepted as it is: ``prompt`` (messages), ``data_source`` (the environment),
``reward_model.ground_truth`` and ``extra_info``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from rlfcore.types import Message


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
    reward_model = raw.get("reward_model") if isinstance(raw.get("reward_model"), dict) else {}
    extra = raw.get("extra", raw.get("extra_info")) or {}
    if not isinstance(extra, dict):
        raise DataError(f"{where}: 'extra' must be an object, got {extra!r:.80}")
    ground_truth = raw.get("ground_truth", raw.get("answer", reward_model.get("ground_truth")))
    if hasattr(ground_truth, "tolist"):  # numpy arrays from parquet
        ground_truth = ground_truth.tolist()
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
    seen: set[str] = set()
    for i, (where, raw) in enumerate(raws):
        if limit is not None and len(rows) >= limit:
            break
        row = normalize_row(raw, i, where)
        if row.id in seen:
            raise DataError(f"{where}: duplicate id {row.id!r}")
        seen.add(row.id)
        rows.append(row)
    return rows


def _jsonl(path: Path) -> Iterable[tuple[str, Any]]:
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield f"{path}:{n}", json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"{path}:{n}: not valid JSON: {exc.msg} (column {exc.colno})") from None
