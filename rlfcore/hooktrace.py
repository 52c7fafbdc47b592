"""``RLF_TRACE_PLUGINS=1``: one stderr line per hook call, through pluggy's call monitoring.

``rlfcore.hookcall`` makes each implementation its own pluggy call, so a line names the plugin that
answered. An ``async def`` implementation answers pluggy with a coroutine; the monitor swaps it for
one that logs when the awaited work ends, so the duration and outcome are the real ones.
"""

from __future__ import annotations

import inspect
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

import pluggy

ENV_TRACE = "RLF_TRACE_PLUGINS"
"""Set to a non-empty value other than ``0`` to log every hook call to stderr."""


def _outcome(exc: BaseException | None, value: Any) -> str:
    if exc is not None:
        return f"raised {type(exc).__name__}" + (f": {exc}" if str(exc) else "")
    return "returned None" if value is None else "ok"


def trace_hook_calls(pm: pluggy.PluginManager, stream: TextIO | None = None) -> Callable[[], None]:
    """Log each hook call on ``pm`` as ``rlf-trace: HOOK plugin=NAME MS ms OUTCOME``; returns the undo."""
    local = threading.local()

    def write(hook: str, impls: Sequence[pluggy.HookImpl], t0: float, outcome: str) -> None:
        plugins = ",".join(i.plugin_name for i in impls if not (i.wrapper or i.hookwrapper)) or "-"
        ms = (time.perf_counter() - t0) * 1000
        (stream or sys.stderr).write(f"rlf-trace: {hook} plugin={plugins} {ms:.2f} ms {outcome}\n")

    async def finish(awaitable: Any, hook: str, impls: Sequence[pluggy.HookImpl], t0: float) -> Any:
        try:
            value = await awaitable
        except BaseException as exc:  # cancellation included: the line says how the call ended
            write(hook, impls, t0, _outcome(exc, None))
            raise
        write(hook, impls, t0, _outcome(None, value))
        return value

    def before(*_: object) -> None:  # pluggy passes the hook, its implementations and its arguments
        local.__dict__.setdefault("starts", []).append(time.perf_counter())

    def after(
        outcome: pluggy.Result[Any], hook: str, impls: Sequence[pluggy.HookImpl], _kwargs: Mapping[str, Any]
    ) -> None:
        t0 = local.starts.pop()
        if outcome.exception is None and inspect.isawaitable(outcome.get_result()):
            outcome.force_result(finish(outcome.get_result(), hook, impls, t0))
            return
        write(hook, impls, t0, _outcome(outcome.exception, None if outcome.exception else outcome.get_result()))

    return pm.add_hookcall_monitoring(before, after)
