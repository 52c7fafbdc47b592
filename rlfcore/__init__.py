"""rlf: reinforcement-learning post-training for LLMs that call tools over many turns.

``import rlfcore`` stays light (no torch, no transformers): plugins import it at start-up. What a
plugin needs is here, in ``__all__``; the modules behind it are the core's own and may change.
:data:`RunConfig`, :class:`ConfigError`, :func:`continuation` and the engine types (:class:`Engine`,
:class:`Generation`, :class:`SamplingParams`, :class:`ChatTokenizer`) load their modules on first use.
Tests import their kit from :mod:`rlfcore.testing`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from rlfcore.context import ScoreContext, SetupContext, TurnContext
from rlfcore.hookspecs import hookimpl
from rlfcore.paths import config_dir, config_path, resolve_path
from rlfcore.registries import RegistryError, pip_download
from rlfcore.stash import Stash, StashKey
from rlfcore.surrogates import first_lone
from rlfcore.tools import tool
from rlfcore.types import (
    Done,
    Example,
    Message,
    Sample,
    Score,
    Tool,
    ToolCall,
    ToolResult,
    TransientToolError,
    Verification,
)

if TYPE_CHECKING:
    from rlfcore.chat import ChatTokenizer
    from rlfcore.config import load_config
    from rlfcore.data import normalize_row, read_rows
    from rlfcore.engines.base import Engine, Generation, SamplingParams
    from rlfcore.loop import Trajectory, continuation
    from rlfcore.rewards import RewardPipeline
    from rlfcore.schema import ConfigError, RunConfig
    from rlfcore.testing import make_runtime

__version__ = "0.1.0"

_LAZY = {
    "ChatTokenizer": "rlfcore.chat",
    "ConfigError": "rlfcore.schema",
    "Engine": "rlfcore.engines.base",
    "Generation": "rlfcore.engines.base",
    "RunConfig": "rlfcore.schema",
    "SamplingParams": "rlfcore.engines.base",
    "continuation": "rlfcore.loop",
    # A plugin that hosts rlf's environments in another framework (rlf-verifiers' export) loads a
    # config and its rows, sets up a runtime, and scores trajectories with rlf's reward pipeline.
    "RewardPipeline": "rlfcore.rewards",
    "Trajectory": "rlfcore.loop",
    "load_config": "rlfcore.config",
    "make_runtime": "rlfcore.testing",
    "normalize_row": "rlfcore.data",
    "read_rows": "rlfcore.data",
}
"""Public names whose modules are heavier (pydantic models, the loop) or sit in a higher layer (the
engines, the loop, the reward pipeline), imported when first used."""

__all__ = [
    "ChatTokenizer",
    "ConfigError",
    "Done",
    "Engine",
    "Example",
    "Generation",
    "Message",
    "RegistryError",
    "RewardPipeline",
    "RunConfig",
    "Sample",
    "SamplingParams",
    "Score",
    "ScoreContext",
    "SetupContext",
    "Stash",
    "StashKey",
    "Tool",
    "ToolCall",
    "ToolResult",
    "Trajectory",
    "TransientToolError",
    "TurnContext",
    "Verification",
    "__version__",
    "config_dir",
    "config_path",
    "continuation",
    "first_lone",
    "hookimpl",
    "load_config",
    "make_runtime",
    "normalize_row",
    "pip_download",
    "read_rows",
    "resolve_path",
    "tool",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rlfcore' has no attribute {name!r}")
