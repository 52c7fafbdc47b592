"""One event loop per run: set-up, every rollout step, scoring and shutdown all run in it.

asyncio objects (semaphores, queues, tasks, an MCP session) belong to the loop that made them. A run
used to set up in one ``asyncio.run``, roll out each step in another and close in a third, so every
component that held one had to notice the loop change and rebuild. A run now owns one
:class:`RunLoop` and runs each phase through it; the synchronous work between phases (the local
trainer's torch update) runs in the same thread, between two :meth:`RunLoop.run` calls.

Written without ``asyncio.Runner`` (Python 3.11+) because rlf supports 3.10, and because its close
waits for ever: :meth:`RunLoop.close` gives what is left a deadline, then abandons it by name.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from rlfcore.signals import Interrupted

T = TypeVar("T")

log = logging.getLogger(__name__)

_abandoned: set[asyncio.Task[Any]] = set()
"""Tasks left running when their loop closed, kept: a task dropped would close its coroutine, running
its ``finally`` blocks outside any loop."""


class RunLoop:
    """The event loop of one run, made on first use and closed once by :meth:`close`.

    ``timeout_s`` bounds each round of the close (``tools.shutdown_timeout_s`` in a run).
    """

    def __init__(self, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._interrupts: list[Interrupted] = []
        """The signals' exceptions that ended a phase already (:meth:`_complete`)."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The run's loop (made now if it was not yet)."""
        if self._closed:
            raise RuntimeError("this run's event loop is closed: a run's phases must run before it ends")
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._loop.set_exception_handler(self._report)
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
        return self._complete(loop, coro)

    def close(self) -> None:
        """Cancel what still runs (a step stopped by Ctrl-C leaves tasks behind, a hung plugin its
        call), finish async generators and the default executor, and close the loop; safe to call
        more than once. Every wait has ``timeout_s``: a run ends even when a plugin never returns."""
        if self._closed:
            return
        self._closed = True
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            self._cancel_all(loop)
            self._bounded(loop, loop.shutdown_asyncgens(), "async generators not finished in %g s are left so")
            self._bounded(
                loop,
                loop.shutdown_default_executor(),
                "asyncio's default executor (asyncio.to_thread, run_in_executor) still runs threads after %g s; "
                "Python cannot stop a thread, and the process waits for them as it exits",
            )
        finally:
            loop.close()

    def _cancel_all(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel every task and wait up to ``timeout_s``; cancel what is left (a task that caught the
        first cancellation to clean up) and wait once more; abandon, with a warning naming each,
        what still runs then (a task that ignores its cancellation)."""
        for _ in range(2):
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            if not pending:
                return
            for task in pending:
                task.cancel()
            self._complete(loop, asyncio.wait(pending, timeout=self.timeout_s))
            for task in pending:  # their failures are retrieved: the run is over, and said why already
                if task.done() and not task.cancelled():
                    task.exception()
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if left:
            log.warning(
                "as the run ends, still running %g s after a second cancellation, abandoned: %s",
                self.timeout_s,
                "; ".join(sorted(_describe(t) for t in left)),
            )
            for task in left:
                task._log_destroy_pending = False  # type: ignore[attr-defined]  # named above; as asyncio.gather does
            _abandoned.update(left)

    def _bounded(self, loop: asyncio.AbstractEventLoop, step: Coroutine[Any, Any, None], warning: str) -> None:
        """Run one step of the close within ``timeout_s``; past it, ``warning`` (``%g``: the timeout)."""
        try:
            self._complete(loop, asyncio.wait_for(step, self.timeout_s))
        except asyncio.TimeoutError:
            log.warning("closing the run's event loop: " + warning, self.timeout_s)

    def _complete(self, loop: asyncio.AbstractEventLoop, awaitable: Awaitable[T]) -> T:
        """``loop.run_until_complete(awaitable)``, robust to what a signal leaves behind.

        A signal's :class:`~rlfcore.signals.Interrupted`, raised in a task's step (a plain ``def``
        hook runs on the loop's thread), escapes the loop, as asyncio lets every ``KeyboardInterrupt``
        do; the phase stops and the command handles it. But every task that awaited the interrupted one
        raises the same exception again when it next runs, and asyncio has queued a ``loop.stop()`` for
        the tasks that finished: either would end the next phase (a checkpoint, the close) at once,
        the second with "Event loop stopped before Future completed". Both are passed over here; a
        new signal is a new exception, and ends the phase as the first did."""
        future = asyncio.ensure_future(awaitable, loop=loop)
        while True:
            try:
                return loop.run_until_complete(future)
            except Interrupted as exc:
                if not any(exc is seen for seen in self._interrupts):
                    self._interrupts.append(exc)
                    raise
                if future.done():  # it ended in the step another task re-raised in
                    return future.result()
            except RuntimeError as exc:
                if future.done() or "stopped before Future completed" not in str(exc):
                    raise

    def _report(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """asyncio's report of an error nobody retrieved, less the tasks that re-raised a signal's
        exception the command has handled already (:meth:`_complete`): the stop was reported once."""
        if any(context.get("exception") is seen for seen in self._interrupts):
            return
        loop.default_exception_handler(context)

    def __enter__(self) -> RunLoop:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _describe(task: asyncio.Task[Any]) -> str:
    """A task's name where the core gave it one (``plugin 'x': shutdown``), else its coroutine's."""
    name = task.get_name()
    return name if not name.startswith("Task-") else getattr(task.get_coro(), "__qualname__", name)
