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
from rlfcore.testing import OpenAIServer, Reply, build_tiny, check_plugin, rollout

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

GUESS = """
import verifiers.v1 as vf


class GuessData(vf.TaskData):
    answer: int


class GuessState(vf.State):
    asked: int = 0


class HintToolset(vf.Toolset[vf.ToolsetConfig, GuessState]):
    TOOL_PREFIX = None

    @vf.tool
    def bounds(self) -> str:
        \"\"\"The range the number is in.\"\"\"
        self.state.asked += 1
        return "1 to 100"


class GuessTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class GuessTask(vf.Task[GuessData, GuessState, GuessTaskConfig]):
    @classmethod
    def toolsets(cls, config: GuessTaskConfig) -> list[vf.Toolset]:
        return [HintToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def solved(self, trace: vf.Trace) -> float:
        return float(trace.last_reply == str(self.data.answer))

    @vf.metric
    async def asked(self, trace: vf.Trace) -> float:
        return float(trace.state.asked)


class GuessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


SEGMENTS = []


class GuessEnv(vf.Env[GuessEnvConfig]):
    \"\"\"The number game: the env answers each guess with higher or lower, and ends it on the right one.\"\"\"

    async def run(self, task, agents):
        found, tries = False, 0
        async with agents.player.interaction(task) as interaction:
            segment = await interaction.turn()
            while not segment.terminated:
                SEGMENTS.append((task.data.id, [m.role for m in segment.messages]))
                tries += 1
                reply = segment.last_reply
                if reply == "boom":
                    raise ValueError("the engine broke")
                if reply == str(task.data.answer):
                    found = True
                    break
                segment = await interaction.turn("higher" if reply.isdigit() and int(reply) < task.data.answer else "lower")
        interaction.trace.record_reward("found", float(found), 0.5)
        interaction.trace.record_metric("tries", tries)
        interaction.trace.info["turns_seen"] = interaction.trace.num_turns


class GuessConfig(vf.TasksetConfig):
    task: GuessTaskConfig = GuessTaskConfig()


class GuessTaskset(vf.Taskset[GuessTask, GuessConfig]):
    def load(self) -> list[GuessTask]:
        return [
            GuessTask(GuessData(id=f"guess-{n}", prompt="Guess my number, 1 to 100.", answer=n), self.config.task)
            for n in (37, 80)
        ]


__all__ = ["GuessEnv", "GuessTaskset"]
"""

ONCE = """
import verifiers.v1 as vf


class OnceEnvConfig(vf.EnvConfig):
    solver: vf.AgentConfig = vf.AgentConfig()


class OnceEnv(vf.Env[OnceEnvConfig]):
    async def run(self, task, agents):
        trace = await agents.solver.run(task)
        trace.record_metric("reply_chars", len(trace.last_reply))


class OnceTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self) -> list[vf.Task]:
        return [vf.Task(vf.TaskData(id="once", prompt="Say hi."))]


__all__ = ["OnceEnv", "OnceTaskset"]
"""

OWN_ENV = """
import verifiers.v1 as vf


class DuelEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()
    opponent: vf.AgentConfig = vf.AgentConfig()


class DuelEnv(vf.Env[DuelEnvConfig]):
    async def run(self, task, agents):
        await agents.player.run(task)
        await agents.opponent.run(task)


class DuelTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
    def load(self) -> list[vf.Task]:
        return [vf.Task(vf.TaskData(prompt="Play."))]


__all__ = ["DuelEnv", "DuelTaskset"]
"""


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test environments as installed modules (verifiers imports a taskset id as its module)."""
    verifiers_or_skip()
    modules = {
        "rlf_vf_arith": ARITH,
        "rlf_vf_box": NEEDS_RUNTIME,
        "rlf_vf_duel": OWN_ENV,
        "rlf_vf_guess": GUESS,
        "rlf_vf_once": ONCE,
    }
    for module, source in modules.items():
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


def test_an_environment_with_two_agents_is_refused_by_name(envs: Path) -> None:
    result = prepare("rlf-vf-duel", envs / "rows.jsonl")
    assert result.exit_code == 1
    assert "runs its own Env (DuelEnv, with agents ['player', 'opponent']" in result.output


GUESS_CONFIG: dict[str, Any] = {"plugins": ["verifiers"], "verifiers": {"env": "rlf-vf-guess"}}
BOUNDS = f"<tool_call>\n{json.dumps({'name': 'bounds', 'arguments': {}})}\n</tool_call>"
"""A call as the chat template writes it, so the full rendering is the rollout's tokens."""


def spans(traj: Any) -> list[tuple[int, str]]:
    """The trajectory's response as runs of one loss-mask value, each decoded."""
    from rlfcore.testing import ByteChatTokenizer

    tok, runs = ByteChatTokenizer(), []
    for mask, token in zip(traj.response_mask, traj.response_ids):
        if runs and runs[-1][0] == mask:
            runs[-1][1].append(token)
        else:
            runs.append((mask, [token]))
    return [(mask, tok.decode(ids)) for mask, ids in runs]


def test_a_multi_turn_environment_answers_each_turn_until_it_is_solved(envs: Path) -> None:
    """verifiers' documented multi-turn style (an Env whose run() answers each interaction.turn()): its replies
    are user turns in the model's template with loss mask 0, tool calls run within a turn, the run ending ends the
    episode (stop reason ``done``), and what it records joins the task's rewards."""
    import rlf_vf_guess

    prepare("rlf-vf-guess", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")
    rlf_vf_guess.SEGMENTS.clear()
    script = {"guess-37": [BOUNDS, "50", "25", "37"], "guess-80": ["80"]}
    trajs = {t.row_id: t for t in rollout(GUESS_CONFIG, rows, script)}
    game, first = trajs["guess-37"], trajs["guess-80"]
    assert [(m["role"], m["content"]) for m in game.messages[1:]] == [
        ("assistant", ""),
        ("tool", "1 to 100"),
        ("assistant", "50"),
        ("user", "lower"),
        ("assistant", "25"),
        ("user", "higher"),
        ("assistant", "37"),
    ]
    assert [m.get("tool_calls") for m in game.messages if m["role"] == "assistant"][1:] == [None, None, None]
    played = [roles for task, roles in rlf_vf_guess.SEGMENTS if task == "guess-37"]
    assert played == [["assistant", "tool", "assistant"], ["assistant"], ["assistant"]]
    assert game.error is None and game.stop_reason == "done" and game.num_turns == 4
    assert game.tool_calls == 1  # the model's one call; the env's turns are no calls
    # the mask covers exactly the generated turns; the env's turns are the template's user turns
    assert spans(game) == [
        (1, f"{BOUNDS}<|im_end|>"),
        (0, "\n<|im_start|>user\n<tool_response>\n1 to 100\n</tool_response><|im_end|>\n<|im_start|>assistant\n"),
        (1, "50<|im_end|>"),
        (0, "\n<|im_start|>user\nlower<|im_end|>\n<|im_start|>assistant\n"),
        (1, "25<|im_end|>"),
        (0, "\n<|im_start|>user\nhigher<|im_end|>\n<|im_start|>assistant\n"),
        (1, "37<|im_end|>"),
    ]
    assert game.template_mismatch is None
    # the task's reward, the run's own (weight 0.5) and its metric, the toolset's state
    assert game.reward_components == {
        "solved": 1.0,
        "found": 1.0,
        "metric.asked": 1.0,
        "metric.tries": 3.0,
        "score": 1.5,
    }
    assert first.stop_reason == "done" and first.tool_calls == 0 and first.reward_components["metric.tries"] == 1.0
    assert [m["role"] for m in first.messages] == ["user", "assistant"]


def test_a_limit_ends_the_exchange_with_a_terminated_segment(envs: Path) -> None:
    prepare("rlf-vf-guess", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")[:1]
    config = {**GUESS_CONFIG, "rollout": {"max_turns": 2}}
    (traj,) = rollout(config, rows, {"guess-37": ["50", "40", "37"]})
    assert traj.stop_reason == "max_turns" and traj.error is None and traj.session_error is None
    assert [m["content"] for m in traj.messages[1:]] == ["50", "lower", "40"]
    assert all("tool_calls" not in m for m in traj.messages) and traj.tool_calls == 0
    # the run saw two guesses, then the terminated segment, and still recorded its reward
    assert traj.reward_components["found"] == 0.0 and traj.reward_components["metric.tries"] == 2.0


def test_an_environment_run_that_raises_is_its_trajectorys_error(envs: Path) -> None:
    prepare("rlf-vf-guess", envs / "rows.jsonl")
    rows = rows_of(envs / "rows.jsonl")[:1]
    (traj,) = rollout(GUESS_CONFIG, rows, {"guess-37": ["50", "boom"]}, score=False)
    assert traj.stop_reason == "error"
    assert "'rlf-vf-guess': GuessEnv.run() failed: ValueError: the engine broke" in str(traj.error)


def test_a_seat_run_plays_one_segment(envs: Path) -> None:
    prepare("rlf-vf-once", envs / "rows.jsonl")
    config = {"plugins": ["verifiers"], "verifiers": {"env": "rlf-vf-once"}}
    (traj,) = rollout(config, rows_of(envs / "rows.jsonl"), {"once": ["hello"]})
    assert traj.stop_reason == "done" and traj.reward_components == {"metric.reply_chars": 5.0, "score": 0.0}


def test_a_multi_turn_environment_plays_on_a_chat_api_that_reads_tool_calls_itself(envs: Path) -> None:
    """``rlf eval`` with ``engine: openai-chat`` (tool calls in the API's ``tool_calls``): the env's turns are user
    messages of the next requests, the run reads a reply without the ``<think>`` block the API left in its content,
    and the run ending ends the episode."""
    prepare("rlf-vf-guess", envs / "rows.jsonl")
    (envs / "rows.jsonl").write_text(json.dumps(rows_of(envs / "rows.jsonl")[0]) + "\n")  # guess-37

    def player(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]
        if last["role"] == "tool":
            return Reply("50")
        if last["content"] == "lower":
            return Reply("<think>below 50</think>37")
        bounds = {"id": "call_0", "type": "function", "function": {"name": "bounds", "arguments": "{}"}}
        return Reply(tool_calls=[bounds], finish_reason="tool_calls")

    out = envs / "out.jsonl"
    with OpenAIServer(chat=player) as server:
        config = {**GUESS_CONFIG, "engine": {"name": "openai-chat", "base_url": server.base_url, "model": "m"}}
        (envs / "run.yaml").write_text(yaml.safe_dump({**config, "data": {"eval": str(envs / "rows.jsonl")}}))
        result = CliRunner().invoke(cli, ["eval", str(envs / "run.yaml"), "--greedy", "--out", str(out)])
        asked = server.requests
    assert result.exit_code == 0, result.output + repr(result.exception)
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["error"] is None and record["stop_reason"] == "done" and record["tool_calls"] == 1
    assert [(m["role"], m["content"]) for m in record["messages"][2:]] == [
        ("tool", "1 to 100"),
        ("assistant", "50"),
        ("user", "lower"),
        ("assistant", "<think>below 50</think>37"),
    ]
    assert [t["function"]["name"] for t in asked[0]["tools"]] == ["bounds"]
    assert [m["role"] for m in asked[-1]["messages"]] == ["user", "assistant", "tool", "assistant", "user"]
    assert record["reward_components"]["found"] == 1.0 and record["reward_components"]["metric.tries"] == 2.0


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
