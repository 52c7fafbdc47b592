"""The multi-turn loop over a chat-completions API: messages in, a message out, no token ids.

The same states as :class:`~rlfcore.loop.Rollout` (generate, parse, invoke, observe) with the same
hooks and the same stop rule (:meth:`~rlfcore.loop.TurnLoop.stop_reason`), so ``rlf eval`` scores an
API's trajectories as it scores a local model's. What differs is what cannot exist without token
ids: the trajectory's ids, mask and logprobs stay empty, ``rollout.max_response_tokens`` counts the
tokens the API reports as generated (``usage.completion_tokens``), and ``rollout.max_total_tokens`` is
the API's business. An observation that continues the assistant's turn as raw text needs the token
loop and fails that trajectory.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rlfcore.context import TurnContext
from rlfcore.engines.chat import ChatEngine, ChatReply
from rlfcore.loop import Progress, Room, State, Trajectory, TurnLoop, _assistant_message
from rlfcore.runtime import Runtime
from rlfcore.types import Message, ToolCall


@dataclass(eq=False, slots=True)
class ChatProgress(Progress):
    """The chat loop's progress: the API's conversation, its last reply and the tokens it generated."""

    api: list[dict[str, Any]] = field(default_factory=list)
    """The conversation in the API's form (the engine's prompt, replies and observations)."""
    reply: ChatReply = field(default_factory=lambda: ChatReply("", "stop"))
    generated: int = 0
    """The API's ``usage.completion_tokens`` over the turns so far."""


class ChatRollout(TurnLoop[ChatProgress]):
    """The turn loop on a :class:`ChatEngine`: grouping, concurrency, tool calls and the stop rule are
    :class:`~rlfcore.loop.TurnLoop`'s; how a turn is generated, read and observed is this loop's."""

    def __init__(self, runtime: Runtime, engine: ChatEngine):  # no tokenizer, no token builder
        super().__init__(runtime)
        self.engine = engine

    def _progress(self, traj: Trajectory, ctx: TurnContext, schemas: list[dict[str, Any]]) -> ChatProgress:
        return ChatProgress(traj, ctx, schemas)

    def room(self, p: ChatProgress) -> Room:
        return Room(self.cfg.max_response_tokens - p.generated, None)  # the total is the API's business

    async def _prompt(self, p: ChatProgress) -> State:
        p.api = self.engine.prompt(p.traj.messages, p.schemas)
        return State.GENERATE

    async def _generate(self, p: ChatProgress) -> State:
        params = self._sampling(p, [])
        t0 = time.perf_counter()
        reply = p.reply = await self.engine.chat(p.api, p.schemas, params, request_id=p.traj.id)
        p.traj.generate_s += time.perf_counter() - t0
        p.traj.num_turns += 1
        p.generated += reply.completion_tokens
        p.cut = reply.finish_reason == "length"
        return State.PARSE

    async def _parse(self, p: ChatProgress) -> State:
        traj, reply, text_calls = p.traj, p.reply, self.engine.format is not None
        if p.cut:
            p.calls = []
            traj.messages.append(_message(reply, []))
            return State.INVOKE
        if text_calls:
            p.calls = await self.runtime.call_first("parse_tool_calls", traj.env, text=reply.content, ctx=p.ctx) or []
        else:
            p.calls = reply.tool_calls
        traj.messages.append(_message(reply, p.calls, text_calls=text_calls))
        return State.INVOKE

    async def _observe(self, p: ChatProgress) -> State:
        if any(m.get("continuation") for m in p.observation):
            raise RuntimeError(
                "build_observation continued the assistant's turn as raw text, which a chat-completions "
                "API cannot do: evaluate this environment with a completions engine (openai, transformers)"
            )
        p.traj.messages.extend(p.observation)
        p.api.append(p.reply.message)
        p.api.extend(self.engine.observation(p.observation))
        return State.GENERATE


def _message(reply: ChatReply, calls: list[ToolCall], text_calls: bool = False) -> Message:
    """The assistant turn in the token loop's form (call arguments as objects, reasoning apart), so
    scorers read an API's trajectories as they read a local model's."""
    message: Message
    if text_calls:
        message = _assistant_message(reply.content, calls)
    else:
        message = {"role": "assistant", "content": reply.content.strip()}
        if calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
            ]
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    return message
