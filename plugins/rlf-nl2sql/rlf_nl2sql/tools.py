"""The tools the model calls during a rollout: ``sql`` (run a query) and, by config, ``schema``.

Each sample has its own database, but the core calls a tool with the model's arguments only. So the
tools are :class:`DatabaseTool` objects: registered once (their schemas are what the model sees), and
bound to the sample's database each turn by the plugin's ``invoke_tools``, which then hands the calls
to the core's executor (timeouts, limits, schema checks and error results stay the executor's).
Unbound (called by another route), they use the configured default database, or answer with an
error that says how to name one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlf_nl2sql.database import DatabaseUnavailable, QueryError, QueryResult, Session
from rlf_nl2sql.settings import Locator, Settings, row_extra
from rlfcore import Tool

EXECUTOR_MARGIN_S = 5.0
"""The executor's own timeout is the query's plus this: the query's progress handler stops it first."""


@dataclass
class DatabaseTool(Tool):
    """A tool whose action takes the sample's database file as its first argument."""

    action: Callable[..., str] | None = None
    locator: Locator | None = None

    def for_row(self, row: Mapping[str, Any]) -> Tool:
        """A plain tool bound to the database a raw dataset row names (``extra.db``).

        Its ``plugin`` names the database too, so the executor's result cache and per-tool limits
        never mix two databases.
        """
        assert self.action is not None and self.locator is not None
        try:
            db = self.locator.locate(row_extra(row))
        except DatabaseUnavailable as exc:
            db, refused = None, exc
        else:
            refused = None
        fallback = functools.partial(_unavailable, refused) if refused is not None else _no_database
        return Tool(
            name=self.name,
            description=self.description,
            parameters=self.parameters,
            fn=functools.partial(self.action, db) if db is not None else fallback,
            timeout_s=self.timeout_s,
            max_concurrency=self.max_concurrency,
            plugin=f"{self.plugin}:{db}" if db is not None else self.plugin,
        )


def _no_database(**arguments: Any) -> str:
    raise DatabaseUnavailable(
        "this sample names no database: give each dataset row extra.db (a path relative to nl2sql.db_root) "
        "or set nl2sql.db in the run config"
    )


def _unavailable(error: DatabaseUnavailable, **arguments: Any) -> str:
    raise error


def render_result(result: QueryResult, *, max_chars: int, max_cell_chars: int) -> str:
    """A query result as the model sees it: a header line, one line per row, ``|`` between cells, and
    a note on how many rows there are. Rows stop before ``max_chars`` characters (the header always
    shows); the note says when rows were left out and why."""
    if not result.columns:
        return "(the statement returned nothing)"
    lines = [" | ".join(_cell(c, max_cell_chars) for c in result.columns)]
    lines += [" | ".join(_cell(v, max_cell_chars) for v in row) for row in result.rows]
    kept, used = [], 0
    for line in lines:
        if kept and used + len(line) + 1 > max_chars:
            break
        kept.append(line[:max_chars])
        used += len(line) + 1
    shown, fetched = len(kept) - 1, len(result.rows)
    more = "+" if result.truncated else ""
    if shown < fetched:
        note = f"({shown} of {fetched}{more} rows shown: the output is limited to {max_chars} characters)"
    elif result.truncated:
        note = f"({shown} rows shown; the query returned more: add conditions, aggregate or use LIMIT)"
    else:
        note = "(no rows)" if shown == 0 else f"({shown} row{'s' if shown != 1 else ''})"
    return "\n".join(kept + [note])


def _cell(value: Any, limit: int) -> str:
    if value is None:
        text = "NULL"
    elif isinstance(value, float):
        text = repr(value)
    elif isinstance(value, bytes):
        text = f"<blob {len(value)} bytes>"
    else:
        text = str(value).replace("\n", "\\n")
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def make_tools(settings: Settings, locator: Locator) -> list[DatabaseTool]:
    """The ``sql`` tool, and the ``schema`` tool when the settings ask for it."""
    max_rows, max_chars, timeout_s = settings.max_rows, settings.max_chars, settings.query_timeout_s

    def run_sql(db: Path, query: str) -> str:
        with Session(db) as session:
            result = session.query(query, timeout_s=timeout_s, max_rows=max_rows, max_bytes=settings.max_result_bytes)
        return render_result(result, max_chars=max_chars, max_cell_chars=settings.max_cell_chars)

    def show_schema(db: Path, table: str | None = None) -> str:
        with Session(db) as session:
            tables = session.tables()
        if table is None:
            return "\n".join(create.strip() + ";" for _, create in tables)
        wanted = table.strip().strip('"`[]').lower()
        for name, create in tables:
            if name.lower() == wanted:
                return create.strip() + ";"
        raise QueryError(f"no table named {table!r}; tables: {', '.join(name for name, _ in tables)}")

    sql = DatabaseTool(
        name="sql",
        description=(
            "Run one read-only SQLite query (SELECT or WITH) on the question's database and see the result: "
            f"at most {max_rows} rows, cut at {max_chars} characters. Use it to explore the data before answering."
        ),
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string", "description": "One SQLite statement."}},
            "required": ["query"],
        },
        fn=functools.partial(run_sql, locator.default) if locator.default else _no_database,
        timeout_s=timeout_s + EXECUTOR_MARGIN_S,
        action=run_sql,
        locator=locator,
    )
    tools = [sql]
    if settings.schema_tool:
        tools.append(
            DatabaseTool(
                name="schema",
                description="Show the CREATE TABLE statements of the question's database, or of one table.",
                parameters={
                    "type": "object",
                    "properties": {"table": {"type": "string", "description": "A table name; omit it for all tables."}},
                },
                fn=functools.partial(show_schema, locator.default) if locator.default else _no_database,
                timeout_s=timeout_s + EXECUTOR_MARGIN_S,
                action=show_schema,
                locator=locator,
            )
        )
    return tools
