"""The contract between the rlf core and its plugins: every hook, grouped by phase.

A plugin is a module (or object) whose functions are decorated with ``rlfcore.hookimpl`` and named
after a hook below. An implementation may accept any subset of a hook's arguments, so new arguments
never break old plugins; context objects carry everything else and grow with the core.

Each spec carries its calling rule (:func:`spec`, collected in :data:`RULES`): whether it may be
implemented as ``async def`` (the core awaits the answer) and whether it is *first result*. Every
hook is called through pluggy by ``rlfcore.hookcall``, one implementation per pluggy call, so hook
wrappers and pluggy's call monitoring (``RLF_TRACE_PLUGINS``) see each one. Hooks marked *first
result* stop at the first implementation that returns something other than ``None``; the core's
built-in defaults are registered with ``trylast=True``, so an enabled plugin takes precedence over
them. Per-sample routing: the per-turn and scoring hooks of a sample are called only on the
plugins of the sample's environment and the built-ins; ``judge`` is called on every enabled plugin
that implements it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

if TYPE_CHECKING:
    import click
    from pydantic import BaseModel

    from rlfcore.chat import ChatTokenizer
    from rlfcore.context import ScoreContext, SetupContext, TurnContext
    from rlfcore.engines.base import Engine
    from rlfcore.schema import RunConfig
    from rlfcore.types import (
        Done,
        Example,
        Message,
        Sample,
        Score,
        Tool,
        ToolCall,
        ToolCallParser,
        ToolResult,
        Verification,
    )

PROJECT = "rlf"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class HookRule:
    """How the core calls one hook: every spec argument by keyword (an implementation takes any
    subset; a ``ctx`` is rebound to the implementing plugin's settings), one answer or all, and
    whether an implementation may be ``async def`` (the core then awaits its answer)."""

    firstresult: bool
    may_be_async: bool


RULES: dict[str, HookRule] = {}
"""Each hook's :class:`HookRule`, declared with the spec by :func:`spec`; ``rlfcore.hookcall`` enforces it."""


def spec(*, may_be_async: bool, firstresult: bool = False) -> Callable[[F], F]:
    """Declare a hook and its calling rule in one place: pluggy's spec marker plus :data:`RULES`."""

    def mark(fn: F) -> F:
        RULES[fn.__name__] = HookRule(firstresult=firstresult, may_be_async=may_be_async)
        return hookspec(firstresult=firstresult)(fn)

    return mark


# --- Registration: what a plugin provides (collect-all, called once per plugin) ---------------------


@spec(may_be_async=False)
def register_config_schema() -> type[BaseModel] | None:
    """Return the pydantic model of this plugin's config section.

    Called once per plugin when a config is loaded. The section is the top-level key named after the
    plugin (``nl2sql: {...}``); it is validated against this model before anything heavy starts, and
    the validated object reaches the plugin's hooks as ``ctx.settings``. Every field needs a default
    so that the plugin runs with an empty section. Collect-all; may not be async.
    """


@spec(may_be_async=True)
def register_tools(ctx: SetupContext) -> list[Tool] | None:
    """Return the tools this plugin's environment offers to the model.

    Called once per plugin per run (and by ``rlf plugins list``/``check`` with the default settings),
    with ``ctx.settings`` the plugin's own section. Samples whose environment is this plugin see only
    these tools. Collect-all; may be async (an MCP plugin lists its servers' tools here).
    """


@spec(may_be_async=False)
def register_parsers(ctx: SetupContext) -> dict[str, ToolCallParser] | None:
    """Return tool-call parsers by name: ``{"llama3-json": parse}``.

    A parser turns one generated text into a list of :class:`~rlfcore.types.ToolCall` (empty when the
    text has none; a call it cannot read comes back with ``error`` set). ``rollout.parser`` in the
    config picks one by name. Collect-all; may not be async.
    """


@spec(may_be_async=False)
def register_engines(ctx: SetupContext) -> dict[str, Callable[[RunConfig, ChatTokenizer], Engine]] | None:
    """Return rollout engine factories by name: ``{"vllm": make_engine}``.

    ``engine.name`` in the config picks one; the factory gets the run config and the tokenizer and
    returns an :class:`~rlfcore.engines.base.Engine`. Built-ins: ``transformers`` and ``openai``.
    Collect-all; may not be async.
    """


@spec(may_be_async=False)
def register_examples(ctx: SetupContext) -> list[Example] | None:
    """Return scripted examples: dataset rows with the assistant turns to play.

    ``rlf plugins check`` runs them through the real loop with a scripted policy (no model) to show the
    plugin's tools and rewards work end to end. Collect-all; may not be async.
    """


@spec(may_be_async=False)
def register_commands() -> dict[str, click.Command] | None:
    """Return command-line commands by name: ``{"nl2sql": group}`` adds ``rlf nl2sql ...``.

    Called once per installed plugin (an ``rlf`` entry point; local plugins have no command line)
    when ``rlf`` needs its plugins' commands: for ``rlf --help`` and for a name that is not a core
    command, never for a core command's run. Each value is a click command or group. A name taken by
    a core command or by an earlier plugin is refused with a warning; a plugin whose hook raises adds
    none and ``rlf`` goes on without it (``rlf plugins list`` shows why). Collect-all; may not be async.
    """


# --- Lifecycle --------------------------------------------------------------------------------------


@spec(may_be_async=True)
def shutdown(ctx: SetupContext) -> None:
    """Release what the plugin started for the run: server processes, sessions, threads, files.

    Called once per plugin with a registration hook's context when the run's runtime closes, after
    the last rollout and score, and also when the run fails or is interrupted. Collect-all; may be
    async; an exception is logged and never stops the other plugins' shutdown.
    """


# --- Rollout: called once per trajectory, then on every turn --------------------------------------


@spec(may_be_async=True)
def open_session(row: Mapping[str, Any], ctx: TurnContext) -> Any:
    """Open this plugin's state for one trajectory from its dataset row: a database, a sandbox, a browser.

    Called before the trajectory's first turn on each plugin of its environment (collect-all), with
    the raw ``row`` (its ``extra`` holds what verl calls ``create_kwargs``). What it returns (``None``:
    no session) reaches every later hook of that trajectory as ``ctx.session`` and this plugin's
    tools as their ``session`` argument; its ``aclose()`` or ``close()``, if any, is called when the
    trajectory ends, fails or is cancelled. A ``cache_key`` attribute on it tells the executor's
    result cache which sessions give the same results. Opening and closing each get
    ``tools.session_timeout_s``; a failure is that trajectory's error, never the step's. May be
    async (a plain ``def`` runs in a worker thread).
    """


# --- Rollout: called on every turn of a trajectory ------------------------------------------------


@spec(may_be_async=True, firstresult=True)
def parse_tool_calls(text: str, ctx: TurnContext) -> list[ToolCall] | None:
    """Return the tool calls in one generated text, ``[]`` when it has none (the trajectory ends).

    Called after each generation with the decoded assistant text. First result: return ``None`` to
    leave the text to the next implementation. Default: the parser named by ``ctx.parser`` (Hermes /
    Qwen3 ``<tool_call>{json}</tool_call>`` unless configured). May be async.
    """


@spec(may_be_async=True, firstresult=True)
def invoke_tools(calls: list[ToolCall], ctx: TurnContext) -> list[ToolResult] | None:
    """Run the calls of one turn and return one result per call, in order.

    Called when a turn has calls. Errors and timeouts must come back as results (``error`` set), never
    as exceptions. First result. Default: the core's async executor (calls of a turn run
    concurrently, with timeouts, limits and schema checks). May be async.
    """


@spec(may_be_async=True, firstresult=True)
def build_observation(results: list[ToolResult], ctx: TurnContext) -> list[Message] | None:
    """Return the messages to append to the context after the tool results.

    Called after ``invoke_tools``. The core renders them with the model's chat template and appends
    their tokens with loss mask 0. First result. Default: one ``{"role": "tool"}`` message per result.
    May be async.
    """


@spec(may_be_async=True, firstresult=True)
def respond(messages: list[Message], ctx: TurnContext) -> list[Message] | Done | None:
    """Answer, as the environment, an assistant turn that called no tool.

    A user simulator, a game master, a tutor's hint, another ecosystem's multi-turn environment. Called after each turn that has no tool calls (and was not cut by a length limit), with the
    conversation so far, its last message that turn. Return the messages to append (usually one
    ``{"role": "user"}``): the core renders them with the model's chat template, appends their
    tokens with loss mask 0 and generates another turn, within ``rollout.max_turns``. Return
    :class:`~rlfcore.types.Done` to end the episode (stop reason ``done``), its ``content`` the last
    messages to append (a list, possibly empty). ``None`` (or ``[]``) ends the trajectory as it ends
    without this hook (``answer`` or ``no_tool_call``). First result. Default: none. May be async.
    """


# --- Reward: called on finished trajectories ------------------------------------------------------


@spec(may_be_async=True, firstresult=True)
def verify_tool(sample: Sample, ctx: ScoreContext) -> Verification | None:
    """Verify the final answer by executing it (run the SQL, the code, the API call).

    Called once per finished trajectory, before ``compute_score``, which receives the result. First
    result. Default: none (no verification). May be async.
    """


@spec(may_be_async=True, firstresult=True)
def compute_score(
    sample: Sample, verification: Verification | None, ctx: ScoreContext
) -> float | list[float] | Score | None:
    """Return the rule-based reward of one finished trajectory: a float, a Score with components, or
    a list of per-turn rewards.

    Called after ``verify_tool``. A list holds one reward per assistant turn, in order
    (``sample.num_turns`` entries; another length is an error on that sample): the ``score`` component
    is their sum, and ``trainer.turn_advantage: return_to_go`` credits each turn with the rewards from
    it on. First result. Default: exact match of the final answer against ``sample.ground_truth``.
    May be async.
    """


@spec(may_be_async=True)
def judge(samples: list[Sample], ctx: ScoreContext) -> list[float | Score | None] | None:
    """Return model-judge scores for a group of samples of one prompt, one entry per sample.

    Called with the whole GRPO group so both pointwise and group-relative judges fit; ``None`` entries
    mean "not judged". Collect-all over every enabled plugin (not routed by environment: check
    ``ctx.env`` to judge only some). Default: none. May be async.
    """


HOOK_NAMES: tuple[str, ...] = tuple(RULES)
"""Every hook name, in the order defined above."""
