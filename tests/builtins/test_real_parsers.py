"""The families' tool-call parsers on text the real chat templates render (``qwen3``, ``qwen3-coder``,
``llama3-json`` for Llama 3.1 and 3.2, ``hermes`` for SmolLM2 with rlf's ChatML-with-tools): parsing a rendered call gives the call back, and rendering
the parsed call gives the same text."""

from __future__ import annotations

import pytest

from rlfcore import hookimpl
from rlfcore.builtins.family_parsers import parse_qwen3, parse_qwen3_coder
from rlfcore.builtins.parsers import parse_hermes, parse_llama3_json
from rlfcore.chat import HFChatTokenizer
from rlfcore.testing import make_runtime, rollout
from rlfcore.tools import tool

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
QUERY = {"role": "user", "content": "What is 6 times 7?"}


def _call(name: str, arguments: dict) -> dict:
    return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}


def _assistant_text(tok: HFChatTokenizer, message: dict, start: str, end: str) -> str:
    """The text the template renders for ``message`` as the turn after the query: what a model generates."""
    before = tok.render([QUERY], TOOLS, add_generation_prompt=True)
    after = tok.render([QUERY, message], TOOLS, add_generation_prompt=False)
    assert after.startswith(before) and before.endswith(start)
    return after[len(before) : after.index(end, len(before))]


def _as_messages(calls) -> list[dict]:
    return [_call(c.name, c.arguments) for c in calls]


@pytest.mark.parametrize("family", ["qwen3", "qwen3-original"])
def test_qwen3_reads_calls_after_the_think_block(real_models, family):
    tok = HFChatTokenizer(real_models.tokenizer(family))
    calls = [_call("calculate", {"expression": "6*7"}), _call("calculate", {"expression": "7*6"})]
    message = {"role": "assistant", "reasoning_content": "I could write <tool_call>{}</tool_call> here.",
               "content": "Computing.", "tool_calls": calls}  # fmt: skip
    text = _assistant_text(tok, message, "<|im_start|>assistant\n", "<|im_end|>")
    assert text.startswith("<think>\nI could write <tool_call>")
    parsed = parse_qwen3(text)
    assert [(c.name, c.arguments, c.error) for c in parsed] == [
        ("calculate", {"expression": "6*7"}, None),
        ("calculate", {"expression": "7*6"}, None),
    ]
    assert all(c.raw in text.split("</think>")[1] for c in parsed)  # the call inside the thinking is not one
    again = {**message, "tool_calls": _as_messages(parsed)}
    assert _assistant_text(tok, again, "<|im_start|>assistant\n", "<|im_end|>") == text


def test_qwen3_still_thinking_has_no_calls_and_plain_hermes_works():
    assert parse_qwen3('<think>\nmaybe <tool_call>{"name": "f", "arguments": {}}</tool_call>') == []
    (call,) = parse_qwen3('<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>')
    assert (call.name, call.arguments) == ("f", {"x": 1})


def test_qwen3_coder_xml_calls_round_trip(real_models):
    tok = HFChatTokenizer(real_models.tokenizer("qwen3-coder"))
    args = {"expression": "6 * 7\n# two lines", "precision": 2, "exact": True, "steps": [1, 2], "opts": {"a": None}}
    message = {
        "role": "assistant",
        "content": "Let me calculate.",
        "tool_calls": [_call("calculate", args), _call("calculate", {"expression": "1"})],
    }
    text = _assistant_text(tok, message, "<|im_start|>assistant\n", "<|im_end|>")
    assert "<function=calculate>\n<parameter=expression>\n6 * 7\n# two lines\n</parameter>" in text
    schemas = {"calculate": TOOLS[0]["function"]["parameters"]}
    assert parse_qwen3_coder(text)[1].arguments == {"expression": 1}  # without the schema: read as JSON
    parsed = parse_qwen3_coder(text, schemas)
    assert [(c.name, c.arguments, c.error, c.id) for c in parsed] == [
        ("calculate", args, None, "call_0"),
        ("calculate", {"expression": "1"}, None, "call_1"),
    ]
    again = {**message, "tool_calls": _as_messages(parsed)}
    assert _assistant_text(tok, again, "<|im_start|>assistant\n", "<|im_end|>") == text


@pytest.mark.parametrize(
    "text, error",
    [
        ("<tool_call>\n<parameter=x>\n1\n</parameter>\n</tool_call>", "no <function=NAME>"),
        ("<tool_call>\n<function=f>\nstray\n<parameter=x>\n1\n</parameter>\n</function>\n</tool_call>", "text outside"),
    ],
)
def test_qwen3_coder_unreadable_calls_are_errors_with_raw_text(text, error):
    (call,) = parse_qwen3_coder(text)
    assert error in call.error and call.raw == text and call.arguments == {}


def test_qwen3_coder_call_cut_at_the_stop_is_read():
    (call,) = parse_qwen3_coder("<tool_call>\n<function=f>\n<parameter=x>\n5\n</parameter>\n</function>\n")
    assert (call.name, call.arguments, call.error) == ("f", {"x": 5}, None)


@pytest.mark.parametrize("family", ["llama3.1", "llama3.2"])
def test_llama_json_calls_as_the_real_templates_render_them(real_models, family):
    tok = HFChatTokenizer(real_models.tokenizer(family))
    message = {"role": "assistant", "content": "", "tool_calls": [_call("calculate", {"expression": "6*7"})]}
    start = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    text = _assistant_text(tok, message, start, "<|eot_id|>")
    assert text == '{"name": "calculate", "parameters": {"expression": "6*7"}}'
    for generated in (text, "<|python_tag|>" + text, "<|python_tag|>" + text + "<|eom_id|>"):
        (call,) = parse_llama3_json(generated)
        assert (call.name, call.arguments, call.error) == ("calculate", {"expression": "6*7"}, None)
    assert _assistant_text(tok, {**message, "tool_calls": _as_messages([call])}, start, "<|eot_id|>") == text
    # A tool result goes back in the ipython role, which ends its turn with <|eot_id|>.
    rendered = tok.render([QUERY, message, {"role": "tool", "content": "42"}], TOOLS, add_generation_prompt=True)
    assert rendered.endswith('<|start_header_id|>ipython<|end_header_id|>\n\n"42"<|eot_id|>' + start)
    assert parse_llama3_json("It is 42.") == []


def test_smollm2_hermes_calls_and_tool_turns_as_rlfs_template_renders_them(real_models):
    tok = HFChatTokenizer(real_models.tokenizer("smollm2"))
    calls = [_call("calculate", {"expression": "6*7"}), _call("calculate", {"expression": "7*6"})]
    message = {"role": "assistant", "content": "Computing.", "tool_calls": calls}
    text = _assistant_text(tok, message, "<|im_start|>assistant\n", "<|im_end|>")
    assert text == 'Computing.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "6*7"}}\n</tool_call>\n' \
        '<tool_call>\n{"name": "calculate", "arguments": {"expression": "7*6"}}\n</tool_call>'  # fmt: skip
    parsed = parse_hermes(text)
    assert [(c.name, c.arguments, c.error) for c in parsed] == [
        ("calculate", {"expression": "6*7"}, None),
        ("calculate", {"expression": "7*6"}, None),
    ]
    assert _assistant_text(tok, {**message, "tool_calls": _as_messages(parsed)}, "<|im_start|>assistant\n",
                           "<|im_end|>") == text  # fmt: skip
    results = [{"role": "tool", "content": "42"}, {"role": "tool", "content": "42"}]
    rendered = tok.render([QUERY, message, *results], TOOLS, add_generation_prompt=True)
    assert rendered.endswith(
        "</tool_call><|im_end|>\n" + "<|im_start|>tool\n42<|im_end|>\n" * 2 + "<|im_start|>assistant\n"
    )


@tool
def echo(code: str, times: int) -> str:
    """Repeat a code."""
    return code * times


class Echo:
    @hookimpl
    def register_tools(self, ctx):
        return [echo]


def test_qwen3_coder_in_the_loop_types_values_by_the_tool_schema():
    """Through the loop, a string parameter that reads as a number stays the model's text."""
    call = "<tool_call>\n<function=echo>\n<parameter=code>\n007\n</parameter>\n<parameter=times>\n2\n</parameter>\n</function>\n</tool_call>"
    runtime = make_runtime({"plugins": ["echo"], "rollout": {"parser": "qwen3-coder"}}, plugins={"echo": Echo()})
    assert runtime.parser("qwen3") is parse_qwen3 and runtime.parser("qwen3-coder") is parse_qwen3_coder
    (t,) = rollout({"plugins": ["echo"], "rollout": {"parser": "qwen3-coder"}}, [{"id": "a", "prompt": "?"}],
                   {"a": [call, "Done."]}, plugins={"echo": Echo()}, score=False)  # fmt: skip
    assert t.tool_calls == 1 and t.tool_errors == 0
    assert t.messages[1]["tool_calls"][0]["function"]["arguments"] == {"code": "007", "times": 2}
    assert t.messages[2]["content"] == "007007"
