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
  ``SQLITE_LIMIT_LENGTH`` so a single value cannot exhaust memory;
- a result is bounded in bytes as it is fetched (``max_bytes``: a row of many capped values, or many
  rows, fail the query), and no value may be larger than that bound either;
- ``printf()``/``format()`` refuse a width or precision above the value cap before they run: SQLite
  checks the time limit between instructions, and ``printf('%.*c', 1e9, 'x')`` is one instruction of
  30 s that neither the progress handler nor ``sqlite3_interrupt()`` can stop.

Every refusal and failure is raised as a :class:`QueryError` whose message says what happened in
words the model can act on.
"""

from __future__ import annotations

import re
import sqlite3
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlf_nl2sql.sqltext import QUERY_KEYWORDS, first_keyword

INSPECTION_PRAGMAS = frozenset(
    {"table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo", "foreign_key_list"}
)
"""PRAGMAs that only describe the schema; every other PRAGMA can change state and is denied."""

DENIED_FUNCTIONS = frozenset({"load_extension", "fts3_tokenizer"})
MAX_VALUE_BYTES = 16 * 1024 * 1024
MAX_RESULT_BYTES = 64 * 1024 * 1024
"""Bytes of one query's fetched rows (strings and blobs by length, other values 8), unless told otherwise."""
PROGRESS_EVERY = 100000
"""SQLite virtual-machine instructions between two checks of the time limit."""

_PRINTF = re.compile("printf|format", re.IGNORECASE)
_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_ACTIONS = [
    "CREATE_INDEX",
    "CREATE_TABLE",
    "CREATE_TEMP_INDEX",
    "CREATE_TEMP_TABLE",
    "CREATE_TEMP_TRIGGER",
    "CREATE_TEMP_VIEW",
    "CREATE_TRIGGER",
    "CREATE_VIEW",
    "DELETE",
    "DROP_INDEX",
    "DROP_TABLE",
    "DROP_TEMP_INDEX",
    "DROP_TEMP_TABLE",
    "DROP_TEMP_TRIGGER",
    "DROP_TEMP_VIEW",
    "DROP_TRIGGER",
    "DROP_VIEW",
    "INSERT",
    "PRAGMA",
    "READ",
    "SELECT",
    "TRANSACTION",
    "UPDATE",
    "ATTACH",
    "DETACH",
    "ALTER_TABLE",
    "REINDEX",
    "ANALYZE",
    "CREATE_VTABLE",
    "DROP_VTABLE",
    "FUNCTION",
    "SAVEPOINT",
    "RECURSIVE",
]
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{a}"): a.replace("_", " ") for a in _ACTIONS if hasattr(sqlite3, f"SQLITE_{a}")
}
"""Authorizer action codes by name (the module's constants mix them with result codes of equal value)."""


class QueryError(Exception):
    """The query could not be run; the message is meant for the model."""


class QueryDenied(QueryError):
    """The query tried something a read-only session may not do."""


class QueryTimeout(QueryError):
    """The query ran past its time limit and was stopped."""


class QueryTooLarge(QueryError):
    """The result holds more bytes than the query may fetch."""


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
        _set_limit(self.conn, "ATTACHED", 0)
        _set_limit(self.conn, "LENGTH", MAX_VALUE_BYTES)
        self._authorizer = _Authorizer()
        self.conn.set_authorizer(self._authorizer)
        self._printf = _GuardedPrintf()
        self._guarded = False
        # a view or trigger of the file may call printf without the query naming it: then always guard
        self._always_guard = bool(
            self.conn.execute(
                "SELECT 1 FROM sqlite_master WHERE sql LIKE '%printf%' OR sql LIKE '%format%' LIMIT 1"
            ).fetchall()
        )

    def query(self, sql: str, *, timeout_s: float, max_rows: int, max_bytes: int = MAX_RESULT_BYTES) -> QueryResult:
        """Run one read-only statement, fetching at most ``max_rows`` rows and ``max_bytes`` bytes, within
        ``timeout_s`` seconds."""
        keyword = first_keyword(sql)
        if not keyword:
            raise QueryError("the query is empty")
        if keyword not in QUERY_KEYWORDS:
            raise QueryDenied(
                f"{keyword} statements are not allowed: the database is read-only; "
                f"send one query starting with {', '.join(QUERY_KEYWORDS)}"
            )
        self._authorizer.denied = None
        self._printf.refused = None
        cap = min(MAX_VALUE_BYTES, max_bytes)
        _set_limit(self.conn, "LENGTH", cap)
        self._printf.limit = cap
        self._guard_printf(self._always_guard or _PRINTF.search(sql) is not None)
        self.conn.set_progress_handler(_stop_after(time.monotonic() + timeout_s), PROGRESS_EVERY)
        try:
            cursor = self.conn.execute(sql)
            columns = [d[0] for d in cursor.description or []]
            rows: list[tuple[Any, ...]] = []
            used = 0
            while len(rows) <= max_rows and (row := cursor.fetchone()) is not None:
                used += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
                if used > max_bytes:
                    raise QueryTooLarge(
                        f"the result holds more than {max_bytes} bytes (at row {len(rows) + 1}); "
                        "select fewer rows or columns, or shorter values"
                    )
                rows.append(row)
        except sqlite3.ProgrammingError as exc:  # "You can only execute one statement at a time."
            raise QueryError(f"{exc} Send a single SQL statement.") from None
        except sqlite3.Error as exc:
            raise _explain(exc, self._authorizer.denied or self._printf.refused, timeout_s, cap) from None
        finally:
            self.conn.set_progress_handler(None, 0)
        if len(rows) > max_rows:
            return QueryResult(columns, rows[:max_rows], truncated=True)
        return QueryResult(columns, rows)

    def _guard_printf(self, on: bool) -> None:
        """Put the guarded ``printf``/``format`` in place of SQLite's for a query that names them (about
        30 µs a call instead of 2), and SQLite's back for one that does not (a function is called by
        its name as written, so a query that does not spell it cannot call it, unless a view or a
        trigger of the file does)."""
        if on != self._guarded:
            for name in ("printf", "format"):
                self.conn.create_function(name, -1, self._printf.named(name) if on else None, deterministic=True)
            self._guarded = on

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


def _set_limit(conn: sqlite3.Connection, limit: Literal["ATTACHED", "LENGTH"], value: int) -> None:
    """Set SQLite's run-time limit ``SQLITE_LIMIT_<limit>`` on ``conn``. The lockdown needs these limits, so
    the plugin needs Python 3.11, the first whose ``sqlite3`` can set them (its ``requires-python``)."""
    conn.setlimit(getattr(sqlite3, f"SQLITE_LIMIT_{limit}"), value)  # type: ignore[attr-defined]  # 3.11+; mypy reads 3.10


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Authorizer:
    """Allows reads only; remembers what it denied so the error can say so."""

    def __init__(self) -> None:
        self.denied: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _trigger: str | None) -> int:
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


class _GuardedPrintf:
    """SQLite's own ``printf``, run on a private in-memory connection once its widths and precisions
    (literal or ``*``) are checked against the value cap; ``refused`` says why a call was not run."""

    SPEC = re.compile(r"%[-+ 0#,!]*(\*|\d+)?(?:\.(\*|\d+))?(?:ll|l)?(.)", re.DOTALL)

    def __init__(self) -> None:
        self.limit = MAX_VALUE_BYTES
        self.refused: str | None = None
        self._inner = sqlite3.connect(":memory:", check_same_thread=False)

    def named(self, name: str) -> Callable[..., Any]:
        def guarded(*args: Any) -> Any:
            if not args:
                return None
            if isinstance(args[0], str):
                biggest = self._biggest(args[0], args[1:])
                if biggest > self.limit:
                    self.refused = f"{name}(): a width or precision of {biggest} is above the limit of {self.limit}"
                    raise ValueError(self.refused)
            _set_limit(self._inner, "LENGTH", self.limit)
            marks = ", ".join("?" * len(args))
            return self._inner.execute(f"SELECT printf({marks})", args).fetchone()[0]

        return guarded

    def _biggest(self, fmt: str, args: tuple[Any, ...]) -> int:
        biggest, i = 0, 0
        for match in self.SPEC.finditer(fmt):
            width, precision, kind = match.groups()
            if kind == "%":
                continue
            for part in (width, precision):
                if part == "*":
                    biggest = max(biggest, abs(_as_int(args[i] if i < len(args) else 0)))
                    i += 1
                elif part:
                    biggest = max(biggest, int(part))
            i += 1
        return biggest


def _as_int(value: Any) -> int:
    """A ``*`` argument as SQLite reads it (a number, or a string that starts with one)."""
    try:
        return int(float(value))
    except (TypeError, ValueError, OverflowError):
        match = re.match(r"\s*[-+]?\d+", str(value))
        return int(match.group()) if match else 0


def _explain(exc: sqlite3.Error, denied: str | None, timeout_s: float, cap: int = MAX_VALUE_BYTES) -> QueryError:
    message = str(exc)
    if denied is not None and denied.startswith(("printf()", "format()")):
        return QueryTooLarge(f"{denied}; ask for shorter text")
    if denied is not None or "not authorized" in message:
        return QueryDenied(f"{denied or message}: the database is read-only and only queries may run")
    if message == "interrupted":
        return QueryTimeout(f"the query ran longer than {timeout_s:g} s and was stopped; simplify it")
    if "too big" in message:
        return QueryTooLarge(f"{message}: a value would be larger than {cap} bytes")
    if "readonly" in message or "read-only" in message:
        return QueryDenied(f"{message}: the database is read-only and only queries may run")
    return QueryError(message)
