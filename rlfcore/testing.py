"""Helpers for plugin authors' tests (and rlf's own): register a plugin for one test, roll out with a
scripted policy through the real loop and reward pipeline, and run the conformance check.

No model is involved: :class:`~rlfcore.chat.ByteChatTokenizer` renders the Qwen3-style template and
:class:`~rlfcore.engines.scripted.ScriptedEngine` plays the assistant's texts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlfcore.chat import ByteChatTokenizer
from rlfcore.config import RunConfig, load_config
from rlfcore.conformance import CheckReport, check
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import Policy, ScriptedEngine
from rlfcore.loop import Rollout, Trajectory
from rlfcore.plugins import PluginManager
from rlfcore.rewards import RewardPipeline
from rlfcore.runtime import Runtime

__all__ = [
    "CheckReport",
    "ScriptedEngine",
    "check_plugin",
    "make_manager",
    "make_runtime",
    "registered",
    "rollout",
]


def make_manager(plugins: Mapping[str, object] | None = None) -> PluginManager:
    """A plugin manager with the built-ins, the installed plugins and ``plugins`` (name → module or
    object) registered as local plugins, which a config then enables by name."""
    manager = PluginManager()
    manager.discover()
    for name, obj in (plugins or {}).items():
        manager.register_object(name, obj)
    return manager


@contextmanager
def registered(manager: PluginManager, obj: object, name: str) -> Iterator[PluginManager]:
    """Register ``obj`` as plugin ``name`` for the duration of a ``with`` block."""
    manager.register_object(name, obj)
    try:
        yield manager
    finally:
        manager.unregister(name)


def make_runtime(
    config: Mapping[str, Any] | str | Path,
    plugins: Mapping[str, object] | None = None,
    overrides: list[str] | None = None,
) -> Runtime:
    """Validate ``config`` (a dict or a YAML path) with ``plugins`` registered, and set the runtime up.

    It owns the run's event loop: run phases with ``runtime.run(coro)``, and ``runtime.close()`` it
    when plugins started servers.
    """
    manager = make_manager(plugins)
    cfg: RunConfig
    cfg, manager = load_config(dict(config) if isinstance(config, Mapping) else config, overrides, manager=manager)
    return Runtime.open(cfg, manager)


def rollout(
    config: Mapping[str, Any] | str | Path,
    rows: Sequence[Mapping[str, Any]],
    script: Policy,
    plugins: Mapping[str, object] | None = None,
    score: bool = True,
) -> list[Trajectory]:
    """Roll out ``rows`` with a scripted policy through the real loop, then score them.

    ``script`` maps a row id to the assistant texts of its turns, or is ``(request_id, prompt) -> text``.
    """
    runtime = make_runtime(config, plugins)
    try:
        return runtime.run(_rollout(runtime, rows, script, score))
    finally:
        runtime.close()


async def _rollout(
    runtime: Runtime, rows: Sequence[Mapping[str, Any]], script: Policy, score: bool
) -> list[Trajectory]:
    tokenizer = ByteChatTokenizer()
    loop = Rollout(runtime, ScriptedEngine(tokenizer, script), tokenizer)
    trajectories = await loop.run([normalize_row(dict(r), i) for i, r in enumerate(rows)])
    if score:
        await RewardPipeline(runtime).score(trajectories)
    return trajectories


def check_plugin(name: str) -> CheckReport:
    """Run ``rlf plugins check NAME`` in-process and return its report."""
    return check(name)
