"""Deadlines on plugin code the core waits for: a session's opening and release, a plugin's ``shutdown``.

A deadline that passes is an error on what waited (a trajectory, the run's close), never a wait
for ever. An async call is cancelled at its deadline; a plain one runs in a thread of its own,
which Python cannot stop, so it is left running and its late answer goes to ``on_late``. The call
runs in a task named after it (``what``), so a call still running when the run's loop closes is
named in :class:`~rlfcore.runloop.RunLoop`'s warning.

A ``CancelledError`` that the plugin's own code raises, when nothing cancelled the caller, would
otherwise look like a cancellation of the trajectory or the run and end the run: it comes back as
:class:`PluginRaised`, an ordinary error, as do the ``BaseException`` s a plain function raises in
its thread. ``KeyboardInterrupt`` and ``SystemExit`` raised on the run's own thread are left alone:
there they may be a real Ctrl-C or a signal (:mod:`rlfcore.signals`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from rlfcore import threads
from rlfcore.hookcall import resolve


class PluginRaised(Exception):
    """A ``BaseException`` raised by a plugin's own code where only an ordinary error is contained:
    a ``CancelledError`` nothing asked for, or ``SystemExit`` in a plain function's thread."""

    def __init__(self, raised: BaseException):
        detail = f": {raised}" if str(raised) else ""
        super().__init__(f"{type(raised).__name__}{detail} (raised by the plugin's own code)")


def describe(exc: Exception) -> str:
    """``Type: message`` of a plugin's failure, for an error that names the plugin."""
    return str(exc) if isinstance(exc, PluginRaised) else f"{type(exc).__name__}: {exc}"


async def within(
    timeout_s: float,
    work: Callable[[], Any],
    *,
    what: str,
    in_thread: bool,
    on_late: Callable[[Any], None] | None = None,
) -> Any:
    """``work()``'s answer, awaited if it is awaitable, within ``timeout_s``; raises
    ``asyncio.TimeoutError`` past it. ``what`` names the call (``plugin 'x': open_session``).

    Shielded, so that the task of a plain call survives its caller: a late answer (after the
    deadline, or after the caller was cancelled) goes to ``on_late``.
    """
    task = asyncio.get_running_loop().create_task(_answer(work, in_thread, what), name=what)
    try:
        return await asyncio.wait_for(asyncio.shield(task), timeout_s)
    except asyncio.CancelledError:
        if task.cancelled() and not _caller_cancelled():  # the plugin raised it: nothing cancelled us
            raise PluginRaised(_cancellation_of(task)) from None
        _abandon(task, in_thread, on_late)
        raise
    except asyncio.TimeoutError:
        _abandon(task, in_thread, on_late)
        raise


async def _answer(work: Callable[[], Any], in_thread: bool, what: str) -> Any:
    try:
        return await resolve(await threads.in_thread(work, {}, name=what) if in_thread else work())
    except threads.Raised as exc:  # what a plain function raised in its thread: SystemExit, CancelledError
        raise PluginRaised(exc.__cause__ or exc) from exc.__cause__


def _abandon(task: asyncio.Task[Any], in_thread: bool, on_late: Callable[[Any], None] | None) -> None:
    """Stop waiting for ``task``: an async call is cancelled, a thread cannot be; an answer either
    still gives goes to ``on_late``."""
    if not in_thread:
        task.cancel()

    def late(done: asyncio.Task[Any]) -> None:
        if done.cancelled() or done.exception() is not None:  # retrieved: the caller reported the deadline
            return
        if on_late is not None:
            on_late(done.result())

    task.add_done_callback(late)


def _caller_cancelled() -> bool:
    """Whether the current task was asked to stop; on Python 3.10 (no ``Task.cancelling``) unknown,
    taken as no: an inner task that ended cancelled while shielded is then the plugin's own doing."""
    task = asyncio.current_task()
    cancelling: Callable[[], int] | None = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() > 0


def _cancellation_of(task: asyncio.Task[Any]) -> asyncio.CancelledError:
    """The ``CancelledError`` a cancelled task ended with (its message is the plugin's)."""
    try:
        task.result()
    except asyncio.CancelledError as exc:
        return exc
    raise AssertionError("unreachable: only called on a cancelled task")
