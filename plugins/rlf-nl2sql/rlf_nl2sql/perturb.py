"""Near-miss queries made from a gold query, deterministically: negatives for tests and benchmarks.

The first of these edits that applies is made, without looking at any query's result:

1. *literal*: the first literal compared to a column (``col = 'arizona'``, ``col > 150000``), text
   before numbers, becomes another value of that column in the database, everywhere the query
   repeats it (the question is then about another entity throughout): for ``=`` and the like the
   value halfway round the sorted distinct values (far from the original, so rarely a look-alike),
   for ``>``/``>=`` the largest value and for ``<``/``<=`` the smallest (a small shift of a threshold
   would often keep the same rows);
2. *column*: the first bare column of the select list becomes the next column of its table;
3. *aggregate*: the select list's first aggregate becomes its counterpart (``MAX``/``MIN``,
   ``SUM``/``AVG``, ``COUNT`` → ``MAX``): swapping the column inside ``COUNT(...)`` rarely changes
   a count;
4. *column* inside a function call, as a last resort.

A perturbed query may still return the gold's result by chance (another city of the same state,
two states with as many rivers); execution match then rightly scores it 1, which is why tests ask
for "almost all" zeros.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlf_nl2sql.database import Session
from rlf_nl2sql.sqltext import Token, first_statement, quote_string, string_value, tokens

COMPARISONS = {"=", "==", "!=", "<>", "<", ">", "<=", ">=", "LIKE"}
AGGREGATE_SWAPS = {"MAX": "MIN", "MIN": "MAX", "SUM": "AVG", "AVG": "SUM", "COUNT": "MAX"}


@dataclass(frozen=True)
class Perturbation:
    sql: str
    kind: str
    """``literal``, ``column`` or ``aggregate``."""
    change: str
    """What changed, e.g. ``'arizona' -> 'arkansas'``."""


class Facts:
    """The columns of each table and the distinct values of each column name, read once per database."""

    def __init__(self, session: Session):
        self.session = session
        self.columns: dict[str, list[str]] = {}
        for name, _ in session.tables():
            info = session.query(f"PRAGMA table_info({_ident(name)})", timeout_s=10, max_rows=10_000)
            self.columns[name.lower()] = [str(r[1]) for r in info.rows]
        self._values: dict[str, list[Any]] = {}

    def values(self, column: str) -> list[Any]:
        """Distinct non-NULL values of every column so named, in any table, sorted (numbers before text)."""
        key = column.lower()
        if key not in self._values:
            found: set[Any] = set()
            for table, cols in self.columns.items():
                for col in cols:
                    if col.lower() == key:
                        sql = f"SELECT DISTINCT {_ident(col)} FROM {_ident(table)} WHERE {_ident(col)} IS NOT NULL"
                        found.update(r[0] for r in self.session.query(sql, timeout_s=10, max_rows=1_000_000).rows)
            self._values[key] = sorted(
                found, key=lambda v: (isinstance(v, str), v if not isinstance(v, bytes) else b"")
            )
        return self._values[key]


def perturb(sql: str, facts: Facts) -> Perturbation | None:
    """A near-miss of ``sql`` (see the module docstring), or ``None`` when neither edit applies."""
    sql = first_statement(sql)
    toks = list(tokens(sql))
    return (
        _swap_literal(sql, toks, facts)
        or _swap_column(sql, toks, facts, bare_only=True)
        or _swap_aggregate(sql, toks)
        or _swap_column(sql, toks, facts)
    )


def _swap_literal(sql: str, toks: list[Token], facts: Facts) -> Perturbation | None:
    candidates = []
    for i in range(2, len(toks)):
        tok, op, col = toks[i], toks[i - 1], toks[i - 2]
        literal = tok.kind in ("string", "dquoted", "number")
        if not literal or op.upper not in COMPARISONS or col.kind not in ("word", "dquoted", "quoted"):
            continue
        column = string_value(col) if col.kind != "word" else col.text
        if tok.kind == "dquoted" and string_value(tok).lower() in _all_columns(facts):
            continue  # a quoted identifier, not SQLite's double-quoted string fallback
        candidates.append((tok.kind == "number", i, tok, op.upper, column))
    for _, _, tok, comparison, column in sorted(candidates):
        current: Any = string_value(tok) if tok.kind != "number" else _number(tok.text)
        replacement = _other_value(facts.values(column), current, comparison)
        if replacement is None:
            continue
        text = quote_string(replacement) if isinstance(replacement, str) else repr(replacement)
        same = [t for t in toks if t.kind == tok.kind and t.text == tok.text]
        return Perturbation(_splice(sql, same, text), "literal", f"{tok.text} -> {text}")
    return None


def _swap_column(sql: str, toks: list[Token], facts: Facts, bare_only: bool = False) -> Perturbation | None:
    aliases = _aliases(toks, facts)
    start = next((i + 1 for i, t in enumerate(toks) if t.upper == "SELECT"), None)
    if start is None:
        return None
    found = []  # (preference, position, token, replacement)
    calls: list[str] = []  # per open parenthesis: the function it calls ("" for grouping)
    for i in range(start, len(toks)):
        tok = toks[i]
        if tok.text == "(":
            calls.append(toks[i - 1].upper if toks[i - 1].kind == "word" else "")
            continue
        if tok.text == ")":
            calls = calls[:-1]
            continue
        if not calls and tok.upper == "FROM":
            break
        if tok.kind != "word" or (i + 1 < len(toks) and toks[i + 1].text in ("(", ".")):
            continue
        qualifier = toks[i - 2].text.lower() if toks[i - 1].text == "." else None
        table = aliases.get(qualifier) if qualifier else next(iter(aliases.values()), None)
        columns = facts.columns.get(table or "", [])
        lowered = [c.lower() for c in columns]
        if tok.text.lower() not in lowered or len(columns) <= 1:  # no other column to swap it for
            continue
        preference = 2 if "COUNT" in calls else (1 if calls else 0)
        if bare_only and preference:
            continue
        found.append((preference, i, tok, columns[(lowered.index(tok.text.lower()) + 1) % len(columns)]))
    if not found:
        return None
    _, _, tok, replacement = min(found, key=lambda f: (f[0], f[1]))
    return Perturbation(_splice(sql, [tok], replacement), "column", f"{tok.text} -> {replacement}")


def _swap_aggregate(sql: str, toks: list[Token]) -> Perturbation | None:
    """The first aggregate call of the select list, as its counterpart (``MAX`` → ``MIN``, ``COUNT`` → ``MAX``)."""
    depth = 0
    for i, tok in enumerate(toks[1:], 1):
        if tok.text in ("(", ")"):
            depth += 1 if tok.text == "(" else -1
        elif depth == 0 and tok.upper == "FROM":
            return None
        elif tok.kind == "word" and tok.upper in AGGREGATE_SWAPS and i + 1 < len(toks) and toks[i + 1].text == "(":
            swap = AGGREGATE_SWAPS[tok.upper]
            return Perturbation(_splice(sql, [tok], swap), "aggregate", f"{tok.text} -> {swap}")
    return None


def _aliases(toks: list[Token], facts: Facts) -> dict[str, str]:
    """Alias (and table name) → table, for ``table AS alias``, ``table alias`` and bare tables."""
    out: dict[str, str] = {}
    for i, tok in enumerate(toks):
        name = tok.text.lower()
        if tok.kind != "word" or name not in facts.columns:
            continue
        out.setdefault(name, name)
        j = i + 2 if i + 1 < len(toks) and toks[i + 1].upper == "AS" else i + 1
        if j < len(toks) and toks[j].kind == "word" and toks[j].upper not in _CLAUSE_WORDS:
            out.setdefault(toks[j].text.lower(), name)
    return out


_CLAUSE_WORDS = {
    "WHERE",
    "JOIN",
    "ON",
    "GROUP",
    "ORDER",
    "LIMIT",
    "UNION",
    "INNER",
    "LEFT",
    "CROSS",
    "NATURAL",
    "EXCEPT",
    "INTERSECT",
    "HAVING",
    "USING",
    "AND",
    "OR",
    "WINDOW",
}


def _all_columns(facts: Facts) -> set[str]:
    return {c.lower() for cols in facts.columns.values() for c in cols}


def _other_value(values: list[Any], current: Any, op: str) -> Any:
    """Another value of the same kind (text or number) as ``current`` for the comparison ``op``, or None."""
    same_kind = [v for v in values if isinstance(v, str) == isinstance(current, str) and not isinstance(v, bytes)]
    if isinstance(current, str):
        others = [v for v in same_kind if v.lower() != current.lower()]
        below = sum(1 for v in others if v.lower() < current.lower())
    else:
        others = [v for v in same_kind if v != current]
        below = sum(1 for v in others if v < current)
    if not others:
        return None
    if op in (">", ">="):
        return others[-1]
    if op in ("<", "<="):
        return others[0]
    return others[(below + len(others) // 2) % len(others)]


def _number(text: str) -> int | float:
    if text.lower().startswith("0x"):
        return int(text, 16)
    return int(text) if text.isdigit() else float(text)


def _splice(sql: str, toks: list[Token], text: str) -> str:
    """``sql`` with each of ``toks`` (in order) replaced by ``text``."""
    out, at = [], 0
    for tok in toks:
        out += [sql[at : tok.start], text]
        at = tok.end
    return "".join(out) + sql[at:]


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
