"""``rlf eval --repeats``: pass@k with the unbiased estimator, mean@k, and the per-row difficulty file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.evaluation import k_values, pass_at_k
from tests.support.rlf import run_rlf

SOLVED_ON = {"one_of_four": {0}, "always": {0, 1, 2, 3}, "never": set(), "half": {1, 3}}
"""Per row, the samples (``row#k``) that give the right answer."""


def _policy(request_id: str, _prompt: str) -> str:
    row, k = request_id.rsplit("#", 1)
    return "5" if int(k) in SOLVED_ON[row] else "6"


def test_pass_at_k_is_the_unbiased_estimator():
    assert [pass_at_k(4, 1, k) for k in (1, 2, 4)] == pytest.approx([0.25, 0.5, 1.0])
    assert [pass_at_k(4, 2, k) for k in (1, 2, 4)] == pytest.approx([0.5, 5 / 6, 1.0])  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(3, 3, 1) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    assert (
        k_values(1) == [1] and k_values(4) == [1, 2, 4] and k_values(6) == [1, 2, 4, 6] and k_values(8) == [1, 2, 4, 8]
    )


def test_a_scripted_policy_gets_hand_computed_pass_at_k_and_difficulty():
    from rlfcore.chat import ByteChatTokenizer
    from rlfcore.data import normalize_row
    from rlfcore.engines.scripted import ScriptedEngine
    from rlfcore.evaluation import evaluate, row_profiles
    from rlfcore.testing import make_runtime

    runtime = make_runtime({"rollout": {"n": 4, "max_turns": 1}})
    tok = ByteChatTokenizer()
    rows = [normalize_row({"id": r, "prompt": "2+3?", "ground_truth": "5"}) for r in SOLVED_ON]
    try:
        trajectories, summary = runtime.run(evaluate(runtime, ScriptedEngine(tok, _policy), tok, rows))
    finally:
        runtime.close()
    assert summary["samples_per_row"] == 4 and summary["solved_at"] == 1.0
    # per row pass@1, @2, @4: one_of_four 1/4, 1/2, 1; always 1, 1, 1; never 0, 0, 0; half 1/2, 5/6, 1
    assert summary["pass_at_k"] == pytest.approx({1: 7 / 16, 2: (0.5 + 1 + 0 + 5 / 6) / 4, 4: 3 / 4})
    assert summary["mean_at_k"] == pytest.approx(7 / 16) and summary["components"]["exact_match"] == pytest.approx(
        7 / 16
    )
    profiles = {p["id"]: p for p in row_profiles(trajectories, 1.0)}
    assert list(profiles) == list(SOLVED_ON)
    assert {r: (p["samples"], p["solved"], p["solve_rate"]) for r, p in profiles.items()} == {
        "one_of_four": (4, 1, 0.25),
        "always": (4, 4, 1.0),
        "never": (4, 0, 0.0),
        "half": (4, 2, 0.5),
    }
    assert profiles["one_of_four"]["reward_mean"] == 0.25 and profiles["one_of_four"]["reward_var"] == pytest.approx(
        0.1875
    )
    assert profiles["always"]["reward_var"] == 0.0 and profiles["half"]["reward_var"] == 0.25
    # a higher bar: nothing scores 2, so nothing is solved
    assert all(p["solve_rate"] == 0.0 for p in row_profiles(trajectories, 2.0))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlfcore.tinymodel import build_tiny

    texts = ["What is 2 plus 3? The answer is 5.", "5", "6"] * 20
    return build_tiny(texts, tmp_path_factory.mktemp("tiny") / "model", vocab_size=280)


def _project(tmp_path: Path, tiny: Path) -> Path:
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text(
        f"model:\n  path: {tiny}\ndata:\n  eval: data.jsonl\nrollout:\n  n: 2\n  max_turns: 1\n"
        "  sampling:\n    max_tokens: 4\n    seed: 1\nengine:\n  device: cpu\n"
    )
    return tmp_path / "run.yaml"


def test_eval_repeats_writes_a_difficulty_file_that_matches_the_trajectories(tiny: Path, tmp_path: Path):
    config = _project(tmp_path, tiny)
    out = run_rlf("eval", str(config), "--repeats", "4", "--solved-at", "0", "--out", "out.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    records = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(records) == 12  # --repeats 4 over rollout.n 2
    lines = [json.loads(x) for x in (tmp_path / "out.difficulty.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["q0", "q1", "q2"]
    for line in lines:
        rewards = [r["reward"] for r in records if r["row_id"] == line["id"]]
        assert line["samples"] == 4 and line["solved_at"] == 0.0
        assert line["solve_rate"] == sum(r >= 0 for r in rewards) / 4 == 1.0  # every reward is >= 0
        assert line["reward_mean"] == pytest.approx(sum(rewards) / 4)
    assert "pass@4" in out.stdout and "mean@4" in out.stdout and "out.difficulty.jsonl" in out.stdout

    named = run_rlf("eval", str(config), "--difficulty", "d/rows.jsonl", "--out", "two.jsonl", cwd=tmp_path)
    assert named.returncode == 0, named.stdout + named.stderr
    assert [json.loads(x)["samples"] for x in (tmp_path / "d" / "rows.jsonl").read_text().splitlines()] == [2, 2, 2]
    assert not (tmp_path / "two.difficulty.jsonl").exists()


def test_eval_without_repeats_writes_no_difficulty_file_and_refuses_greedy_repeats(tiny: Path, tmp_path: Path):
    config = _project(tmp_path, tiny)
    out = run_rlf("eval", str(config), "--out", "out.jsonl", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 6  # rollout.n, as before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "out.jsonl", "run.yaml"]
    refused = run_rlf("eval", str(config), "--greedy", "--repeats", "4", cwd=tmp_path)
    assert refused.returncode == 2 and "--greedy" in refused.stderr
