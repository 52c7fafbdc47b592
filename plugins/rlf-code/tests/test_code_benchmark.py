"""benchmarks/call_latency.py at tiny sizes: every row is printed with its failure count, and a gold
solution that does not score 1 is counted, not hidden."""

from __future__ import annotations

import importlib.util
import itertools
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from rlf_code.prepare import humaneval_rows

PLUGIN = Path(__file__).resolve().parents[1]
SCRIPT = PLUGIN / "benchmarks" / "call_latency.py"
CACHE = Path.home() / ".cache" / "rlf-code"


def benchmark(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script as a module (registered while the test runs: its dataclass looks its module up)."""
    spec = importlib.util.spec_from_file_location("call_latency", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_the_benchmark_prints_every_row_with_its_failures() -> None:
    args = ["--calls", "3", "--sessions", "2", "--starts", "2", "--humaneval", "3", "--cache", str(CACHE)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=PLUGIN, capture_output=True, text=True, timeout=240, check=False
    )
    assert proc.returncode == 0, proc.stderr
    counts = dict(re.findall(r"^(\S.*?)\s+p50 .* failures (\d+/\d+)$", proc.stdout, re.MULTILINE))
    assert counts == {
        "in-process exec": "0/3",
        "subprocess.run(python -c)": "0/20",
        "sandbox, 2 sessions": "0/6",
        "sandbox start + close (no pool)": "0/2",
        "HumanEval gold, 3 verifications": "0/3",
    }, proc.stdout
    assert re.search(r"HumanEval gold, 3 verifications .* [\d.]+ verifications/s\s+wall\s+[\d.]+ s", proc.stdout)


def test_a_gold_solution_that_fails_is_counted_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = list(itertools.islice(humaneval_rows(CACHE), 2))
    entry_point, gold = rows[1]["ground_truth"]["entry_point"], rows[1]["extra"]["solution"]
    wrong = f"{gold}\n\ndef {entry_point}(*args):\n    return None\n"  # the gold, then redefined to fail
    broken = {**rows[1], "extra": {**rows[1]["extra"], "solution": wrong}}
    row = benchmark(monkeypatch).score_gold([rows[0], broken])
    assert row.count == 2 and row.wall_s > 0
    assert len(row.failures) == 1 and row.failures[0].startswith("HumanEval-1: reward 0.0"), row.failures
