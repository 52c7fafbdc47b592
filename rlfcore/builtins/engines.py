"""Built-in plugin ``rlf.engines``: the ``transformers`` and ``openai`` rollout engines.

Factories import their engine (and torch) only when a run asks for it.
"""

from __future__ import annotations

from typing import Callable

from rlfcore.chat import ChatTokenizer
from rlfcore.config import RunConfig
from rlfcore.context import SetupContext
from rlfcore.engines.base import Engine
from rlfcore.hookspecs import hookimpl


def _transformers(config: RunConfig, tokenizer: ChatTokenizer) -> Engine:
    from rlfcore.engines.transformers import TransformersEngine

    if not config.model.path:
        raise ValueError("engine 'transformers' needs model.path: a local model folder")
    return TransformersEngine.from_pretrained(
        config.model.path, device=config.engine.device, dtype=config.model.dtype,
        max_batch_size=config.engine.max_batch_size, threads=config.engine.threads, tokenizer=tokenizer,
    )


def _openai(config: RunConfig, tokenizer: ChatTokenizer) -> Engine:
    from rlfcore.engines.openai import OpenAIEngine

    return OpenAIEngine.from_config(config.engine, tokenizer)


@hookimpl
def register_engines(ctx: SetupContext) -> dict[str, Callable[[RunConfig, ChatTokenizer], Engine]]:
    return {"transformers": _transformers, "openai": _openai}
