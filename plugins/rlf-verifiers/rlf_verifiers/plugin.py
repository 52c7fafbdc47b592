"""rlf plugin ``verifiers``: an installed verifiers 0.4 environment in rlf's loop.

Enable it with ``plugins: [verifiers]`` and ``verifiers: {env: NAME, args: {...}}``; write its rows with
``rlf verifiers prepare NAME -o rows.jsonl``. Its toolsets' tools are the model's tools, its task's
reward functions are the reward components (weighted as verifiers weights them), and the reward is
verifiers' weighted sum. An environment with its own ``Env.run()`` answers the model's turns with user turns
through the core's ``respond`` hook (:class:`rlf_verifiers.bridge.Exchange`). verifiers itself loads on first
use (:mod:`rlf_verifiers.bridge`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from rlf_verifiers.bridge import Environment, Session, ToolSpec, Unsupported, load, task_of, to_trace
from rlf_verifiers.bridge import judge as judge_trace
from rlf_verifiers.bridge import score as score_trace
from rlf_verifiers.settings import Settings
from rlfcore import (
    Done,
    Message,
    Sample,
    Score,
    ScoreContext,
    SetupContext,
    StashKey,
    Tool,
    TurnContext,
    hookimpl,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    import click

ENVIRONMENT = StashKey[Environment]("verifiers environment")
"""The run's loaded environment: loaded once, its taskset toolsets shared by every trajectory."""


def environment(ctx: SetupContext | TurnContext | ScoreContext) -> Environment:
    settings = ctx.settings_as(Settings)
    if settings.env is None:
        raise Unsupported("verifiers.env is not set: name the installed verifiers environment to run")
    name = settings.env
    return ctx.stash.start(ENVIRONMENT, lambda: load(name, settings.args))


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return Settings


@hookimpl
def register_commands() -> dict[str, click.Command]:
    """``rlf verifiers prepare NAME -o rows.jsonl``: an environment's tasks as rlf rows."""
    from rlf_verifiers.cli import cli

    return {"verifiers": cli}


@hookimpl
def register_tools(ctx: SetupContext) -> list[Tool]:
    """The environment's toolset tools; none while no environment is named (``rlf plugins list``)."""
    if ctx.settings_as(Settings).env is None:
        return []
    return [_tool(spec) for spec in environment(ctx).tools]


def _tool(spec: ToolSpec) -> Tool:
    async def call(session: Session | None = None, **arguments: Any) -> Any:
        if session is None:
            raise Unsupported(f"verifiers tool {spec.name!r} runs inside a trajectory of a verifiers row")
        return await session.call(spec, arguments)

    return Tool(name=spec.name, description=spec.description, parameters=spec.parameters, fn=call, takes_session=True)


@hookimpl
async def open_session(row: Mapping[str, Any], ctx: TurnContext) -> Session:
    """The trajectory's task (rebuilt from the row), its state, and its task-scoped toolsets, set up for it."""
    env = environment(ctx)
    extra = row.get("extra")
    task = task_of(env, extra if isinstance(extra, dict) else {}, ctx.sample_id)
    session = Session(env, task, ctx.sample_id, ctx.messages)
    await session.open()
    return session


@hookimpl
async def respond(ctx: TurnContext) -> list[Message] | Done | None:
    """Where the environment runs its own ``Env.run()``, the model's turn without tool calls (the last of the
    conversation its exchange holds) goes to that run: its user turn is the next observation, and the run ending
    ends the episode (``done``). ``None`` for a plain taskset, whose trajectory ends at such a turn."""
    exchange = ctx.session.exchange if isinstance(ctx.session, Session) else None
    if exchange is None:
        return None
    reply = await exchange.answer()
    return Done([]) if reply is None else reply


@hookimpl
async def compute_score(sample: Sample, ctx: ScoreContext) -> Score:
    """The task's ``@vf.reward`` functions (components, raw) and ``@vf.metric`` ones (``metric.<name>``) on the
    trajectory's trace; the value is verifiers' weighted sum of the rewards."""
    env = environment(ctx)
    task = task_of(env, sample.extra, sample.id)
    state = env.states.get(sample.id) if task.config.judges else env.states.pop(sample.id, None)
    return await score_trace(trace_of(env, task, sample, state), task, env.recorded.pop(sample.id, None))


@hookimpl
async def judge(samples: list[Sample], ctx: ScoreContext) -> list[float | None] | None:
    """The task's plugged judges (``TaskConfig.judges``), weighted and summed per sample (``judge.verifiers``);
    ``None`` for samples of other plugins' rows and tasks without judges."""
    if ctx.settings_as(Settings).env is None:
        return None
    env = environment(ctx)

    async def one(sample: Sample) -> float | None:
        if "verifiers" not in sample.extra:
            return None
        task = task_of(env, sample.extra, sample.id)
        state = env.states.pop(sample.id, None)
        if not task.config.judges:
            return None
        return await judge_trace(trace_of(env, task, sample, state), task, ctx.judge_endpoints)

    return list(await asyncio.gather(*(one(sample) for sample in samples)))


def trace_of(env: Environment, task: Any, sample: Sample, state: Any | None) -> Any:
    stored = sample.extra["verifiers"]
    return to_trace(env, task, sample.messages, int(stored.get("prompt_messages", 0)), state, sample.stop_reason)


@hookimpl
async def shutdown(ctx: SetupContext) -> None:
    """Release the taskset toolsets the run set up."""
    env = ctx.stash.pop(ENVIRONMENT, None)
    if env is not None:
        await env.close()
