"""A stdio MCP server that dies, hangs, or cannot start: calls become tool errors, the run goes on."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import pytest
from mcp_testkit import (
    call,
    children,
    connection,
    load,
    needs_proc,
    pid_of,
    probe_once,
    probe_server,
    settings,
    wait_gone,
)
from rlf_mcp.connection import ServerDown
from rlf_mcp.pool import shutdown
from rlf_mcp.settings import McpSettings

from rlfcore import ToolCall
from rlfcore.testing import ToolExecutor, ToolsConfig

pytestmark = needs_proc


@pytest.fixture(scope="module")
def tools():
    yield load(settings(probe=probe_server()))
    shutdown()
    assert wait_gone(children("mcp_probe_server")) == []


def test_a_server_killed_mid_run_fails_its_calls_restarts_and_serves_again(tools):
    pid = pid_of(tools)
    starts = connection("probe").starts

    async def run_and_kill():
        executor = ToolExecutor(ToolsConfig(timeout_s=15))
        in_flight = asyncio.gather(*(executor.run_one(ToolCall("pause", {"seconds": 3}), tools) for _ in range(4)))
        await asyncio.sleep(0.5)
        os.kill(pid, signal.SIGKILL)
        return await in_flight

    for result in asyncio.run(run_and_kill()):
        assert result.error == "transient"
        assert "MCP server 'probe' died during the call" in result.content and "being restarted" in result.content
    new_pid = pid_of(tools)  # waits for the restart
    assert new_pid != pid and connection("probe").starts == starts + 1
    assert call(tools, "add", a=40, b=2).content == "42"
    assert children("mcp_probe_server") == [new_pid]


def test_a_hung_server_times_out_through_the_executor_and_is_restarted(tools):
    pid = pid_of(tools)
    starts = connection("probe").starts
    hung = call(tools, "hang", timeout_s=0.5, seconds=60)
    assert hung.error == "timeout" and "timed out after 0.5 s" in hung.content
    deadline = time.monotonic() + 20
    while connection("probe").starts == starts:  # a ping goes unanswered, the server is restarted
        assert time.monotonic() < deadline, "the hung server was not restarted"
        time.sleep(0.05)
    assert pid_of(tools) != pid
    assert wait_gone([pid]) == []  # the SDK killed the hung process


@pytest.mark.usefixtures("tools")
def test_a_server_that_keeps_failing_to_restart_is_given_up(tmp_path):
    once = settings(once=probe_once(tmp_path / "started"))
    once.max_restarts = 2
    flaky = load(once)
    assert call(flaky, "echo", text="first life").content == "first life"
    crashed = call(flaky, "crash")
    assert crashed.error == "transient" and "died during the call" in crashed.content
    deadline = time.monotonic() + 15
    while connection("once").down is None:
        assert time.monotonic() < deadline, "the server was not given up"
        time.sleep(0.05)
    down = call(flaky, "echo", text="again")
    assert down.error == "exception"
    assert "MCP server 'once' was given up after 2 failed restarts in a row" in down.content


@pytest.mark.usefixtures("tools")
def test_a_server_that_cannot_start_is_an_error_naming_it():
    with pytest.raises(ServerDown, match=r"MCP server 'broken' \(stdio .*\) could not start"):
        load(settings(broken={"command": sys.executable, "args": ["-c", "raise SystemExit(2)"]}))
    mute = {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]}  # never answers
    silent = McpSettings.model_validate({"servers": {"silent": mute}, "startup_timeout_s": 0.5})
    with pytest.raises(
        ServerDown, match=r"'silent' .* could not start: TimeoutError: no tool list within startup_timeout_s=0.5"
    ):
        load(silent)
