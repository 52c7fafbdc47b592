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


def test_quick_check_accepts_only_what_jsonschema_accepts():
    """The quick check of ``@tool``'s scalar schemas may say False wrongly (jsonschema then decides),
    never True wrongly: checked against jsonschema on seeded random mixes of awkward values."""
    import random

    from rlfcore.schemas import quick_check

    open_schema = {
        "type": "object",
        "properties": {"s": {"type": "string"}, "n": {"type": "number"}, "i": {"type": "integer", "default": 1}},
        "required": ["s"],
    }
    closed = {
        **open_schema,
        "additionalProperties": False,
        "properties": {**open_schema["properties"], "b": {"type": "boolean"}, "z": {"type": "null"}},
    }
    absent = object()
    values = [absent, "x", "", 0, 1, 1.0, 2.5, True, False, None, [], {}, float("nan")]
    rng = random.Random(0)
    checked = 0
    for schema in (open_schema, closed):
        quick = quick_check(schema)
        assert quick is not None
        validator = jsonschema.validators.validator_for(schema)(schema)
        names = [*schema["properties"], "extra"]
        for _ in range(3000):
            arguments = {k: v for k in names if (v := rng.choice(values)) is not absent}
            if quick(arguments):
                assert validator.is_valid(arguments), (schema, arguments)
                checked += 1
        assert not quick("not an object") and not quick({})
    assert checked > 20  # it does accept valid calls (the point of it)
    assert quick_check({**open_schema, "minProperties": 1}) is None  # any other keyword: jsonschema only
    assert quick_check({"type": "object", "properties": {"a": {"type": ["string", "null"]}}}) is None
    assert quick_check({"type": "object", "properties": {"a": {"type": "string", "enum": ["x"]}}}) is None


async def test_quick_checked_calls_still_report_every_bad_argument():
    ex = ToolExecutor(ToolsConfig(), backoff_s=0.01)
    results = await ex.run(
        [ToolCall("add", {"a": 1.0, "b": 2}, id="float"), ToolCall("add", {"a": True, "b": 2, "c": 3}, id="bad")],
        {"add": add},
    )
    assert results[0].error is None and results[0].content == "3"  # 1.0 is an integer to JSON schema
    assert results[1].error == "schema"
    assert (
        "argument 'a': True is not of type 'integer'" in results[1].content
        and "'c' was unexpected" in results[1].content
    )


def test_a_schema_in_use_keeps_its_validator_while_many_others_come_and_go(monkeypatch):
    """The validators are kept least-recently-used first out: a run whose tools have more schemas
    than are kept still builds its busy tool's validator once (before: all were dropped at once
    when the table filled, the busy one with them)."""
    from rlfcore.schemas import argument_problems

    built: list[object] = []
    real = jsonschema.validators.validator_for

    def counting(schema, *args, **kwargs):
        built.append(schema)
        return real(schema, *args, **kwargs)

    monkeypatch.setattr(jsonschema.validators, "validator_for", counting)
    busy = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    others = [{"type": "object", "properties": {f"p{i}": {"type": "string"}}} for i in range(3000)]
    for other in others:
        assert argument_problems(other, {}) is None
        assert argument_problems(busy, {"x": "one"}) == "argument 'x': 'one' is not of type 'integer'"
    assert sum(schema is busy for schema in built) == 1
    assert sum(schema is others[0] for schema in built) == 1
