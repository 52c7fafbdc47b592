"""Turning NL2SQL datasets into rlf dataset rows.

One reader covers the common layouts, field by field:

| what | read from |
| --- | --- |
| question | ``question`` |
| gold SQL | ``query`` (Spider), ``SQL`` (BIRD), ``gold_sql`` (GeoQuery here), ``sql`` when a string |
| database | ``db`` (a file path under the database folder) or ``db_id`` (``<db_id>/<db_id>.sqlite`` there) |
| hint | ``evidence`` (BIRD), added to the prompt |
| id | ``id`` or ``question_id``, else ``<file stem>-<index>`` |

Input is a JSON list (Spider, BIRD) or JSON lines (GeoQuery). Each output row is
``{"id", "env": "nl2sql", "prompt", "ground_truth": gold SQL, "extra": {"db": ..., ...}}``; ``extra.db`` is
relative to the database folder, which the run config names as ``nl2sql.db_root``. The other scalar
fields of a record (splits, difficulty) are kept in ``extra``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rlf_nl2sql.answer import FORMATS, AnswerFormat
from rlf_nl2sql.database import QueryError, Session

SchemaPlace = Literal["prompt", "tool"]
SQL_KEYS = ("query", "SQL", "gold_sql", "sql")
CONSUMED = {"question", "db", "db_id", "evidence", "id", "question_id", *SQL_KEYS}


class PrepareError(ValueError):
    """A record cannot become a row; the message names the file, the record and the field."""


@dataclass
class Prepared:
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    """``"<id>: <why>"`` for each record left out by ``check``."""


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a JSON list or a JSON-lines file."""
    text = path.read_text()
    records: list[Any]  # JSON values until each is checked to be an object, below
    if text.lstrip().startswith("["):
        records = json.loads(text)
    else:
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise PrepareError(f"{path}:{n}: not valid JSON: {exc.msg}") from None
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise PrepareError(f"{path}: record {bad} is not an object")
    return records


def build_prompt(question: str, *, schema: str | None, answer_format: AnswerFormat, hint: str | None = None) -> str:
    """The user message: the task, the schema (or where to find it), the question and the answer format."""
    parts = ["Write one SQLite query that answers the question about the database below."]
    if schema is not None:
        parts.append("You can run queries with the `sql` tool to look at the data before answering.")
        parts.append(f"Database schema:\n{schema}")
    else:
        parts.append("Call the `schema` tool to see the tables, and run queries with the `sql` tool before answering.")
    parts.append(f"Question: {question.strip()}")
    if hint:
        parts.append(f"Hint: {hint.strip()}")
    parts.append(FORMATS[answer_format])
    return "\n\n".join(parts)


def prepare(
    records: Iterable[dict[str, Any]],
    db_dir: Path,
    *,
    source: str = "rows",
    schema: SchemaPlace = "prompt",
    answer_format: AnswerFormat = "sql_fence",
    where: dict[str, str] | None = None,
    limit: int | None = None,
    check: bool = False,
    timeout_s: float = 10.0,
) -> Prepared:
    """Rows for the records that pass ``where`` (field = value), at most ``limit`` of them.

    With ``check``, each gold query is run first and records whose gold fails are left out (and named
    in ``skipped``), so a training set never rewards against a broken reference.
    """
    out = Prepared()
    schemas: dict[Path, str] = {}
    for index, record in enumerate(records):
        if limit is not None and len(out.rows) >= limit:
            break
        if where and any(str(record.get(k)) != v for k, v in where.items()):
            continue
        where_ = f"{source}: record {index}"
        question, gold, db = _field(record, ("question",), where_), _gold(record, where_), _db(record, where_)
        row_id = str(record.get("id", record.get("question_id", f"{source}-{index:05d}")))
        path = db_dir / db
        if not path.is_file():
            raise PrepareError(f"{where_} ({row_id}): database file not found: {path}")
        if path not in schemas:
            with Session(path) as session:
                schemas[path] = session.schema()
        if check:
            problem = _gold_problem(path, gold, timeout_s)
            if problem:
                out.skipped.append(f"{row_id}: {problem}")
                continue
        extra: dict[str, str | int | float | bool] = {"db": db, "question": question}
        extra.update({k: v for k, v in record.items() if k not in CONSUMED and isinstance(v, (str, int, float, bool))})
        prompt = build_prompt(
            question,
            schema=schemas[path] if schema == "prompt" else None,
            answer_format=answer_format,
            hint=record.get("evidence"),
        )
        out.rows.append({"id": row_id, "env": "nl2sql", "prompt": prompt, "ground_truth": gold, "extra": extra})
    return out


def _field(record: dict[str, Any], keys: tuple[str, ...], where: str) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise PrepareError(f"{where}: needs a non-empty string field {' or '.join(repr(k) for k in keys)}")


def _gold(record: dict[str, Any], where: str) -> str:
    return _field(record, SQL_KEYS, where).strip()


def _db(record: dict[str, Any], where: str) -> str:
    db, db_id = record.get("db"), record.get("db_id")
    if isinstance(db, str) and db:
        return db
    if isinstance(db_id, str) and db_id:
        return f"{db_id}/{db_id}.sqlite"
    raise PrepareError(f"{where}: needs 'db' (a database file) or 'db_id' (Spider/BIRD layout)")


def _gold_problem(path: Path, sql: str, timeout_s: float) -> str | None:
    try:
        with Session(path) as session:
            session.query(sql, timeout_s=timeout_s, max_rows=1)
    except QueryError as exc:
        return str(exc)
    return None


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
