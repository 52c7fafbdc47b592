"""The tools the model calls during a rollout: ``sql`` (run a query) and, by config, ``schema``.

Each trajectory has its own database: the plugin's ``open_session`` finds the file its row names
(:class:`DatabaseSession`), and the tools get that session with each call, so the core's executor
runs them as any other (timeouts, limits, schema checks, error results) and its result cache keeps
one database's answers apart from another's by the session's ``cache_key``. Called outside a
trajectory (the UI's tool bench) they use the configured default database, or answer with an error
that says how to name one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlf_nl2sql.database import DatabaseUnavailable, QueryError, QueryResult, Session
from rlf_nl2sql.settings import Locator, Settings, row_extra
from rlfcore import Tool

EXECUTOR_MARGIN_S = 5.0
"""The executor's own timeout is the query's plus this: the query's progress handler stops it first."""
NO_DATABASE = (
    "this sample names no database: give each dataset row extra.db (a path relative to nl2sql.db_root) "
    "or set nl2sql.db in the run config"
)


class DatabaseSession:
    """One trajectory's database: the file its row names (else the configured default), or why it may
    not use it. Its connection opens on the first query and serves every call of the trajectory, one
    at a time; :meth:`close` (the core calls it when the trajectory ends) closes it."""

    def __init__(self, path: Path | None, refused: DatabaseUnavailable | None = None):
        self.path = path
        self.refused = refused
        self._lock = threading.Lock()
        self._db: Session | None = None
        self._closed = False

    @classmethod
    def for_row(cls, locator: Locator, row: Mapping[str, Any]) -> DatabaseSession:
        """The session of a raw dataset row (``extra.db``); a refused path is kept for the tools to report."""
        try:
            return cls(locator.locate(row_extra(row)))
        except DatabaseUnavailable as exc:
            return cls(None, exc)

    @property
    def cache_key(self) -> str:
        """Trajectories on one file get the same results: the executor's cache may share them."""
        return str(self.path) if self.refused is None else f"refused:{self.refused}"

    @property
    def is_open(self) -> bool:
        """Whether its connection is open (between the first query and :meth:`close`)."""
        return self._db is not None

    def database(self) -> Path:
        """The file to query; :class:`DatabaseUnavailable` (the model reads it) when there is none."""
        if self.refused is not None:
            raise self.refused
        if self.path is None:
            raise DatabaseUnavailable(NO_DATABASE)
        return self.path

    @contextmanager
    def connection(self) -> Iterator[Session]:
        """The trajectory's connection, opened on first use; calls of one turn take turns on it."""
        with self._lock:
            if self._closed:
                raise DatabaseUnavailable("this trajectory's database session is closed")
            if self._db is None:
                self._db = Session(self.database())
            yield self._db

    def close(self) -> None:
        """Close the connection, after a query still running on it (its own timeout ends it)."""
        with self._lock:
            self._closed = True
            if self._db is not None:
                self._db.close()
                self._db = None


@contextmanager
def _connection(session: DatabaseSession | None, default: Path | None) -> Iterator[Session]:
    """The trajectory's connection, or, called outside a trajectory, one on the default database for this call."""
    if session is not None:
        with session.connection() as db:
            yield db
    else:
        with Session(DatabaseSession(default).database()) as db:
            yield db


def render_result(result: QueryResult, *, max_chars: int, max_cell_chars: int) -> str:
    """A query result as the model sees it: a header line, one line per row, ``|`` between cells, and
    a note on how many rows there are. Rows stop before ``max_chars`` characters (the header always
    shows); the note says when rows were left out and why."""
    if not result.columns:
        return "(the statement returned nothing)"
    lines = [" | ".join(_cell(c, max_cell_chars) for c in result.columns)]
    lines += [" | ".join(_cell(v, max_cell_chars) for v in row) for row in result.rows]
    kept: list[str] = []
    used = 0
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


def make_tools(settings: Settings, locator: Locator) -> list[Tool]:
    """The ``sql`` tool, and the ``schema`` tool when the settings ask for it; both take the trajectory's session."""
    max_rows, max_chars, timeout_s = settings.max_rows, settings.max_chars, settings.query_timeout_s

    def run_sql(*, session: DatabaseSession | None, query: str) -> str:
        with _connection(session, locator.default) as db:
            result = db.query(query, timeout_s=timeout_s, max_rows=max_rows, max_bytes=settings.max_result_bytes)
        return render_result(result, max_chars=max_chars, max_cell_chars=settings.max_cell_chars)

    def show_schema(*, session: DatabaseSession | None, table: str | None = None) -> str:
        with _connection(session, locator.default) as db:
            tables = db.tables()
        if table is None:
            return "\n".join(create.strip() + ";" for _, create in tables)
        wanted = table.strip().strip('"`[]').lower()
        for name, create in tables:
            if name.lower() == wanted:
                return create.strip() + ";"
        raise QueryError(f"no table named {table!r}; tables: {', '.join(name for name, _ in tables)}")

    def database_tool(name: str, description: str, parameters: dict[str, Any], fn: Callable[..., str]) -> Tool:
        return Tool(
            name=name,
            description=description,
            parameters=parameters,
            fn=fn,
            timeout_s=timeout_s + EXECUTOR_MARGIN_S,
            takes_session=True,
        )

    tools = [
        database_tool(
            "sql",
            "Run one read-only SQLite query (SELECT or WITH) on the question's database and see the result: "
            f"at most {max_rows} rows, cut at {max_chars} characters. Use it to explore the data before answering.",
            {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "One SQLite statement."}},
                "required": ["query"],
            },
            run_sql,
        )
    ]
    if settings.schema_tool:
        tools.append(
            database_tool(
                "schema",
                "Show the CREATE TABLE statements of the question's database, or of one table.",
                {
                    "type": "object",
                    "properties": {"table": {"type": "string", "description": "A table name; omit it for all tables."}},
                },
                show_schema,
            )
        )
    return tools
