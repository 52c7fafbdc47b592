"""Run a sample's final answer against its row's tests, or its answer, in a fresh sandbox."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlf_code.checks import (
    BadGroundTruth,
    TestProgram,
    expected_answer,
    final_code,
    parse_number,
    program_answer,
    same_number,
)
from rlf_code.pool import Pool
from rlf_code.settings import Settings
from rlfcore import Verification


def verify(pool: Pool, settings: Settings, response: str, truth: Any) -> Verification:
    """Tests give ``pass_fraction`` and ``all_pass``; an answer gives ``correct``. Details say why."""
    kind = truth.get("kind") if isinstance(truth, Mapping) else "answer"
    code = final_code(response, settings.answer)
    if kind == "tests":
        if code is None:
            return Verification(passed=False, details={"stage": "format", "pass_fraction": 0.0})
        program = TestProgram.build(code, truth)
        out = run_fresh(pool, program.source, settings)
        passed = program.passed(out)
        if passed is None:
            return Verification(
                passed=False, details={"stage": "run", "pass_fraction": 0.0, "error": (out.error or "")[-500:]}
            )
        fraction = sum(passed) / program.count
        return Verification(passed=all(passed), score=fraction, details={"stage": "tests", "pass_fraction": fraction})
    if kind != "answer":
        raise BadGroundTruth(f"ground_truth kind {kind!r}: expected 'tests' or 'answer'")
    want = expected_answer(truth)
    if code is None:  # no program: the answer itself, as written
        tags = [t for t in response.split("<answer>")[1:] if "</answer>" in t]
        got = parse_number(tags[-1].split("</answer>")[0]) if tags else None
        return Verification(passed=same_number(got, want), details={"stage": "answer", "answer": got})
    out = run_fresh(pool, code, settings)
    got = program_answer(out) if out.error is None else None
    return Verification(
        passed=same_number(got, want),
        details={"stage": "program", "answer": got, **({"error": out.error[-500:]} if out.error else {})},
    )


def run_fresh(pool: Pool, source: str, settings: Settings) -> Any:
    """One program in a sandbox of its own, closed after it."""
    sandbox = pool.take()
    try:
        return sandbox.call(source, timeout_s=settings.verify_timeout_s)
    finally:
        sandbox.close()
