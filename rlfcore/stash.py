"""Run-scoped plugin state: a typed store per plugin, modelled on pytest's ``Stash``.

A plugin keeps what it starts for a run (servers, pools, indexes, clients) in ``ctx.stash``, the
store the runtime holds for that plugin, under module-level :class:`StashKey` objects, instead of
module globals or caches that outlive the run. The runtime drops the stores after the plugins'
``shutdown`` hooks, which is where a plugin releases what its store holds. Keys are objects, not
strings, so two plugins (or two modules of one) never collide, and each key carries its value's
type for the type checker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast

T = TypeVar("T")
D = TypeVar("D")


class StashKey(Generic[T]):
    """A key of a :class:`Stash` whose values are ``T``: make one per thing, at module level."""

    __slots__ = ("name",)

    def __init__(self, name: str = ""):
        self.name = name
        """Only for messages: keys are told apart by identity."""

    def __repr__(self) -> str:
        return f"StashKey({self.name!r})"


class Stash:
    """A typed mapping of :class:`StashKey` to values, one per plugin per run."""

    __slots__ = ("_data", "_starting")

    def __init__(self) -> None:
        self._data: dict[StashKey[Any], Any] = {}
        self._starting = threading.RLock()

    def __setitem__(self, key: StashKey[T], value: T) -> None:
        self._data[key] = value

    def __getitem__(self, key: StashKey[T]) -> T:
        try:
            return cast(T, self._data[key])
        except KeyError:
            raise KeyError(f"nothing stashed under {key!r}") from None

    def get(self, key: StashKey[T], default: D) -> T | D:
        """The value under ``key``, else ``default``."""
        return cast(T, self._data[key]) if key in self._data else default

    def setdefault(self, key: StashKey[T], default: T) -> T:
        """The value under ``key``, storing ``default`` first when there is none."""
        if key not in self._data:
            self._data[key] = default
        return cast(T, self._data[key])

    def start(self, key: StashKey[T], factory: Callable[[], T]) -> T:
        """The value under ``key``, made by ``factory()`` on first use: how a run's resources start lazily.
        Callers in several threads at once start it once."""
        with self._starting:
            if key not in self._data:
                self._data[key] = factory()
            return cast(T, self._data[key])

    def pop(self, key: StashKey[T], default: D) -> T | D:
        """Remove and return the value under ``key``, else ``default`` (what ``shutdown`` releases)."""
        return cast(T, self._data.pop(key)) if key in self._data else default

    def __delitem__(self, key: StashKey[Any]) -> None:
        del self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __len__(self) -> int:
        return len(self._data)
