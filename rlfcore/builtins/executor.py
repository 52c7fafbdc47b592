"""Built-in plugin ``rlf.executor``: the default ``invoke_tools``, the run's shared ToolExecutor.

Registered last, so any enabled plugin that implements ``invoke_tools`` (and returns non-``None``)
answers first.
"""

from __future__ import annotations

from rlfcore.context import TurnContext
from rlfcore.hookspecs import hookimpl
from rlfcore.types import ToolCall, ToolResult


@hookimpl(trylast=True)
async def invoke_tools(calls: list[ToolCall], ctx: TurnContext) -> list[ToolResult]:
    if ctx.runtime is None:
        raise RuntimeError("the built-in invoke_tools needs ctx.runtime (it holds the run's ToolExecutor)")
    return await ctx.runtime.executor.run(calls, ctx.tools, ctx.sessions)
