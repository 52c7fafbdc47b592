"""Hostile model output: the parsers stay linear in their input and never raise.

In RL the model under training finds every slow path by chance, and a parser runs synchronously on
the event loop, so one quadratic input stalls every trajectory. Each input below was seconds to
minutes before the fix (figures in the test ids' comments); the bound is per input size.
"""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlfcore.builtins.parsers import MAX_CALLS, MAX_DEPTH, parse_hermes, parse_llama3_json

MB = 1_000_000
BOUND_S = 0.75
"""A 1 MB hostile text must parse in well under a second (2 shared CI cores)."""


def timed(parse, text):
    start = time.perf_counter()
    calls = parse(text)
    return calls, time.perf_counter() - start


WORST = {
    # before the fix: 2,000 newlines 11.7 s, 4 KB 38 s, 10 KB 341 s (cubic backtracking of the fence regex)
    "unclosed fence": (parse_hermes, "<tool_call>```json" + "\n" * MB + "x</tool_call>"),
    "unclosed fence, spaces": (parse_hermes, "<tool_call>```" + " \t" * (MB // 2)),
    # before: 90,000 tags 75 s (the close tag searched again from each open tag, JSONDecodeError
    # counting the lines before each failure)
    "many unclosed tags": (parse_hermes, "<tool_call>" * (MB // 11)),
    "many unclosed objects": (parse_hermes, "<tool_call>{" * (MB // 12)),
    "many unclosed strings": (parse_hermes, '<tool_call>{"a": "' * (MB // 18)),
    "newlines then tags": (parse_hermes, "\n" * (MB // 2) + "<tool_call>[" * (MB // 24)),
    "one huge argument": (parse_hermes, '<tool_call>{"name": "f", "arguments": {"s": "' + "x" * MB + '"}}</tool_call>'),
    "trailing commas": (parse_hermes, "<tool_call>[" + "1," * (MB // 2) + "x</tool_call>"),
    "deep nesting": (parse_hermes, "<tool_call>" + "[" * MB + "</tool_call>"),
    # before: 1 M semicolons 44.7 s (the text before each one sliced again)
    "many semicolons": (parse_llama3_json, "{" + ";" * MB),
    "many blank calls": (parse_llama3_json, "{" + " ; " * (MB // 3)),
    "many calls": (parse_llama3_json, '{"name": "f"};' * (MB // 14)),
    "llama3 unclosed string": (parse_llama3_json, '{"name": "' + '\\";' * (MB // 3)),
    "llama3 fence": (parse_llama3_json, "<|python_tag|>```json" + "\n" * MB),
}


@pytest.mark.parametrize("case", list(WORST))
def test_worst_inputs_parse_in_linear_time(case):
    parse, text = WORST[case]
    calls, seconds = timed(parse, text)
    assert seconds < BOUND_S, f"{case}: {len(text):,} chars took {seconds:.2f} s"
    assert len(calls) <= MAX_CALLS + 1
    assert all(c.raw in text for c in calls)


def test_time_grows_linearly_with_size():
    """Doubling the input at most about doubles the time (quadratic would quadruple it)."""
    for parse, unit in [
        (parse_hermes, "<tool_call>```\n"),
        (parse_llama3_json, "{;"),
        (parse_hermes, '<tool_call>{"a": "'),
    ]:
        small = min(timed(parse, unit * 20_000)[1] for _ in range(3))
        large = min(timed(parse, unit * 80_000)[1] for _ in range(3))
        assert large < 8 * small + 0.05, f"{unit!r}: x4 input took {large / max(small, 1e-9):.1f}x the time"


def test_deep_nesting_is_a_malformed_call_not_a_recursion_error():
    for depth in (MAX_DEPTH + 5, 1_000, 100_000):
        body = '{"name": "f", "arguments": {"x": ' + "[" * depth + "]" * depth + "}}"
        [call] = parse_hermes(f"<tool_call>{body}</tool_call>")
        assert call.error and f"more than {MAX_DEPTH} deep" in call.error and call.name == "f"
        [call] = parse_llama3_json(body)
        assert call.error and "deep" in call.error
    [call] = parse_hermes('<tool_call>{"name": "f", "arguments": {"x": ' + "[" * 50 + "]" * 50 + "}}</tool_call>")
    assert call.error is None


def test_deeply_nested_string_arguments_are_malformed():
    inner = json.dumps("[" * 5_000 + "]" * 5_000)
    [call] = parse_hermes(f'<tool_call>{{"name": "f", "arguments": {inner}}}</tool_call>')
    assert call.error and call.name == "f"


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "f", "arguments": {"q": "a\\ud800b"}}',
        '{"name": "f", "arguments": {"\\udfff": 1}}',
        '{"name": "f", "arguments": "{\\"q\\": \\"\\\\ud800\\"}"}',
        '{"name": "f", "arguments": {"q": ["\ud800"]}}',
    ],
)
def test_lone_surrogates_are_refused(body):
    [call] = parse_hermes(f"<tool_call>{body}</tool_call>")
    assert call.error and "lone surrogate" in call.error and call.arguments == {}
    [call] = parse_llama3_json(body)
    assert call.error and "lone surrogate" in call.error


def test_a_surrogate_pair_is_a_real_character():
    [call] = parse_hermes('<tool_call>{"name": "f", "arguments": {"q": "\\ud83d\\ude00"}}</tool_call>')
    assert call.error is None and call.arguments == {"q": "\U0001f600"}


def test_calls_past_the_limit_are_one_error_call():
    text = '<tool_call>{"name": "f", "arguments": {}}</tool_call>' * (MAX_CALLS + 50)
    calls = parse_hermes(text)
    assert len(calls) == MAX_CALLS + 1 and all(c.error is None for c in calls[:MAX_CALLS])
    assert f"more than {MAX_CALLS}" in calls[-1].error and calls[-1].raw.count("<tool_call>") == 50
    calls = parse_llama3_json('{"name": "f"}; ' * (MAX_CALLS + 3))
    assert len(calls) == MAX_CALLS + 1 and f"more than {MAX_CALLS}" in calls[-1].error
    assert "".join(c.raw for c in calls) == ('{"name": "f"}; ' * (MAX_CALLS + 3)).rstrip()


# --- fuzzing -------------------------------------------------------------------------------------

PIECES = [
    "<tool_call>",
    "</tool_call>",
    "```json",
    "```",
    "{",
    "}",
    "[",
    "]",
    '"',
    "\\",
    ",",
    ":",
    ";",
    " ",
    "\n",
    '"name"',
    '"arguments"',
    "<|python_tag|>",
    "<|eot_id|>",
    "\\ud800",
    "\ud800",
    "1",
    "null",
    "x",
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(PIECES), max_size=60), st.integers(1, 2_000))
def test_fuzz_never_raises_and_raw_is_text(pieces, repeat):
    """Random mixtures of the syntax, repeated: never an exception, always bounded time, every
    ``raw`` a substring, no error call without a reason, no accepted call with unencodable text."""
    text = "".join(pieces) * (repeat if len("".join(pieces)) * repeat <= 200_000 else 1)
    for parse in (parse_hermes, parse_llama3_json):
        calls, seconds = timed(parse, text)
        assert seconds < BOUND_S * max(1, len(text) / MB) + 0.2, f"{len(text):,} chars took {seconds:.2f} s"
        assert len(calls) <= MAX_CALLS + 1
        for call in calls:
            assert call.raw in text
            if call.error is None:
                json.dumps(call.arguments, ensure_ascii=False).encode("utf-8")
