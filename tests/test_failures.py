"""A run that failed says so: ``rlf eval`` against a dead or wrong endpoint, broken reward hooks.

The served model is rlfcore.testing's OpenAIServer, its completions route on loopback (vLLM cannot run here);
the tokenizer is a tiny one built here; everything else is the real ``rlf`` command.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.testing import OpenAIServer, closed_url, counting
from tests.support.rlf import run_rlf

ROWS = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(4)]

BAD_REWARDS = """
from rlfcore import hookimpl


@hookimpl
def compute_score(sample, verification, ctx):
    kind = sample.id.split("#")[0]
    if kind == "q0":
        return "great"
    if kind == "q1":
        return {"score": 1.0}
    if kind == "q2":
        return {"a": 1}["b"]
    return 1.0
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    return build_tiny(
        ["What is 2 plus 3? The answer is 5."] * 10, tmp_path_factory.mktemp("tiny") / "model", vocab_size=280
    )


def _project(tmp_path: Path, tiny: Path, extra: str = "") -> Path:
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "run.yaml").write_text(f"model: {{path: {tiny}}}\ndata: {{eval: data.jsonl}}\n{extra}")
    return tmp_path / "run.yaml"


def test_eval_against_an_unreachable_endpoint_fails_loud(tiny, tmp_path):
    config = _project(tmp_path, tiny, f"engine: {{name: openai, base_url: '{closed_url()}'}}\n")
    out = run_rlf("eval", str(config), "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "every trajectory failed" in out.stderr and "rollout ConnectError ×4" in out.stderr
    assert "first: rollout: EngineError: http://127.0.0.1" in out.stderr
    assert len((tmp_path / "out.jsonl").read_text().splitlines()) == 4  # the records are still kept


def test_eval_against_a_404_fails_loud_with_the_status(tiny, tmp_path):
    with OpenAIServer() as server:
        config = _project(tmp_path, tiny, f"engine: {{name: openai, base_url: '{server.base_url[:-3]}/api'}}\n")
        out = run_rlf("eval", str(config), "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "4 of 4 trajectories failed: rollout HTTP 404 ×4" in out.stderr


def test_broken_reward_hooks_cost_their_samples_only_and_name_plugin_hook_and_value(tiny, tmp_path):
    (tmp_path / "bad.py").write_text(BAD_REWARDS)
    with OpenAIServer(completions=counting(eos_id=7)) as server:
        config = _project(
            tmp_path,
            tiny,
            f"local_plugins: [bad.py]\nengine: {{name: openai, base_url: '{server.base_url}'}}\n"
            "rollout: {sampling: {max_tokens: 4}}\n",
        )
        out = run_rlf("--debug", "eval", str(config), "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    records = {r["row_id"]: r for r in map(json.loads, (tmp_path / "out.jsonl").read_text().splitlines())}
    assert (
        records["q0"]["reward_error"]
        == "compute_score of plugin 'bad' returned str 'great'; expected a float, a Score, a list of per-turn floats, or None"
    )
    assert records["q1"]["reward_error"].startswith("compute_score of plugin 'bad' returned dict {'score': 1.0}")
    assert records["q2"]["reward_error"] == "compute_score failed: KeyError: 'b'"
    assert 'bad.py", line 13, in compute_score' in records["q2"]["reward_traceback"]
    assert records["q3"]["reward"] == 1.0 and records["q3"]["reward_error"] is None
    assert "errors: 3 of 4 trajectories failed" in out.stderr
    assert "traceback of the first reward error (q2#0)" in out.stderr and "KeyError: 'b'" in out.stderr


@pytest.mark.parametrize("value", ['"great"', '{"score": 1.0}'])
def test_plugins_check_rejects_a_reward_of_the_wrong_type(tmp_path, value):
    (tmp_path / "wrong.py").write_text(
        "from rlfcore import hookimpl\nfrom rlfcore.tools import tool\n\n\n@tool\ndef echo(text: str) -> str:\n"
        '    """Echo."""\n    return text\n\n\n@hookimpl\ndef register_tools(ctx):\n    return [echo]\n\n\n'
        f"@hookimpl\ndef compute_score(sample, verification, ctx):\n    return {value}\n"
    )
    out = run_rlf("plugins", "check", str(tmp_path / "wrong.py"), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "[FAIL] smoke rollout" in out.stdout and "compute_score of plugin 'wrong' returned" in out.stdout


def test_an_agent_that_failed_before_the_policy_generated_anything_counts_as_failed():
    """Every episode's agent failing at once (a wrong model name, a missing library) stops the step,
    naming the agent's error; an agent that failed after its first answer keeps its sample."""
    from rlfcore.failures import RunFailed, check_not_all_failed, error_of
    from rlfcore.loop import Trajectory

    def episode(turns: int, reason: str = "agent_error") -> Trajectory:
        said = "NotFoundError: model 'gpt-4o' does not exist here"
        t = Trajectory(id="q#0", row_id="q", env=None, messages=[], num_turns=turns, error=said)
        t.stop_reason = reason  # type: ignore[assignment]
        return t

    assert error_of(episode(0)) == "agent: NotFoundError: model 'gpt-4o' does not exist here"
    assert error_of(episode(0, "agent_timeout")) is not None
    assert error_of(episode(1)) is None
    with pytest.raises(RunFailed, match=r"step 1: every trajectory failed.*agent NotFoundError ×2"):
        check_not_all_failed([episode(0), episode(0)], "step 1")
    check_not_all_failed([episode(0), episode(1)], "step 1")
