"""The plugin through rlf's real loop and reward pipeline, with a scripted policy."""

from __future__ import annotations

import json
from typing import Any

from rlfcore.testing import check_plugin, rollout

CONFIG: dict[str, Any] = {"plugins": ["code"], "code": {"pool_size": 1, "limits": {"call_timeout_s": 3}}}
TESTS = {"kind": "tests", "entry_point": "add", "tests": ["assert candidate(2, 3) == 5", "assert add(2, 2) == 4"]}


def call(code: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'python', 'arguments': {'code': code}})}</tool_call>"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_plugin_passes_the_conformance_check() -> None:
    report = check_plugin("code")
    assert report.ok, report.render()


def test_state_is_kept_within_a_trajectory_and_apart_between_trajectories() -> None:
    script = {
        "a": [call("x = 6 * 7"), call("x"), fenced("def add(a, b):\n    return a + b")],
        "b": [call("'x' in dir()"), fenced("def add(a, b):\n    return a * b")],
    }
    rows = [{"id": k, "prompt": "Write add(a, b).", "ground_truth": TESTS} for k in script]
    trajs = {t.row_id: t for t in rollout(CONFIG, rows, script)}
    tool_text = {k: [m["content"] for m in t.messages if m["role"] == "tool"] for k, t in trajs.items()}
    assert tool_text["a"] == ["[no output]", "[result]\n42"]
    assert tool_text["b"] == ["[result]\nFalse"]
    assert trajs["a"].reward == 1.0 and trajs["a"].reward_components["pass_fraction"] == 1.0
    assert trajs["b"].reward == 0.0 and trajs["b"].reward_components["pass_fraction"] == 0.5


def test_hostile_code_is_an_error_result_and_the_trajectory_goes_on() -> None:
    script = {"loop": [call("while True: pass"), call("1 + 1"), fenced("def add(a, b):\n    return a + b")]}
    rows = [{"id": "loop", "prompt": "Write add(a, b).", "ground_truth": TESTS}]
    (traj,) = rollout(CONFIG, rows, script)
    first, second = (m["content"] for m in traj.messages if m["role"] == "tool")
    assert first.startswith("Error: tool 'python' failed: CodeError: [error]\nthe call ran past its 3 s limit")
    assert "[result]\n2" in second and "new interpreter" in second
    assert traj.tool_errors == 1 and traj.reward == 1.0


def test_program_of_thought_answers_are_checked_by_running_them() -> None:
    truth = {"kind": "answer", "answer": "18"}
    script = {
        "right": [fenced("eggs = 16 - 3 - 4\nprint(f'${eggs * 2}')")],
        "value": [fenced("(16 - 3 - 4) * 2")],
        "tagged": ["<answer>18</answer>"],
        "wrong": [fenced("print(19)")],
        "raises": [fenced("print(18 / 0)")],
    }
    rows = [{"id": k, "prompt": "Janet's ducks...", "ground_truth": truth} for k in script]
    rewards = {t.row_id: t.reward for t in rollout(CONFIG, rows, script)}
    assert rewards == {"right": 1.0, "value": 1.0, "tagged": 1.0, "wrong": 0.0, "raises": 0.0}


def test_a_bad_ground_truth_is_a_reward_error_not_a_zero_for_the_model() -> None:
    rows = [{"id": "bad", "prompt": "p", "ground_truth": {"kind": "tests", "tests": []}}]
    (traj,) = rollout(CONFIG, rows, {"bad": [fenced("x = 1")]})
    assert traj.reward == 0.0 and "has no tests" in (traj.reward_error or "")
