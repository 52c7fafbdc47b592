"""rlf: reinforcement-learning post-training for LLMs that call tools over many turns.

``import rlfcore`` stays light (no torch, no transformers): plugins import it at start-up.
"""

from rlfcore.context import ScoreContext, SetupContext, TurnContext
from rlfcore.hookspecs import hookimpl
from rlfcore.stash import Stash, StashKey
from rlfcore.tools import tool
from rlfcore.types import (
    Example,
    Sample,
    Score,
    Tool,
    ToolCall,
    ToolResult,
    TransientToolError,
    Verification,
)

__version__ = "0.1.0"

__all__ = [
    "Example",
    "Sample",
    "Score",
    "ScoreContext",
    "SetupContext",
    "Stash",
    "StashKey",
    "Tool",
    "ToolCall",
    "ToolResult",
    "TransientToolError",
    "TurnContext",
    "Verification",
    "__version__",
    "hookimpl",
    "tool",
]
