"""Built-in plugin ``rlf.engines``: the ``transformers`` and ``openai`` rollout engines, and
``openai-chat`` for evaluation (:mod:`rlfcore.engines.chat`: messages, no token ids).

Factories import their engine (and torch) only when a run asks for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rlfcore.chat import ChatTokenizer
from rlfcore.engines.base import Engine
from rlfcore.hookspecs import hookimpl
from rlfcore.schema import RunConfig

if TYPE_CHECKING:
    from rlfcore.engines.chat import ChatEngine


def _transformers(config: RunConfig, tokenizer: ChatTokenizer) -> Engine:
    from rlfcore.engines.transformers import TransformersEngine

    if not config.model.path:
        raise ValueError("engine 'transformers' needs model.path: a local model folder")
    return TransformersEngine.from_pretrained(
        str(config.path(config.model.path)),
        device=config.engine.device,
        dtype=config.model.dtype,
        max_batch_size=config.engine.max_batch_size,
        threads=config.engine.threads,
        tokenizer=tokenizer,
    )


def _openai(config: RunConfig, tokenizer: ChatTokenizer) -> Engine:
    from rlfcore.engines.openai import OpenAIEngine

    return OpenAIEngine.from_config(config.engine, tokenizer)


def _openai_chat(config: RunConfig, _tokenizer: ChatTokenizer | None) -> ChatEngine:
    """The chat engine sends messages, not tokens: the tokenizer every factory is given is not needed."""
    from rlfcore.engines.chat import ChatEngine

    return ChatEngine.from_config(config.engine, parser=config.rollout.parser)


@hookimpl
def register_engines() -> dict[str, Callable[..., Engine | ChatEngine]]:
    return {"transformers": _transformers, "openai": _openai, "openai-chat": _openai_chat}
