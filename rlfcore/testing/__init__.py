"""Helpers for plugin authors' tests (and rlf's own): register a plugin for one test, roll out with a
scripted policy through the real loop and reward pipeline, run the conformance check, and serve a
stand-in model over HTTP (:class:`OpenAIServer`).

No model is involved: :class:`ByteChatTokenizer` renders the Qwen3-style template and
:class:`ScriptedEngine` plays the assistant's texts. With ``rlfcore`` itself this is all a plugin's
code, tests and benchmarks import (a lint rule holds them to it): the core's modules behind these
names may move.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlfcore.chat import SPECIAL_TOKENS, ByteChatTokenizer, HFChatTokenizer
from rlfcore.config import RunConfig, load_config
from rlfcore.conformance import CheckReport, check
from rlfcore.data import normalize_row, read_rows
from rlfcore.engines.scripted import Policy, ScriptedEngine
from rlfcore.executor import ToolExecutor
from rlfcore.loop import Rollout, Trajectory
from rlfcore.plugins import PluginManager
from rlfcore.rewards import RewardPipeline
from rlfcore.runtime import Runtime
from rlfcore.schema import ToolsConfig
from rlfcore.testing.openai_server import OpenAIServer, Reply, Request, Responder, calculator, closed_url, counting
from rlfcore.tinymodel import build_tiny, build_tokenizer

__all__ = [
    "SPECIAL_TOKENS",
    "ByteChatTokenizer",
    "CheckReport",
    "HFChatTokenizer",
    "OpenAIServer",
    "Policy",
    "Reply",
    "Request",
    "Responder",
    "RewardPipeline",
    "Rollout",
    "ScriptedEngine",
    "ToolExecutor",
    "ToolsConfig",
    "Trajectory",
    "build_tiny",
    "build_tokenizer",
    "calculator",
    "check_plugin",
    "closed_url",
    "counting",
    "load_config",
    "make_manager",
    "make_runtime",
    "normalize_row",
    "read_rows",
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
