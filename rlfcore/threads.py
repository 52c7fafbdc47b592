"""Plain (sync) code called from the event loop runs in a worker thread; its answer comes back to the loop.

Every call that runs has a thread of its own: Python cannot stop a thread, so a call stuck for ever
(a hung tool, a plugin's ``close()``) holds its own thread and nothing else. A thread whose call
ended waits ``Workers.IDLE_S`` for the next call, so most calls start no thread.

Why not ``concurrent.futures.ThreadPoolExecutor`` (or ``asyncio.to_thread``, which uses one): its
``max_workers`` bound lets a few hung calls take every thread, after which all other calls queue
behind them for ever; its threads are joined at interpreter exit, so a hung call would hold up the
end of the run; and it starts them with ``threading.Thread.start()``, which blocks the event loop
until the new thread runs (about 1 ms each under load, measured in benchmarks/loop_scheduling.py,
where a thread start per call was the largest part of the loop's CPU per call). These threads are
started with ``_thread`` and never joined, like daemon threads. Their answers reach each event loop
in batches (``_Inbox``): the answers that arrive before the loop gets to them cost one wake-up of
the loop together, not one each.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import logging
import os
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger(__name__)

Answer = Callable[[bool, Any], None]
"""``answer(ok, value)``: the call's return value (``ok``), or what it raised."""


class Raised(Exception):
    """Carries a ``BaseException`` that plugin code raised (``SystemExit``, ``KeyboardInterrupt``, its
    own ``CancelledError``) as its ``__cause__``; raised as such, it would end the task, the event
    loop or the process."""


def start_in_thread(fn: Callable[..., Any], arguments: Mapping[str, Any], answer: Answer) -> None:
    """Run ``fn(**arguments)`` in a worker thread, in a copy of the current context; ``answer(ok,
    value)`` is called on the running loop when it ends (``ok`` False: ``value`` is what it raised, a
    ``BaseException`` wrapped in :class:`Raised`). Nothing is called if the loop closed meanwhile."""
    context = contextvars.copy_context()

    def work() -> Callable[[], None]:
        ok: bool
        value: Any
        try:
            ok, value = True, context.run(fn, **arguments)
        except Exception as exc:  # handed to the awaiting coroutine, which turns it into a result
            ok, value = False, exc
        except BaseException as exc:  # sys.exit() in a tool must not end the run
            wrapped = Raised()
            wrapped.__cause__ = exc
            ok, value = False, wrapped

        def hand_over() -> None:
            try:
                inbox.put(answer, ok, value)
            except RuntimeError:  # the loop closed while the call ran
                pass

        return hand_over

    inbox = _inbox(asyncio.get_running_loop())
    WORKERS.submit(work)


async def in_thread(fn: Callable[..., Any], arguments: Mapping[str, Any], *, name: str) -> Any:
    """``fn(**arguments)`` run in a worker thread, awaited (see :func:`start_in_thread`).

    Cancelled, it ends at once: Python cannot stop the thread, which is left running (``name`` says
    whose it is in the warning) and whose late answer is dropped. Waiting for it here would make a
    hung plugin hold up the close of the run's loop for ever."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    start_in_thread(fn, arguments, settle)
    try:
        return await future
    except asyncio.CancelledError:
        if future.cancelled():  # not answered yet: the thread still runs
            log.warning(
                "%s: still running in its thread when cancelled (the run is ending); Python cannot stop a thread, "
                "so it is left running and the run goes on without it",
                name,
            )
        raise


Job = Callable[[], Callable[[], None]]
"""A call to run in a worker thread; it returns how to hand its answer over."""


class Workers:
    """The worker threads: one is kept for the next call once its call ends, a new one started
    whenever none is free; one idle for ``IDLE_S`` ends."""

    IDLE_S = 10.0

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._idle: list[_Worker] = []

    def submit(self, job: Job) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            _thread.start_new_thread(_Worker(self, job).serve, ())
            return
        worker.job = job
        worker.go.release()

    def forget(self) -> None:
        """In a forked child: the parent's threads are not there."""
        self._lock = _thread.allocate_lock()
        self._idle = []

    def offer(self, worker: _Worker) -> None:
        """``worker`` is free for the next call (before it hands its answer over, so the call that
        answer lets go on finds it free)."""
        with self._lock:
            self._idle.append(worker)

    def rest(self, worker: _Worker) -> bool:
        """Wait for the next call; False when none came in ``IDLE_S`` and the worker should end."""
        if worker.go.acquire(timeout=self.IDLE_S):
            return True
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return False
        worker.go.acquire()  # taken by a call as the wait ran out: its job is on the way
        return True


class _Worker:
    def __init__(self, pool: Workers, job: Job):
        self.pool = pool
        self.job: Job | None = job
        self.go = _thread.allocate_lock()
        self.go.acquire()

    def serve(self) -> None:
        while True:
            self._run()
            if not self.pool.rest(self):
                return

    def _run(self) -> None:
        """The job, let go of once it ran (it holds the call's loop, arguments and answer)."""
        job, self.job = self.job, None
        hand_over = job() if job is not None else None  # never raises: every outcome is an answer
        self.pool.offer(self)
        if hand_over is not None:
            hand_over()


class _Inbox:
    """The answers for one event loop, handed over in batches."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.answers: deque[tuple[Answer, bool, Any]] = deque()
        self.woken = False

    def put(self, settle: Answer, ok: bool, value: Any) -> None:
        """From a worker thread."""
        self.answers.append((settle, ok, value))
        if not self.woken:  # two threads may both wake the loop: the second finds nothing left
            self.woken = True
            self.loop.call_soon_threadsafe(self.deliver)

    def deliver(self) -> None:
        """On the loop: every answer there is, including any that arrive meanwhile."""
        self.woken = False
        while self.answers:
            settle, ok, value = self.answers.popleft()
            try:
                settle(ok, value)
            except Exception as exc:  # as the loop reports a failing callback, and on to the next
                self.loop.call_exception_handler({"message": "settling a thread's answer failed", "exception": exc})


_INBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()


def _inbox(loop: asyncio.AbstractEventLoop) -> _Inbox:
    inbox = _INBOXES.get(loop)
    if inbox is None:
        inbox = _INBOXES[loop] = _Inbox(loop)
    return inbox


WORKERS = Workers()
"""The process's worker threads, shared by every event loop in it."""
os.register_at_fork(after_in_child=WORKERS.forget)
