"""Verdicts of identical requests, asked once.

GRPO groups often hold the same response several times (easy prompts, short answers), and evaluation
reruns the same samples. The key is the exact request (model, messages, sampling parameters), so a hit
returns what the judge would have been asked again. Only readable verdicts are stored; a request that
is already in flight is awaited rather than sent twice.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")


def request_key(model: str, messages: list[dict[str, Any]], params: dict[str, Any]) -> str:
    """A digest of the exact request."""
    text = json.dumps({"model": model, "messages": messages, "params": params}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class VerdictCache:
    """An LRU map of request keys to verdicts, with in-flight requests shared."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._pending: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> tuple[bool, Any]:
        if key in self._items:
            self._items.move_to_end(key)
            return True, self._items[key]
        return False, None

    def put(self, key: str, value: Any) -> None:
        if self.size <= 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    async def get_or_compute(self, key: str, compute: Callable[[], Awaitable[T]]) -> tuple[T, str]:
        """The verdict for ``key`` and where it came from: ``hit`` (stored), ``shared`` (an identical
        request in flight) or ``computed`` (by ``compute()``, then stored)."""
        if self.size <= 0:
            return await compute(), "computed"
        hit, value = self.get(key)
        if hit:
            return value, "hit"
        entry = self._pending.get(key)
        if entry is not None and entry[0] is asyncio.get_running_loop():
            try:
                return await asyncio.shield(entry[1]), "shared"
            except _Abandoned:
                pass  # the first asker was cancelled: ask ourselves
        return await self._run(key, compute), "computed"

    async def _run(self, key: str, compute: Callable[[], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[key] = (loop, future)
        try:
            value = await compute()
        except BaseException as exc:
            future.set_exception(_Abandoned() if isinstance(exc, asyncio.CancelledError) else exc)
            future.exception()  # mark it retrieved: perhaps nobody waits, and asyncio would log it
            raise
        finally:
            if self._pending.get(key, (None, None))[1] is future:
                del self._pending[key]
        future.set_result(value)
        self.put(key, value)
        return value


class _Abandoned(Exception):
    """The request an identical one was waiting for was cancelled."""
