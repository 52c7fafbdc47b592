"""End to end: a run config naming MCP servers, rolled out and scored through the real loop, a server
killed mid-run, the run's servers closed by its ``shutdown``, ``rlf plugins check mcp``, and no
server process left behind when the process exits."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections import defaultdict
from pathlib import Path

import pytest
from mcp_testkit import PROBE, children, needs_proc, wait_gone
from rlf_mcp.plugin import POOL
from rlf_mcp.pool import get_pool, shutdown

from rlfcore.testing import make_runtime, rollout

pytestmark = needs_proc


def tool_call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def run_config(tmp_path_factory) -> Path:
    """A run config whose MCP servers come from an mcpServers file beside it (a relative path)."""
    folder = tmp_path_factory.mktemp("run")
    servers = {
        "mcpServers": {
            "calc": {"command": sys.executable, "args": ["-m", "rlf_mcp.servers.calculator"]},
            "probe": {"command": sys.executable, "args": [PROBE], "include": ["echo", "pause"], "prefix": "probe_"},
        }
    }
    (folder / "mcp.json").write_text(json.dumps(servers))
    (folder / "run.yaml").write_text(
        "plugins: [mcp]\nmcp:\n  config_file: mcp.json\n  restart_backoff_s: 0.05\ntools:\n  timeout_s: 30\n"
    )
    yield folder / "run.yaml"
    shutdown()
    assert wait_gone(children("rlf_mcp.servers.calculator") + children("mcp_probe_server")) == []


def test_a_run_with_two_servers_survives_one_being_killed_mid_run(run_config):
    turns: dict[str, int] = defaultdict(int)

    def policy(request_id: str, _prompt: str) -> str:
        turn = turns[request_id]
        turns[request_id] += 1
        row = request_id.split("#", maxsplit=1)[0]
        if row == "math":
            return [tool_call("calculate", expression="6 * 7"), "<answer>42</answer>"][turn]
        if row == "oops":
            return [tool_call("calculate", expression="6 / 0"), "<answer>6</answer>"][turn]
        if row == "code":
            return [tool_call("calculate", expression="__import__('os').getcwd()"), "<answer>/</answer>"][turn]
        if turn == 0:  # row "kill": the probe server is killed while it works on the call
            [pid] = children("mcp_probe_server")
            threading.Timer(0.5, os.kill, (pid, signal.SIGKILL)).start()
            return tool_call("probe_pause", seconds=5)
        return [tool_call("probe_echo", text="after the restart"), "<answer>after the restart</answer>"][turn - 1]

    rows = [
        {"id": "math", "prompt": "What is 6 * 7?", "ground_truth": "42"},
        {"id": "oops", "prompt": "What is 6 / 0?", "ground_truth": "undefined"},
        {"id": "code", "prompt": "Where am I?", "ground_truth": "/tmp"},
        {"id": "kill", "prompt": "Echo a phrase.", "ground_truth": "after the restart"},
    ]
    math, oops, code, kill = rollout(run_config, rows, policy)
    assert (math.reward, math.tool_calls, math.tool_errors) == (1.0, 1, 0)
    assert math.messages[-2]["role"] == "tool" and math.messages[-2]["content"] == "42"
    # the calculator's ToolErrors reach the model with their message
    assert (oops.reward, oops.tool_errors) == (0.0, 1) and "division by zero in 6 / 0" in oops.messages[-2]["content"]
    assert code.tool_errors == 1 and "a function call is not allowed" in code.messages[-2]["content"]
    assert kill.stop_reason != "error" and (kill.tool_calls, kill.tool_errors) == (2, 1)
    tool_messages = [m["content"] for m in kill.messages if m["role"] == "tool"]
    assert "MCP server 'probe' died during the call" in tool_messages[0] and tool_messages[1] == "after the restart"
    assert kill.reward == 1.0


def test_the_runs_servers_live_in_its_stash_and_are_gone_when_the_run_closes(run_config):
    """Setting a run up starts its own servers in its own pool; closing the run (its ``shutdown``)
    stops them and the pool's loop, with no atexit involved."""
    before = set(children("rlf_mcp.servers.calculator") + children("mcp_probe_server"))
    runtime = make_runtime(run_config)
    pool = runtime.stash("mcp")[POOL]
    started = set(children("rlf_mcp.servers.calculator") + children("mcp_probe_server")) - before
    assert len(started) == 2 and pool.running and pool is not get_pool()
    asyncio.run(runtime.aclose())
    assert wait_gone(sorted(started)) == [] and not pool.running
    assert runtime._stashes == {}


def test_plugins_check_passes_and_leaves_no_server_when_the_process_exits():
    """``rlf plugins check mcp`` in a fresh process (the bundled calculator, real calls and rewards)
    closes its run's server in ``shutdown``; a run set up after it and never closed leaves its server
    to the last resort: atexit closes it when the process exits, no process survives."""
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from mcp_testkit import children
        from rlfcore.testing import check_plugin, make_runtime
        report = check_plugin("mcp")
        print(report.render())
        after_check = children("rlf_mcp.servers.calculator")
        make_runtime({{"plugins": ["mcp"]}})  # never closed
        unclosed = children("rlf_mcp.servers.calculator")
        print(json.dumps({{"ok": report.ok, "after_check": after_check, "unclosed": unclosed}}))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    *report, last = done.stdout.strip().splitlines()
    out = json.loads(last)
    assert out["ok"], "\n".join(report)
    assert "tools: calculate" in done.stdout
    assert "smoke rollout calc-wrong-answer: 2 turns, 1 tool calls, reward 0" in done.stdout
    assert out["after_check"] == [] and len(out["unclosed"]) == 1
    assert wait_gone(out["unclosed"]) == []
