"""The one async interface every rollout engine implements.

Token ids in, token ids and logprobs out: the loop never sends text to an engine, so what the model
generated is exactly what is trained on.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from rlfcore.config import SamplingConfig


@dataclass
class SamplingParams:
    """Sampling settings for one generation; every turn of a trajectory uses the configured ones."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 256
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    """Stop strings: generation ends once the generated text contains one (the token that completes
    it is kept, nothing after it is generated), as Search-R1 stops at ``</search>``."""

    @classmethod
    def from_config(cls, cfg: SamplingConfig, stop_token_ids: list[int]) -> SamplingParams:
        return cls(
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k,
            max_tokens=cfg.max_tokens,
            seed=cfg.seed,
            stop_token_ids=list(stop_token_ids),
            stop=list(cfg.stop),
        )


def cut_at_stop(text: str, stop: list[str]) -> int | None:
    """Where ``text`` ends when generation stops at the earliest-ending of the ``stop`` strings, or None."""
    ends = [i + len(s) for s in stop if (i := text.find(s)) >= 0]
    return min(ends) if ends else None


@dataclass
class Generation:
    """What one generate call produced. ``token_ids`` include the stop token when one was hit; after
    a stop string they end with the token that completed it (no end-of-turn token follows)."""

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: Literal["stop", "length"]
    versions: list[int] | None = None
    """Per token, the policy version (trainer updates applied) it was sampled with, where the engine
    tracks it (asynchronous training): a row may span versions when new weights arrive mid-turn."""
    kept_logmass: list[float] | None = None
    """Per token, ``log`` of the probability mass the top-k/top-p cut kept (0 without a cut), with
    ``versions``: the distribution that drew the token gives it ``logprobs - kept_logmass``."""


class Engine(abc.ABC):
    """An async generator of tokens. Implementations must be safe to call concurrently."""

    @abc.abstractmethod
    async def generate(self, prompt_ids: list[int], params: SamplingParams, request_id: str = "") -> Generation:
        """Continue ``prompt_ids``. ``request_id`` is stable across the turns of one trajectory."""

    async def close(self) -> None:  # noqa: B027 - most engines hold nothing to release
        """Release servers, sessions and memory."""
