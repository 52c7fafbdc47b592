"""verifiers environments written in the test, in verifiers 0.4's documented style (the layout ``vf-init``
scaffolds: a TaskData, a Task with ``@vf.reward`` methods and ``toolsets``, a ``vf.Toolset`` with
``@vf.tool`` methods, a Taskset), prepared as rows and rolled out through rlf's real loop and reward
pipeline with a scripted policy."""

from __future__ import annotations

import json
import textwrap
from importlib.metadata import PackageNotFoundError
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from rlf_verifiers import bridge
from verifiers_testkit import verifiers_or_skip

from rlfcore.cli import cli
from rlfcore.testing import OpenAIServer, build_tiny, check_plugin, rollout

ARITH = '''
import verifiers.v1 as vf


class ArithData(vf.TaskData):
    answer: str


class CalcState(vf.State):
    calls: int = 0


class CalcToolset(vf.Toolset[vf.ToolsetConfig, CalcState]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> str:
        """Add two integers."""
        self.state.calls += 1
        return str(a + b)


SETUPS = []


class TableToolset(vf.Toolset[vf.SharedToolsetConfig]):
    TOOL_PREFIX = None

    async def setup(self) -> None:
        SETUPS.append(type(self).__name__)
        self.numbers = {"two": 2, "three": 3}

    @vf.tool
    async def lookup(self, word: str) -> str:
        """The number a word names."""
        return str(self.numbers[word])


class ArithTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class ArithTask(vf.Task[ArithData, CalcState, ArithTaskConfig]):
    @classmethod
    def toolsets(cls, config: ArithTaskConfig) -> list[vf.Toolset]:
        return [CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == self.data.answer)

    @vf.reward(weight=0.5)
    async def used_tool(self, trace: vf.Trace) -> float:
        return float(trace.state.calls > 0)

    @vf.metric
    async def turns(self, trace: vf.Trace) -> float:
        return float(trace.num_turns)

    @vf.metric
    async def truncated(self, trace: vf.Trace) -> float:
        return float(trace.is_truncated)


class ArithConfig(vf.TasksetConfig):
    num_tasks: int = 2
    task: ArithTaskConfig = ArithTaskConfig()


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    @classmethod
    def toolsets(cls, config: ArithConfig) -> list[vf.Toolset]:
        return [TableToolset(vf.SharedToolsetConfig())]

    def load(self) -> list[ArithTask]:
        return [
            ArithTask(
                ArithData(id=f"add-{i}", prompt=f"What is {i} + 2?", system_prompt="Use the calculator.", answer=str(i + 2)),
                self.config.task,
            )
            for i in range(self.config.num_tasks)
        ]


__all__ = ["ArithTaskset"]
'''

NEEDS_RUNTIME = """
import verifiers.v1 as vf


class BoxTask(vf.Task):
    @vf.reward
    async def tests_pass(self, trace: vf.Trace, runtime: vf.Runtime) -> float:
        return 1.0


class BoxTaskset(vf.Taskset[BoxTask, vf.TasksetConfig]):
    def load(self) -> list[BoxTask]:
        return [BoxTask(vf.TaskData(prompt="Fix the bug."))]


__all__ = ["BoxTaskset"]
"""

OWN_ENV = """
import verifiers.v1 as vf


class DuelEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class DuelEnv(vf.Env[DuelEnvConfig]):
    async def run(self, task, agents):
        await agents.player.run(task)


class DuelTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self) -> list[vf.Task]:
        return [vf.Task(vf.TaskData(prompt="Play."))]


__all__ = ["DuelEnv", "DuelTaskset"]
"""


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test environments as installed modules (verifiers imports a taskset id as its module)."""
    verifiers_or_skip()
    for module, source in {"rlf_vf_arith": ARITH, "rlf_vf_box": NEEDS_RUNTIME, "rlf_vf_duel": OWN_ENV}.items():
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def prepare(env: str, out: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["verifiers", "prepare", env, "-o", str(out), *args])


def rows_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def call(a: int, b: int) -> str:
    return f"<tool_call>{json.dumps({'name': 'calc_add', 'arguments': {'a': a, 'b': b}})}</tool_call>"


CONFIG: dict[str, Any] = {"plugins": ["verifiers"], "verifiers": {"env": "rlf-vf-arith"}}


def test_prepare_writes_the_tasks_as_rows_with_their_data(envs: Path) -> None:
    result = prepare("rlf-vf-arith", envs / "rows.jsonl", "--args", '{"num_tasks": 3}')
    assert result.exit_code == 0, result.output
    rows = rows_of(envs / "rows.jsonl")
    assert [r["id"] for r in rows] == ["add-0", "add-1", "add-2"]
    assert rows[1]["prompt"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 1 + 2?"},
    ]
    assert rows[1]["extra"]["verifiers"]["task"]["answer"] == "3"
    assert rows[1]["extra"]["verifiers"]["env"] == "rlf-vf-arith"


def test_tools_state_and_reward_components_through_the_loop(envs: Path) -> None:
    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")
    script = {"add-0": [call(0, 2), "2"], "add-1": ["4"]}
    trajs = {t.row_id: t for t in rollout(CONFIG, rows, script)}
    used, guessed = trajs["add-0"], trajs["add-1"]
    assert [m["content"] for m in used.messages if m["role"] == "tool"] == ["2"]
    assert used.tool_calls == 1 and used.tool_errors == 0
    # raw scores by reward name, the verifiers weighted sum (1 * correct + 0.5 * used_tool) as the reward
    assert used.reward_components == {
        "correct": 1.0,
        "used_tool": 1.0,
        "metric.turns": 2.0,
        "metric.truncated": 0.0,
        "score": 1.5,
    }
    assert used.reward == 1.5
    # the other trajectory's state is its own: no tool call counted there
    assert guessed.reward_components == {
        "correct": 0.0,
        "used_tool": 0.0,
        "metric.turns": 1.0,
        "metric.truncated": 0.0,
        "score": 0.0,
    }


def test_a_taskset_toolset_is_set_up_once_for_the_run(envs: Path) -> None:
    import rlf_vf_arith  # the test environment's module, as verifiers imported it

    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")
    lookup = f"<tool_call>{json.dumps({'name': 'lookup', 'arguments': {'word': 'two'}})}</tool_call>"
    rlf_vf_arith.SETUPS.clear()
    trajs = rollout(CONFIG, rows, {"add-0": [lookup, call(0, 2), "2"], "add-1": [lookup, "3"]})
    assert [[m["content"] for m in t.messages if m["role"] == "tool"] for t in trajs] == [["2", "2"], ["2"]]
    assert rlf_vf_arith.SETUPS == ["TableToolset"]


def test_reward_weights_pick_verifiers_components(envs: Path) -> None:
    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")[:1]
    config = {**CONFIG, "reward": {"weights": {"correct": 1.0}}}
    (traj,) = rollout(config, rows, {"add-0": [call(0, 2), "2"]})
    assert traj.reward == 1.0


def test_a_trajectory_cut_by_max_turns_is_a_truncated_trace(envs: Path) -> None:
    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")[:1]
    config = {**CONFIG, "rollout": {"max_turns": 1}}
    (traj,) = rollout(config, rows, {"add-0": [call(0, 2), "2"]})
    assert traj.stop_reason == "max_turns"
    assert traj.reward_components["metric.truncated"] == 1.0 and traj.reward_components["correct"] == 0.0


def test_a_bad_tool_argument_is_a_tool_error_and_the_trajectory_goes_on(envs: Path) -> None:
    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")[:1]
    bad = f"<tool_call>{json.dumps({'name': 'calc_add', 'arguments': {'a': 'two'}})}</tool_call>"
    (traj,) = rollout(CONFIG, rows, {"add-0": [bad, call(0, 2), "2"]})
    assert traj.tool_errors == 1 and traj.reward_components["correct"] == 1.0


def test_a_row_of_another_environment_is_a_reward_error(envs: Path) -> None:
    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")[:1]
    rows[0]["extra"]["verifiers"]["env"] = "other-env"
    (traj,) = rollout(CONFIG, rows, {"add-0": ["2"]}, score=False)
    assert traj.stop_reason == "error"
    assert "prepared from verifiers environment 'other-env', but verifiers.env is 'rlf-vf-arith'" in str(traj.error)


def test_a_reward_that_needs_a_runtime_is_refused_by_name(envs: Path) -> None:
    result = prepare("rlf-vf-box", envs / "rows.jsonl")
    assert result.exit_code == 1
    assert "@vf.reward functions ['tests_pass'] need a runtime" in result.output


def test_an_environment_with_its_own_run_is_refused_by_name(envs: Path) -> None:
    result = prepare("rlf-vf-duel", envs / "rows.jsonl")
    assert result.exit_code == 1
    assert "runs its own Env (DuelEnv" in result.output


def test_a_wrong_argument_is_verifiers_own_validation_error(envs: Path) -> None:
    result = prepare("rlf-vf-arith", envs / "rows.jsonl", "--args", '{"num_task": 3}')
    assert result.exit_code == 1
    assert "'rlf-vf-arith': its arguments (verifiers.args) are invalid" in result.output
    assert "taskset.num_task\n  Extra inputs are not permitted" in result.output


def test_an_unknown_environment_names_what_verifiers_tried(envs: Path) -> None:
    result = prepare("no-such-taskset", envs / "rows.jsonl")
    assert result.exit_code == 1
    assert "taskset 'no-such-taskset' not found (tried to import 'no_such_taskset')" in result.output


def test_without_verifiers_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(bridge, "version", missing)
    with pytest.raises(bridge.Unsupported, match=r"needs the verifiers package: pip install 'verifiers==0\.4\.0'"):
        bridge.import_verifiers()


def test_plugin_passes_the_conformance_check() -> None:
    report = check_plugin("verifiers")
    assert report.ok, report.render()


@pytest.mark.slow
def test_rlf_eval_and_train_run_the_environment_with_a_tiny_model(envs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``rlf eval`` writes each verifiers reward by name in its records; ``rlf train`` takes a GRPO step on them."""
    rows = envs / "rows.jsonl"
    assert prepare("rlf-vf-arith", rows).exit_code == 0
    model = build_tiny([call(1, 2), "3", "What is 1 + 2?"] * 20, envs / "model", vocab_size=300)
    config = envs / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "plugins": ["verifiers"],
                "verifiers": {"env": "rlf-vf-arith"},
                "model": {"path": str(model)},
                "engine": {"device": "cpu"},
                "rollout": {"max_turns": 2, "sampling": {"max_tokens": 8}},
            }
        )
    )
    monkeypatch.chdir(envs)
    out = envs / "out.jsonl"
    result = CliRunner().invoke(cli, ["eval", str(config), f"data.eval={rows}", "--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["row_id"] for r in records} == {"add-0", "add-1"}
    assert all(r["reward_error"] is None for r in records)
    assert all({"correct", "used_tool", "metric.turns"} <= set(r["reward_components"]) for r in records)

    result = CliRunner().invoke(
        cli,
        [
            "train",
            str(config),
            f"data.train={rows}",
            "trainer.device=cpu",
            "trainer.steps=1",
            "trainer.prompts_per_step=2",
            "rollout.n=2",
            "--run-dir",
            str(envs / "train"),
        ],
    )
    assert result.exit_code == 0, result.output + repr(result.exception)
    [metrics] = [json.loads(x) for x in (envs / "train" / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 1 and metrics["reward_errors"] == 0 and "reward/correct" in metrics


def test_plugged_judges_score_through_rlfs_judge_path(envs: Path) -> None:
    """A built-in verifiers judge (``reference``) plugged by the run's args asks its endpoint once per answered
    sample; its weighted verdict is ``judge.verifiers``, and ``score + judge`` is verifiers' own total."""
    prepare("rlf-vf-arith", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")
    with OpenAIServer(chat="yes") as server:
        judges = [{"id": "reference", "base_url": server.base_url, "model": "judge", "weight": 0.25}]
        config = {
            "plugins": ["verifiers"],
            "verifiers": {"env": "rlf-vf-arith", "args": {"task": {"judges": judges}}},
            "reward": {"weights": {"score": 1.0, "judge": 1.0}},
        }
        trajs = {t.row_id: t for t in rollout(config, rows, {"add-0": [call(0, 2), "2"], "add-1": [""]})}
        asked = [r["messages"][-1]["content"] for r in server.requests]
    answered, empty = trajs["add-0"], trajs["add-1"]
    assert answered.reward_components["judge.verifiers"] == 0.25 and answered.reward == 1.5 + 0.25
    assert empty.reward_components["judge.verifiers"] == 0.0  # nothing to grade: verifiers skips the call
    assert len(asked) == 1 and "What is 0 + 2?" in asked[0]
