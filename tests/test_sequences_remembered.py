"""The token builder renders a prompt or an observation once and reuses the tokens only for the
exact same messages: the same tokens as a fresh rendering, never another message's."""

from __future__ import annotations

from rlfcore.chat import COMPACT_TEMPLATE, ByteChatTokenizer
from rlfcore.sequences import REMEMBERED_CHARS, SequenceBuilder


class CountingTokenizer(ByteChatTokenizer):
    def __init__(self) -> None:
        super().__init__(COMPACT_TEMPLATE)
        self.renders = 0

    def render(self, messages, tools, add_generation_prompt):
        self.renders += 1
        return super().render(messages, tools, add_generation_prompt)


def tool_message(content, **extra):
    return {"role": "tool", "tool_call_id": "call_0", "name": "calc", "content": content, **extra}


def test_the_same_observation_is_rendered_once_and_gives_the_same_tokens():
    tok = CountingTokenizer()
    builder, fresh = SequenceBuilder(tok), SequenceBuilder(ByteChatTokenizer(COMPACT_TEMPLATE))
    end = tok.eos_token_ids[0]
    first = builder.observation_ids([tool_message("42")], end)
    before = tok.renders
    again = builder.observation_ids([tool_message("42")], end)
    assert tok.renders == before and again == first == fresh.observation_ids([tool_message("42")], end)
    again.append(-1)  # the caller's list is its own: the remembered tokens stay as they were
    assert builder.observation_ids([tool_message("42")], end) == first


def test_messages_that_differ_in_any_way_are_rendered_anew():
    tok = CountingTokenizer()
    builder = SequenceBuilder(tok)
    end = tok.eos_token_ids[0]
    variants = [
        [tool_message("42")],
        [tool_message("43")],
        [tool_message(42)],  # an int renders as the string would, but is not the same message
        [tool_message(42.0)],
        [tool_message(True)],
        [tool_message("42", extra="x")],
        [{"content": "42", "role": "tool", "tool_call_id": "call_0", "name": "calc"}],  # key order
        [tool_message("42"), tool_message("1")],
    ]
    for messages in variants:
        before = tok.renders
        builder.observation_ids(messages, end)
        assert tok.renders == before + 1, messages
    for kept in ([tool_message(("4", "2"))], [tool_message("x" * (REMEMBERED_CHARS + 1))]):  # a tuple; too long
        builder.observation_ids(kept, end)
        before = tok.renders
        builder.observation_ids(kept, end)
        assert tok.renders == before + 1


def test_the_samples_of_a_row_share_one_prompt_rendering():
    tok = CountingTokenizer()
    builder = SequenceBuilder(tok)
    prompt = [{"role": "user", "content": "What is six times seven?"}]
    tools = [{"type": "function", "function": {"name": "calc", "description": "", "parameters": {}}}]
    first = builder.prompt_ids(prompt, tools)
    before = tok.renders
    assert [builder.prompt_ids(prompt, tools) for _ in range(7)] == [first] * 7 and tok.renders == before
    assert builder.prompt_ids(prompt, None) != first and tok.renders == before + 1
