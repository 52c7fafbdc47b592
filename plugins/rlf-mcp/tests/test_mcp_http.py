"""Remote MCP servers on loopback: streamable HTTP (headers, 64-way concurrency, a server that goes
away and comes back) and the older SSE transport."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time

import pytest
from mcp_testkit import PROBE, call, load, settings
from rlf_mcp.pool import shutdown

from rlfcore import ToolCall
from rlfcore.testing import ToolExecutor, ToolsConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Remote:
    """The probe server as a separate process serving on a loopback port, which a test may stop."""

    def __init__(self, flag: str) -> None:
        self.flag = flag
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def launch(self) -> Remote:
        self.process = subprocess.Popen([sys.executable, PROBE, self.flag, str(self.port)], stderr=subprocess.DEVNULL)
        return self

    def wait_listening(self, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert self.process is not None and self.process.poll() is None, "the probe server exited"
                assert time.monotonic() < deadline, "the probe server did not listen in time"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def remotes():
    http, sse = Remote("--http").launch(), Remote("--sse").launch()  # both start at once
    http.wait_listening()
    sse.wait_listening()
    yield http, sse
    shutdown()
    http.stop()
    sse.stop()


@pytest.fixture(scope="module")
def tools(remotes, monkeypatch_module):
    http, _ = remotes
    monkeypatch_module.setenv("PROBE_TOKEN", "t0ken")
    entry = {"url": f"http://127.0.0.1:{http.port}/mcp", "headers": {"Authorization": "Bearer ${PROBE_TOKEN}"}}
    return load(settings(remote=entry))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


def test_streamable_http_tools_and_headers_reach_the_server(tools):
    assert {"echo", "add", "header"} <= set(tools)
    assert call(tools, "add", a=20, b=22).content == "42"
    assert call(tools, "header", key="Authorization").content == "Bearer t0ken"
    failed = call(tools, "fail", message="no such row")
    assert failed.error == "exception" and "no such row" in failed.content


def test_64_concurrent_calls_over_one_http_session(tools):
    async def many():
        executor = ToolExecutor(ToolsConfig(timeout_s=30))
        start = time.perf_counter()
        results = await executor.run([ToolCall("pause", {"seconds": 0.5}) for _ in range(64)], tools)
        return results, time.perf_counter() - start

    results, seconds = asyncio.run(many())
    assert all(r.ok for r in results), [r.content for r in results if not r.ok][:2]
    assert seconds < 16  # one after the other: 32 s


def test_a_remote_server_that_goes_away_fails_calls_and_is_reconnected_when_back(remotes, tools):
    """Calls in flight when it stops fail; once it is back, a new session serves the next calls."""
    http, _ = remotes

    async def stop_mid_call():
        executor = ToolExecutor(ToolsConfig(timeout_s=15))
        in_flight = asyncio.gather(*(executor.run_one(ToolCall("pause", {"seconds": 3}), tools) for _ in range(2)))
        await asyncio.sleep(0.5)
        http.stop()
        return await in_flight

    for result in asyncio.run(stop_mid_call()):
        assert result.error == "transient" and "MCP server 'remote' died during the call" in result.content
        assert "reconnecting" in result.content
    http.launch().wait_listening()
    assert call(tools, "echo", timeout_s=30, text="back").content == "back"
    # restarted between two calls: the new server does not know our session (HTTP 404), which never
    # ran the call, so it is sent again on a new session and the model sees no error
    http.stop()
    http.launch().wait_listening()
    assert call(tools, "echo", timeout_s=30, text="transparent").content == "transparent"


def test_the_sse_transport(remotes):
    _, sse = remotes
    tools = load(settings(legacy={"url": f"http://127.0.0.1:{sse.port}/sse"}))
    assert call(tools, "add", a=1, b=2).content == "3"
    assert call(tools, "header", key="Authorization").content == "missing"
