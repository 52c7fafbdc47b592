"""One event loop per run: set-up, every rollout step, scoring and shutdown all run in it.

asyncio objects (semaphores, queues, tasks, an MCP session) belong to the loop that made them. A run
used to set up in one ``asyncio.run``, roll out each step in another and close in a third, so every
component that held one had to notice the loop change and rebuild. A run now owns one
:class:`RunLoop` and runs each phase through it; the synchronous work between phases (the local
trainer's torch update) runs in the same thread, between two :meth:`RunLoop.run` calls.

Written without ``asyncio.Runner`` (Python 3.11+) because rlf supports 3.10, and because its close
waits for ever: :meth:`RunLoop.close` gives what is left a deadline, then abandons it by name. For
the same reason the loop's default executor (``asyncio.to_thread``) is a :class:`LeftBehind`, whose
threads the interpreter does not wait for at exit.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from rlfcore.signals import Interrupted
from rlfcore.threads import WORKERS

T = TypeVar("T")
P = ParamSpec("P")

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
        self._executor = LeftBehind()
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
            self._loop.set_default_executor(self._executor)
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
        call), finish async generators and the default executor's calls, and close the loop; safe to
        call more than once. Every wait has ``timeout_s``: a run ends even when a plugin never returns."""
        if self._closed:
            return
        self._closed = True
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            self._cancel_all(loop)
            self._bounded(loop, loop.shutdown_asyncgens(), "async generators not finished in %g s are left so")
            self._finish_calls()
        finally:
            loop.close()

    def _finish_calls(self) -> None:
        """Wait up to ``timeout_s`` for the calls in the default executor (``asyncio.to_thread``), then
        leave those still running, with a warning naming each. Not ``loop.shutdown_default_executor``:
        on Python 3.11 it joins its helper thread even when its wait is cancelled, so one call that
        never returns would hang the close."""
        self._executor.shutdown(wait=False)
        unfinished = self._executor.unfinished()
        if unfinished:  # the loop is not running: a wait here holds up nothing
            futures.wait(unfinished, timeout=self.timeout_s)
        left = self._executor.unfinished().values()
        if left:
            log.warning(
                "closing the run's event loop: still running in asyncio's default executor (asyncio.to_thread, "
                "run_in_executor) %g s later: %s; threads cannot be killed: abandoned, and the process exits "
                "without waiting for them",
                self.timeout_s,
                "; ".join(sorted(left)),
            )

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


class LeftBehind(ThreadPoolExecutor):
    """The run loop's default executor: each call runs in a worker thread of :mod:`rlfcore.threads`,
    which is never joined, so a call that never returns (a plugin's ``asyncio.to_thread``) cannot keep
    the process from exiting, as the threads of a ``ThreadPoolExecutor`` do (it joins them at exit).

    At most as many calls at once as a ``ThreadPoolExecutor``'s default, the rest queued, as asyncio's
    own default executor does. A ``ThreadPoolExecutor`` only for ``loop.set_default_executor``, which
    takes nothing else: none of its threads or queues are used.
    """

    def __init__(self) -> None:
        super().__init__()
        self._limit = min(32, (os.cpu_count() or 1) + 4)
        self._guard = threading.Lock()
        self._queued: deque[_Call] = deque()
        self._running: dict[Future[Any], str] = {}
        self._closed = False

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        call = _Call(partial(fn, *args, **kwargs), _caller_of(fn))
        with self._guard:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if len(self._running) >= self._limit:
                self._queued.append(call)
                return call.future
            self._running[call.future] = call.name
        WORKERS.submit(partial(self._serve, call))
        return call.future

    def _serve(self, call: _Call | None) -> Callable[[], None]:
        """Run ``call``, then the queued calls while there are any (in a worker thread)."""
        while call is not None:
            call.run()
            with self._guard:
                del self._running[call.future]
                call = self._queued.popleft() if self._queued else None
                if call is not None:
                    self._running[call.future] = call.name
        return _nothing

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse new calls; with ``cancel_futures``, cancel the queued ones; with ``wait``, wait for
        the rest (for ever, as ``ThreadPoolExecutor`` does: the run loop bounds its own wait)."""
        with self._guard:
            self._closed = True
            queued = list(self._queued)
        if cancel_futures:
            for call in queued:
                call.future.cancel()
        if wait:
            futures.wait(self.unfinished())

    def unfinished(self) -> dict[Future[Any], str]:
        """The calls running or queued, each with what it runs and for which task (``plugin 'x': shutdown``)."""
        with self._guard:
            calls = [*self._running.items(), *((call.future, call.name) for call in self._queued)]
        return {future: name for future, name in calls if not future.done()}  # one just answered is done


class _Call:
    def __init__(self, work: Callable[[], Any], name: str):
        self.work = work
        self.name = name
        self.future: Future[Any] = Future()

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.work()
        except BaseException as exc:  # the caller's to raise, as in a ThreadPoolExecutor
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


def _nothing() -> None:
    """A call of the default executor hands nothing over: its future has its answer already."""


def _caller_of(fn: Callable[..., Any]) -> str:
    """``module.function`` that ``fn`` runs (through ``asyncio.to_thread``'s ``partial(context.run,
    function, ...)``), and the task that called it when it runs in one."""
    while isinstance(fn, partial):
        context_run = isinstance(getattr(fn.func, "__self__", None), contextvars.Context)
        fn = fn.args[0] if context_run and fn.args else fn.func
    name = getattr(fn, "__qualname__", None) or repr(fn)
    module = getattr(fn, "__module__", None)
    name = f"{module}.{name}" if module else name
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not called from the loop's thread
        task = None
    return f"{name} (called by {_describe(task)})" if task is not None else name
