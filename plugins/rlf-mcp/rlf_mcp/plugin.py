"""rlf plugin ``mcp``: the tools of the MCP servers a run config names, for the model to call.

Enable it with ``plugins: [mcp]``; its settings live under ``mcp:`` (see :class:`McpSettings`). With
no servers configured it runs the bundled calculator server, so ``plugins: [mcp]`` alone is a working
setup (the one ``rlf plugins check mcp`` exercises). Rewards are left to the core's default (exact
match against ``ground_truth``) or to another plugin of the environment.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from pydantic import BaseModel

from rlf_mcp.pool import Pool
from rlf_mcp.settings import McpSettings, configured_servers, uses_default
from rlfcore import Example, SetupContext, StashKey, Tool, config_dir, hookimpl


@hookimpl
def register_config_schema() -> type[BaseModel]:
    return McpSettings


POOL = StashKey[Pool]("mcp pool")
"""The run's MCP servers and their event loop, started by ``register_tools``, closed by ``shutdown``."""


@hookimpl
async def register_tools(ctx: SetupContext) -> list[Tool]:
    """Start the configured servers (once per run, in the run's pool), list their tools, and offer them.

    ``rlf plugins list`` (``ctx.listing``) starts nothing: the tools are known once servers run.
    """
    if ctx.listing:
        return []
    settings = _settings(ctx)
    entries = configured_servers(settings, _base_dir(ctx))
    if not entries:
        return []
    from rlf_mcp.toolset import load_tools  # the MCP SDK, imported only when servers start

    return await load_tools(entries, settings, ctx.stash.start(POOL, Pool))


@hookimpl
async def shutdown(ctx: SetupContext) -> None:
    """Close the run's servers and stop their loop (in a thread: closing blocks until they exit)."""
    pool = ctx.stash.pop(POOL, None)
    if pool is not None:
        await asyncio.to_thread(pool.close)


@hookimpl
def register_examples(ctx: SetupContext) -> list[Example]:
    """Scripted uses of the bundled calculator (only when it is the configured server)."""
    if not uses_default(_settings(ctx)):
        return []
    return [
        Example(
            row={"id": "calc-one-call", "prompt": "What is 12 * (3 + 4) - 2 ** 5?", "ground_truth": "52"},
            script=[_call("12 * (3 + 4) - 2 ** 5"), "<answer>52</answer>"],
            expected_reward=1.0,
        ),
        Example(
            row={"id": "calc-two-turns", "prompt": "Triple 17 + 25, then divide by 7.", "ground_truth": "18"},
            script=[_call("(17 + 25) * 3"), _call("126 / 7"), "<answer>18</answer>"],
            expected_reward=1.0,
        ),
        Example(
            row={"id": "calc-wrong-answer", "prompt": "What is 2 ** 10?", "ground_truth": "1024"},
            script=[_call("2 ** 10"), "<answer>1000</answer>"],
            expected_reward=0.0,
        ),
    ]


def _call(expression: str) -> str:
    return "<tool_call>" + json.dumps({"name": "calculate", "arguments": {"expression": expression}}) + "</tool_call>"


def _settings(ctx: SetupContext) -> McpSettings:
    return ctx.settings_as(McpSettings)


def _base_dir(ctx: SetupContext) -> Path:
    """Relative paths in the section are relative to the run config's folder (rlfcore's one rule)."""
    return config_dir(ctx.config)
