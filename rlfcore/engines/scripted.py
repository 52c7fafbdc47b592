"""A policy that plays scripted texts: for tests and ``rlf plugins check``, where no model is wanted."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from rlfcore.chat import ChatTokenizer
from rlfcore.engines.base import Engine, Generation, SamplingParams, cut_at_stop

Policy = Callable[[str, str], str] | Mapping[str, Sequence[str]]


class ScriptedEngine(Engine):
    """Answers each request with a scripted text, encoded with the run's tokenizer.

    ``policy`` is either a mapping to the texts of its turns from a trajectory id (the request id) or a
    row id (the request id less the loop's final ``#k``, so a row id may contain ``#``), or a callable
    ``(request_id, prompt_text) -> text``. Logprobs are 0: the text is certain. ``latency_s`` simulates a
    model's generation time. A text holding one of ``params.stop`` is cut after the
    earliest, with no end-of-turn token, as a model sampled with those stop strings would end.
    """

    def __init__(self, tokenizer: ChatTokenizer, policy: Policy, latency_s: float = 0.0):
        self.tokenizer = tokenizer
        self.policy = policy
        self.latency_s = latency_s
        self._turns: dict[str, int] = defaultdict(int)

    def _text(self, request_id: str, prompt_ids: list[int]) -> str:
        if callable(self.policy):
            return self.policy(request_id, self.tokenizer.decode(prompt_ids))
        script = self.policy.get(request_id) or self.policy.get(request_id.rsplit("#", 1)[0])
        if script is None:
            raise KeyError(f"scripted engine has no script for request {request_id!r}")
        turn = self._turns[request_id]
        self._turns[request_id] += 1
        return script[turn] if turn < len(script) else script[-1]

    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self._text(request_id, prompt_ids)
        cut = cut_at_stop(text, params.stop)
        ids = self.tokenizer.encode(text if cut is None else text[:cut])
        if len(ids) >= params.max_tokens:
            ids = ids[: params.max_tokens]
            return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="length")
        if cut is None:
            ids.append(self.tokenizer.eos_token_ids[0])
        return Generation(token_ids=ids, logprobs=[0.0] * len(ids), finish_reason="stop")
