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
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlfcore.runtime import Runtime

log = logging.getLogger("rlfcore.verl")

_runtimes: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, tuple[str, ...]], asyncio.Task[Runtime]]
]
_runtimes = weakref.WeakKeyDictionary()


async def shared_runtime(config_path: str, overrides: Sequence[str] = ()) -> Runtime:
    """The set-up runtime of ``config_path`` with ``overrides``, built once per process and event loop.

    Concurrent first callers share one build; a build that failed fails every later call the same
    way, logged once.
    """
    loop = asyncio.get_running_loop()
    builds = _runtimes.setdefault(loop, {})
    key = (str(config_path), tuple(str(o) for o in overrides))
    if key not in builds:
        builds[key] = loop.create_task(_build(key[0], list(key[1])))
    return await asyncio.shield(builds[key])


async def _build(config_path: str, overrides: list[str]) -> Runtime:
    from rlfcore.config import load_config
    from rlfcore.runtime import Runtime

    try:
        config, manager = load_config(config_path, overrides)
        runtime = await Runtime.create(config, manager)
    except Exception:  # verl would report this as a bare worker crash; say what failed, once
        log.exception("rlf: cannot load the run config %s with overrides %s", config_path, overrides)
        raise
    atexit.register(_close, runtime)
    return runtime


def _close(runtime: Runtime) -> None:
    """Run the plugins' ``shutdown`` hooks when a verl worker process exits.

    verl has no end-of-run callback for agent loops or reward functions, so interpreter exit is the
    last moment a plugin can stop its servers or flush its files; the worker's own event loop is
    gone by then, so the hooks run on a fresh one.
    """
    try:
        asyncio.run(runtime.aclose())
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
