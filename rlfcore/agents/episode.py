"""One agent episode's exact tokens, from whatever chat requests its agent sends.

An agent resends its whole conversation with every request. When a request's messages extend a
segment's (that segment's messages, the answer rlf gave, then new tool results or user turns), only
the template's tokens for the new messages are appended (loss mask 0) and the next answer is
generated after them: the sequence holds exactly what the policy generated and read. A request that
does not extend any segment (the agent summarised, cut or edited its history, changed its system
prompt or its tools, or sent a second request while the first was still running) starts a new
segment, with the reason recorded. Every segment of an episode shares its reward.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from rlfcore.sequences import RolloutTokens
from rlfcore.types import Message


@dataclass(eq=False)
class Segment:
    """One context of an episode: the prompt it began with, then generated and appended tokens."""

    reason: str
    prompt_ids: list[int]
    messages: list[Message]
    """The conversation these tokens render: the request's messages and every answer rlf gave."""
    tools: list[dict[str, Any]] | None
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    generated: int = 0
    """How many of ``response_mask`` are 1, kept as they change: a budget check per request stays O(1)."""
    busy: bool = False
    """A request on this segment is being answered: a request beside it starts its own segment."""
    cut: bool = False
    """The last answer ran into its token limit: it has no end-of-turn token to continue after."""

    @property
    def ids(self) -> list[int]:
        return self.prompt_ids + self.response_ids

    def record(self) -> dict[str, Any]:
        return {
            "reason": self.reason,
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.response_mask,
            "logprobs": self.logprobs,
        }


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of OpenAI's content list."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return "" if content is None else str(content)


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _calls(message: Message) -> list[tuple[Any, Any]]:
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {} if isinstance(call, dict) else {}
        out.append((fn.get("name"), _arguments(fn.get("arguments"))))
    return out


def same_message(ours: Message, theirs: Message) -> bool:
    """Whether the agent sent back a message as rlf knows it: role, text, tool calls (arguments as
    JSON or as objects) and the call a tool result answers. Fields no template reads (ids of an
    SDK's own, ``refusal``, ``annotations``) do not count, nor does ``reasoning_content``, which an
    agent rarely keeps: rlf keeps the generated tokens either way."""
    if (
        ours.get("role") != theirs.get("role")
        or _text(ours.get("content")).strip() != _text(theirs.get("content")).strip()
    ):
        return False
    if ours.get("role") == "assistant":
        return _calls(ours) == _calls(theirs)
    return ours.get("tool_call_id") == theirs.get("tool_call_id")


def common_prefix(ours: list[Message], theirs: list[Message]) -> int:
    """How many leading messages the two conversations share."""
    n = 0
    for a, b in zip(ours, theirs):
        if not same_message(a, b):
            break
        n += 1
    return n


@dataclass(eq=False)
class Episode:
    """The segments of one episode and where the next request's tokens go."""

    tokens: RolloutTokens
    segments: list[Segment] = field(default_factory=list)

    def generated(self) -> int:
        """Tokens the policy generated in every segment so far (a fork's shared tokens count once)."""
        return sum(s.generated for s in self.segments)

    def place(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> tuple[Segment, list[int]]:
        """The segment a request continues (or a new one) and the context to generate after.

        The new messages' tokens are appended to a continued segment with loss mask 0 before this
        returns, and the segment is marked busy until :meth:`answered`."""
        best: Segment | None = None
        for seg in self.segments:
            extends = len(messages) > len(seg.messages) and common_prefix(seg.messages, messages) == len(seg.messages)
            free = seg.tools == tools and not seg.busy and not seg.cut
            if extends and free and (best is None or len(seg.messages) > len(best.messages)):
                best = seg
        if best is None:
            seg = Segment(self._why_new(messages), self.tokens.prompt_ids(messages, tools), list(messages), tools)
            self.segments.append(seg)
        else:
            seg = best
            grown = seg.messages + list(messages[len(seg.messages) :])  # rlf's own record of what it said
            drop, ids = self.tokens.context_ids(seg.ids, seg.messages, grown, tools)
            if drop:
                kept = len(seg.response_ids) - drop
                seg.generated -= sum(seg.response_mask[kept:])
                del seg.response_ids[kept:], seg.response_mask[kept:], seg.logprobs[kept:]
            seg.response_ids += ids
            seg.response_mask += [0] * len(ids)
            seg.logprobs += [0.0] * len(ids)
            seg.messages = grown
        seg.busy = True
        return seg, seg.ids

    def _why_new(self, messages: list[Message]) -> str:
        if not self.segments:
            return "first request"
        for seg in self.segments:
            if seg.busy and len(messages) >= len(seg.messages) == common_prefix(seg.messages, messages):
                return "a request beside one still being answered"
        last = self.segments[-1]
        shared = common_prefix(last.messages, messages)
        if shared == len(last.messages):
            return "the previous answer was cut at its token limit" if last.cut else "the tools changed"
        if shared == len(messages):
            if shared == len(last.messages) - 1:
                return "the same request again"
            return f"the history was cut to its first {shared} messages"
        return f"the history was rewritten at message {shared} ({messages[shared].get('role')})"

    @staticmethod
    def answered(seg: Segment, token_ids: list[int], logprobs: list[float] | None, message: Message, cut: bool) -> None:
        """A generation joins its segment (loss mask 1) with the assistant message it reads as."""
        seg.response_ids += token_ids
        seg.response_mask += [1] * len(token_ids)
        seg.generated += len(token_ids)
        seg.logprobs += logprobs if logprobs is not None else [0.0] * len(token_ids)
        seg.messages.append(message)
        seg.cut, seg.busy = cut, False

    @staticmethod
    def failed(seg: Segment) -> None:
        """A request on ``seg`` got no answer: the segment takes requests again."""
        seg.busy = False
