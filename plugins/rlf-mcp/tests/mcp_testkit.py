"""Helpers for the plugin's tests: the probe server's config, loading tools, calling them through the
core's executor, and finding server processes (to kill one, or to prove none is left behind)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest
from rlf_mcp.connection import ServerConnection
from rlf_mcp.pool import get_pool
from rlf_mcp.settings import McpSettings, configured_servers
from rlf_mcp.toolset import load_tools

from rlfcore import Tool, ToolCall, ToolResult
from rlfcore.testing import ToolExecutor, ToolsConfig

HERE = Path(__file__).parent
PROBE = str(HERE / "mcp_probe_server.py")
FAST = {"restart_backoff_s": 0.05, "ping_timeout_s": 1.0}
"""Restart quickly and give up on a ping soon, so the failure tests stay short."""

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process checks read /proc (Linux)")


def probe_server(*args: str, **fields: object) -> dict[str, object]:
    """An ``mcpServers`` entry running the probe server over stdio with this Python."""
    return {"command": sys.executable, "args": [PROBE, *args], **fields}


def probe_once(marker: Path) -> dict[str, object]:
    """The probe server the first time; every later start exits at once (for the give-up path)."""
    launcher = (
        "import os, sys; m = sys.argv[1]; os.path.exists(m) and sys.exit('probe: started once already'); "
        "open(m, 'w').close(); os.execv(sys.executable, [sys.executable, sys.argv[2]])"
    )
    return {"command": sys.executable, "args": ["-c", launcher, str(marker), PROBE]}


def settings(**servers: dict) -> McpSettings:
    return McpSettings.model_validate({"servers": servers, **FAST})


def load(section: McpSettings) -> dict[str, Tool]:
    """Start (or reuse) the section's servers in their own ``asyncio.run``, as a run's setup does."""
    return {t.name: t for t in asyncio.run(load_tools(configured_servers(section, HERE), section))}


def call(tools: dict[str, Tool], tool: str, timeout_s: float = 15.0, **arguments: object) -> ToolResult:
    """One call through the core's executor, in a fresh event loop (as each rollout has)."""
    return asyncio.run(ToolExecutor(ToolsConfig(timeout_s=timeout_s)).run_one(ToolCall(tool, dict(arguments)), tools))


def connection(name: str) -> ServerConnection:
    return next(c for c in get_pool().connections() if c.name == name)


def pid_of(tools: dict[str, Tool]) -> int:
    result = call(tools, "pid")
    assert result.ok, result.content
    return int(result.content)


def children(marker: str, parent: int | None = None) -> list[int]:
    """Live (not zombie) child processes of ``parent`` (default: this one) whose command line has ``marker``."""
    parent = os.getpid() if parent is None else parent
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == parent and state != "Z" and marker in cmdline:
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """The pids still alive after waiting up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left
