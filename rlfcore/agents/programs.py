"""Running the user's agent for one episode: a Python function given an OpenAI client, or a program.

Either way the agent knows only a base URL and a key; what it does with them is its own business.
An agent that raises, exits non-zero or runs past ``agent.timeout_s`` ends its episode with a named
stop reason; a program past its time is killed with every process of its group.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import importlib.util
import inspect
import json
import os
import signal
import ssl
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlfcore.schema import AgentConfig

MAX_OUTPUT_BYTES = 1024 * 1024
"""Of an agent program's stdout (its answer) and stderr (its error), kept at most."""

AgentFunction = Callable[[dict[str, Any], Any], Awaitable[Any]]


@dataclass
class Outcome:
    """How the agent's run ended: ``answer`` when it returned, else ``stop_reason`` and ``error``."""

    answer: str | None = None
    stop_reason: Literal["answer", "agent_error", "agent_timeout"] = "answer"
    error: str | None = None


class AgentLoadError(ValueError):
    """``agent.entry`` names nothing that can be called as an agent."""


def load_entry(entry: str, base_dir: Path) -> AgentFunction:
    """``module:function`` or ``file.py:function`` (relative to the config's folder)."""
    target, _, name = entry.rpartition(":")
    try:
        if target.endswith(".py"):
            path = Path(target) if Path(target).is_absolute() else base_dir / target
            spec = importlib.util.spec_from_file_location(f"rlf_agent_{path.stem}", path)
            if spec is None or spec.loader is None or not path.is_file():
                raise FileNotFoundError(f"no such file: {path}")
            module: Any = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except Exception as exc:
        raise AgentLoadError(f"agent.entry {entry!r}: cannot import {target}: {type(exc).__name__}: {exc}") from exc
    fn: AgentFunction | None = getattr(module, name, None)
    if fn is None or not inspect.iscoroutinefunction(fn):
        raise AgentLoadError(f"agent.entry {entry!r}: {name} is not an `async def {name}(task, client)` in {target}")
    return fn


def _answer(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for the process: building one loads the CA store (26 ms of CPU), which every
    rollout step's new client would pay again."""
    return ssl.create_default_context()


class FunctionAgent:
    """``agent.entry``: ``fn(task, client)`` per episode. Every episode's client is a copy of one
    ``openai.AsyncOpenAI`` with the episode's key, so they share one connection pool and one TLS
    context; a copy is given the base URL only where it differs from the shared client's, since
    parsing it again doubles a copy's cost."""

    def __init__(self, fn: AgentFunction, timeout_s: float):
        self.fn, self.timeout_s = fn, timeout_s
        self._base: Any = None
        self._base_url = ""

    async def __call__(self, task: dict[str, Any], base_url: str, key: str) -> Outcome:
        if self._base is None:
            import openai

            http = openai.DefaultAsyncHttpxClient(verify=_tls())
            self._base = openai.AsyncOpenAI(
                base_url=base_url, api_key=key, max_retries=0, timeout=self.timeout_s, http_client=http
            )
            self._base_url = base_url
        if base_url == self._base_url:
            client = self._base.with_options(api_key=key)
        else:
            client = self._base.with_options(base_url=base_url, api_key=key)
        try:
            value = await asyncio.wait_for(self.fn(task, client), self.timeout_s)
            return Outcome(answer=_answer(value))
        except asyncio.TimeoutError:
            return Outcome(
                stop_reason="agent_timeout", error=f"the agent ran past agent.timeout_s ({self.timeout_s:g} s)"
            )
        except Exception as exc:  # the agent's own failure ends its episode only
            where = traceback.format_exception(type(exc), exc, exc.__traceback__)[-3:]
            return Outcome(stop_reason="agent_error", error=f"{type(exc).__name__}: {exc}\n{''.join(where)[-2000:]}")

    async def aclose(self) -> None:
        """Close the shared connections (the endpoint stopped: they point nowhere now)."""
        if self._base is not None:
            base, self._base = self._base, None
            await base.close()


class CommandAgent:
    """``agent.command``: the program per episode (:func:`run_command`)."""

    def __init__(self, argv: list[str], timeout_s: float, cwd: Path):
        self.argv, self.timeout_s, self.cwd = argv, timeout_s, cwd

    async def __call__(self, task: dict[str, Any], base_url: str, key: str) -> Outcome:
        return await run_command(self.argv, task, base_url, key, self.timeout_s, self.cwd)

    async def aclose(self) -> None:
        return None


async def run_command(
    argv: list[str], task: dict[str, Any], base_url: str, key: str, timeout_s: float, cwd: Path
) -> Outcome:
    """The program, in its own process group, with the episode in its environment; its answer is its
    stdout. Past ``timeout_s`` the whole group is killed."""
    env = {**os.environ, "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": key, "RLF_TASK": json.dumps(task)}
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
    except OSError as exc:
        return Outcome(stop_reason="agent_error", error=f"agent.command {argv[0]!r} could not start: {exc}")

    async def read(stream: asyncio.StreamReader | None) -> bytes:
        data = b""
        while stream is not None and (chunk := await stream.read(65536)):
            if len(data) < MAX_OUTPUT_BYTES:
                data += chunk[: MAX_OUTPUT_BYTES - len(data)]
        return data

    io = asyncio.gather(read(proc.stdout), read(proc.stderr), proc.wait())
    try:
        out, err, code = await asyncio.wait_for(asyncio.shield(io), timeout_s)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        await io
        if isinstance(exc, asyncio.CancelledError):
            raise
        return Outcome(stop_reason="agent_timeout", error=f"the agent ran past agent.timeout_s ({timeout_s:g} s)")
    finally:
        with contextlib.suppress(
            ProcessLookupError, PermissionError
        ):  # whatever it started and left behind goes with it
            os.killpg(proc.pid, signal.SIGKILL)
    if code != 0:
        tail = err.decode(errors="replace").strip()[-2000:]
        return Outcome(stop_reason="agent_error", error=f"agent.command exited with status {code}: {tail}")
    return Outcome(answer=out.decode(errors="replace").strip())


def runner(cfg: AgentConfig, base_dir: Path) -> FunctionAgent | CommandAgent:
    """How each episode runs the configured agent: ``await agent(task, base_url, key) -> Outcome``."""
    if cfg.entry is not None:
        return FunctionAgent(load_entry(cfg.entry, base_dir), cfg.timeout_s)
    return CommandAgent(list(cfg.command or []), cfg.timeout_s, base_dir)
