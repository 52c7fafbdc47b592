"""The objects that cross the hook boundary.

Plugins see messages (OpenAI chat format, plain dicts) and these small dataclasses; the core owns
tokens, masks and batching. Every class here is cheap to build and has no heavy imports.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, Any]
"""One chat message in OpenAI format: ``{"role": ..., "content": ..., "tool_calls"?: [...]}``."""

ToolErrorKind = Literal["unknown_tool", "malformed", "schema", "exception", "timeout", "transient"]


@dataclass
class ToolCall:
    """A call the model asked for. ``error`` is set when the call could not be read; the executor then
    answers it with an error result instead of guessing."""

    name: str
    arguments: dict[str, Any]
    id: str = ""
    raw: str = ""
    error: str | None = None


@dataclass
class ToolResult:
    """What one call produced. Failures are results too: the model sees ``content`` either way."""

    call_id: str
    name: str
    content: str
    error: ToolErrorKind | None = None
    latency_s: float = 0.0
    traceback: str | None = None
    """Where a failing tool raised, for its author (``rlf --debug``, the trajectory record); never shown to the model."""
    done: bool = False
    """The tool returned :class:`Done`: its environment's episode is over, and so is the trajectory."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Done:
    """What a tool returns when its environment's episode is over (a game won, a gym ``done``):
    ``content`` is the last observation, which the model's record keeps, and the trajectory ends after
    it with stop reason ``done`` instead of generating another turn."""

    content: Any


@dataclass
class Tool:
    """A callable the model may call, with a JSON-schema description of its arguments.

    ``fn`` takes the arguments as keywords and may be sync or async; it returns a string (or anything
    ``str()``-able, dicts and lists are rendered as JSON). Raise :class:`TransientToolError` for errors
    worth a retry. With ``takes_session`` it also gets ``session=``: what its plugin's
    ``open_session`` opened for the calling trajectory, ``None`` when there is none (``@tool`` sets
    it for a function with a ``session`` parameter, which the model never sees).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    timeout_s: float | None = None
    max_concurrency: int | None = None
    plugin: str | None = None
    takes_session: bool = False
    listed: bool = True
    """False: callable, but left out of the prompt's tool list, for a format whose prompt describes
    its own call syntax (Search-R1's ``<search>`` tags, read by the plugin's ``parse_tool_calls``)."""

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn) or inspect.iscoroutinefunction(type(self.fn).__call__)

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema that chat templates render."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class TransientToolError(Exception):
    """Raised by a tool for a failure that may pass on retry (a busy server, a dropped connection)."""


ToolCallParser = Callable[[str], list[ToolCall]]
"""Turns one generated text into its tool calls (an empty list: the trajectory ends)."""


@dataclass
class Score:
    """A reward with named parts. ``value`` is the scalar that trains; ``components`` are logged."""

    value: float
    components: dict[str, float] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Verification:
    """The outcome of executing the final answer (running the SQL, the code, the API call)."""

    passed: bool
    score: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass
class Sample:
    """A finished trajectory as the reward hooks see it."""

    id: str
    env: str | None
    messages: list[Message]
    response: str
    ground_truth: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    num_turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    stop_reason: str = ""


@dataclass
class Example:
    """A dataset row with a scripted policy: the assistant texts to play, one per turn.

    Plugins provide examples through ``register_examples`` so that ``rlf plugins check`` can run their
    tools and rewards without a model. ``expected_reward``, when set, is checked.
    """

    row: dict[str, Any]
    script: list[str]
    expected_reward: float | None = None
