"""One MCP server as a run sees it: a session shared by every trajectory, restarted when it dies.

The SDK needs a stdio session entered and exited in the same task, so one *owner* task per server
opens the transport and the session, lists the tools, holds them open while they work, closes them,
and opens new ones (after a backoff) when the server dies or hangs. Calls are tasks of their own on the
owner's current session: the SDK multiplexes concurrent requests over one session, so 64 trajectories
calling at once share one server process.

A server is *dead* when its side of the connection ends (a stdio process that exits closes its
stdout: seen at once, even with no call in flight) or a call fails on the transport. It is *hung* when,
after a call was cancelled (the core executor's timeout), it does not answer a ping within
``ping_timeout_s``. Either way in-flight calls fail with :class:`ServerGone` (a transient tool error
for the model, not a crash of the run), waiting calls go to the next session, and the owner restarts
the server. After ``max_restarts`` failed restarts in a row it gives up: calls then fail at once with
:class:`ServerDown`.

Everything here runs in the pool's event loop (:mod:`rlf_mcp.pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from rlf_mcp.settings import ServerSpec
from rlfcore import TransientToolError

if sys.version_info < (3, 11):  # anyio installs the backport there
    from exceptiongroup import BaseExceptionGroup

log = logging.getLogger("rlf_mcp")

MAX_BACKOFF_S = 30.0
CLOSE_TIMEOUT_S = 10.0
"""The SDK's stdio shutdown waits at most about 6 s (stdin closed, then SIGTERM, then SIGKILL)."""
MAX_TOOL_PAGES = 100
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
CLIENT_INFO = types.Implementation(name="rlf-mcp", version="0.1.0")
_TRANSPORT_ERRORS = (
    OSError,
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
)


class ServerGone(TransientToolError):
    """The server died or hung during the call; it is being restarted (a retry may succeed)."""


class ServerDown(RuntimeError):
    """The server cannot be used: it failed to start, was given up after restarts, or was shut down."""


@dataclass(frozen=True)
class Policy:
    """How long to wait for servers and how to restart them (from the ``mcp:`` settings)."""

    startup_timeout_s: float = 30.0
    ping_timeout_s: float = 5.0
    restart_backoff_s: float = 0.5
    max_restarts: int = 10


class ServerConnection:
    """A running MCP server: its tools, and :meth:`call` to use them. Create and use it in one loop."""

    def __init__(self, spec: ServerSpec, policy: Policy) -> None:
        self.spec = spec
        self.policy = policy
        self.tools: list[types.Tool] = []
        self.starts = 0
        """Sessions opened: the first start plus every restart."""
        self.start_s: list[float] = []
        """Seconds each (re)start took, from launching the server to its tool list."""
        self._session: ClientSession | None = None
        self._generation = 0
        self._ready = asyncio.Event()  # set while there is a session, or for good once the server is down
        self._broken = asyncio.Event()  # set to end the current session
        self._stop = asyncio.Event()
        self._why = ""
        self._failures = 0
        self._down: str | None = None
        self._owner: asyncio.Task[None] | None = None
        self._first: asyncio.Future[None] | None = None
        self._checks: set[asyncio.Task[None]] = set()
        self._scope: anyio.CancelScope | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def down(self) -> str | None:
        """Why the server cannot be used any more, or ``None`` while it can."""
        return self._down

    async def start(self) -> None:
        """Launch the server, open the first session and list the tools; :class:`ServerDown` if that fails."""
        loop = asyncio.get_running_loop()
        self._first = loop.create_future()
        self._owner = loop.create_task(self._own(), name=f"rlf-mcp-owner-{self.name}")
        await asyncio.shield(self._first)

    async def call(self, tool: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Call one tool on the current session (waiting for a restart in progress).

        A remote server that lost our session (it restarted: HTTP 404) never ran the call, so it is
        sent again, once, on a new session.
        """
        for attempt in range(2):
            await self._ready.wait()
            session, generation = self._session, self._generation
            if session is None:
                raise ServerDown(self._down or f"MCP server {self.name!r} is not running")
            try:
                result = await session.call_tool(tool, arguments)
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    self._mark_broken(generation, "its connection closed")
                    raise self._gone() from None
                if not (self._session_lost(exc) and attempt == 0):
                    raise
                self._mark_broken(generation, f"it lost the session ({exc.message}); it probably restarted")
                continue
            except asyncio.CancelledError:  # the caller's timeout: the server may be hung
                self._check_alive(session, generation)
                raise
            except _TRANSPORT_ERRORS as exc:
                self._mark_broken(generation, f"the transport failed: {type(exc).__name__}: {exc}")
                raise self._gone() from None
            self._failures = 0
            return result
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _session_lost(self, exc: MCPError) -> bool:
        """Streamable HTTP's 404 for an unknown session id (the SDK's client and server both say "session")."""
        return self.spec.transport != "stdio" and exc.code == types.INVALID_REQUEST and "session" in exc.message.lower()

    async def close(self) -> None:
        """End the session and stop the server (stdio: stdin closed, then SIGTERM, then SIGKILL)."""
        self._down = self._down or f"MCP server {self.name!r} was shut down"
        self._stop.set()
        self._broken.set()
        if self._scope is not None and not self._session:  # still starting: stop waiting for it
            self._scope.cancel()
        for task in list(self._checks):
            task.cancel()
        if self._owner is not None and not self._owner.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._owner), CLOSE_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning(
                    "MCP server %r did not close within %.0f s; abandoning its session", self.name, CLOSE_TIMEOUT_S
                )
                self._owner.cancel()
        self._session = None
        self._ready.set()

    # --- the owner task ----------------------------------------------------------------------------

    async def _own(self) -> None:
        assert self._first is not None
        while not self._stop.is_set():
            try:
                await self._lifetime()
                reason = self._why
            except Exception as exc:  # could not start, or the transport broke: restart below
                reason = _reason(exc)
            self._session = None
            self._ready.clear()
            if self._stop.is_set():
                break
            if not self._first.done():
                self._give_up(
                    f"MCP server {self.name!r} ({self.spec.describe()}, from {self.spec.where}) could not start: {reason}"
                )
                self._first.set_exception(ServerDown(self._down))
                return
            self._failures += 1
            if self._failures > self.policy.max_restarts:
                self._give_up(
                    f"MCP server {self.name!r} was given up after {self.policy.max_restarts} failed restarts in a row; "
                    f"last: {reason}"
                )
                log.error("%s", self._down)
                return
            delay = min(self.policy.restart_backoff_s * 2 ** (self._failures - 1), MAX_BACKOFF_S)
            log.warning("MCP server %r stopped (%s); restarting in %.2g s", self.name, reason, delay)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
        if not self._first.done():
            self._first.set_exception(ServerDown(f"MCP server {self.name!r} was shut down while starting"))
        self._ready.set()

    async def _lifetime(self) -> None:
        """One session, from launching the server to closing it; returns when it broke or on close."""
        first = self._first
        assert first is not None
        self._generation += 1
        generation = self._generation
        self._broken.clear()
        began = time.perf_counter()
        started = False
        with anyio.CancelScope(deadline=anyio.current_time() + self.policy.startup_timeout_s) as scope:
            self._scope = scope
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(await self._transport(stack))
                read = _EndWatch(read, lambda: self._mark_broken(generation, "it exited or closed the connection"))
                session = await stack.enter_async_context(ClientSession(read, write, client_info=CLIENT_INFO))
                await session.initialize()
                tools = await _list_tools(session)
                scope.deadline = math.inf
                started = True
                self.start_s.append(time.perf_counter() - began)
                self.starts += 1
                if self.starts == 1:
                    self.tools = tools
                elif {t.name for t in tools} != {t.name for t in self.tools}:
                    log.warning(
                        "MCP server %r offers other tools after its restart; the run keeps the first list", self.name
                    )
                self._session = session
                self._ready.set()
                if not first.done():
                    first.set_result(None)
                await self._broken.wait()
                self._session = None
                self._ready.clear()
        if scope.cancelled_caught and not started:
            raise TimeoutError(f"no tool list within startup_timeout_s={self.policy.startup_timeout_s:g}")

    async def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        spec = self.spec
        if spec.transport == "stdio":
            assert spec.command is not None
            params = StdioServerParameters(
                command=spec.command, args=list(spec.args), env=dict(spec.env) or None, cwd=spec.cwd
            )
            return stdio_client(params, errlog=_stderr())
        assert spec.url is not None
        headers = dict(spec.headers) or None
        if spec.transport == "sse":
            return sse_client(spec.url, headers=headers, sse_read_timeout=spec.sse_read_timeout)
        client = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=HTTP_TIMEOUT))
        return streamable_http_client(spec.url, http_client=client)

    # --- failures ------------------------------------------------------------------------------------

    def _mark_broken(self, generation: int, why: str) -> None:
        if generation != self._generation or self._broken.is_set():
            return
        self._why = why
        self._session = None
        self._ready.clear()
        self._broken.set()

    def _gone(self) -> Exception:
        if self._stop.is_set():
            return ServerDown(self._down or f"MCP server {self.name!r} was shut down during the call")
        then = "it is being restarted" if self.spec.transport == "stdio" else "reconnecting"
        return ServerGone(f"MCP server {self.name!r} died during the call ({self._why}); {then}")

    def _give_up(self, message: str) -> None:
        self._down = message
        self._ready.set()

    def _check_alive(self, session: ClientSession, generation: int) -> None:
        """After a cancelled call, ping once (per session at a time): no answer means the server hangs."""
        if self._checks or generation != self._generation:
            return

        async def ping() -> None:
            try:
                with anyio.fail_after(self.policy.ping_timeout_s):
                    await session.send_ping()
            except Exception as exc:
                detail = "no answer" if isinstance(exc, TimeoutError) else _reason(exc)
                deadline = self.policy.ping_timeout_s
                self._mark_broken(generation, f"hung: {detail} to a ping within {deadline:g} s after a call timed out")

        task = asyncio.get_running_loop().create_task(ping(), name=f"rlf-mcp-ping-{self.name}")
        self._checks.add(task)
        task.add_done_callback(self._checks.discard)


class _EndWatch:
    """A transport's read stream that reports when the server's side ends (EOF), as the SDK reads it."""

    def __init__(self, inner: Any, on_end: Callable[[], None]) -> None:
        self._inner = inner
        self._on_end = on_end

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _EndWatch:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _EndWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


async def _list_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_TOOL_PAGES):
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _reason(exc: BaseException) -> str:
    """The innermost useful message of an exception (anyio wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_reason(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _stderr() -> TextIO:
    """Where a stdio server's stderr goes: ours, if it is a real file (under pytest it may not be), else the
    process's original one, else nowhere (a process started without stderr has ``sys.__stderr__`` None, and
    its descriptor 2 may be another file by now)."""
    for stream in (sys.stderr, sys.__stderr__):
        try:
            if stream is not None:
                stream.fileno()
                return stream
        except (AttributeError, OSError, ValueError):
            pass
    return _devnull()


@functools.cache
def _devnull() -> TextIO:
    """One sink for every server's stderr, open while the process lives."""
    return open(os.devnull, "w")
