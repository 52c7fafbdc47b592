"""The executor builds one JSON-schema validator per tool schema, not one per call."""

from __future__ import annotations

import jsonschema

from rlfcore.config import ToolsConfig
from rlfcore.executor import ToolExecutor
from rlfcore.tools import tool
from rlfcore.types import ToolCall


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


async def test_schema_checks_reuse_one_validator_and_still_name_the_bad_argument(monkeypatch):
    built: list[object] = []
    real = jsonschema.validators.validator_for

    def counting(schema, *args, **kwargs):
        built.append(schema)
        return real(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.validators, "validator_for", counting)
    ex = ToolExecutor(ToolsConfig(), backoff_s=0.01)
    calls = [ToolCall("add", {"a": i, "b": 1}, id=f"c{i}") for i in range(5)]
    calls.append(ToolCall("add", {"a": "three", "b": 1}, id="bad"))
    results = await ex.run(calls, {"add": add})
    assert [r.content for r in results[:5]] == [str(i + 1) for i in range(5)]
    assert results[5].error == "schema" and "argument 'a': 'three' is not of type 'integer'" in results[5].content
    assert built.count(add.parameters) <= 1  # built at most once here (once ever, per schema object)
    again = await ex.run([ToolCall("add", {"a": 1}, id="missing")], {"add": add})
    assert again[0].error == "schema" and "'b' is a required property" in again[0].content
    assert built.count(add.parameters) <= 1
