"""SIGINT and SIGTERM as an exception, so a stopped command cleans up before it exits.

Python's default for SIGTERM (what schedulers, ``timeout`` and ``kill`` send) ends the process at
once: no ``finally`` block, no ``atexit`` hook, so MCP servers and worker processes are left running.
Under :func:`handled` both signals raise :class:`Interrupted` in the main thread instead, as Ctrl-C
raises ``KeyboardInterrupt`` (of which it is a kind, so code that stops on one stops on the other):
the command unwinds, its servers and workers are closed, and it exits with the shell's code for the
signal (130 for SIGINT, 143 for SIGTERM). A second signal while it cleans up gets the default action,
so a stuck cleanup can still be cut short. Inside :func:`deferred` a signal waits for the block's end,
so a training step is either applied in full or not at all.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

HANDLED = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A signal stopped the command; ``note`` tells the user what was kept (a trainer sets it)."""

    def __init__(self, signum: int = signal.SIGINT, note: str = ""):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.note = note

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal's number."""
        return 128 + self.signum


_pending: list[int] = []
_depth = 0


def _raise(signum: int, _frame: Any) -> None:
    if _depth:
        _pending.append(signum)
        return
    _restore_defaults()
    raise Interrupted(signum)


def _restore_defaults() -> None:
    for signum in HANDLED:
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


@contextmanager
def handled() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`Interrupted` (main thread only; elsewhere a
    no-op). The previous handlers are restored after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in HANDLED}
    for signum in HANDLED:
        signal.signal(signum, _raise)
    try:
        yield
    finally:
        _pending.clear()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold a signal that arrives inside the block until the block is done, then raise it."""
    global _depth  # noqa: PLW0603 - signal handlers are process-wide, so the nesting they see is too
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
    if not _depth and _pending:  # not reached when the block raised: that error is the one to report
        signum = _pending[0]
        _pending.clear()
        _restore_defaults()
        raise Interrupted(signum)


def interruption(exc: BaseException) -> Interrupted | None:
    """The :class:`Interrupted` behind ``exc`` (click wraps it in ``Abort``), or ``None``."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, Interrupted):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
