"""The built-in tool-call parsers (``rlf.parsers``): formats, tolerated slips, error calls, dispatch."""

from __future__ import annotations

import json
import random
import string

import pytest

from rlfcore.builtins import parsers
from rlfcore.builtins.parsers import parse_hermes, parse_llama3_json
from rlfcore.config import RunConfig
from rlfcore.context import TurnContext
from rlfcore.hookspecs import hookimpl
from rlfcore.plugins import PluginManager
from rlfcore.runtime import Runtime


def content_of(text: str, calls) -> str:
    assert all(call.raw and call.raw in text for call in calls)
    for call in calls:
        text = text.replace(call.raw, "")
    return text


def turn(parser: str = "hermes", runtime=None) -> TurnContext:
    return TurnContext(sample_id="s0", env=None, turn=0, messages=[], tools={}, parser=parser, runtime=runtime)


# --- Hermes ---------------------------------------------------------------------------------------


def test_hermes_several_calls_with_content_ids_and_exact_raw():
    text = (
        "Let me look both up.\n"
        '<tool_call>\n{"name": "search", "arguments": {"query": "rlf"}}\n</tool_call>\n'
        '<tool_call>{"name": "sql", "arguments": {"q": "SELECT 1", "limit": 5}}</tool_call>\nDone.'
    )
    calls = parse_hermes(text)
    assert [(c.id, c.name, c.arguments, c.error) for c in calls] == [
        ("call_0", "search", {"query": "rlf"}, None),
        ("call_1", "sql", {"q": "SELECT 1", "limit": 5}, None),
    ]
    assert calls[0].raw == '<tool_call>\n{"name": "search", "arguments": {"query": "rlf"}}\n</tool_call>'
    assert content_of(text, calls) == "Let me look both up.\n\n\nDone."


@pytest.mark.parametrize("text", ["", "The answer is 42.", "I could use </tool_call> here", "a {json: 'no'} b"])
def test_hermes_no_calls(text):
    assert parse_hermes(text) == []


@pytest.mark.parametrize(
    "body, name, args",
    [
        ('  \n\t{"name": "f", "arguments": {"x": 1}}  \n\n', "f", {"x": 1}),
        ('{"name": "f", "arguments": "{\\"x\\": [1, 2]}"}', "f", {"x": [1, 2]}),
        ('{"name": "f", "arguments": ""}', "f", {}),
        ('{"name": "f", "parameters": {"x": "y"}}', "f", {"x": "y"}),
        ('{"name": "noargs"}', "noargs", {}),
        ('{"name": "f", "arguments": {"x": 1, "y": [1, 2,],},}', "f", {"x": 1, "y": [1, 2]}),
        ('{"name": "f", "arguments": {"s": "a,}b"},}', "f", {"s": "a,}b"}),
        ('```json\n{"name": "f", "arguments": {"x": 1}}\n```', "f", {"x": 1}),
        ('\n```\n{"name": "f", "arguments": {"x": 1},}\n```\n', "f", {"x": 1}),
        ('{"name": "py", "arguments": {"c": "def f():\n\treturn 1"}}', "py", {"c": "def f():\n\treturn 1"}),
        (
            '{"name": "e", "arguments": {"t": "a </tool_call> <tool_call> c"}}',
            "e",
            {"t": "a </tool_call> <tool_call> c"},
        ),
    ],
)
def test_hermes_tolerated_slips(body, name, args):
    text = f"before <tool_call>{body}</tool_call> after"
    [call] = parse_hermes(text)
    assert (call.name, call.arguments, call.error) == (name, args, None)
    assert call.raw == f"<tool_call>{body}</tool_call>"
    assert content_of(text, [call]) == "before  after"


def test_hermes_missing_final_close_tag():
    text = 'Searching.\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n'
    [call] = parse_hermes(text)
    assert (call.name, call.arguments, call.error) == ("search", {"q": "x"}, None)
    assert call.raw == text[len("Searching.\n") :]
    # the same when the first of two calls is closed and the last one is not
    text2 = '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<tool_call>{"name": "b", "arguments": {"k": 2}}'
    assert [(c.name, c.arguments, c.error) for c in parse_hermes(text2)] == [("a", {}, None), ("b", {"k": 2}, None)]


@pytest.mark.parametrize(
    "body, name, reason",
    [
        ('{"name": "search", "arguments": {"q": "x"', "search", "not valid JSON"),
        ("{'name': 'search', 'arguments': {}}", "", "not valid JSON"),
        ('{"name": "f", "arguments": {}} and more', "f", "not valid JSON"),
        ('{"arguments": {"q": 1}}', "", 'no "name"'),
        ('{"name": "", "arguments": {}}', "", '"name" must be a non-empty string'),
        ('{"name": ["f"], "arguments": {}}', "", '"name" must be a non-empty string'),
        ('{"name": "f", "arguments": [1, 2]}', "f", '"arguments" must be a JSON object, got array'),
        ('{"name": "f", "arguments": null}', "f", '"arguments" must be a JSON object, got null'),
        ('{"name": "f", "parameters": "x=1"}', "f", '"parameters" is a string that is not valid JSON'),
        ('{"name": "f", "arguments": "[1]"}', "f", '"arguments" must be a JSON object, got array'),
        ('{"name": "f", "arguments": {}, "parameters": {}}', "f", 'both "arguments" and "parameters"'),
        ('[{"name": "f", "arguments": {}}]', "", "is a JSON array"),
        ("   ", "", "empty"),
        ("```json\n```", "", "empty"),
    ],
)
def test_hermes_unreadable_call_is_an_error_call(body, name, reason):
    text = f"x<tool_call>{body}</tool_call>y"
    [call] = parse_hermes(text)
    assert call.error is not None and reason in call.error
    assert (call.name, call.arguments, call.id) == (name, {}, "call_0")
    assert call.raw == f"<tool_call>{body}</tool_call>"
    assert content_of(text, [call]) == "xy"


def test_hermes_unclosed_call_before_the_next_is_an_error_and_the_next_still_parses():
    text = '<tool_call>{"name": "a", "arguments": {}}\nthinking more\n<tool_call>{"name": "b"}</tool_call>'
    first, second = parse_hermes(text)
    assert first.name == "a" and "not closed" in first.error
    assert first.raw == '<tool_call>{"name": "a", "arguments": {}}\nthinking more\n'
    assert (second.id, second.name, second.error) == ("call_1", "b", None)
    assert content_of(text, [first, second]) == ""


def test_hermes_error_call_between_good_ones_keeps_order_and_ids():
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "b", "arguments": {oops}}</tool_call>'
        '<tool_call>{"name": "c", "arguments": {"z": true}}</tool_call>'
    )
    calls = parse_hermes(text)
    assert [(c.id, c.name, c.error is None) for c in calls] == [
        ("call_0", "a", True),
        ("call_1", "b", False),
        ("call_2", "c", True),
    ]
    assert calls[2].arguments == {"z": True}


# --- Llama 3.x JSON -------------------------------------------------------------------------------


def test_llama_single_call_plain_and_tagged():
    plain = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    [call] = parse_llama3_json(plain)
    assert (call.id, call.name, call.arguments, call.error) == ("call_0", "get_weather", {"city": "Paris"}, None)
    assert call.raw == plain
    tagged = '<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris"}}<|eom_id|>'
    [call] = parse_llama3_json(tagged)
    assert (call.name, call.arguments, call.error) == ("get_weather", {"city": "Paris"}, None)
    assert content_of(tagged, [call]) == "<|eom_id|>"


def test_llama_several_calls_separated_by_semicolons():
    text = ' <|python_tag|>{"name": "a", "parameters": {"q": "x; y"}}; {"name": "b", "parameters": {}};\n<|eot_id|>'
    calls = parse_llama3_json(text)
    assert [(c.id, c.name, c.arguments, c.error) for c in calls] == [
        ("call_0", "a", {"q": "x; y"}, None),
        ("call_1", "b", {}, None),
    ]
    assert calls[0].raw == '<|python_tag|>{"name": "a", "parameters": {"q": "x; y"}}'
    assert content_of(text, calls) == " \n<|eot_id|>"


@pytest.mark.parametrize("text", ["The weather is fine.", '{"answer": 42}', "", "  \n"])
def test_llama_no_calls(text):
    assert parse_llama3_json(text) == []


def test_llama_unreadable_calls_are_error_calls():
    text = '<|python_tag|>{"name": "a", "parameters": {"q": 1}}; {"name": "b", "parameters": {"q": }; {"name": 7}'
    ok, broken, no_name = parse_llama3_json(text)
    assert (ok.name, ok.error) == ("a", None)
    assert broken.name == "b" and "not valid JSON" in broken.error
    assert broken.raw == '; {"name": "b", "parameters": {"q": }'
    assert no_name.name == "" and '"name" must be a non-empty string' in no_name.error
    assert content_of(text, [ok, broken, no_name]) == ""
    [builtin] = parse_llama3_json('<|python_tag|>brave_search.call(query="x")')
    assert "not valid JSON" in builtin.error and builtin.raw == '<|python_tag|>brave_search.call(query="x")'
    [empty] = parse_llama3_json("<|python_tag|>  <|eom_id|>")
    assert (empty.id, empty.error) == ("call_0", "nothing follows <|python_tag|>")
    [truncated] = parse_llama3_json('{"name": "a", "parameters": {"q": "unfinish')
    assert truncated.name == "a" and "not valid JSON" in truncated.error


# --- hooks ----------------------------------------------------------------------------------------


class FakeRuntime:
    def __init__(self):
        self.asked: list[str] = []

    def parser(self, name):
        self.asked.append(name)
        return parsers.PARSERS[name]


def test_register_parsers_names_both_formats():
    assert parsers.register_parsers() == {"hermes": parse_hermes, "llama3-json": parse_llama3_json}


def test_default_hook_dispatches_by_ctx_parser():
    runtime = FakeRuntime()
    llama = '{"name": "f", "parameters": {"x": 1}}'
    hermes = '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    assert [c.name for c in parsers.parse_tool_calls(llama, turn("llama3-json", runtime))] == ["f"]
    assert parsers.parse_tool_calls(llama, turn("hermes", runtime)) == []
    assert [c.name for c in parsers.parse_tool_calls(hermes, turn("hermes", runtime))] == ["g"]
    assert runtime.asked == ["llama3-json", "hermes", "hermes"]
    # without a runtime the built-ins answer; an unknown name is named in the error
    assert [c.name for c in parsers.parse_tool_calls(hermes, turn())] == ["g"]
    with pytest.raises(KeyError, match="'xml'.*hermes, llama3-json"):
        parsers.parse_tool_calls(hermes, turn("xml"))


async def test_real_runtime_collects_parsers_and_a_plugin_overrides_the_default():
    pm = PluginManager()
    pm.load(pm.add_local("rlfcore.builtins.parsers"))
    runtime = await Runtime.create(RunConfig(), pm)
    assert set(runtime.parsers) >= {"hermes", "llama3-json"}
    text = '{"name": "f", "parameters": {}}'
    hook = pm.pm.hook.parse_tool_calls
    assert [c.name for c in hook(text=text, ctx=turn("llama3-json", runtime))] == ["f"]
    with pytest.raises(KeyError, match="no tool-call parser named 'nope'"):
        hook(text=text, ctx=turn("nope", runtime))

    class Mine:
        @hookimpl
        def parse_tool_calls(self, text):
            return [] if text.startswith("{") else None  # None: leave it to the default

    pm.pm.register(Mine(), name="mine")
    try:
        assert hook(text=text, ctx=turn("llama3-json", runtime)) == []
        hermes = '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
        assert [c.name for c in hook(text=hermes, ctx=turn("hermes", runtime))] == ["g"]
    finally:
        pm.pm.unregister(name="mine")


# --- properties -----------------------------------------------------------------------------------

_TRICKY = ["</tool_call>", "<tool_call>", '"', "\\", "{", "}", "[", "],", ";", "\n", "\t", "é", "日本", "```", ",}"]


PROSE = ["", "ok ", "Let me check.\n", "I'll call } { ]", "a </tool_call> b\n"]


def _rand_str(rng: random.Random) -> str:
    pieces = [rng.choice(string.printable) for _ in range(rng.randint(0, 6))]
    pieces += rng.sample(_TRICKY, rng.randint(0, 3))
    rng.shuffle(pieces)
    return "".join(pieces)


def _rand_value(rng: random.Random, depth: int = 0):
    kind = rng.choice(["str", "int", "float", "bool", "null", "list", "dict"] if depth < 3 else ["str", "int", "null"])
    if kind == "str":
        return _rand_str(rng)
    if kind == "int":
        return rng.randint(-(10**12), 10**12)
    if kind == "float":
        return rng.uniform(-1e6, 1e6)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [_rand_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return _rand_args(rng, depth + 1)


def _rand_args(rng: random.Random, depth: int = 0) -> dict:
    return {_rand_str(rng) or "k": _rand_value(rng, depth) for _ in range(rng.randint(0, 4))}


def _render(rng: random.Random, name: str, args: dict) -> str:
    """One call in the Hermes format, with the variations models and chat templates produce."""
    key = rng.choice(["arguments", "arguments", "parameters"])
    value = json.dumps(json.dumps(args)) if rng.random() < 0.25 else json.dumps(args, ensure_ascii=rng.random() < 0.5)
    body = "{" + f'"name": {json.dumps(name)}, "{key}": {value}' + "}"
    if rng.random() < 0.2:
        body = f"```json\n{body}\n```"
    before, after = (rng.choice(["", "\n", " ", "\n\n  "]) for _ in range(2))
    return f"<tool_call>{before}{body}{after}</tool_call>"


def test_property_hermes_round_trip_of_random_calls():
    rng = random.Random(20240611)
    for _ in range(400):
        wanted = [
            (rng.choice(["search", "run_sql", "a.b-c", "日本_tool", "x" * rng.randint(1, 30)]), _rand_args(rng))
            for _ in range(rng.randint(0, 4))
        ]
        prose = [rng.choice(PROSE) for _ in range(len(wanted) + 1)]
        rendered = [_render(rng, n, a) for n, a in wanted]
        if rendered and rng.random() < 0.3:  # generation stopped on the last </tool_call>
            prose[-1] = ""
            rendered[-1] = rendered[-1][: -len("</tool_call>")]
        text = prose[0] + "".join(r + p for r, p in zip(rendered, prose[1:]))
        calls = parse_hermes(text)
        assert [(c.name, c.arguments, c.error) for c in calls] == [(n, a, None) for n, a in wanted], text
        assert [c.id for c in calls] == [f"call_{i}" for i in range(len(wanted))]
        assert [c.raw for c in calls] == rendered
        assert content_of(text, calls) == "".join(prose)


def test_property_parsers_never_raise_and_raws_are_ordered_substrings():
    rng = random.Random(7)
    atoms = ["<tool_call>", "</tool_call>", "<|python_tag|>", "{", "}", '"name"', ":", '"f"', ",", '"arguments"',
             '"parameters"', "[", "]", '"', "\\", ";", " ", "\n", "```", "null", "1", "<|eom_id|>"]  # fmt: skip
    for _ in range(3000):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 25)))
        for parse in (parse_hermes, parse_llama3_json):
            calls = parse(text)
            pos = 0
            for i, c in enumerate(calls):
                assert c.id == f"call_{i}"
                assert (c.error is None) or c.arguments == {}
                assert isinstance(c.arguments, dict) and isinstance(c.name, str)
                found = text.find(c.raw, pos)
                assert c.raw and found != -1, (text, c)
                pos = found + len(c.raw)
