"""Execution-match semantics: multisets, order, numeric tolerance, NULLs, column order."""

from __future__ import annotations

from rlf_nl2sql.compare import Tolerance, results_match, values_close


def match(gold, pred, ordered=False, **kw):
    return results_match(gold, pred, ordered=ordered, **kw)


def test_rows_are_a_multiset_unless_the_gold_orders():
    gold = [("a", 1), ("b", 2), ("b", 2)]
    assert match(gold, [("b", 2), ("a", 1), ("b", 2)])
    assert not match(gold, [("a", 1), ("b", 2)])  # a duplicate is missing
    assert not match(gold, [("a", 1), ("a", 1), ("b", 2)])  # same set, other counts
    assert not match(gold, [("b", 2), ("a", 1), ("b", 2)], ordered=True)
    assert match(gold, [("a", 1), ("b", 2), ("b", 2)], ordered=True)


def test_empty_results_and_widths():
    assert match([], [])
    assert not match([], [(1,)])
    assert not match([(1,)], [(1, 2)])


def test_numbers_compare_within_tolerance_and_across_int_and_float():
    assert match([(3,)], [(3.0,)])
    assert match([(0.1 + 0.2,)], [(0.3,)])
    assert match([(437.9,), (1.0,)], [(1.0000000001,), (437.90000000000003,)])
    assert not match([(1.0,)], [(1.001,)])
    assert match([(1.0,)], [(1.001,)], tolerance=Tolerance(rel=1e-2))
    assert match([(0.0,)], [(1e-12,)])  # absolute tolerance near zero
    assert not match([(2**60,)], [(2**60 + 1,)])  # integers are exact


def test_text_is_not_a_number_and_null_equals_null():
    assert not values_close("3", 3)
    assert not match([("3",)], [(3,)])
    assert match([(None, "x")], [(None, "x")])
    assert not match([(None,)], [(0,)])
    assert not match([(None,)], [("",)])
    assert not match([("Texas",)], [("texas",)])


def test_columns_in_another_order_match_only_when_allowed():
    gold = [("ada", 36), ("alan", 41)]
    swapped = [(41, "alan"), (36, "ada")]
    assert match(gold, swapped)
    assert not match(gold, swapped, ignore_column_order=False)
    assert not match(gold, [(36, "alan"), (41, "ada")])  # right values, wrong pairing
    # ordered results keep their row order even when columns move
    assert match(gold, [(36, "ada"), (41, "alan")], ordered=True)
    assert not match(gold, swapped, ordered=True)


def test_tolerant_matching_pairs_leftover_rows():
    gold = [("x", 1.0), ("y", 2.0), ("z", 1.0 + 1e-12)]
    pred = [("z", 1.0), ("x", 1.0 + 1e-12), ("y", 2.0 - 1e-12)]
    assert match(gold, pred)
    assert not match(gold, [("z", 1.0), ("x", 1.0), ("y", 2.5)])
