"""One rlf runtime per process, shared by the agent loop and the reward function.

verl builds a new agent-loop object for every sample and calls the reward function per sample, in
Ray workers that never saw the rlf command line; the run's config path and overrides travel inside
verl's config instead, and the plugins they enable are loaded here once per process and shut down
when the process exits.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlfcore.runtime import Runtime

log = logging.getLogger("rlfcore.verl")

_runtimes: dict[tuple[str, tuple[str, ...]], asyncio.Task[Runtime]] = {}
_loop: asyncio.AbstractEventLoop | None = None
"""The event loop the process's runtimes live in: a verl worker (a Ray actor) has one for its life."""


async def shared_runtime(config_path: str, overrides: Sequence[str] = ()) -> Runtime:
    """The set-up runtime of ``config_path`` with ``overrides``, built once per process.

    Concurrent first callers share one build; a build that failed fails every later call the same
    way, logged once. Every caller must be in the process's one event loop (its plugins' servers,
    semaphores and sessions live there); once that loop has closed, the next one builds afresh.
    """
    global _loop  # noqa: PLW0603 - a verl worker process has one event loop for its runtimes
    loop = asyncio.get_running_loop()
    if _loop is None or _loop.is_closed():
        _loop = loop
        _runtimes.clear()  # built in a loop that has ended; each is still shut down at exit
    elif _loop is not loop:
        raise RuntimeError(
            "rlf: the shared runtime lives in this process's first event loop, which is still open; "
            "a second loop cannot use its plugins (call it from the worker's own loop)"
        )
    key = (str(config_path), tuple(str(o) for o in overrides))
    if key not in _runtimes:
        _runtimes[key] = loop.create_task(_build(key[0], list(key[1])))
    return await asyncio.shield(_runtimes[key])


async def _build(config_path: str, overrides: list[str]) -> Runtime:
    from rlfcore.config import load_config
    from rlfcore.runtime import Runtime

    try:
        config, manager = load_config(config_path, overrides)
        runtime = await Runtime.create(config, manager)
    except Exception:  # verl would report this as a bare worker crash; say what failed, once
        log.exception("rlf: cannot load the run config %s with overrides %s", config_path, overrides)
        raise
    atexit.register(_close, runtime, asyncio.get_running_loop())
    return runtime


def _close(runtime: Runtime, loop: asyncio.AbstractEventLoop) -> None:
    """Run the plugins' ``shutdown`` hooks when a verl worker process exits.

    verl has no end-of-run callback for agent loops or reward functions, so interpreter exit is the
    last moment a plugin can stop its servers or flush its files. They run in the loop the runtime
    was set up in while it can still run; once the worker has closed it, in a fresh one.
    """
    try:
        if loop.is_closed() or loop.is_running():
            asyncio.run(runtime.aclose())
        else:
            loop.run_until_complete(runtime.aclose())
    except Exception:
        log.exception("rlf: shutting the plugins down failed")


def rlf_settings(verl_config: Any) -> tuple[str, list[str]]:
    """The rlf config path and overrides that :mod:`.hydra` stored in verl's config (``rlf.*``)."""
    section = verl_config.get("rlf") if hasattr(verl_config, "get") else None
    path = section.get("config") if section is not None else None
    if section is None or not path:
        raise RuntimeError(
            "verl's config has no rlf.config: the rlf_agent agent loop needs the rlf run config "
            "(launch with `rlf train CONFIG --backend verl`, or add +rlf.config=/path/to/run.yaml)"
        )
    return str(path), [str(o) for o in (section.get("overrides") or [])]
