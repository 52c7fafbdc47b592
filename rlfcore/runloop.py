"""One event loop per run: set-up, every rollout step, scoring and shutdown all run in it.

asyncio objects (semaphores, queues, tasks, an MCP session) belong to the loop that made them. A run
used to set up in one ``asyncio.run``, roll out each step in another and close in a third, so every
component that held one had to notice the loop change and rebuild. A run now owns one
:class:`RunLoop` and runs each phase through it; the synchronous work between phases (the local
trainer's torch update) runs in the same thread, between two :meth:`RunLoop.run` calls.

Written without ``asyncio.Runner`` (Python 3.11+) because rlf supports 3.10.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

T = TypeVar("T")


class RunLoop:
    """The event loop of one run, made on first use and closed once by :meth:`close`."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The run's loop (made now if it was not yet)."""
        if self._closed:
            raise RuntimeError("this run's event loop is closed: a run's phases must run before it ends")
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            weakref.finalize(self, self._loop.close)  # one never closed (a test's runtime) still is, once dropped
        return self._loop

    def holds(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether ``loop`` is this run's loop (asks without making one)."""
        return self._loop is loop

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to its end in the run's loop, from synchronous code (not from inside a loop)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            coro.close()
            raise RuntimeError("RunLoop.run was called from inside a running event loop: await the coroutine instead")
        try:
            loop = self.loop
        except RuntimeError:
            coro.close()
            raise
        return loop.run_until_complete(coro)

    def close(self) -> None:
        """Cancel what still runs (a step stopped by Ctrl-C leaves tasks behind), finish async
        generators and the default executor, and close the loop; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()

    def __enter__(self) -> RunLoop:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
