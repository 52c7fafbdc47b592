"""rlf plugin ``openenv``: an OpenEnv environment server in rlf's loop, one episode per trajectory.

Enable it with ``plugins: [openenv]`` and ``openenv: {server: {command: [...]}}`` (rlf starts the server for the
run and stops it at its end) or ``openenv: {url: ...}`` (a server already running). Each trajectory opens its
own episode on the server's ``/ws`` (reset; its observation joins the prompt as a user message), the
environment's action is one tool whose arguments are the action's fields (each call is a step; the tool's
result is the observation), or with ``tools: mcp`` an ``MCPEnvironment``'s tools are the model's (each call a
``call_tool`` step), and the reward is the episode's return: the sum of the steps' rewards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from rlf_openenv.client import (
    Episode,
    OpenEnvError,
    Returns,
    ServerProcess,
    Step,
    action_schema,
    mcp_result,
    mcp_tools,
    start,
)
from rlf_openenv.settings import Settings
from rlfcore import Done, Sample, Score, ScoreContext, SetupContext, StashKey, Tool, TurnContext, hookimpl

if TYPE_CHECKING:
    from collections.abc import Mapping

    import click

SERVER = StashKey[ServerProcess]("openenv server")
"""The server rlf started for the run, stopped by ``shutdown``."""

RETURNS = StashKey[dict[str, Returns]]("openenv returns")
"""Each trajectory's rewards, from its session's steps to its score, by trajectory id."""


class Session:
    """One trajectory's episode: reset when it opens, stepped by the tool, released when the trajectory ends."""

    def __init__(self, url: str, timeout_s: float, returns: Returns) -> None:
        self.episode = Episode(url, timeout_s)
        self.returns = returns

    async def step(self, action: dict[str, Any]) -> Step:
        """One step of the episode, its reward counted."""
        if self.returns.done:
            raise OpenEnvError("the episode is over (the environment answered done): no more steps")
        step = await self.episode.step(action)
        self.returns.rewards.append(step.reward or 0.0)
        self.returns.done = step.done
        return step

    async def aclose(self) -> None:
        await self.episode.close()


def server_url(ctx: SetupContext | TurnContext) -> str:
    """The running server's URL: ``openenv.url``, or the one rlf starts on first use."""
    settings = ctx.settings_as(Settings)
    if settings.url is not None:
        return settings.url.rstrip("/")
    if settings.server is None:
        raise OpenEnvError("neither openenv.url nor openenv.server is set: name a running server or how to start one")
    server = settings.server
    return ctx.stash.start(SERVER, lambda: start(server)).url


def configured(settings: Settings) -> bool:
    return settings.url is not None or settings.server is not None


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return Settings


@hookimpl
def register_commands() -> dict[str, click.Command]:
    """``rlf openenv rows -n N --prompt TEXT -o rows.jsonl``: one row per episode, each with its seed."""
    from rlf_openenv.cli import cli

    return {"openenv": cli}


@hookimpl
async def register_tools(ctx: SetupContext) -> list[Tool]:
    """The environment's action as one tool (its schema is the server's), or an MCP environment's tools; none while
    no server is configured."""
    settings = ctx.settings_as(Settings)
    if not configured(settings):
        return []
    url = server_url(ctx)
    if settings.tools == "mcp":
        return [_mcp_tool(spec) for spec in await mcp_tools(url, settings.timeout_s)]
    schema = action_schema(url)
    description = settings.description or schema.get("description") or "Act in the environment."
    parameters = {"type": "object", "properties": schema["properties"], "required": schema.get("required", [])}

    async def act(session: Session | None = None, **action: Any) -> str | Done:
        step = await _in_trajectory(session, settings.tool).step(action)
        return Done(step.text()) if step.done else step.text()  # done: the trajectory ends after it

    return [Tool(name=settings.tool, description=description, parameters=parameters, fn=act, takes_session=True)]


def _mcp_tool(spec: dict[str, Any]) -> Tool:
    name = str(spec["name"])

    async def call(session: Session | None = None, **arguments: Any) -> str | Done:
        step = await _in_trajectory(session, name).step(
            {"type": "call_tool", "tool_name": name, "arguments": arguments}
        )
        return Done(mcp_result(step)) if step.done else mcp_result(step)

    schema = spec.get("input_schema") or {"type": "object", "properties": {}}
    return Tool(
        name=name, description=str(spec.get("description") or ""), parameters=schema, fn=call, takes_session=True
    )


def _in_trajectory(session: Session | None, tool: str) -> Session:
    if session is None:
        raise OpenEnvError(f"openenv tool {tool!r} runs inside a trajectory of an openenv row")
    return session


@hookimpl
async def open_session(row: Mapping[str, Any], ctx: TurnContext) -> Session:
    """Reset a new episode for the trajectory; its first observation joins the prompt as a user message."""
    settings = ctx.settings_as(Settings)
    extra = row.get("extra")
    own = extra.get("openenv", {}) if isinstance(extra, dict) else {}
    session = Session(server_url(ctx), settings.timeout_s, Returns())
    try:
        first = await session.episode.reset({**settings.reset, **own.get("reset", {})})
    except BaseException:
        await session.aclose()
        raise
    ctx.stash.setdefault(RETURNS, {})[ctx.sample_id] = session.returns
    ctx.messages.append({"role": "user", "content": first.text()})
    return session


@hookimpl
def compute_score(sample: Sample, ctx: ScoreContext) -> Score:
    """The episode's return (``return``, the sum of its steps' rewards, is the value) and whether the environment
    ended it (``done``)."""
    returns = ctx.stash.setdefault(RETURNS, {}).pop(sample.id, None)
    if returns is None:
        return Score(
            0.0, error=f"no OpenEnv episode of trajectory {sample.id!r}: its rewards exist only while it is rolled out"
        )
    total = sum(returns.rewards)
    return Score(total, {"return": total, "done": float(returns.done)})


@hookimpl
def shutdown(ctx: SetupContext) -> None:
    """Stop the server rlf started for the run."""
    server = ctx.stash.pop(SERVER, None)
    if server is not None:
        server.stop()
