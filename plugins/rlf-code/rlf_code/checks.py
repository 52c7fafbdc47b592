"""What a sample's answer is checked against, and the programs that check it in a fresh sandbox.

A row's ``ground_truth`` is one of:

- ``{"kind": "tests", "tests": [...], "setup": "...", "entry_point": "f"}``: unit tests, each a Python
  statement run after the answer's code (``candidate`` names the entry point); the answer scores the
  fraction that pass, and whether all do.
- ``{"kind": "answer", "answer": "18"}`` (or a plain string/number): program of thought, the answer's
  program prints (or ends with) a number that must equal it.
"""

from __future__ import annotations

import ast
import json
import math
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlf_code.sandbox import Output

FENCE = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")


class BadGroundTruth(ValueError):
    """A row's ground truth has neither tests nor an answer: the data's fault, not the model's."""


def final_code(response: str, where: str) -> str | None:
    """The answer's program: the last fenced block (inside ``<answer>`` with ``where="answer_tag"``)."""
    text = response
    if where == "answer_tag":
        tags = ANSWER.findall(response)
        if not tags:
            return None
        text = tags[-1]
    blocks = FENCE.findall(text)
    if blocks:
        return str(blocks[-1])
    return text.strip() if where == "answer_tag" and text.strip() else None


def split_tests(test_source: str, entry_point: str) -> tuple[str, list[str]]:
    """HumanEval's ``check(candidate)`` as setup and one test per top-level statement that asserts
    (a statement without an ``assert`` is setup), so a pass fraction can be counted."""
    module = ast.parse(test_source)
    setup: list[str] = []
    tests: list[str] = []
    for node in module.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            for stmt in node.body:
                if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant):
                    continue  # `assert True, "..."`: passes whatever the answer
                source = ast.unparse(stmt)
                asserts = any(isinstance(n, ast.Assert) for n in ast.walk(stmt))
                (tests if asserts else setup).append(source)
        else:
            setup.append(ast.unparse(node))
    if not tests:
        raise BadGroundTruth(f"the tests of {entry_point!r} assert nothing")
    return "\n".join(setup), tests


@dataclass(frozen=True)
class TestProgram:
    """The answer's code with a harness that runs each test and prints a line tagged with a nonce."""

    source: str
    nonce: str
    count: int

    @classmethod
    def build(cls, code: str, truth: Mapping[str, Any]) -> TestProgram:
        nonce = secrets.token_hex(8)
        tests = [str(t) for t in truth.get("tests", [])]
        if not tests:
            raise BadGroundTruth("ground_truth of kind 'tests' has no tests")
        entry = truth.get("entry_point")
        harness = f"""
def __rlf_run(__tests, __setup):
    import json as __json
    __passed = []
    __env = dict(globals())
    try:
        exec(__setup, __env)
    except BaseException as __exc:
        print({nonce!r}, __json.dumps({{"passed": [False] * len(__tests), "setup_error": repr(__exc)[:300]}}))
        return
    for __t in __tests:
        try:
            exec(__t, __env)
            __passed.append(True)
        except BaseException:
            __passed.append(False)
    print({nonce!r}, __json.dumps({{"passed": __passed}}), flush=True)
{f"candidate = {entry}" if entry else ""}
__rlf_run({tests!r}, {str(truth.get("setup", ""))!r})
"""
        return cls(source=code + "\n" + harness, nonce=nonce, count=len(tests))

    def passed(self, out: Output) -> list[bool] | None:
        """Each test's outcome, or ``None`` when the harness never reported (the code ended it)."""
        for line in reversed(out.stdout.splitlines()):
            if line.startswith(self.nonce + " "):
                found = json.loads(line[len(self.nonce) + 1 :])["passed"]
                return [bool(p) for p in found][: self.count]
        return None


def expected_answer(truth: Any) -> float:
    value = truth.get("answer") if isinstance(truth, Mapping) else truth
    number = parse_number(str(value))
    if number is None:
        raise BadGroundTruth(f"ground truth {value!r} is not a number")
    return number


def parse_number(text: str) -> float | None:
    """The last number in ``text`` (``1,234.5``, ``-3``, ``$18``), or ``None``."""
    found = NUMBER.findall(text)
    if not found:
        return None
    try:
        return float(found[-1].replace(",", ""))
    except ValueError:
        return None


def program_answer(out: Output) -> float | None:
    """What a program of thought answered: its last expression's value, else its last printed number."""
    for text in (out.result or "", out.stdout):
        lines = [line for line in text.splitlines() if line.strip()]
        if lines and (number := parse_number(lines[-1])) is not None:
            return number
    return None


def same_number(got: float | None, want: float) -> bool:
    return got is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-6)
