"""SQL as text: a small lexer, and what the plugin needs to know about a query without running it.

SQLite's grammar is large, but the questions asked here are narrow (which keyword starts the
statement, is there an ``ORDER BY`` outside every parenthesis, where does the first statement end,
which literals does it hold), and all of them only need to skip strings, quoted identifiers and
comments correctly. So this is a lexer, not a parser.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import NamedTuple

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*'?)
  | (?P<dquoted>"(?:[^"]|"")*"?)
  | (?P<quoted>`(?:[^`]|``)*`?|\[[^\]]*\]?)
  | (?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|0[xX][0-9a-fA-F]+)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<op><>|!=|==|<=|>=|\|\||<<|>>|[-+*/%=<>&|~])
  | (?P<punct>.)
    """,
    re.VERBOSE | re.DOTALL,
)

_STATEMENT = re.compile(
    r"""(?:[^;'"`\[\-/]+|'(?:[^']|'')*(?:'|\Z)|"(?:[^"]|"")*(?:"|\Z)|`(?:[^`]|``)*(?:`|\Z)|\[[^\]]*(?:\]|\Z)"""
    r"""|--[^\n]*|/\*.*?(?:\*/|\Z)|[-/])*""",
    re.DOTALL,
)
"""The text before the first ``;`` outside strings, quoted identifiers and comments, in one match."""

QUERY_KEYWORDS = ("SELECT", "WITH", "VALUES", "PRAGMA", "EXPLAIN")
"""Statements the ``sql`` tool accepts; anything else is refused before SQLite sees it."""


class Token(NamedTuple):
    kind: str
    text: str
    start: int

    @property
    def upper(self) -> str:
        return self.text.upper()

    @property
    def end(self) -> int:
        return self.start + len(self.text)


def tokens(sql: str, *, skip_blank: bool = True) -> Iterator[Token]:
    """The tokens of ``sql`` in order; whitespace and comments are dropped unless ``skip_blank`` is false."""
    for match in _TOKEN.finditer(sql):
        kind = match.lastgroup or "punct"
        if skip_blank and kind in ("space", "comment"):
            continue
        yield Token(kind, match.group(), match.start())


def first_keyword(sql: str) -> str:
    """The statement's first word, upper-cased (``""`` for an empty text)."""
    for tok in tokens(sql):
        return tok.upper if tok.kind == "word" else tok.text
    return ""


def has_top_level_order_by(sql: str) -> bool:
    """Whether the statement orders its result: an ``ORDER BY`` outside every parenthesis.

    Orderings inside subqueries, window definitions (``OVER (ORDER BY ...)``) or aggregate calls do not
    order the result; only a top-level one does, which is when Spider's evaluation compares in order.
    """
    depth = 0
    previous = ""
    for tok in tokens(first_statement(sql)):
        if tok.text == "(":
            depth += 1
        elif tok.text == ")":
            depth = max(0, depth - 1)
        elif depth == 0 and tok.kind == "word" and tok.upper == "BY" and previous == "ORDER":
            return True
        previous = tok.upper if tok.kind == "word" else tok.text
    return False


def first_statement(sql: str) -> str:
    """``sql`` up to (not including) its first ``;`` outside strings, identifiers and comments."""
    if ";" not in sql:
        return sql.strip()
    match = _STATEMENT.match(sql)
    return sql[: match.end() if match else len(sql)].strip()


def string_value(tok: Token) -> str:
    """The text of a quoted token without its quotes, doubled quotes undone."""
    quote = tok.text[0]
    body = tok.text[1:-1] if len(tok.text) > 1 and tok.text[-1] == quote else tok.text[1:]
    return body.replace(quote * 2, quote)


def quote_string(value: str) -> str:
    """``value`` as a SQL string literal."""
    return "'" + value.replace("'", "''") + "'"
