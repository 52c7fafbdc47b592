"""The @tool decorator's schemas and calls, and the qwen-agent adapter."""

from __future__ import annotations

import json
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from rlfcore.executor import ToolExecutor
from rlfcore.tools import tool, tool_from_qwen_agent
from rlfcore.types import ToolCall


def search(query: str, k: int, tags: list[str], site: str | None = None, fresh: bool = False) -> str:
    """Search the corpus for passages.

    Returns the best passages first.

    Args:
        query: What to look for.
        k (int): How many passages
            to return.
        tags: Labels to filter on.

    Returns:
        The passages, one per line.
    """
    return f"{query}|{k}|{tags}|{site}|{fresh}"


def test_schema_from_signature_and_docstring():
    t = tool(search)
    assert t.name == "search"
    assert t.description == "Search the corpus for passages."
    assert t.parameters == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "query": {"type": "string", "description": "What to look for."},
            "k": {"type": "integer", "description": "How many passages to return."},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Labels to filter on."},
            "site": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            "fresh": {"type": "boolean", "default": False},
        },
        "required": ["query", "k", "tags"],
    }
    assert not t.is_async
    assert t.schema()["function"]["name"] == "search"


def test_options_and_annotated_descriptions_win():
    @tool(name="lookup", description="Find a row.", timeout_s=2.5, max_concurrency=3)
    async def find(title: Annotated[str, Field(description="The row's title.")], default: int = 0) -> str:  # noqa: ARG001 - its schema is what is tested
        """Ignored docstring.

        Args:
            title: ignored too.
        """
        return title

    assert (find.name, find.description, find.timeout_s, find.max_concurrency) == ("lookup", "Find a row.", 2.5, 3)
    assert find.is_async
    # parameters named like schema keywords survive the removal of pydantic's title noise
    assert find.parameters["properties"] == {
        "title": {"type": "string", "description": "The row's title."},
        "default": {"type": "integer", "default": 0},
    }


class Point(BaseModel):
    x: int
    y: int


async def test_arguments_are_validated_into_the_annotated_types():
    @tool
    def norm(p: Point, scale: float = 1.0) -> float:
        """Manhattan norm."""
        assert isinstance(p, Point)
        return (abs(p.x) + abs(p.y)) * scale

    assert "$defs" in norm.parameters and "title" not in json.dumps(norm.parameters)
    [result] = await ToolExecutor().run([ToolCall("norm", {"p": {"x": 3, "y": -4}})], {"norm": norm})
    assert (result.content, result.error) == ("7.0", None)


def test_bad_tools_are_rejected_with_the_reason():
    def pos(a: int, /) -> int:
        return a

    with pytest.raises(ValueError, match="'a' is positional-only"):
        tool(pos)
    with pytest.raises(ValueError, match="tool name 'has space'"):
        tool(search, name="has space")

    def unresolvable(p: Missing) -> None:  # noqa: F821
        """A hint that names nothing."""

    with pytest.raises(TypeError, match="tool 'unresolvable': cannot derive a JSON schema.*Missing"):
        tool(unresolvable)


# --- qwen-agent ------------------------------------------------------------------------------------


class _Item:
    """Stands in for qwen_agent.llm.schema.ContentItem."""

    def __init__(self, kind: str, value: str):
        self.kind, self.value = kind, value

    def get_type_and_value(self) -> tuple[str, str]:
        return self.kind, self.value


class DuckWeather:
    """Shaped like a qwen-agent BaseTool with the old list-of-params style."""

    name = "weather"
    description = "Weather of a city."
    parameters = [
        {"name": "city", "type": "string", "description": "City name", "required": True},
        {"name": "days", "type": "integer", "description": "Forecast days"},
    ]

    def __init__(self) -> None:
        self.seen: list[Any] = []

    def call(self, params: str | dict, **kwargs: Any) -> Any:
        self.seen.append(params)
        args = json.loads(params)
        if args["city"] == "pics":
            return [_Item("text", "sunny"), _Item("image", "sun.png")]
        return {"city": args["city"], "days": args.get("days", 1)}


async def test_qwen_agent_duck_typed_adapter():
    duck = DuckWeather()
    t = tool_from_qwen_agent(duck, timeout_s=5)
    assert t.name == "weather" and t.timeout_s == 5
    assert t.parameters == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "days": {"type": "integer", "description": "Forecast days"},
        },
        "required": ["city"],
    }
    results = await ToolExecutor().run(
        [ToolCall("weather", {"city": "Oslo"}), ToolCall("weather", {"city": "pics"}), ToolCall("weather", {})],
        {"weather": t},
    )
    assert json.loads(results[0].content) == {"city": "Oslo", "days": 1}
    assert (
        '{"city": "Oslo"}' in duck.seen
    )  # called as qwen-agent's agents call it: a JSON string (calls run concurrently)
    assert results[1].content == "sunny\n[image: sun.png]"
    assert results[2].error == "schema" and "'city' is a required property" in results[2].content


def test_qwen_agent_adapter_rejects_other_objects():
    with pytest.raises(TypeError, match="expected a qwen-agent BaseTool instance.*got int"):
        tool_from_qwen_agent(3)


async def test_real_qwen_agent_tool():
    base = pytest.importorskip("qwen_agent.tools.base")

    class Add(base.BaseTool):
        name = "add"
        description = "Add two integers."
        parameters = {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        }

        def call(self, params: str | dict, **kwargs: Any) -> str:
            args = self._verify_json_format_args(params)
            return str(args["a"] + args["b"])

    t = tool_from_qwen_agent(Add())
    assert t.schema()["function"]["parameters"]["required"] == ["a", "b"]
    ok, bad = await ToolExecutor().run([ToolCall("add", {"a": 2, "b": 40}), ToolCall("add", {"a": 2})], {"add": t})
    assert (ok.content, ok.error) == ("42", None)
    assert bad.error == "schema" and "'b' is a required property" in bad.content
