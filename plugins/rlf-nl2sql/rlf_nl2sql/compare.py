"""Execution accuracy: do two query results hold the same answer?

The rules follow Spider's and BIRD's execution match:

- results are multisets of rows (duplicates count), compared in order only when the gold query
  orders its result (a top-level ``ORDER BY``);
- numbers compare by value within a tolerance, so ``3``, ``3.0`` and ``2.9999999999`` agree, but
  ``'3'`` (text) and ``3`` do not, as SQLite keeps them apart too;
- ``NULL`` equals ``NULL``;
- when ``ignore_column_order`` is set (Spider), the prediction may list the same columns in another
  order; BIRD compares columns in place (set it false).

With tolerance a multiset is no longer a set of hashable keys, so exact matches are taken first
(Counter subtraction), and the few rows left are paired after sorting, then greedily.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

Row = Sequence[Any]

MAX_PERMUTATIONS = 120
"""Column orders tried at most when matching a prediction whose columns are shuffled."""
MAX_GREEDY_ROWS = 2000
"""Above this many rows left unmatched after exact matching, tolerant pairing by sorting must suffice."""


@dataclass(frozen=True)
class Tolerance:
    rel: float = 1e-6
    abs: float = 1e-9


def results_match(
    gold: Sequence[Row],
    pred: Sequence[Row],
    *,
    ordered: bool,
    tolerance: Tolerance = Tolerance(),
    ignore_column_order: bool = True,
) -> bool:
    """Whether ``pred`` answers like ``gold`` (see the module docstring for the rules)."""
    if len(gold) != len(pred):
        return False
    if not gold:
        return True
    width = len(gold[0])
    if any(len(r) != width for r in pred):
        return False
    if _match(gold, pred, ordered, tolerance):
        return True
    if not ignore_column_order or width <= 1:  # one column has no order to ignore
        return False
    for order in _column_orders(gold, pred, width):
        if _match(gold, [tuple(r[i] for i in order) for r in pred], ordered, tolerance):
            return True
    return False


def _match(gold: Sequence[Row], pred: Sequence[Row], ordered: bool, tol: Tolerance) -> bool:
    if ordered:
        return all(_rows_close(g, p, tol) for g, p in zip(gold, pred))
    gold_count, pred_count = Counter(map(tuple, gold)), Counter(map(tuple, pred))
    if gold_count == pred_count:
        return True
    left_gold = sorted((gold_count - pred_count).elements(), key=_row_key)
    left_pred = sorted((pred_count - gold_count).elements(), key=_row_key)
    if len(left_gold) != len(left_pred) or not any(_has_float(r) for r in left_gold + left_pred):
        return False
    if all(_rows_close(g, p, tol) for g, p in zip(left_gold, left_pred)):
        return True
    if len(left_pred) > MAX_GREEDY_ROWS:
        return False
    unmatched = list(left_gold)
    for p in left_pred:
        hit = next((i for i, g in enumerate(unmatched) if _rows_close(g, p, tol)), None)
        if hit is None:
            return False
        unmatched.pop(hit)
    return True


def values_close(a: Any, b: Any, tol: Tolerance = Tolerance()) -> bool:
    """One cell: numbers within tolerance, everything else (text, blobs, NULL) exactly."""
    if _is_number(a) and _is_number(b):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return math.isclose(a, b, rel_tol=tol.rel, abs_tol=tol.abs)
    return type(a) is type(b) and a == b


def _rows_close(g: Row, p: Row, tol: Tolerance) -> bool:
    return all(values_close(a, b, tol) for a, b in zip(g, p))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _has_float(row: Row) -> bool:
    return any(isinstance(v, float) for v in row)


def _value_key(v: Any) -> tuple[int, Any]:
    """A sort key that orders mixed types and puts near-equal numbers next to each other."""
    if v is None:
        return (0, 0)
    if _is_number(v):
        return (1, float(f"{float(v):.6g}") if math.isfinite(v) else float(v))
    if isinstance(v, str):
        return (2, v)
    return (3, bytes(v) if isinstance(v, (bytes, bytearray, memoryview)) else repr(v))


def _row_key(row: Row) -> tuple[tuple[int, Any], ...]:
    return tuple(_value_key(v) for v in row)


def _column_orders(gold: Sequence[Row], pred: Sequence[Row], width: int) -> list[tuple[int, ...]]:
    """Orders of the prediction's columns whose value multisets fit the gold's, identity excluded."""
    gold_cols = [sorted(_value_key(r[i]) for r in gold) for i in range(width)]
    pred_cols = [sorted(_value_key(r[i]) for r in pred) for i in range(width)]
    candidates = [[j for j in range(width) if pred_cols[j] == gold_cols[i]] for i in range(width)]
    if any(not c for c in candidates):
        return []
    identity = tuple(range(width))
    return [o for o in itertools.islice(_permutations(candidates, ()), MAX_PERMUTATIONS + 1) if o != identity]


def _permutations(candidates: list[list[int]], prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Column orders taking each position's column from its candidates, no column twice (backtracking)."""
    if len(prefix) == len(candidates):
        yield prefix
        return
    for j in candidates[len(prefix)]:
        if j not in prefix:
            yield from _permutations(candidates, prefix + (j,))
