"""Calling hook implementations that may be async.

pluggy calls implementations synchronously, so an ``async def`` implementation of a first-result hook
would "answer" with a coroutine before it ran. The core therefore walks the implementations itself,
in pluggy's order, awaiting what is awaitable.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from typing import Any

import pluggy


async def resolve(value: Any) -> Any:
    """Await ``value`` if it is awaitable."""
    if inspect.isawaitable(value):
        return await value
    return value


def _args(impl: pluggy.HookImpl, kwargs: dict[str, Any]) -> list[Any]:
    """The arguments an implementation asked for; a context gets the implementing plugin's settings."""
    ctx = kwargs.get("ctx")
    if ctx is not None and "ctx" in impl.argnames and getattr(ctx, "runtime", None) is not None:
        own = ctx.runtime.config.settings(impl.plugin_name)
        if own is not ctx.settings:
            kwargs = {**kwargs, "ctx": dataclasses.replace(ctx, settings=own)}
    return [kwargs[name] for name in impl.argnames]


async def call_first(impls: list[pluggy.HookImpl], **kwargs: Any) -> Any:
    """The first non-``None`` answer of ``impls`` (in call order), or ``None``."""
    for impl in impls:
        result = await resolve(impl.function(*_args(impl, kwargs)))
        if result is not None:
            return result
    return None


async def call_all(impls: list[pluggy.HookImpl], **kwargs: Any) -> list[tuple[str, Any]]:
    """Every non-``None`` answer as ``(plugin name, answer)``, implementations run concurrently."""
    results = await asyncio.gather(*(resolve(impl.function(*_args(impl, kwargs))) for impl in impls))
    return [(impl.plugin_name, r) for impl, r in zip(impls, results) if r is not None]


def run_sync(coro: Any) -> Any:
    """Run a coroutine from synchronous code (the CLI), or return a plain value as it is."""
    if inspect.isawaitable(coro):
        return asyncio.run(_wrap(coro))
    return coro


async def _wrap(awaitable: Any) -> Any:
    return await awaitable
