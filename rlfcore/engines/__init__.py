"""Rollout engines: prompt token ids in, generated token ids and logprobs out."""

from rlfcore.engines.base import Engine, Generation, SamplingParams

__all__ = ["Engine", "Generation", "SamplingParams"]
