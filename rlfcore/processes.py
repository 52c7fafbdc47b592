"""Worker processes for CPU-heavy scoring, so one slow scorer does not stall the event loop.

Rewards are scored on the event loop that also drives rollouts and tool calls. A scorer that parses,
executes or compares for tens of milliseconds per sample (SQL result sets, unit tests, symbolic
maths) would hold every other coroutine up; :meth:`ProcessPool.run` sends it to a worker process
instead. The pool starts on first use, with the ``forkserver`` method where the platform has it (the
parent runs threads: MCP sessions, executor threads, which ``fork`` would copy half-way), and a worker
that dies fails only the call that killed it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from rlfcore.cpus import available_cpus

if TYPE_CHECKING:  # imported on first use: every rlf command builds a runtime, few score in processes
    from concurrent.futures import ProcessPoolExecutor

T = TypeVar("T")


class WorkerDied(RuntimeError):
    """A worker process exited while running the call (a crash, ``os._exit``, the OOM killer)."""


def default_processes() -> int:
    """Up to 4 workers, and never more than the CPUs this process may use (a cgroup quota included)."""
    return max(1, min(4, available_cpus()))


class ProcessPool:
    """A lazily started process pool shared by the scorers of one run."""

    def __init__(self, processes: int = 0):
        self.processes = processes or default_processes()
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @staticmethod
    def _context() -> Any:
        import multiprocessing

        method = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
        return multiprocessing.get_context(method)

    def _get(self) -> ProcessPoolExecutor:
        from concurrent.futures import ProcessPoolExecutor

        with self._lock:
            if self._executor is None:
                self._executor = ProcessPoolExecutor(self.processes, mp_context=self._context())
            return self._executor

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a worker process. ``fn`` and its arguments must pickle (a
        module-level function, plain data); its exception is raised here unchanged.

        A worker that dies breaks every call the pool is running, not only its own; each broken
        call is run again alone in a fresh process, so only the call that kills its process fails
        (with :class:`WorkerDied`).
        """
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        executor = self._get()
        try:
            return await asyncio.wrap_future(executor.submit(fn, *args, **kwargs))
        except BrokenProcessPool:
            with self._lock:
                if self._executor is executor:  # the first caller to notice replaces the pool
                    self._executor = None
            executor.shutdown(wait=False, cancel_futures=True)
        alone = ProcessPoolExecutor(1, mp_context=self._context())
        try:
            return await asyncio.wrap_future(alone.submit(fn, *args, **kwargs))
        except BrokenProcessPool as exc:
            name = getattr(fn, "__qualname__", repr(fn))
            raise WorkerDied(f"the worker process running {name} died ({exc})") from None
        finally:
            alone.shutdown(wait=False)

    def close(self) -> None:
        """Stop the workers (the run is over); running calls are cancelled."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
