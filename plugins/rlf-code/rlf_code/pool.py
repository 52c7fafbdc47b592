"""Sandboxes started ahead of time, so a trajectory's first call costs milliseconds, not a start."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rlf_code.sandbox import Output, Sandbox


class Pool:
    """Keeps ``size`` started sandboxes; :meth:`take` hands one out and a thread starts its replacement."""

    def __init__(self, make: Callable[[], Sandbox], size: int):
        self._make, self._size = make, size
        self._ready: list[Sandbox] = []
        self._cond = threading.Condition()
        self._closed = False
        self._filler = threading.Thread(target=self._fill, name="rlf-code pool", daemon=True)
        self._filler.start()

    def take(self) -> Sandbox:
        with self._cond:
            sandbox = self._ready.pop() if self._ready else None
            self._cond.notify_all()
        if sandbox is not None and sandbox.alive:
            return sandbox
        if sandbox is not None:  # died while waiting (its CPU limit, the machine): release what it held
            sandbox.close()
        return self._make().start()

    def _fill(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._closed or len(self._ready) < self._size)
                if self._closed:
                    return
            try:
                sandbox = self._make().start()
            except Exception:  # a start that fails here fails again, with its message, in take()
                with self._cond:
                    self._cond.wait(1.0)
                continue
            with self._cond:
                if self._closed:
                    sandbox.close()
                    return
                self._ready.append(sandbox)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            ready, self._ready = self._ready, []
            self._cond.notify_all()
        self._filler.join(timeout=30)
        for sandbox in ready:
            sandbox.close()


class Session:
    """One trajectory's interpreter, taken from the pool on its first call and kept until the
    trajectory ends; after a call kills it, the next call gets a fresh one (and is told so)."""

    def __init__(self, pool: Pool):
        self._pool = pool
        self._sandbox: Sandbox | None = None
        self._lock = threading.Lock()
        self.restarts = 0
        self.failures: list[str] = []

    def call(self, code: str, mode: str = "python") -> Output:
        with self._lock:
            restarted = self._sandbox is not None and not self._sandbox.alive
            if restarted:
                assert self._sandbox is not None
                self._sandbox.close()
                self.restarts += 1
            if self._sandbox is None or restarted:
                self._sandbox = self._pool.take()
            out = self._sandbox.call(code, mode)
        if out.failure:
            self.failures.append(out.failure)
        if restarted:
            out.stderr = (
                "[a new interpreter: the earlier one was stopped, its variables and files are gone]\n" + out.stderr
            )
        return out

    def close(self) -> None:
        with self._lock:
            if self._sandbox is not None:
                self._sandbox.close()
                self._sandbox = None
