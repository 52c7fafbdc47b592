"""MCP tools as rlf tools: each server's tools, filtered and renamed, with their schemas.

An rlf tool's ``fn`` is async and runs in whatever loop the core's executor uses; it hands the call to
the pool's loop, where the session lives. The executor applies its timeout, concurrency limits and
schema check as for any tool; what the server says is turned into a result here: ``is_error`` results
and protocol errors raise :class:`McpToolError` (an ``exception`` result), a server that died raises
:class:`~rlf_mcp.connection.ServerGone` (a ``transient`` one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import mcp_types as types

from rlf_mcp.connection import Policy, ServerConnection
from rlf_mcp.pool import Pool, get_pool
from rlf_mcp.settings import McpConfigError, McpSettings, ServerEntry
from rlfcore import Tool, first_lone


class McpToolError(Exception):
    """The server answered the call with an error (``is_error``); the message is the server's text."""


def policy_of(settings: McpSettings) -> Policy:
    return Policy(
        startup_timeout_s=settings.startup_timeout_s,
        ping_timeout_s=settings.ping_timeout_s,
        restart_backoff_s=settings.restart_backoff_s,
        max_restarts=settings.max_restarts,
    )


async def load_tools(entries: list[ServerEntry], settings: McpSettings, pool: Pool | None = None) -> list[Tool]:
    """Start (or reuse) the servers of ``entries`` and return their tools as rlf tools."""
    pool = pool or get_pool()
    connections = await pool.run(pool.connect([e.spec for e in entries], policy_of(settings)))
    return make_tools(entries, connections, pool, settings.call_timeout_s)


def make_tools(
    entries: list[ServerEntry], connections: list[ServerConnection], pool: Pool, timeout_s: float | None = None
) -> list[Tool]:
    """One rlf tool per offered MCP tool; clashing names and unknown include/exclude names are errors."""
    tools: dict[str, Tool] = {}
    owner: dict[str, str] = {}
    for entry, connection in zip(entries, connections, strict=True):
        offered = {t.name: t for t in connection.tools}
        for field, names in (("include", entry.include or ()), ("exclude", entry.exclude)):
            unknown = [n for n in names if n not in offered]
            if unknown:
                raise McpConfigError(
                    f"server {entry.spec.name!r}, field {field!r}: no tool named {', '.join(map(repr, unknown))}; "
                    f"the server offers: {', '.join(sorted(offered)) or 'none'}"
                )
        for mcp_tool in connection.tools:
            if (entry.include is not None and mcp_tool.name not in entry.include) or mcp_tool.name in entry.exclude:
                continue
            name = entry.prefix + mcp_tool.name
            if name in tools:
                raise McpConfigError(
                    f"tool {name!r} is offered by server {owner[name]!r} and by server {entry.spec.name!r}; "
                    "set `prefix` on one of them"
                )
            owner[name] = entry.spec.name
            tools[name] = Tool(
                name=name,
                description=mcp_tool.description or mcp_tool.title or "",
                parameters=_parameters(mcp_tool.input_schema),
                fn=_caller(pool, connection, mcp_tool.name),
                timeout_s=timeout_s,
            )
    return list(tools.values())


def _caller(pool: Pool, connection: ServerConnection, tool: str) -> Callable[..., Coroutine[Any, Any, str]]:
    async def call_mcp_tool(**arguments: Any) -> str:
        problem = _unsendable(arguments)
        if problem is not None:
            raise McpToolError(f"{problem}; the call was not sent to MCP server {connection.name!r}")
        result = await pool.run(connection.call(tool, arguments))
        text = render(result)
        if result.is_error:
            raise McpToolError(text or f"the server reported an error in tool {tool!r} without a message")
        return text

    return call_mcp_tool


def _unsendable(arguments: dict[str, Any]) -> str | None:
    """Why ``arguments`` cannot be encoded for the server, or ``None``. A lone surrogate sent would fail
    the session's writer and so every call in flight on it, not only this one (the core's parsers
    refuse them; a backend's parser or a plugin calling a tool directly may not)."""
    for key, value in arguments.items():
        text = json.dumps({key: value}, ensure_ascii=False, default=str)
        at = first_lone(text)
        if at is not None:
            return f"argument {key!r} holds a lone surrogate (U+{ord(text[at]):04X}), which is not valid Unicode"
    return None


def render(result: types.CallToolResult) -> str:
    """The text the model reads: text blocks as they are, other blocks as a short note of what they were."""
    parts = [_block(block) for block in result.content]
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def _block(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[binary resource {resource.uri} ({resource.mime_type or 'unknown type'})]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}]"
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        return f"[{block.type} ({block.mime_type})]"
    return f"[{getattr(block, 'type', type(block).__name__)} content]"


def _parameters(schema: Any) -> dict[str, Any]:
    """The tool's input schema; MCP requires an object schema, and a few servers leave ``type`` out."""
    if not isinstance(schema, dict):
        return {"type": "object", "properties": {}}
    return schema if "type" in schema else {"type": "object", **schema}
