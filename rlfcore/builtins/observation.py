"""Built-in plugin ``rlf.observation``: tool results become tool messages, rendered by the chat template."""

from __future__ import annotations

from rlfcore.hookspecs import hookimpl
from rlfcore.types import Message, ToolResult


@hookimpl(trylast=True)
def build_observation(results: list[ToolResult]) -> list[Message]:
    return [{"role": "tool", "tool_call_id": r.call_id, "name": r.name, "content": r.content} for r in results]
