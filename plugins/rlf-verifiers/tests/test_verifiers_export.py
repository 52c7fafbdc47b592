"""rlf plugins out: ``rlf verifiers export`` writes an rlf run config as a verifiers environment package, and
verifiers' own ``vf-eval`` runs it, installed, against a loopback model: rlf-mcp's bundled calculator and
rlf-nl2sql's shop demo, their tools served to the model by verifiers and their reward rlf's."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from verifiers_testkit import SITE, streamed, verifiers_or_skip

from rlfcore.cli import cli
from rlfcore.testing import OpenAIServer, Reply, Responder, calculator

CALCULATOR = Path(__file__).parents[3] / "examples" / "calculator" / "run.yaml"


def export(config: Path, out: Path, *args: str) -> Any:
    return CliRunner().invoke(cli, ["verifiers", "export", str(config), "-o", str(out), *args])


def tasks_of(package: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in package.read_text().splitlines()]


def test_export_writes_the_rows_config_and_module_of_a_package(tmp_path: Path) -> None:
    out = tmp_path / "rlf-calculator"
    result = export(CALCULATOR, out, "--limit", "2", "rollout.system_prompt=Use the calculator.")
    assert result.exit_code == 0, result.output
    package = out / "rlf_calculator"
    tasks = tasks_of(package / "tasks.jsonl")
    assert [t["id"] for t in tasks] == ["e00000", "e00001"]
    # the prompt as rlf's loop sends it (the config's system prompt first), the row as read, for tools and reward
    assert tasks[0]["prompt"] == [
        {"role": "system", "content": "Use the calculator."},
        {"role": "user", "content": "What is 77+32?"},
    ]
    assert tasks[0]["row"] == {"id": "e00000", "prompt": "What is 77+32?", "ground_truth": "109"}
    config = (package / "rlf.yaml").read_text()
    assert config.startswith(f'# rlf-source: "{CALCULATOR.resolve()}"')  # its relative paths read as before
    assert yaml.safe_load(config)["rollout"]["system_prompt"] == "Use the calculator."
    pyproject = (out / "pyproject.toml").read_text()
    assert 'name = "rlf-calculator"' in pyproject
    assert 'dependencies = ["rlf-verifiers", "rlf-mcp"]' in pyproject
    assert '__all__ = ["RlfHarness", "Taskset", "load_environment"]' in (package / "__init__.py").read_text()


def test_export_needs_rows_and_a_package_name(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"plugins": ["mcp"]}))
    result = export(config, tmp_path / "calc")
    assert result.exit_code == 1
    assert "data.eval is not set: name the rows to export" in result.output
    result = export(CALCULATOR, tmp_path / "calc", "--name", "9lives")
    assert result.exit_code == 1
    assert "'9lives' is not a package name" in result.output


def test_load_environment_builds_what_vf_eval_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package's ``load_environment(**args)``: verifiers' single-agent env over the rows, with the package's
    harness, the agent on this host, and the taskset's arguments (another rlf config) applied to every task."""
    verifiers_or_skip()
    assert export(CALCULATOR, tmp_path / "rlf-calc", "--limit", "3").exit_code == 0
    monkeypatch.syspath_prepend(str(tmp_path / "rlf-calc"))
    import rlf_calc  # the package just written
    from verifiers.v1.utils.loaders import load_harness

    env = rlf_calc.load_environment()
    assert type(env).__name__ == "SingleAgentEnv"
    assert [task.data.id for task in env.taskset] == ["e00000", "e00001", "e00002"]
    assert env.config.agent.runtime.type == "subprocess"
    assert type(load_harness(env.config.agent_harnesses()["agent"])) is rlf_calc.RlfHarness
    packaged = str(tmp_path / "rlf-calc" / "rlf_calc" / "rlf.yaml")
    assert {task.config.tools.config for task in env.taskset} == {packaged}
    other = rlf_calc.load_environment(rlf_config="/elsewhere/run.yaml")
    assert {task.config.tools.config for task in other.taskset} == {"/elsewhere/run.yaml"}


def install(tmp_path: Path, config: Path, name: str, *args: str) -> Path:
    """Export ``config`` as package ``name`` and pip-install it into a folder of its own (no index, no deps)."""
    source = tmp_path / name
    assert export(config, source, *args).exit_code == 0
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", target, source],
        check=True,
    )
    return target


def vf_eval(name: str, site: Path, server: OpenAIServer, out: Path) -> list[dict[str, Any]]:
    """Run verifiers' ``vf-eval`` (its console script, in a process of its own) on installed environment ``name``
    with the loopback model, the agent on this host; the traces of the episodes it wrote."""
    script = SITE / "bin" / "vf-eval"
    if not script.is_file():
        script = Path(sys.executable).with_name("vf-eval")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(SITE)])}
    command = [sys.executable, str(script), name, "-m", "loopback", "--client.base-url", server.base_url]
    command += ["--env.agent.runtime.type", "subprocess", "--no-push", "--no-rich", "-o", str(out)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [written] = out.glob("*/traces.jsonl")
    return [trace for line in written.read_text().splitlines() for trace in json.loads(line)["traces"]]


def by_row(traces: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {t["task"]["data"]["id"]: t for t in traces}


def said(trace: dict[str, Any], role: str) -> list[Any]:
    return [node["message"].get("content") for node in trace["nodes"] if node["message"]["role"] == role]


@pytest.mark.slow
def test_vf_eval_runs_the_exported_calculator(tmp_path: Path) -> None:
    """rlf-mcp's bundled calculator server answers the model's calls through verifiers' tool server; rlf's
    exact-match reward scores the answers: right for one row, wrong (the model's slip) for the other."""
    verifiers_or_skip()
    site = install(tmp_path, CALCULATOR, "rlf-calculator", "--limit", "2")

    def slips_on_65(body: dict[str, Any]) -> Reply | str:
        last = body["messages"][-1]
        if last["role"] == "tool" and last["content"] == "100":
            return "101"
        return calculator(body)

    with OpenAIServer(chat=streamed(slips_on_65)) as server:
        traces = by_row(vf_eval("rlf-calculator", site, server, tmp_path / "outputs"))
        offered = [[t["function"]["name"] for t in r.get("tools", [])] for r in server.requests]
    right, wrong = traces["e00000"], traces["e00001"]
    assert said(right, "tool") == ["109"] and said(right, "assistant")[-1] == "109"
    assert right["rewards"] == {"rlf": {"score": 1.0, "weight": 1.0}}
    assert right["metrics"] == {"score": 1.0, "exact_match": 1.0}
    assert said(wrong, "tool") == ["100"] and said(wrong, "assistant")[-1] == "101"
    assert wrong["rewards"] == {"rlf": {"score": 0.0, "weight": 1.0}}
    assert offered == [["calculate"]] * 4  # rlf's tool names, unprefixed, on every request


SHOP_SQL = re.compile(r"Question: (.*?)\n")


def shop_model(gold: dict[str, str], wrong: str) -> Responder:
    """Looks a question's table up with the ``sql`` tool, then answers its gold query in a sql fence; for the
    question ``wrong`` it answers a query that counts the wrong table."""

    def respond(body: dict[str, Any]) -> Reply:
        question = SHOP_SQL.search(body["messages"][0]["content"] or "")
        assert question is not None
        sql = gold[question.group(1)]
        if body["messages"][-1]["role"] != "tool":
            call = {
                "id": "call_0",
                "type": "function",
                "function": {"name": "sql", "arguments": json.dumps({"query": sql})},
            }
            return Reply(tool_calls=[call], finish_reason="tool_calls")
        answer = "SELECT COUNT(*) FROM products" if question.group(1) == wrong else sql
        return Reply(f"```sql\n{answer}\n```")

    return respond


@pytest.mark.slow
def test_vf_eval_runs_the_exported_nl2sql_shop(tmp_path: Path) -> None:
    """rlf-nl2sql's tools query the row's database (its session, opened in verifiers' tool server) and its
    execution-match reward compares the answer's result with the gold query's."""
    verifiers_or_skip()
    demo = tmp_path / "shop"
    assert CliRunner().invoke(cli, ["nl2sql", "demo", str(demo)]).exit_code == 0
    site = install(tmp_path, demo / "shop.yaml", "rlf-shop", "--limit", "2")
    rows = [json.loads(line) for line in (demo / "shop.jsonl").read_text().splitlines()][:2]
    gold = {row["extra"]["question"]: row["ground_truth"] for row in rows}
    wrong = rows[1]["extra"]["question"]
    with OpenAIServer(chat=streamed(shop_model(gold, wrong))) as server:
        traces = by_row(vf_eval("rlf-shop", site, server, tmp_path / "outputs"))
    right, missed = traces[rows[0]["id"]], traces[rows[1]["id"]]
    assert rows[0]["ground_truth"] == "SELECT COUNT(*) FROM customers"
    [result] = said(right, "tool")
    assert "COUNT(*)" in result and "Error" not in result  # the shop database answered the model's query
    assert right["rewards"]["rlf"]["score"] == 1.0 and right["metrics"]["execution"] == 1.0
    assert missed["rewards"]["rlf"]["score"] < 1.0 and missed["metrics"]["execution"] == 0.0


PLUGIN = '''
from pathlib import Path

from rlfcore import Score, hookimpl, tool

RELEASED = Path(__file__).with_name("released.log")


class Tally:
    """A trajectory's session: the row it was opened for; its release is logged."""

    def __init__(self, row_id):
        self.row_id = row_id

    def close(self):
        with RELEASED.open("a") as f:
            f.write(self.row_id + "\\n")


@tool
def whose(session) -> str:
    """The id of the row this trajectory was opened for."""
    return session.row_id


@hookimpl
def register_tools(ctx):
    return [whose]


@hookimpl
def open_session(row, ctx):
    return Tally(row["id"])


@hookimpl
def compute_score(sample):
    if sample.ground_truth == "unscorable":
        raise ValueError("this row has no score")
    return Score(value=float(sample.response == sample.ground_truth), components={"match": 1.0})
'''


def asks_whose(body: dict[str, Any]) -> Reply:
    """Calls ``whose``, then answers what it said."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return Reply(last["content"])
    call = {"id": "call_0", "type": "function", "function": {"name": "whose", "arguments": "{}"}}
    return Reply(tool_calls=[call], finish_reason="tool_calls")


@pytest.mark.slow
def test_a_plugin_of_the_config_with_sessions_and_a_failing_reward(tmp_path: Path) -> None:
    """A plugin the config loads from a file (``local_plugins``): its tool reads the session its ``open_session``
    opened for the rollout's row, each session is released when its tool server stops, and a reward hook that
    raises is the trace's scoring error, with rlf's reason."""
    verifiers_or_skip()
    (tmp_path / "plugin.py").write_text(PLUGIN)
    rows = [{"id": "mine", "prompt": "Whose row is this?", "ground_truth": "mine"}]
    rows += [{"id": "odd", "prompt": "Whose row is this?", "ground_truth": "unscorable"}]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({"local_plugins": ["plugin.py"], "data": {"eval": "rows.jsonl"}}))
    site = install(tmp_path, config, "rlf-whose")
    with OpenAIServer(chat=streamed(asks_whose)) as server:
        traces = by_row(vf_eval("rlf-whose", site, server, tmp_path / "outputs"))
    mine, odd = traces["mine"], traces["odd"]
    assert said(mine, "tool") == ["mine"] and said(odd, "tool") == ["odd"]  # each rollout its own row's session
    assert mine["rewards"] == {"rlf": {"score": 1.0, "weight": 1.0}} and mine["metrics"] == {"match": 1.0, "score": 1.0}
    errors = json.dumps(odd["errors"])
    assert "rlf reward of row 'odd'" in errors and "this row has no score" in errors
    assert sorted((tmp_path / "released.log").read_text().split()) == ["mine", "odd"]
