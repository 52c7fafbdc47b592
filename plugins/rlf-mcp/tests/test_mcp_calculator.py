"""The calculator example server's evaluator: exact arithmetic, and nothing else. (Its MCP side runs in
test_mcp_rollout.py.)"""

from __future__ import annotations

import re

import pytest
from rlf_mcp.servers.calculator import MAX_BITS, MAX_LENGTH, CalculatorError, evaluate, format_number


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("12 * (3 + 4) - 2 ** 5", 52),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 % 3", 2),
        ("-(2 ** 3)", -8),
        ("+4 - -4", 8),
        ("2 ** -1", 0.5),
        ("1.5e3 + 0.25", 1500.25),
        ("2 ** 1000 // 2 ** 999", 2),
    ],
)
def test_evaluates_arithmetic_exactly(expression, value):
    result = evaluate(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('true')", "a function call is not allowed"),
        ("x + 1", "the name 'x' is not allowed"),
        ("(1).real", "Attribute syntax is not allowed"),
        ("1 < 2", "Compare syntax is not allowed"),
        ("1 << 40", "the operator LShift is not allowed"),
        ("'a' * 3", "only numbers are allowed, not 'a'"),
        ("True + 1", "only numbers are allowed, not True"),
        ("[1, 2]", "List syntax is not allowed"),
        ("1 +", "cannot parse '1 +'"),
        ("", "the expression is empty"),
        ("1/0", "division by zero in 1 / 0"),
        ("5 % 0", "division by zero in 5 % 0"),
        ("(-8) ** 0.5", "is not a real number"),
        ("9 ** 9 ** 9", "the exponent 387420489 is too large"),
        ("(2 ** 1000) ** 1000", "more than 4096 bits"),
        ("10.0 ** 400", "too large to represent"),
        ("1e308 * 10", "too large to represent"),
        ("1+" * 150 + "1", f"at most {MAX_LENGTH} are allowed"),
    ],
)
def test_refuses_everything_else_with_a_message_naming_why(expression, message):
    with pytest.raises(CalculatorError, match=re.escape(message)):
        evaluate(expression)


def test_integer_results_stay_under_the_size_limit():
    assert evaluate("2 ** 1000 * 2 ** 1000 * 2 ** 1000 * 2 ** 1000").bit_length() <= MAX_BITS
    with pytest.raises(CalculatorError, match="more than 4096 bits"):
        evaluate("2 ** 1000 * 2 ** 1000 * 2 ** 1000 * 2 ** 1000 * 2 ** 1000")
    assert format_number(evaluate("6 / 3")) == "2.0" and format_number(evaluate("6 // 3")) == "2"


def test_a_delayed_calculator_waits_heavy_tailed_and_side_by_side():
    """``--delay-ms``: each call waits a log-normal while of that median before it answers, and calls
    wait at the same time (as on a remote service), so 16 calls take about the longest, not the sum."""
    import asyncio
    import statistics
    import time

    from rlf_mcp.servers.calculator import build_server

    server = build_server(delay_ms=40, seed=1)

    async def one() -> float:
        t0 = time.perf_counter()
        result = await server.call_tool("calculate", {"expression": "6 * 7"})
        assert result.structured_content == {"result": "42"}
        return time.perf_counter() - t0

    async def all_at_once() -> tuple[list[float], float]:
        t0 = time.perf_counter()
        waits = await asyncio.gather(*(one() for _ in range(16)))
        return list(waits), time.perf_counter() - t0

    waits, wall = asyncio.run(all_at_once())
    assert min(waits) > 0.002 and max(waits) > 0.04  # every call waited; the tail is longer than the median
    assert wall < 0.8 * sum(waits)
    assert 0.01 < statistics.median(waits) < 0.2


def test_a_negative_delay_is_refused():
    from rlf_mcp.servers.calculator import main

    with pytest.raises(SystemExit) as exc:
        main(["--delay-ms", "-1"])
    assert exc.value.code == 2
