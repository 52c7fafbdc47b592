"""Running untrusted SQL on a SQLite file without letting it change anything or run forever.

The model writes the SQL, so every connection is locked down in layers, each enough on its own for
the statements it covers:

- the file is opened read-only (URI ``mode=ro``) and ``PRAGMA query_only`` is set;
- an authorizer allows reading and nothing else: writes, schema changes, ``ATTACH``/``DETACH``,
  transactions, ``VACUUM``/``ANALYZE``/``REINDEX``, every ``PRAGMA`` but the schema-inspection ones,
  and ``load_extension`` are denied while SQLite compiles the statement, before it can run;
- extension loading stays off, and no database can be attached (``SQLITE_LIMIT_ATTACHED`` = 0);
- only statements that start with a query keyword are sent to SQLite at all, one at a time;
- a progress handler stops any statement past its time limit, and strings and blobs are capped at
  ``SQLITE_LIMIT_LENGTH`` so a single value cannot exhaust memory.

Every refusal and failure is raised as a :class:`QueryError` whose message says what happened in
words the model can act on.
"""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlf_nl2sql.sqltext import QUERY_KEYWORDS, first_keyword

INSPECTION_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)
"""PRAGMAs that only describe the schema; every other PRAGMA can change state and is denied."""

DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
MAX_VALUE_BYTES = 16 * 1024 * 1024
PROGRESS_EVERY = 100000
"""SQLite virtual-machine instructions between two checks of the time limit."""

_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_ACTIONS = (
    "CREATE_INDEX CREATE_TABLE CREATE_TEMP_INDEX CREATE_TEMP_TABLE CREATE_TEMP_TRIGGER CREATE_TEMP_VIEW "
    "CREATE_TRIGGER CREATE_VIEW DELETE DROP_INDEX DROP_TABLE DROP_TEMP_INDEX DROP_TEMP_TABLE DROP_TEMP_TRIGGER "
    "DROP_TEMP_VIEW DROP_TRIGGER DROP_VIEW INSERT PRAGMA READ SELECT TRANSACTION UPDATE ATTACH DETACH ALTER_TABLE "
    "REINDEX ANALYZE CREATE_VTABLE DROP_VTABLE FUNCTION SAVEPOINT RECURSIVE"
).split()
_ACTION_NAMES = {getattr(sqlite3, f"SQLITE_{a}"): a.replace("_", " ") for a in _ACTIONS if hasattr(sqlite3, f"SQLITE_{a}")}
"""Authorizer action codes by name (the module's constants mix them with result codes of equal value)."""


class QueryError(Exception):
    """The query could not be run; the message is meant for the model."""


class QueryDenied(QueryError):
    """The query tried something a read-only session may not do."""


class QueryTimeout(QueryError):
    """The query ran past its time limit and was stopped."""


class DatabaseUnavailable(QueryError):
    """The sample's database is not named, does not exist, or is not a SQLite file: the data's fault."""


@dataclass
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool = False
    """More rows exist than were fetched."""


class Session:
    """One locked-down, read-only connection to an existing SQLite file (see the module docstring).

    A session belongs to one thread at a time; the verifier keeps one per worker thread and database.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise DatabaseUnavailable(f"database file not found: {self.path}")
        uri = f"file:{urllib.parse.quote(str(self.path.resolve()))}?mode=ro"
        self.conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        try:
            self.conn.text_factory = _decode  # databases in the wild hold invalid UTF-8: show it, do not fail
            self.conn.execute("PRAGMA query_only = 1")
            self.conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchall()  # is it a database at all?
        except sqlite3.Error as exc:
            self.conn.close()
            raise DatabaseUnavailable(f"cannot read {self.path} as a SQLite database: {exc}") from None
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        self._authorizer = _Authorizer()
        self.conn.set_authorizer(self._authorizer)

    def query(self, sql: str, *, timeout_s: float, max_rows: int) -> QueryResult:
        """Run one read-only statement, fetching at most ``max_rows`` rows, within ``timeout_s`` seconds."""
        keyword = first_keyword(sql)
        if not keyword:
            raise QueryError("the query is empty")
        if keyword not in QUERY_KEYWORDS:
            raise QueryDenied(
                f"{keyword} statements are not allowed: the database is read-only; "
                f"send one query starting with {', '.join(QUERY_KEYWORDS)}"
            )
        self._authorizer.denied = None
        self.conn.set_progress_handler(_stop_after(time.monotonic() + timeout_s), PROGRESS_EVERY)
        try:
            cursor = self.conn.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            rows = cursor.fetchmany(max_rows + 1)
        except sqlite3.ProgrammingError as exc:  # "You can only execute one statement at a time."
            raise QueryError(f"{exc} Send a single SQL statement.") from None
        except sqlite3.Error as exc:
            raise _explain(exc, self._authorizer.denied, timeout_s) from None
        finally:
            self.conn.set_progress_handler(None, 0)
        if len(rows) > max_rows:
            return QueryResult(columns, rows[:max_rows], truncated=True)
        return QueryResult(columns, rows)

    def tables(self) -> list[tuple[str, str]]:
        """``(name, CREATE statement)`` of each table and view, as stored in the file."""
        return self.conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite_%' "
            "AND sql IS NOT NULL ORDER BY type, name"
        ).fetchall()

    def schema(self) -> str:
        """The ``CREATE`` statements of every table and view, one after another."""
        return "\n".join(create.strip() + ";" for _, create in self.tables())

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Authorizer:
    """Allows reads only; remembers what it denied so the error can say so."""

    def __init__(self) -> None:
        self.denied: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
        if action in _READ_ACTIONS:
            if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS:
                return self._deny(f"calling {arg2}() is not allowed")
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in INSPECTION_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and (arg1 or "").lower() in ("sqlite_master", "sqlite_schema"):
            # SQLite asks this while compiling table-valued PRAGMA functions as well as real schema writes
            return self._deny(
                "writing sqlite_master is not allowed (nor table-valued functions such as pragma_table_info(); "
                "use PRAGMA table_info(<table>) or SELECT sql FROM sqlite_master)"
            )
        if action == sqlite3.SQLITE_PRAGMA:
            return self._deny(f"PRAGMA {arg1} is not allowed (only {', '.join(sorted(INSPECTION_PRAGMAS))})")
        what = _ACTION_NAMES.get(action, f"action {action}")
        target = f" on {arg1}" if arg1 and action not in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_ATTACH) else ""
        return self._deny(f"{what}{target} is not allowed")

    def _deny(self, reason: str) -> int:
        if self.denied is None:
            self.denied = reason
        return sqlite3.SQLITE_DENY


def _stop_after(deadline: float) -> Callable[[], int]:
    def check() -> int:
        return int(time.monotonic() > deadline)

    return check


def _explain(exc: sqlite3.Error, denied: str | None, timeout_s: float) -> QueryError:
    message = str(exc)
    if denied is not None or "not authorized" in message:
        return QueryDenied(f"{denied or message}: the database is read-only and only queries may run")
    if message == "interrupted":
        return QueryTimeout(f"the query ran longer than {timeout_s:g} s and was stopped; simplify it")
    if "readonly" in message or "read-only" in message:
        return QueryDenied(f"{message}: the database is read-only and only queries may run")
    return QueryError(message)
