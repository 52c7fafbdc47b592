"""The multi-turn loop over a chat-completions API: messages in, a message out, no token ids.

The same turns as :class:`~rlfcore.loop.Rollout` (generate, read the calls, invoke, observe) with
the same hooks, limits and stop reasons, so ``rlf eval`` scores an API's trajectories as it scores a
local model's. What differs is what cannot exist without token ids: the trajectory's ids, mask and
logprobs stay empty, ``rollout.max_response_tokens`` counts the tokens the API reports as generated
(``usage.completion_tokens``), and ``rollout.max_total_tokens`` is the API's business. An observation
that continues the assistant's turn as raw text needs the token loop and fails that trajectory.
"""

from __future__ import annotations

import time
import zlib
from typing import Any

from rlfcore.context import TurnContext
from rlfcore.engines.base import SamplingParams
from rlfcore.engines.chat import ChatEngine, ChatReply
from rlfcore.loop import Rollout, Trajectory, _assistant_message, length_stop
from rlfcore.runtime import Runtime
from rlfcore.types import Message, ToolCall


class ChatRollout(Rollout):
    """:class:`~rlfcore.loop.Rollout` on a :class:`ChatEngine`: grouping, concurrency and tool
    bookkeeping are the token loop's; only the turns differ."""

    def __init__(self, runtime: Runtime, engine: ChatEngine):  # no tokenizer, no token builder
        self.runtime = runtime
        self.engine = engine  # type: ignore[assignment]
        self.chat_engine = engine
        self.tok = None  # type: ignore[assignment]
        self.cfg = runtime.config.rollout
        self.seed = runtime.config.rollout.sampling.seed
        self._gate = None
        self.reasoning = False

    async def _turns(self, traj: Trajectory, ctx: TurnContext) -> bool:
        schemas = [t.schema() for t in ctx.tools.values() if t.listed]
        api = self.chat_engine.prompt(traj.messages, schemas)
        generated = 0
        for turn in range(self.cfg.max_turns):
            ctx.turn = turn
            budget = min(self.cfg.sampling.max_tokens, self.cfg.max_response_tokens - generated)
            if budget <= 0:
                traj.stop_reason, traj.truncated = "max_response_tokens", True
                return False
            params = SamplingParams.from_config(self.cfg.sampling, [])
            params.max_tokens = budget
            if self.seed is not None:  # one seed per sample and turn, as in the token loop
                params.seed = zlib.crc32(f"{self.seed}/{traj.id}/{turn}".encode())
            t0 = time.perf_counter()
            reply = await self.chat_engine.chat(api, schemas, params, request_id=traj.id)
            traj.generate_s += time.perf_counter() - t0
            traj.num_turns += 1
            generated += reply.completion_tokens
            if reply.finish_reason == "length":
                traj.messages.append(_message(reply, []))
                room = self.cfg.max_response_tokens - generated + reply.completion_tokens
                traj.stop_reason, traj.truncated = length_stop(budget, -1, room), True
                return False
            if self.chat_engine.format is None:
                calls = reply.tool_calls
            else:
                calls = await self.runtime.call_first("parse_tool_calls", traj.env, text=reply.content, ctx=ctx) or []
            traj.messages.append(_message(reply, calls, text_calls=self.chat_engine.format is not None))
            api.append(reply.message)
            if not calls:
                traj.stop_reason = "answer" if traj.tool_calls else "no_tool_call"
                return False
            if self.cfg.unreadable_calls == "stop" and any(c.error for c in calls):
                traj.stop_reason = "unreadable_call"
                return False
            if turn == self.cfg.max_turns - 1:
                traj.stop_reason = "max_turns"
                return False
            results = await self._invoke(calls, ctx, traj)
            observation = await self.runtime.call_first("build_observation", traj.env, results=results, ctx=ctx)
            observation = observation or []
            if any(m.get("continuation") for m in observation):
                raise RuntimeError(
                    "build_observation continued the assistant's turn as raw text, which a chat-completions "
                    "API cannot do: evaluate this environment with a completions engine (openai, transformers)"
                )
            traj.messages.extend(observation)
            api.extend(self.chat_engine.observation(observation))
        traj.stop_reason = "max_turns"
        return False


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


def chat_rollout(runtime: Runtime, engine: Any) -> ChatRollout | None:
    """The loop for ``engine`` when it is a chat engine, else None (the token loop applies)."""
    return ChatRollout(runtime, engine) if isinstance(engine, ChatEngine) else None
