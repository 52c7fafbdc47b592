"""Per-trajectory tool sessions: state a plugin opens from one trajectory's row and releases when it ends.

verl's tools do this with ``create(create_kwargs)`` / ``execute`` / ``release`` per trajectory; here
a plugin implements the ``open_session`` hook once and returns any object (a database handle, a
sandbox, a browser). The loop opens the sessions of a trajectory's environment before its first
turn, hands them to every hook of that trajectory (``ctx.session``) and to its plugin's tools (a
``session`` parameter), and releases each one when the trajectory ends, fails or is cancelled: its
``aclose()`` or ``close()``, sync or async. Opening and releasing each have ``tools.session_timeout_s``
(:mod:`rlfcore.deadlines`); a failure or a timeout is an error on that trajectory, never on the step.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlfcore.deadlines import describe, within
from rlfcore.hookcall import call_impl_sync

if TYPE_CHECKING:
    import pluggy

    from rlfcore.context import TurnContext
    from rlfcore.runtime import Runtime

log = logging.getLogger(__name__)

_serial = itertools.count()
_late: set[asyncio.Future[None]] = set()
"""Releases of sessions that opened after their trajectory stopped waiting (a timeout, a cancellation)."""


@dataclass(frozen=True)
class OpenSession:
    """One plugin's session for one trajectory, as the core holds it."""

    plugin: str
    value: Any
    key: str
    """The session's identity in the executor's result cache: the value's ``cache_key`` when it has
    one (the plugin vouches that sessions with one key give the same results), else unique."""


class SessionError(RuntimeError):
    """A plugin's ``open_session`` failed or ran past its timeout; the message names the plugin."""


class TrajectorySessions:
    """The sessions of one trajectory: opened in turn, released in reverse order, each within ``timeout_s``."""

    def __init__(self, runtime: Runtime, timeout_s: float):
        self.runtime = runtime
        self.timeout_s = timeout_s
        self.opened: dict[str, OpenSession] = {}

    async def open(self, ctx: TurnContext) -> None:
        """Open the session of each plugin of the trajectory's environment that implements the hook.

        Raises :class:`SessionError` at the first that fails; those opened before stay in
        :attr:`opened` for :meth:`close`.
        """
        for impl in self.runtime.impls("open_session", ctx.env):
            plugin = impl.plugin_name
            try:
                value = await within(
                    self.timeout_s,
                    self._opener(impl, ctx),
                    what=f"plugin '{plugin}': open_session",
                    in_thread=not inspect.iscoroutinefunction(impl.function),
                    on_late=_release_late(plugin, self.timeout_s),
                )
            except asyncio.TimeoutError:
                raise SessionError(
                    f"plugin '{plugin}': open_session took longer than tools.session_timeout_s ({self.timeout_s:g} s)"
                ) from None
            except Exception as exc:
                raise SessionError(f"plugin '{plugin}': open_session failed: {describe(exc)}") from exc
            if value is not None:
                key = getattr(value, "cache_key", None)
                self.opened[plugin] = OpenSession(plugin, value, str(key) if key is not None else f"#{next(_serial)}")

    async def close(self) -> list[str]:
        """Release every opened session, last opened first; one problem per session that failed to.

        Runs to the end even when the trajectory is being cancelled: a second cancellation stops the
        wait, not the release.
        """
        if not self.opened:  # most trajectories: no task to make
            return []
        task = asyncio.ensure_future(self._close_all())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            task.add_done_callback(_log_problems)
            raise

    async def _close_all(self) -> list[str]:
        problems = []
        while self.opened:
            _, session = self.opened.popitem()
            try:
                await _release(session.plugin, session.value, self.timeout_s)
            except asyncio.TimeoutError:
                problems.append(
                    f"plugin '{session.plugin}': releasing its session took longer than "
                    f"tools.session_timeout_s ({self.timeout_s:g} s)"
                )
            except Exception as exc:
                log.debug("plugin %r failed to release its session", session.plugin, exc_info=True)
                problems.append(f"plugin '{session.plugin}': releasing its session failed: {describe(exc)}")
        return problems

    def _opener(self, impl: pluggy.HookImpl, ctx: TurnContext) -> Callable[[], Any]:
        manager = self.runtime.plugins
        return lambda: call_impl_sync(manager, "open_session", impl, row=ctx.row, ctx=ctx)


async def _release(plugin: str, value: Any, timeout_s: float) -> None:
    """Call the session's ``aclose()`` or ``close()``, if it has one, within ``timeout_s``."""
    close = getattr(value, "aclose", None) or getattr(value, "close", None)
    if callable(close):
        what = (
            f"plugin '{plugin}': releasing its session ({type(value).__name__}.{getattr(close, '__name__', 'close')})"
        )
        await within(timeout_s, close, what=what, in_thread=not inspect.iscoroutinefunction(close))


def _release_late(plugin: str, timeout_s: float) -> Callable[[Any], None]:
    def release(value: Any) -> None:
        if value is not None:
            log.warning("plugin '%s': a session that opened after its trajectory stopped waiting is released", plugin)
            what = f"plugin '{plugin}': releasing a session that opened late"
            late = asyncio.get_running_loop().create_task(_release(plugin, value, timeout_s), name=what)
            _late.add(late)  # the loop keeps only a weak reference to a task
            late.add_done_callback(_late.discard)

    return release


def _log_problems(task: asyncio.Future[list[str]]) -> None:
    if not task.cancelled() and task.exception() is None:
        for problem in task.result():
            log.warning("%s", problem)
