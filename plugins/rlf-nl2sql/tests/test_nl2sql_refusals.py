"""Statements that pass the keyword check, or that would outlive their query, are refused by name.

A temp trigger is written to the connection's own ``temp`` schema, not the file, so opening the file
read-only does not stop it (``PRAGMA query_only`` and the authorizer do); made, it would run inside
later statements of the session. ``WITH ... INSERT`` starts with a query keyword, so the keyword check
lets it through and the authorizer must name it.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from rlf_nl2sql.database import QueryDenied, Session
from rlf_nl2sql.shop import build_database, shop_sql

TEMP_TRIGGERS = [
    "CREATE TEMP TRIGGER spy AFTER UPDATE ON orders BEGIN SELECT 1; END",
    "CREATE TEMPORARY TRIGGER hide BEFORE DELETE ON customers BEGIN SELECT RAISE(IGNORE); END",
]

CTE_WRITES = [
    (
        "WITH eve AS (SELECT 99, 'Eve', 'Paris', '2024-01-01') INSERT INTO customers SELECT * FROM eve",
        "INSERT on customers",
    ),
    (
        "WITH eve AS (SELECT 1, 'Eve', 'Paris', '2024-01-01') REPLACE INTO customers SELECT * FROM eve",
        "INSERT on customers",
    ),
    ("WITH cheap AS (SELECT 0 AS price) UPDATE products SET price = (SELECT price FROM cheap)", "UPDATE on products"),
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A writable copy of the shop database: only the session's own locks can protect it."""
    return build_database(shop_sql(), tmp_path / "shop.sqlite")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def temp_triggers(s: Session) -> list[str]:
    return [name for (name,) in s.conn.execute("SELECT name FROM sqlite_temp_master WHERE type = 'trigger'")]


@pytest.mark.parametrize("statement", TEMP_TRIGGERS)
def test_a_temp_trigger_is_refused_and_none_is_left(db, statement):
    before = digest(db)
    with Session(db) as s:
        with pytest.raises(QueryDenied, match="CREATE statements are not allowed"):
            s.query(statement, timeout_s=1, max_rows=1)
        # past the keyword check, straight to the connection: the authorizer denies it
        with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
            s.conn.execute(statement)
        assert temp_triggers(s) == []
        assert s.query("SELECT COUNT(*) FROM orders", timeout_s=1, max_rows=1).rows[0][0] > 0
    assert digest(db) == before


@pytest.mark.parametrize(("statement", "refused"), CTE_WRITES)
def test_a_write_through_a_cte_is_refused_naming_it(db, statement, refused):
    before = digest(db)
    table = refused.split()[-1]
    with Session(db) as s:
        rows = s.query(f"SELECT * FROM {table} ORDER BY 1", timeout_s=1, max_rows=100).rows
        with pytest.raises(QueryDenied, match=f"{refused} is not allowed"):
            s.query(statement, timeout_s=1, max_rows=1)
        assert s.query(f"SELECT * FROM {table} ORDER BY 1", timeout_s=1, max_rows=100).rows == rows
    assert digest(db) == before
