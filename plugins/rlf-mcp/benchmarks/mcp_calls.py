"""MCP tool calls through rlf: latency, throughput, server start and restart, over stdio and HTTP.

Every call takes the path a rollout's call takes: the core's ToolExecutor, the plugin's bridge to the
pool's event loop, one shared MCP session, the calculator server and back. The same function as a
local rlf tool gives the baseline.

    python plugins/rlf-mcp/benchmarks/mcp_calls.py            # prints a table
    python plugins/rlf-mcp/benchmarks/mcp_calls.py --calls 100 # quicker

Writes benchmarks/results/mcp_calls.json (at the repository root). Linux only (it reads /proc).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rlf_mcp.pool import get_pool, shutdown
from rlf_mcp.servers.calculator import evaluate, format_number
from rlf_mcp.settings import McpSettings, configured_servers
from rlf_mcp.toolset import load_tools

from rlfcore import Tool, ToolCall, tool
from rlfcore.testing import ToolExecutor, ToolsConfig

ROOT = Path(__file__).resolve().parents[3]
CONCURRENCY = (1, 8, 64)
CALCULATOR = [sys.executable, "-m", "rlf_mcp.servers.calculator"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


async def latencies(tools: dict[str, Tool], calls: int) -> list[float]:
    executor = ToolExecutor(ToolsConfig(timeout_s=30))
    out = []
    for i in range(calls):
        start = time.perf_counter()
        result = await executor.run_one(ToolCall("calculate", {"expression": f"{i} * 7 + 1"}), tools)
        out.append(time.perf_counter() - start)
        assert result.ok, result.content
    return out


async def throughput(tools: dict[str, Tool], concurrency: int, calls: int) -> float:
    """Calls per second with ``concurrency`` callers, each calling one after the other."""
    executor = ToolExecutor(ToolsConfig(timeout_s=60, max_concurrency=max(CONCURRENCY)))
    per_caller = max(1, calls // concurrency)

    async def caller(k: int) -> None:
        for i in range(per_caller):
            result = await executor.run_one(ToolCall("calculate", {"expression": f"{k} + {i}"}), tools)
            assert result.ok, result.content

    start = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(concurrency)))
    return per_caller * concurrency / (time.perf_counter() - start)


def measure(tools: dict[str, Tool], calls: int) -> dict[str, Any]:
    asyncio.run(latencies(tools, 20))  # warm up: first calls pay for imports and thread start
    lat = asyncio.run(latencies(tools, calls))
    row: dict[str, Any] = {f"p{q}_ms": 1000 * percentile(lat, q) for q in (50, 90, 99)}
    for c in CONCURRENCY:
        row[f"calls_per_s_c{c}"] = asyncio.run(throughput(tools, c, calls))
    return row


def local_tools() -> dict[str, Tool]:
    @tool
    def calculate(expression: str) -> str:
        """The calculator's evaluator as an in-process rlf tool: the baseline without MCP."""
        return format_number(evaluate(expression))

    return {"calculate": calculate}


def mcp_tools(servers: dict[str, Any]) -> dict[str, Tool]:
    settings = McpSettings.model_validate({"servers": servers, "restart_backoff_s": 0.0})
    return {t.name: t for t in asyncio.run(load_tools(configured_servers(settings, Path.cwd()), settings))}


def server_pid(marker: str = "rlf_mcp.servers.calculator") -> int:
    """The calculator child of this process (from /proc)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z" and marker in cmdline:
                return int(entry.name)
    raise RuntimeError("no calculator server process found")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def restarts(tools: dict[str, Tool], times: int) -> list[float]:
    """Seconds from killing the server to the next successful call (which waits for the restart)."""
    out = []
    for _ in range(times):
        pid = server_pid()
        start = time.perf_counter()
        os.kill(pid, signal.SIGKILL)
        executor = ToolExecutor(ToolsConfig(timeout_s=60))
        while True:  # the first call may still reach the dying session and fail: try again
            result = asyncio.run(executor.run_one(ToolCall("calculate", {"expression": "1 + 1"}), tools))
            if result.ok:
                break
        out.append(time.perf_counter() - start)
    return out


def http_server() -> tuple[subprocess.Popen[bytes], int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([*CALCULATOR, "--http", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return process, port
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise RuntimeError("the calculator HTTP server did not start") from None
            time.sleep(0.05)


def main() -> None:
    cli = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cli.add_argument("--calls", type=int, default=500, help="calls per latency and throughput measurement")
    cli.add_argument("--restarts", type=int, default=3, help="kills of the stdio server to time")
    cli.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "mcp_calls.json")
    args = cli.parse_args()

    rows: dict[str, dict[str, Any]] = {"local (no MCP)": measure(local_tools(), args.calls)}

    stdio = mcp_tools({"calculator": {"command": CALCULATOR[0], "args": CALCULATOR[1:]}})
    [connection] = get_pool().connections()
    start_cpu = cpu_seconds(server_pid())
    rows["stdio"] = measure(stdio, args.calls)
    restart_s = restarts(stdio, args.restarts)

    process, port = http_server()
    try:
        rows["streamable HTTP"] = measure(mcp_tools({"remote": {"url": f"http://127.0.0.1:{port}/mcp"}}), args.calls)
    finally:
        shutdown()
        process.kill()

    starts = {
        "stdio_start_s": connection.start_s[0],
        "stdio_start_cpu_s": start_cpu,
        "restart_after_kill_s": restart_s,
        "session_reopen_s": connection.start_s[1:],
    }
    report = {
        "calls": args.calls,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "transports": rows,
        "server": starts,
    }
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {args.out}")


def print_table(report: dict[str, Any]) -> None:
    heads = ["transport", "p50 ms", "p90 ms", "p99 ms", *(f"calls/s @{c}" for c in CONCURRENCY)]
    print(f"MCP calls through the rlf executor ({report['calls']} calls each, {report['machine']['cpus']} CPUs)\n")
    print("  ".join(f"{h:>14}" for h in heads))
    for name, row in report["transports"].items():
        cells = [name, *(f"{row[f'p{q}_ms']:.2f}" for q in (50, 90, 99))]
        cells += [f"{row[f'calls_per_s_c{c}']:.0f}" for c in CONCURRENCY]
        print("  ".join(f"{c:>14}" for c in cells))
    server = report["server"]
    restarts = ", ".join(f"{s:.2f}" for s in server["restart_after_kill_s"])
    reopens = ", ".join(f"{s:.2f}" for s in server["session_reopen_s"])
    print(
        f"\nstdio server start: {server['stdio_start_s']:.2f} s wall, {server['stdio_start_cpu_s']:.2f} s CPU of the server"
        f"\nkill -> next successful call: {restarts} s (the restart itself: {reopens} s)"
    )


if __name__ == "__main__":
    main()
