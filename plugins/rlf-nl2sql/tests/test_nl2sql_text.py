"""Reading SQL out of final answers, and the lexer's answers about a query."""

from __future__ import annotations

import pytest
from rlf_nl2sql.answer import extract_sql
from rlf_nl2sql.sqltext import first_keyword, first_statement, has_top_level_order_by


@pytest.mark.parametrize(
    ("response", "sql", "shape"),
    [
        ("```sql\nSELECT 1\n```", "SELECT 1", "sql_fence"),
        ("First I look.\n```sql\nSELECT 1\n```\nThen:\n```SQL\nSELECT 2;\n```\nDone.", "SELECT 2", "sql_fence"),
        ("```python\nprint(1)\n```\n```\nSELECT 3\n```", "SELECT 3", "code_fence"),
        ("```\nSELECT 9\n```\n```sql\nSELECT 4\n```\n```\nSELECT 5\n```", "SELECT 4", "sql_fence"),
        ("<answer>SELECT name FROM t</answer>", "SELECT name FROM t", "answer_tag"),
        ("<answer>\n```sql\nSELECT a FROM t\n```\n</answer>", "SELECT a FROM t", "answer_tag"),
        ("```sql\nSELECT 0\n```\n<answer>SELECT 6</answer>", "SELECT 6", "answer_tag"),
        ("SELECT name FROM t WHERE x = 'a;b'; and that is all", "SELECT name FROM t WHERE x = 'a;b'", "plain"),
        ("The query is:\nSQL: select 7", "select 7", "plain"),
        ("WITH a AS (SELECT 1) SELECT * FROM a", "WITH a AS (SELECT 1) SELECT * FROM a", "plain"),
        ("I do not know.", "", None),
        ("", "", None),
    ],
)
def test_extraction_follows_the_documented_order(response, sql, shape):
    found = extract_sql(response)
    assert (found.sql, found.shape) == (sql, shape)


def test_reasoning_is_never_the_answer():
    drafted = "<think>\n```sql\nSELECT wrong\n```\n</think>\n```sql\nSELECT right\n```"
    assert extract_sql(drafted).sql == "SELECT right"
    # the template opened <think> in the prompt: only the closing tag is in the response
    assert extract_sql("maybe SELECT wrong\n</think>\nSELECT right").sql == "SELECT right"
    assert extract_sql("<think>SELECT unfinished thought").sql == ""


def test_format_is_checked_against_the_expected_shape():
    fenced, tagged, bare = (
        extract_sql("```sql\nSELECT 1\n```"),
        extract_sql("<answer>SELECT 1</answer>"),
        extract_sql("SELECT 1"),
    )
    assert fenced.follows("sql_fence") and not fenced.follows("answer_tag")
    assert tagged.follows("answer_tag") and not tagged.follows("sql_fence")
    assert not bare.follows("sql_fence") and bare.follows("plain") and fenced.follows("plain")
    assert not extract_sql("```\nSELECT 1\n```").follows("sql_fence")
    assert not extract_sql("no sql").follows("plain")


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t order   by a desc limit 3;", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) AS s", False),
        ("SELECT a, row_number() OVER (ORDER BY a) FROM t", False),
        ("SELECT a FROM t WHERE b = 'ORDER BY' -- ORDER BY a", False),
        ("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1", True),
        ('SELECT "order" FROM t', False),
        ("SELECT a FROM t; SELECT a FROM t ORDER BY a", False),
    ],
)
def test_only_a_top_level_order_by_orders_the_result(sql, ordered):
    assert has_top_level_order_by(sql) is ordered


def test_first_statement_and_keyword_skip_strings_and_comments():
    assert first_statement("SELECT ';' AS x; DROP TABLE t") == "SELECT ';' AS x"
    assert first_statement('SELECT "a;b" FROM [c;d] /* ; */ -- ;\n; DELETE') == 'SELECT "a;b" FROM [c;d] /* ; */ -- ;'
    assert first_statement("SELECT 'unterminated;") == "SELECT 'unterminated;"
    assert first_keyword("  -- note\n/* c */ select 1") == "SELECT"
    assert first_keyword("   ") == ""
