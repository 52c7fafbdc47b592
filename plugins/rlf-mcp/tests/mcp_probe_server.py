"""An MCP server for the plugin's tests: tools that answer, fail, hang, crash and tell their pid.

Run as a script: ``python mcp_probe_server.py`` (stdio), ``--http PORT`` or ``--sse PORT``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from rlf_mcp.servers.run import parser, serve

server = MCPServer("probe", log_level="CRITICAL")


@server.tool(description="Echo the text back.")
def echo(text: str) -> str:
    return text


@server.tool(description="Add two integers.")
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="Answer after a pause, without blocking the server.")
async def pause(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "done"


@server.tool(description="Block the server's event loop: the whole server hangs.")
async def hang(seconds: float) -> str:
    time.sleep(seconds)  # noqa: ASYNC251 - blocking on purpose
    return "woke up"


@server.tool(description="Fail with the given message.")
def fail(message: str) -> str:
    raise ToolError(message)


@server.tool(description="Raise an unexpected exception.")
def explode() -> str:
    raise RuntimeError("secret internals")


@server.tool(description="The server's process id.")
def pid() -> int:
    return os.getpid()


@server.tool(description="Exit the server process at once.")
def crash() -> str:
    os._exit(3)


@server.tool(description="An environment variable and the working folder.")
def where(variable: str) -> str:
    return f"{os.environ.get(variable)} {os.getcwd()}"


@server.tool(description="A header of the HTTP request that carried this call.")
def header(key: str, ctx: Context) -> str:
    return (ctx.headers or {}).get(key.lower(), "missing")


if __name__ == "__main__":
    serve(server, parser("The probe MCP server.").parse_args(sys.argv[1:]))
