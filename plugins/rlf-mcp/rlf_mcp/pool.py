"""MCP servers and the event loop they live in: one :class:`Pool` per run, closed by the plugin's ``shutdown``.

Why a loop of its own: an MCP session is tied to the task and loop that opened it, and a pool must
still close its servers after its run's loop is gone (interpreter exit, for a run that never reached
``shutdown``) and serve callers with no run loop at all (:func:`get_pool`, for scripts and tests).
So a pool's sessions live in one event loop in a daemon thread, and a tool call from the run's loop is
bridged to it (``run_coroutine_threadsafe`` + ``wrap_future``: cancelling the caller, as the executor's
timeout does, cancels the call in the pool too). A side effect that matters on few cores: server I/O
goes on while the run's loop is busy in a synchronous decode step.

A run's pool is kept in the plugin's run-scoped stash and closed (:meth:`Pool.close`) by its
``shutdown`` hook. Within a pool servers are keyed by their resolved spec (name, command or URL,
environment...), so toolsets naming the same server share it. :func:`get_pool` is a process-wide
pool for scripts and tests that load tools without a run; :func:`shutdown` closes it. As a last
resort, interpreter exit (``atexit``) closes every pool still open, a run's that never reached its
``shutdown`` included. A process killed outright cannot: stdio servers then see their stdin close
and exit (every ``MCPServer`` does), and a server that ignores EOF must be cleaned up by the
process's supervisor. A forked child forgets its parent's pools instead of closing them.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import threading
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

if TYPE_CHECKING:
    from rlf_mcp.connection import Policy, ServerConnection
    from rlf_mcp.settings import ServerSpec

T = TypeVar("T")

SHUTDOWN_TIMEOUT_S = 30.0


class Pool:
    """An event loop in a daemon thread, and the MCP server connections that live in it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._starts: dict[str, asyncio.Task[ServerConnection]] = {}
        self._created: list[ServerConnection] = []
        self._thread = threading.Thread(target=self._run, name="rlf-mcp", daemon=True)
        self._thread.start()
        _open.add(self)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` in the pool's loop, from any thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` in the pool's loop from another event loop; cancelling this cancels it there."""
        return await asyncio.wrap_future(self.submit(coro))

    @property
    def in_pool_thread(self) -> bool:
        return threading.current_thread() is self._thread

    async def connect(self, specs: list[ServerSpec], policy: Policy) -> list[ServerConnection]:
        """The running connection of each spec, starting (concurrently) those not running yet.

        Runs in the pool's loop. A server that failed to start raises :class:`ServerDown`; one that was
        given up is started afresh.
        """
        from rlf_mcp.connection import ServerConnection

        async def one(spec: ServerSpec) -> ServerConnection:
            key = spec.key()
            task = self._starts.get(key)
            if task is None or not _usable(task):
                connection = ServerConnection(spec, policy)
                self._created.append(connection)

                async def start() -> ServerConnection:
                    await connection.start()
                    return connection

                task = self._starts[key] = self.loop.create_task(start(), name=f"rlf-mcp-start-{spec.name}")
            return await asyncio.shield(task)

        results = await asyncio.gather(*(one(s) for s in specs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return cast("list[ServerConnection]", results)

    def connections(self) -> list[ServerConnection]:
        """Every connection that started (for figures and tests)."""
        tasks = list(self._starts.values())  # may be read from another thread while the loop adds one
        return [t.result() for t in tasks if t.done() and not t.cancelled() and t.exception() is None]

    async def close_all(self) -> None:
        """Close every connection ever created here, those still starting or given up included."""
        await asyncio.gather(*(c.close() for c in self._created), return_exceptions=True)
        self._starts.clear()
        self._created.clear()

    def close(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Close every server of this pool and stop its loop; safe to call more than once.

        Blocks until the servers are closed (stdio servers exit on stdin EOF, or are killed after a
        few seconds): call it from a thread, not from an event loop.
        """
        if self.in_pool_thread:
            raise RuntimeError("an MCP pool cannot be closed from inside its own loop")
        if self not in _open:
            return
        try:
            self.submit(self.close_all()).result(timeout_s)
        finally:
            self.stop()

    @property
    def running(self) -> bool:
        """Whether its loop's thread still runs."""
        return self._thread.is_alive()

    def stop(self) -> None:
        _open.discard(self)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


def _usable(task: asyncio.Task[ServerConnection]) -> bool:
    """Starting, or started and not given up: a new start would only duplicate the server."""
    if not task.done():
        return True
    return not task.cancelled() and task.exception() is None and task.result().down is None


_lock = threading.Lock()
_pool: Pool | None = None
_open: set[Pool] = set()
"""Every pool whose loop runs: interpreter exit closes those left."""


def get_pool() -> Pool:
    """The process-wide pool (for tools loaded without a run), started on first use (again after :func:`shutdown`)."""
    global _pool  # noqa: PLW0603 - the process-wide pool, under _lock
    with _lock:
        if _pool is None:
            _pool = Pool()
        return _pool


def shutdown(timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
    """Close the process-wide pool's servers and stop its loop (:meth:`Pool.close`); safe to call more
    than once. Servers start again if a toolset is set up afterwards."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close(timeout_s)


def _close_all_at_exit() -> None:
    """The last resort: close every pool still open when the interpreter exits."""
    shutdown()
    for pool in list(_open):
        pool.close()


def _forget_after_fork() -> None:
    """In a forked child the pools' threads do not exist: start afresh, leave the parent's servers alone."""
    global _lock, _pool, _open  # noqa: PLW0603 - a forked child starts the process-wide state afresh
    _lock = threading.Lock()
    _pool = None
    _open = set()


atexit.register(_close_all_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
