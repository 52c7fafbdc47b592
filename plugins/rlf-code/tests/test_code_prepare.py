"""The datasets from registries and shared data: gold answers score 1, deliberately wrong ones 0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from code_sandbox_support import SMALL, layers, pool  # noqa: F401 (fixtures)
from rlf_code.cli import main
from rlf_code.layers import Layers
from rlf_code.pool import Pool
from rlf_code.prepare import gsm8k_rows
from rlf_code.sandbox import Sandbox
from rlf_code.settings import Settings
from rlf_code.verify import verify

CACHE = Path.home() / ".cache" / "rlf-code"


@pytest.fixture(scope="module")
def humaneval(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("he") / "humaneval.jsonl"
    assert main(["prepare", "humaneval", "-o", str(out), "--cache", str(CACHE)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.fixture(scope="module")
def verifier(layers: Layers) -> Iterator[Pool]:
    warm = Pool(lambda: Sandbox(SMALL, layers), size=2)
    yield warm
    warm.close()


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def wrong(solution: str) -> str:
    """The function's signature and docstring kept, its body replaced by one that always fails."""
    head = solution.rsplit('"""', 1)[0] + '"""' if '"""' in solution else solution.split(":\n", 1)[0] + ":"
    return head + "\n    return None\n"


def check(pool: Pool, rows: list[dict[str, Any]], answer: Any) -> list[float]:
    """Verified six at a time, as training gathers them: each waits mostly on its sandbox's start and close."""

    def one(row: dict[str, Any]) -> float:
        return float(verify(pool, Settings(), fenced(answer(row)), row["ground_truth"]).details["pass_fraction"])

    with ThreadPoolExecutor(max_workers=6) as workers:
        return list(workers.map(one, rows))


def test_humaneval_comes_whole_from_the_wheel(humaneval: list[dict[str, Any]]) -> None:
    assert len(humaneval) == 164 and humaneval[0]["id"] == "HumanEval-0"
    assert all(r["ground_truth"]["tests"] and r["ground_truth"]["entry_point"] for r in humaneval)


def test_humaneval_gold_passes_and_wrong_fails_on_a_sample(verifier: Pool, humaneval: list[dict[str, Any]]) -> None:
    rows = humaneval[::20]
    assert check(verifier, rows, lambda r: r["extra"]["solution"]) == [1.0] * len(rows)
    assert check(verifier, rows, lambda r: wrong(r["extra"]["solution"])) == [0.0] * len(rows)


@pytest.mark.slow
def test_every_humaneval_gold_solution_passes(verifier: Pool, humaneval: list[dict[str, Any]]) -> None:
    scores = check(verifier, humaneval, lambda r: r["extra"]["solution"])
    assert [r["id"] for r, s in zip(humaneval, scores) if s != 1.0] == []


def test_gsm8k_rows_check_the_final_number(verifier: Pool, shared_data: Path) -> None:
    rows = list(gsm8k_rows("test", shared_data / "math" / "gsm8k"))
    assert len(rows) == 1319 and rows[0]["ground_truth"] == {"kind": "answer", "answer": "18"}
    for row in rows[:3]:
        want = row["ground_truth"]["answer"]
        assert verify(verifier, Settings(), fenced(f"print({want})"), row["ground_truth"]).passed
        assert not verify(verifier, Settings(), fenced(f"print({want} + 1)"), row["ground_truth"]).passed


def test_prepare_writes_gsm8k_rows(tmp_path: Path, shared_data: Path) -> None:
    where = ["--gsm8k-dir", str(shared_data / "math" / "gsm8k")]
    out = tmp_path / "g.jsonl"
    assert main(["prepare", "gsm8k", "-o", str(out), "--limit", "3", "--split", "train", *where]) == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [f"gsm8k-train-{i}" for i in range(3)]
    assert main(["prepare", "gsm8k", "-o", str(out), "--split", "dev", *where]) == 1
    with pytest.raises(SystemExit):  # GSM8K is never bundled: its folder must be named
        main(["prepare", "gsm8k", "-o", str(out)])


def test_a_failed_prepare_leaves_the_output_as_it_was(tmp_path: Path) -> None:
    gsm8k = tmp_path / "gsm8k"
    gsm8k.mkdir()
    (gsm8k / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "#### 2"}\nnot json\n')
    out = tmp_path / "out" / "rows.jsonl"
    out.parent.mkdir()
    out.write_text("kept\n")
    assert (
        main(["prepare", "gsm8k", "-o", str(out), "--split", "test", "--gsm8k-dir", str(gsm8k)]) == 1
    )  # no test split
    fresh = out.with_name("fresh.jsonl")
    assert main(["prepare", "gsm8k", "-o", str(fresh), "--split", "train", "--gsm8k-dir", str(gsm8k)]) == 1  # line 2
    assert out.read_text() == "kept\n" and sorted(p.name for p in out.parent.iterdir()) == ["rows.jsonl"]
