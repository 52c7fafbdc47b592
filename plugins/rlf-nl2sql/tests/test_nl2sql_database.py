"""The locked-down session: nothing the model sends can change the file, and no query runs forever."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest
from rlf_nl2sql.database import DatabaseUnavailable, QueryDenied, QueryError, QueryTimeout, Session
from rlf_nl2sql.shop import build_database, shop_sql
from rlf_nl2sql.tools import render_result

DESTRUCTIVE = [
    "DROP TABLE customers",
    "DELETE FROM orders",
    "UPDATE products SET price = 0",
    "INSERT INTO customers VALUES (99, 'Eve', 'Paris', '2024-01-01')",
    "CREATE TABLE notes (x)",
    "CREATE TEMP TABLE notes (x)",
    "ALTER TABLE customers RENAME TO people",
    "ATTACH DATABASE 'elsewhere.db' AS other",
    "DETACH DATABASE main",
    "PRAGMA writable_schema = 1",
    "PRAGMA journal_mode = WAL",
    "PRAGMA query_only = 0",
    "PRAGMA user_version = 7",
    "VACUUM",
    "VACUUM INTO 'copy.db'",
    "REINDEX",
    "ANALYZE",
    "BEGIN",
    "SAVEPOINT s",
    "SELECT load_extension('mod_spatialite')",
    "WITH doomed AS (SELECT id FROM orders) DELETE FROM orders WHERE id IN (SELECT id FROM doomed)",
    "EXPLAIN DELETE FROM orders",
    "SELECT 1; DROP TABLE customers",
]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A writable copy of the shop database: only the session's own locks can protect it."""
    return build_database(shop_sql(), tmp_path / "shop.sqlite")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reads_work(db):
    with Session(db) as s:
        assert s.query("SELECT COUNT(*) FROM customers", timeout_s=1, max_rows=5).rows == [(8,)]
        assert [r[1] for r in s.query("PRAGMA table_info(products)", timeout_s=1, max_rows=9).rows][:2] == [
            "id",
            "name",
        ]
        assert s.query(
            "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 5) SELECT SUM(x) FROM n",
            timeout_s=1,
            max_rows=1,
        ).rows == [(15,)]
        assert "CREATE TABLE customers" in s.schema()


@pytest.mark.parametrize("statement", DESTRUCTIVE)
def test_destructive_statements_are_refused_and_the_file_is_unchanged(db, tmp_path, statement):
    before = digest(db)
    with Session(db) as s, pytest.raises(QueryError) as info:
        s.query(statement, timeout_s=1, max_rows=5)
    assert digest(db) == before
    assert not (tmp_path / "copy.db").exists() and not (tmp_path / "elsewhere.db").exists()
    message = str(info.value)
    assert "not allowed" in message or "one statement" in message, message


# Not here: REINDEX of a database without indexes asks the authorizer nothing (and writes nothing).
@pytest.mark.parametrize(
    "statement", [s for s in DESTRUCTIVE if not s.startswith(("SELECT 1;", "SELECT load", "REINDEX"))]
)
def test_the_authorizer_alone_refuses_what_the_keyword_check_would(db, statement):
    """Defence in depth: sent straight to the connection, past the keyword check, it is still denied."""
    before = digest(db)
    with Session(db) as s, pytest.raises(sqlite3.DatabaseError):
        s.conn.execute(statement)
    assert digest(db) == before


def test_refusals_say_what_was_refused(db):
    with Session(db) as s:
        with pytest.raises(QueryDenied, match="DELETE on orders is not allowed"):
            s.query("WITH x AS (SELECT 1) DELETE FROM orders", timeout_s=1, max_rows=1)
        with pytest.raises(QueryDenied, match="PRAGMA writable_schema is not allowed"):
            s.query("PRAGMA writable_schema = 1", timeout_s=1, max_rows=1)
        with pytest.raises(QueryDenied, match="DROP statements are not allowed"):
            s.query("drop table customers", timeout_s=1, max_rows=1)
        with pytest.raises(QueryError, match="no such column: nope"):
            s.query("SELECT nope FROM customers", timeout_s=1, max_rows=1)
        # the session is still usable after refusals and errors
        assert s.query("SELECT 2", timeout_s=1, max_rows=1).rows == [(2,)]


def test_a_runaway_query_is_stopped_by_its_time_limit(db):
    forever = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT COUNT(*) FROM n"
    with Session(db) as s:
        start = time.monotonic()
        with pytest.raises(QueryTimeout, match="longer than 0.2 s"):
            s.query(forever, timeout_s=0.2, max_rows=1)
        assert time.monotonic() - start < 10  # generous: stopped, not run to the end
        assert s.query("SELECT 1", timeout_s=1, max_rows=1).rows == [(1,)]


def test_huge_values_are_capped(db):
    with Session(db) as s, pytest.raises(QueryError, match="too big"):
        s.query("SELECT zeroblob(100000000)", timeout_s=5, max_rows=1)


@pytest.mark.parametrize("function", ["printf", "format"])
def test_one_long_function_call_is_refused_before_it_runs(db, function):
    """SQLite checks its time limit between instructions, never inside one call: printf('%.*c', 1e9,
    'x') ran 30 s under a 0.5 s limit, and sqlite3_interrupt() does not stop it either."""
    with Session(db) as s:
        start = time.monotonic()
        with pytest.raises(QueryError, match=rf"{function}\(\): a width or precision of 1000000000 is above"):
            s.query(f"SELECT length({function}('%.*c', 1e9, 'x'))", timeout_s=0.5, max_rows=1)
        with pytest.raises(QueryError, match="above"):
            s.query(f"SELECT {function}('%.900000000c', 'x') FROM customers", timeout_s=0.5, max_rows=1)
        assert time.monotonic() - start < 1.0
        ok = s.query(
            f"SELECT {function}('%d-%s|%5.2f|%%|%-4s|%.*s', 3, 'a', 3.14159, 'b', 2, 'xyz')", timeout_s=1, max_rows=1
        )
        assert ok.rows == [("3-a| 3.14|%|b   |xy",)]
        for sql in (f"SELECT {function}('%c%c|%s', 'x')", f"SELECT {function}('%!.3g %q', 1.5e10, 'it''s')"):
            assert s.query(sql, timeout_s=1, max_rows=1).rows == sqlite3.connect(":memory:").execute(sql).fetchall()
        assert s.query("SELECT 1", timeout_s=1, max_rows=1).rows == [(1,)]  # SQLite's own printf is back...
        with pytest.raises(QueryError, match="above"):  # ...and guarded again for the next query naming it
            s.query(f"SELECT \"{function.upper()}\"('%.*c', 1e9, 'x')", timeout_s=0.5, max_rows=1)


def test_a_view_calling_printf_is_guarded_too(db):
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE VIEW padded AS SELECT printf('%.*c', 1000000000, 'x') AS p")
    with Session(db) as s, pytest.raises(QueryError, match="above the limit"):
        s.query("SELECT length(p) FROM padded", timeout_s=0.5, max_rows=1)


def test_a_result_is_bounded_in_bytes_not_only_per_value(db):
    with Session(db) as s:
        wide = "SELECT " + ", ".join("zeroblob(900000)" for _ in range(8))  # each value under the cap, 7.2 MB in all
        with pytest.raises(QueryError, match="more than 1000000 bytes"):
            s.query(wide, timeout_s=5, max_rows=1, max_bytes=1_000_000)
        tall = "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 5000) SELECT zeroblob(1000) FROM n"
        with pytest.raises(QueryError, match="more than 1000000 bytes"):
            s.query(tall, timeout_s=5, max_rows=10_000, max_bytes=1_000_000)
        with pytest.raises(QueryError, match="larger than 1000000 bytes"):
            s.query("SELECT zeroblob(2000000)", timeout_s=5, max_rows=1, max_bytes=1_000_000)
        assert len(s.query(tall, timeout_s=5, max_rows=10_000, max_bytes=10_000_000).rows) == 5000


def test_a_missing_or_foreign_file_is_named_and_left_alone(tmp_path):
    missing = tmp_path / "nope.sqlite"
    with pytest.raises(DatabaseUnavailable, match="nope.sqlite"):
        Session(missing)
    assert not missing.exists()
    (tmp_path / "notes.txt").write_text("not a database, but long enough to have a header " * 4)
    with pytest.raises(DatabaseUnavailable, match="cannot read .*notes.txt as a SQLite database"):
        Session(tmp_path / "notes.txt")


def test_results_are_shown_within_row_and_character_limits(db):
    with Session(db) as s:
        few = s.query("SELECT name, city FROM customers WHERE city = 'London' ORDER BY name", timeout_s=1, max_rows=5)
        many = s.query("SELECT id, name FROM products ORDER BY id", timeout_s=1, max_rows=3)
        nulls = s.query("SELECT name, city FROM customers WHERE city IS NULL", timeout_s=1, max_rows=3)
        none = s.query("SELECT name FROM customers WHERE 0", timeout_s=1, max_rows=3)
    assert (
        render_result(few, max_chars=500, max_cell_chars=50)
        == "name | city\nAda Lovelace | London\nJohn Backus | London\n(2 rows)"
    )
    text = render_result(many, max_chars=500, max_cell_chars=50)
    assert text.splitlines()[1:4] == ["1 | Notebook", "2 | Fountain pen", "3 | Pencil set"]
    assert "3 rows shown; the query returned more" in text
    assert render_result(nulls, max_chars=500, max_cell_chars=50).splitlines()[1] == "Donald Knuth | NULL"
    assert render_result(none, max_chars=500, max_cell_chars=50) == "name\n(no rows)"
    cut = render_result(many, max_chars=25, max_cell_chars=5)
    assert cut == "id | name\n1 | Note…\n(1 of 3+ rows shown: the output is limited to 25 characters)"
