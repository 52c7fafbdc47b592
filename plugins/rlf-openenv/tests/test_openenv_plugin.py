"""A real OpenEnv environment on loopback in rlf's loop: the echo environment openenv 0.10.0 ships (what ``openenv
init`` writes, its server an ``openenv.core`` app), served by openenv's own Python (scripts/install-openenv.sh)
and rolled out with a scripted policy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner
from rlf_openenv import client, plugin

from rlfcore.cli import cli
from rlfcore.testing import build_tiny, check_plugin, make_runtime, rollout

CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
VENV = Path(os.environ.get("RLF_OPENENV_VENV", CACHE / "rlf" / "openenv-0.10.0"))
"""openenv's own virtual environment (scripts/install-openenv.sh): the servers' Python, never rlf's."""

READY = '{"echoed_message": "Echo Env environment ready!", "message_length": 0}'


def openenv_or_skip() -> Path:
    """openenv's ``openenv`` command; skip without it, or fail where ``RLF_REQUIRE_OPENENV=1`` says it must be there."""
    command = VENV / "bin" / "openenv"
    if not command.is_file():
        why = f"openenv 0.10.0 is not installed in {VENV}: run plugins/rlf-openenv/scripts/install-openenv.sh"
        if os.environ.get("RLF_REQUIRE_OPENENV") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return command


@pytest.fixture(scope="module")
def echo_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The echo environment as ``openenv init`` writes it from openenv's package."""
    command = openenv_or_skip()
    folder = tmp_path_factory.mktemp("openenv")
    subprocess.run([str(command), "init", "echo_env", "-o", str(folder)], check=True, capture_output=True, timeout=120)
    return folder / "echo_env"


def serve(echo_env: Path) -> dict[str, Any]:
    """``openenv.server`` for the echo environment: uvicorn on the port rlf picks, in openenv's Python."""
    argv = [str(VENV / "bin" / "python"), "-m", "uvicorn", "server.app:app", "--host", "127.0.0.1", "--port", "{port}"]
    return {"command": argv, "cwd": str(echo_env)}


@pytest.fixture
def running(echo_env: Path) -> Iterator[client.ServerProcess]:
    """An echo server the test started itself, for ``openenv.url``."""
    from rlf_openenv.settings import Server

    server = client.start(Server(**serve(echo_env)))
    yield server
    server.stop()


GUESS = """
from typing import Any, Optional

from pydantic import Field

from openenv.core.env_server import Action, Environment, Observation, State, create_app


class GuessAction(Action):
    guess: int = Field(description="A digit")


class GuessObservation(Observation):
    seed: Optional[int] = None
    hint: str = ""


class GuessEnvironment(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        self._state = State()
        self.target = 0

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> GuessObservation:
        self.target = (seed or 0) % 10
        self._state = State(episode_id=episode_id, step_count=0)
        return GuessObservation(seed=seed, hint="guess the digit")

    def step(self, action: GuessAction) -> GuessObservation:
        self._state.step_count += 1
        if action.guess == self.target:
            return GuessObservation(hint="right", reward=1.0, done=True)
        return GuessObservation(hint="higher" if action.guess < self.target else "lower", reward=-0.1)

    @property
    def state(self) -> State:
        return self._state


app = create_app(GuessEnvironment, GuessAction, GuessObservation, env_name="guess", max_concurrent_envs=4)
"""
"""An environment in OpenEnv's documented style (an ``Environment`` with typed action and observation, served by
``create_app``) whose reset takes the seed and whose episode ends: the digit is the seed's last."""


@pytest.fixture
def guess_env(tmp_path: Path) -> Path:
    openenv_or_skip()
    (tmp_path / "guess_app.py").write_text(GUESS)
    return tmp_path


CALC = """
from typing import Any, Optional

from fastmcp import FastMCP

from openenv.core.env_server import CallToolAction, CallToolObservation, Observation, State, create_app
from openenv.core.env_server.mcp_environment import MCPEnvironment


class CalcEnvironment(MCPEnvironment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("calc")

        @mcp.tool()
        def add(a: int, b: int) -> int:
            \"\"\"Add two integers.\"\"\"
            return a + b

        @mcp.tool()
        def divide(a: int, b: int) -> float:
            \"\"\"Divide a by b.\"\"\"
            return a / b

        super().__init__(mcp)
        self._state = State()

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> Observation:
        self._state = State(episode_id=episode_id)
        return Observation()

    def _step_impl(self, action: Any, timeout_s: Optional[float] = None, **kwargs: Any) -> Observation:
        return Observation(done=True)

    @property
    def state(self) -> State:
        return self._state


app = create_app(CalcEnvironment, CallToolAction, CallToolObservation, env_name="calc", max_concurrent_envs=4)
"""
"""An MCP environment as OpenEnv's ``MCPEnvironment`` documents one: a FastMCP server's tools, called by steps."""


def echo(message: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'echo', 'arguments': {'message': message}})}</tool_call>"


ROWS = [{"id": r, "prompt": [{"role": "user", "content": "Say something."}]} for r in ("a", "b", "c")]


def config(openenv: dict[str, Any], concurrency: int = 1) -> dict[str, Any]:
    return {"plugins": ["openenv"], "openenv": {"tool": "echo", **openenv}, "rollout": {"concurrency": concurrency}}


def test_each_trajectory_is_an_episode_with_its_observations_and_rewards(echo_env: Path) -> None:
    script = {"a": [echo("hello"), echo("hi"), "done"], "b": ["nothing to say"], "c": [echo("0123456789abc"), "ok"]}
    trajs = {t.row_id: t for t in rollout(config({"server": serve(echo_env)}), ROWS, script)}
    for traj in trajs.values():  # reset per trajectory: its first observation is the prompt's last message
        assert traj.error is None and traj.session_error is None
        assert traj.messages[1] == {"role": "user", "content": READY}
    a = trajs["a"]
    assert [m["content"] for m in a.messages if m["role"] == "tool"] == [
        '{"echoed_message": "hello", "message_length": 5}',
        '{"echoed_message": "hi", "message_length": 2}',
    ]
    # the echo environment rewards 0.1 per character, at most 1 a step; the return is their sum
    assert a.reward_components == pytest.approx({"return": 0.7, "done": 0.0, "score": 0.7})
    assert a.reward == pytest.approx(0.7)
    assert trajs["b"].reward_components["return"] == 0.0
    assert trajs["c"].reward == pytest.approx(1.0)  # the template's server holds one episode at a time: each was closed


def test_the_tool_is_the_servers_action_schema(echo_env: Path) -> None:
    runtime = make_runtime(config({"server": serve(echo_env)}))
    try:
        tool = runtime.tools["openenv"]["echo"]
        assert tool.parameters == {
            "type": "object",
            "properties": {"message": {"description": "Message to echo back", "title": "Message", "type": "string"}},
            "required": ["message"],
        }
        assert tool.description == "Action for the Echo Env environment - just a message to echo."
    finally:
        runtime.close()


def test_shutdown_stops_the_server_rlf_started(echo_env: Path) -> None:
    runtime = make_runtime(config({"server": serve(echo_env)}))
    server = runtime.stash("openenv")[plugin.SERVER]
    assert httpx.get(f"{server.url}/health").status_code == 200
    runtime.close()
    assert server.proc.poll() is not None
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{server.url}/health")


def test_an_action_the_server_refuses_is_a_tool_error_and_the_episode_goes_on(echo_env: Path) -> None:
    wrong = f"<tool_call>{json.dumps({'name': 'echo', 'arguments': {'message': 'x', 'loud': True}})}</tool_call>"
    (traj,) = rollout(config({"server": serve(echo_env)}), ROWS[:1], {"a": [wrong, echo("hello"), "done"]})
    assert traj.tool_errors == 1
    assert traj.reward_components["return"] == pytest.approx(0.5)


def test_an_episode_beyond_the_servers_capacity_costs_only_its_trajectory(echo_env: Path) -> None:
    """The template's server takes one episode at a time (max_concurrent_envs=1): two trajectories at once."""
    script = {"a": [echo("hello"), "done"], "b": [echo("hello"), "done"]}
    trajs = rollout(config({"server": serve(echo_env)}, concurrency=2), ROWS[:2], script)
    failed = [t for t in trajs if t.stop_reason == "error"]
    assert len(failed) == 1, [t.error for t in trajs]
    assert "openenv server http://127.0.0.1:" in str(failed[0].error)
    assert "refused the reset: CAPACITY_REACHED" in str(failed[0].error)
    [ok] = [t for t in trajs if t.stop_reason != "error"]
    assert ok.reward == pytest.approx(0.5)


def test_a_server_gone_mid_run_costs_only_the_trajectories_that_need_it(running: client.ServerProcess) -> None:
    """``openenv.url``: a running server, killed during the first trajectory; the second cannot reach it."""

    def policy(request_id: str, prompt: str) -> str:
        if request_id.startswith("a#") and "hello" not in prompt:
            return echo("hello")
        if request_id.startswith("a#") and running.proc.poll() is None:
            os.killpg(running.proc.pid, signal.SIGKILL)
            running.proc.wait()
            return echo("again")
        return "done"

    trajs = {t.row_id: t for t in rollout(config({"url": running.url}), ROWS[:2], policy)}
    a, b = trajs["a"], trajs["b"]
    assert a.stop_reason != "error" and a.tool_errors == 1  # the step after the kill
    assert a.reward_components["return"] == pytest.approx(0.5)
    assert b.stop_reason == "error"
    assert f"plugin 'openenv': open_session failed: OpenEnvError: openenv server {running.url} is unreachable" in str(
        b.error
    )


def test_a_server_that_exits_says_so_with_its_output() -> None:
    from rlf_openenv.settings import Server

    command = [sys.executable, "-c", "import sys; print('no such environment'); sys.exit(3)"]
    with pytest.raises(client.OpenEnvError, match=r"exited with 3: no such environment"):
        client.start(Server(command=command))


def test_plugin_passes_the_conformance_check() -> None:
    report = check_plugin("openenv")
    assert report.ok, report.render()


@pytest.mark.slow
def test_rlf_eval_and_train_run_the_environment_with_a_tiny_model(
    echo_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``rlf eval`` writes the episode's return by name in its records; ``rlf train`` takes a GRPO step on it."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in ROWS[:2]))
    model = build_tiny([echo("hello"), "Say something.", READY] * 20, tmp_path / "model", vocab_size=300)
    run = tmp_path / "run.yaml"
    run.write_text(
        yaml.safe_dump(
            {
                **config({"server": serve(echo_env)}),
                "model": {"path": str(model)},
                "engine": {"device": "cpu"},
                "rollout": {"concurrency": 1, "max_turns": 2, "sampling": {"max_tokens": 8}},
            }
        )
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out.jsonl"
    result = CliRunner().invoke(cli, ["eval", str(run), f"data.eval={rows}", "--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["row_id"] for r in records} == {"a", "b"}
    assert all(r["reward_error"] is None and {"return", "done"} <= set(r["reward_components"]) for r in records)

    train = ["train", str(run), f"data.train={rows}", "trainer.device=cpu", "trainer.steps=1"]
    train += ["trainer.prompts_per_step=2", "rollout.n=2", "--run-dir", str(tmp_path / "train")]
    result = CliRunner().invoke(cli, train)
    assert result.exit_code == 0, result.output + repr(result.exception)
    [metrics] = [json.loads(x) for x in (tmp_path / "train" / "metrics.jsonl").read_text().splitlines()]
    assert metrics["step"] == 1 and metrics["reward_errors"] == 0 and "reward/return" in metrics


def guess(digit: int) -> str:
    return f"<tool_call>{json.dumps({'name': 'step', 'arguments': {'guess': digit}})}</tool_call>"


def test_rows_seed_their_episodes_and_a_done_episode_ends_its_trajectory(guess_env: Path) -> None:
    out = guess_env / "rows.jsonl"
    result = CliRunner().invoke(
        cli, ["openenv", "rows", "-n", "2", "--first-seed", "3", "--prompt", "Guess.", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["extra"]["openenv"]["reset"] for r in rows] == [{"seed": 3}, {"seed": 4}]
    argv = [str(VENV / "bin" / "python"), "-m", "uvicorn", "guess_app:app", "--port", "{port}"]
    run = {"plugins": ["openenv"], "openenv": {"server": {"command": argv, "cwd": str(guess_env)}}}
    script = {"seed-3": [guess(1), guess(3), guess(5), "done"], "seed-4": [guess(4), "done"]}
    trajs = {t.row_id: t for t in rollout({**run, "rollout": {"concurrency": 2}}, rows, script)}
    three, four = trajs["seed-3"], trajs["seed-4"]
    assert three.messages[1]["content"] == '{"seed": 3, "hint": "guess the digit"}'
    tool = [m["content"] for m in three.messages if m["role"] == "tool"]
    assert tool == ['{"seed": null, "hint": "higher"}', '{"seed": null, "hint": "right"}']  # no third step
    assert three.stop_reason == "done" and three.num_turns == 2 and three.tool_errors == 0
    assert three.reward_components == pytest.approx({"return": 0.9, "done": 1.0, "score": 0.9})
    assert four.reward_components == pytest.approx({"return": 1.0, "done": 1.0, "score": 1.0})


def test_an_mcp_environments_tools_are_the_models_tools(tmp_path: Path) -> None:
    openenv_or_skip()
    (tmp_path / "calc_app.py").write_text(CALC)
    argv = [str(VENV / "bin" / "python"), "-m", "uvicorn", "calc_app:app", "--port", "{port}"]
    run = {"plugins": ["openenv"], "openenv": {"tools": "mcp", "server": {"command": argv, "cwd": str(tmp_path)}}}
    add = f"<tool_call>{json.dumps({'name': 'add', 'arguments': {'a': 2, 'b': 3}})}</tool_call>"
    bad = f"<tool_call>{json.dumps({'name': 'divide', 'arguments': {'a': 2, 'b': 0}})}</tool_call>"
    (traj,) = rollout(run, ROWS[:1], {"a": [add, bad, "5"]})
    assert traj.error is None, traj.error
    tool = [m["content"] for m in traj.messages if m["role"] == "tool"]
    assert tool[0] == "5"
    assert traj.tool_errors == 1 and "division by zero" in tool[1], tool
    assert traj.reward_components == {"return": 0.0, "done": 0.0, "score": 0.0}
