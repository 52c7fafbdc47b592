"""A real stdio MCP server shared by every call: schemas, errors, concurrency, filters, cleanup.

Every call goes through the core's ToolExecutor, each test in its own ``asyncio.run`` (as rollouts
are), while the server lives in the pool's loop for the whole module.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest
from mcp_testkit import HERE, call, children, connection, load, needs_proc, pid_of, probe_server, settings, wait_gone
from rlf_mcp.pool import get_pool, shutdown
from rlf_mcp.settings import McpConfigError, configured_servers
from rlf_mcp.toolset import make_tools

from rlfcore import ToolCall
from rlfcore.testing import ToolExecutor, ToolsConfig

pytestmark = needs_proc
ENTRY = probe_server(env={"PROBE_TAG": "stdio-test"}, cwd="..")


@pytest.fixture(scope="module")
def tools():
    yield load(settings(probe=ENTRY))
    shutdown()
    assert wait_gone(children("mcp_probe_server")) == []


def test_tools_come_with_their_schemas_and_the_servers_environment(tools):
    assert {"echo", "add", "pause", "hang", "fail", "explode", "pid", "crash", "where"} <= set(tools)
    add = tools["add"]
    assert add.description == "Add two integers." and add.plugin is None
    assert add.parameters["required"] == ["a", "b"] and add.parameters["properties"]["a"]["type"] == "integer"
    assert call(tools, "add", a=2, b=3).content == "5"
    assert call(tools, "where", variable="PROBE_TAG").content == f"stdio-test {HERE.parent.resolve()}"


def test_server_errors_are_tool_errors_the_model_can_read(tools):
    failed = call(tools, "fail", message="the table 'users' does not exist")
    assert failed.error == "exception" and "the table 'users' does not exist" in failed.content
    crashed_inside = call(tools, "explode")
    assert crashed_inside.error == "exception" and "Error executing tool explode" in crashed_inside.content
    assert "secret internals" not in crashed_inside.content  # the server keeps its internals to itself
    bad = call(tools, "add", a="two", b=3)
    assert bad.error == "schema" and "'two' is not of type 'integer'" in bad.content


def test_64_concurrent_calls_share_one_session_and_one_process(tools):
    pid = pid_of(tools)

    async def many():
        executor = ToolExecutor(ToolsConfig(timeout_s=30))
        adds = [ToolCall("add", {"a": i, "b": 1}) for i in range(64)]
        pauses = [ToolCall("pause", {"seconds": 0.5}) for _ in range(64)]
        start = time.perf_counter()
        paused = await executor.run(pauses, tools)
        return await executor.run(adds, tools), paused, time.perf_counter() - start

    added, paused, pause_s = asyncio.run(many())
    assert [r.content for r in added] == [str(i + 1) for i in range(64)]
    assert all(r.ok for r in paused)
    assert pause_s < 16  # 64 half-second calls one after the other would take 32 s
    assert pid_of(tools) == pid and children("mcp_probe_server") == [pid]


def test_a_lone_surrogate_in_the_arguments_fails_only_its_own_call(tools):
    """It cannot be encoded for the server: sent, it ended the session and every call in flight on it."""
    pid, starts = pid_of(tools), connection("probe").starts

    async def together():
        executor = ToolExecutor(ToolsConfig(timeout_s=15))
        return await executor.run([ToolCall("pause", {"seconds": 0.5}), ToolCall("echo", {"text": "a\ud800b"})], tools)

    paused, refused = asyncio.run(together())
    assert paused.ok and paused.content == "done"
    assert refused.error == "exception" and "lone surrogate (U+D800)" in refused.content and "'text'" in refused.content
    assert connection("probe").starts == starts and pid_of(tools) == pid


def test_a_timed_out_call_on_a_healthy_server_does_not_restart_it(tools):
    starts = connection("probe").starts
    slow = call(tools, "pause", timeout_s=0.3, seconds=5)
    assert slow.error == "timeout"
    time.sleep(1.2)  # longer than the ping's deadline: the server answered it
    assert call(tools, "echo", text="still here").content == "still here"
    assert connection("probe").starts == starts


def test_include_exclude_and_prefix_share_the_running_server(tools):
    pid = pid_of(tools)
    picked = load(settings(probe={**ENTRY, "include": ["echo", "add", "pid"], "exclude": ["pid"], "prefix": "p_"}))
    assert sorted(picked) == ["p_add", "p_echo"]
    assert call(picked, "p_add", a=1, b=1).content == "2"
    assert pid_of(tools) == pid  # same spec: the same process, no second server


@pytest.mark.parametrize(
    ("field", "names", "message"),
    [
        ("include", ["echo", "ecoh"], "server 'probe', field 'include': no tool named 'ecoh'; the server offers: add,"),
        ("exclude", ["nope"], "server 'probe', field 'exclude': no tool named 'nope'"),
    ],
)
@pytest.mark.usefixtures("tools")
def test_filter_names_must_exist_on_the_server(field, names, message):
    with pytest.raises(McpConfigError, match=message):
        load(settings(probe={**ENTRY, field: names}))


@pytest.mark.usefixtures("tools")
def test_two_servers_offering_the_same_name_need_a_prefix():
    [entry] = configured_servers(settings(probe=ENTRY), HERE)
    probe = connection("probe")
    with pytest.raises(
        McpConfigError, match="tool 'echo' is offered by server 'probe' and by server 'probe'; set `prefix`"
    ):
        make_tools([entry, replace(entry)], [probe, probe], get_pool())
    prefixed = make_tools([entry, replace(entry, prefix="b_")], [probe, probe], get_pool())
    assert {"echo", "b_echo"} <= {t.name for t in prefixed}
