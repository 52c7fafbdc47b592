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
from typing import TYPE_CHECKING, Any

from rlfcore.surrogates import first_lone
from rlfcore.types import Message

if TYPE_CHECKING:
    from rlfcore.schema import RunConfig

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


def read_difficulty(path: str | Path) -> dict[str, float]:
    """Each row's solve rate from a difficulty file (``rlf eval --repeats``: one JSON line per row with
    ``id`` and ``solve_rate``); errors name the file and line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"no such difficulty file: {path} (data.difficulty; write one with rlf eval --repeats K --difficulty PATH)"
        )
    rates: dict[str, float] = {}
    for where, line in _jsonl(path):
        if not isinstance(line, dict) or "id" not in line:
            raise DataError(f"{where}: a difficulty line is an object with an 'id', got {line!r:.80}")
        rate = line.get("solve_rate")
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
            raise DataError(f"{where}: 'solve_rate' must be a number from 0 to 1, got {rate!r:.80}")
        row_id = str(line["id"])
        if row_id in rates:
            raise DataError(f"{where}: duplicate id {row_id!r}")
        rates[row_id] = float(rate)
    return rates


def select_by_difficulty(
    rows: list[Row], rates: dict[str, float], at_least: float | None, at_most: float | None, where: str = "difficulty"
) -> list[Row]:
    """The rows worth training on: drop those whose solve rate is ``>= at_least`` (always solved: no
    signal left) or ``<= at_most`` (never solved: no signal yet). Rows the file does not profile stay;
    a file that names rows the data lacks was made from other data, and is refused."""
    ids = {r.id for r in rows}
    unknown = [i for i in rates if i not in ids]
    if unknown:
        first, rest = unknown[:3], unknown[3:]
        shown = ", ".join(map(repr, first)) + (f" and {len(rest)} more" if rest else "")
        raise DataError(
            f"{where}: names {len(unknown)} row(s) not in the training data ({shown}): was it made from another "
            "dataset (data.eval rather than data.train)?"
        )

    def keep(row: Row) -> bool:
        rate = rates.get(row.id)
        if rate is None:
            return True
        return not ((at_least is not None and rate >= at_least) or (at_most is not None and rate <= at_most))

    kept = [r for r in rows if keep(r)]
    if not kept:
        raise DataError(
            f"{where}: every training row is dropped by data.drop_solved_at_least={at_least} / "
            f"data.drop_solved_at_most={at_most}"
        )
    return kept


def training_rows(rows: list[Row], config: RunConfig) -> list[Row]:
    """``rows`` (data.train's) less those ``data.difficulty`` and its thresholds drop; all of them
    without a difficulty file."""
    data = config.data
    if not data.difficulty:
        return rows
    path = config.path(data.difficulty)
    rates = read_difficulty(path)
    return select_by_difficulty(rows, rates, data.drop_solved_at_least, data.drop_solved_at_most, str(path))


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
