"""An MCP server with one tool, ``calculate``: exact arithmetic on numbers, safe by construction.

The expression is parsed with :mod:`ast` and only numbers, ``+ - * / // % **``, unary signs and
parentheses are evaluated; names, calls, attributes and everything else are refused, so no input can
run code. Size limits keep a call cheap: the expression's length, the exponent, and the size of
integer results (``9**9**9`` is refused instead of computed).

Run it with ``python -m rlf_mcp.servers.calculator`` (stdio) or ``--http PORT`` (streamable HTTP on
127.0.0.1). The embedded default of ``rlf-mcp`` starts it when a run config names no server.
``--delay-ms MEDIAN`` makes every call wait a heavy-tailed while (log-normal, that median, sigma 1)
before it answers, as a search engine or a sandbox would: the workload where waiting dominates.
"""

from __future__ import annotations

import ast
import asyncio
import math
import operator
import random
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

Number = int | float

MAX_LENGTH = 200
"""Characters in one expression at most."""
MAX_EXPONENT = 1000
"""Largest absolute exponent of ``**``."""
MAX_BITS = 4096
"""Largest integer result, in bits (about 1233 decimal digits)."""

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}


class CalculatorError(ValueError):
    """The expression cannot be evaluated; the message says why, for the model to read."""


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression, or :class:`CalculatorError` naming what is wrong."""
    text = expression.strip()
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise CalculatorError(f"the expression is {len(text)} characters long; at most {MAX_LENGTH} are allowed")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise CalculatorError(f"cannot parse {text!r}: {exc.msg}") from None
    value = _eval(tree.body)
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large to represent")
    return value


def format_number(value: Number) -> str:
    """Integers exactly; floats with Python's shortest round-trip repr."""
    return str(value) if isinstance(value, int) else repr(value)


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalculatorError(f"only numbers are allowed, not {node.value!r}")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_eval(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        return _apply(type(node.op), left, right)
    raise CalculatorError(f"{_describe(node)} is not allowed: use numbers, + - * / // % ** and parentheses")


def _apply(op: type[ast.operator], left: Number, right: Number) -> Number:
    if op is ast.Pow:
        _check_power(left, right)
    try:
        value = _BINARY[op](left, right)
    except ZeroDivisionError:
        raise CalculatorError(
            f"division by zero in {format_number(left)} {_SYMBOL[op]} {format_number(right)}"
        ) from None
    except OverflowError:
        raise CalculatorError("the result is too large to represent") from None
    if isinstance(value, complex):
        raise CalculatorError(f"{format_number(left)} ** {format_number(right)} is not a real number")
    if isinstance(value, int) and value.bit_length() > MAX_BITS:
        raise CalculatorError(f"the result has more than {MAX_BITS} bits")
    return value


def _check_power(base: Number, exponent: Number) -> None:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"the exponent {format_number(exponent)} is too large (at most {MAX_EXPONENT} in size)")
    # a lower bound on the result's size
    if (
        isinstance(base, int)
        and isinstance(exponent, int)
        and exponent > 0
        and max(base.bit_length() - 1, 0) * exponent > MAX_BITS
    ):
        raise CalculatorError(f"the result has more than {MAX_BITS} bits")


def _describe(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return f"the name {node.id!r}"
    if isinstance(node, ast.Call):
        return "a function call"
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        return f"the operator {type(node.op).__name__}"
    return f"{type(node).__name__} syntax"


def build_server(
    delay_ms: float = 0.0, seed: int | None = None
) -> MCPServer:  # the SDK imported here, so ``evaluate`` needs none
    """The MCP server: one ``calculate`` tool whose errors reach the model as readable tool errors;
    each call first waits a log-normal while of median ``delay_ms`` (0: none), drawn from ``seed``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("calculator", instructions="Exact arithmetic on numbers.", log_level="WARNING")
    draw = random.Random(seed)

    @server.tool(
        description="Evaluate an arithmetic expression: numbers, + - * / // % **, unary minus and parentheses."
    )
    async def calculate(
        expression: Annotated[str, Field(description='The expression, e.g. "12 * (3 + 4) - 2 ** 5".')],
    ) -> str:
        if delay_ms > 0:  # awaited, so calls wait side by side as they would on a remote service
            await asyncio.sleep(delay_ms / 1000 * draw.lognormvariate(0.0, 1.0))
        try:
            return format_number(evaluate(expression))
        except CalculatorError as exc:
            raise ToolError(str(exc)) from None

    return server


def main(argv: list[str] | None = None) -> None:
    from rlf_mcp.servers.run import parser, serve

    p = parser("The calculator MCP server.")
    p.add_argument(
        "--delay-ms",
        type=float,
        default=0.0,
        metavar="MEDIAN",
        help="wait before each answer: log-normal, this median in milliseconds, heavy-tailed (default: 0)",
    )
    p.add_argument("--seed", type=int, default=None, help="seed of the delays (default: unseeded)")
    args = p.parse_args(argv)
    if args.delay_ms < 0:
        p.error(f"--delay-ms must be 0 or more, got {args.delay_ms}")
    serve(build_server(args.delay_ms, args.seed), args)


if __name__ == "__main__":
    main(sys.argv[1:])
