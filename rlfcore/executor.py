"""The default tool executor: runs the calls of a turn concurrently, and turns every failure into a result.

One executor serves every trajectory of a run, so its limits are global: at most
``ToolsConfig.max_concurrency`` calls run at once across all trajectories, and a tool's own
``max_concurrency`` caps that tool (a rate-limited API, a single database). The model must always get
an answer it can read, so nothing here raises: unknown tools, unreadable calls, bad arguments,
exceptions, timeouts and exhausted retries all come back as a :class:`ToolResult` with ``error`` set.

Sync tools run in their own daemon thread, so they never block the event loop. Python cannot kill a
thread: a sync tool that times out keeps running in the background until it returns, but its result is
dropped and its concurrency slot is released at the timeout, so a hung tool never starves the others
(and, being a daemon thread, never keeps the process alive at exit). Async tools are cancelled.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import inspect
import json
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Mapping

import jsonschema

from rlfcore.config import ToolsConfig
from rlfcore.types import Tool, ToolCall, ToolErrorKind, ToolResult, TransientToolError

log = logging.getLogger(__name__)

LATENCY_WINDOW = 10_000
"""Latency percentiles are over each tool's most recent calls, so memory stays flat in long runs."""


@dataclass
class _Outcome:
    content: str
    error: ToolErrorKind | None = None


class ToolMetrics:
    """Counts of calls and errors, and per-tool latencies; ``snapshot()`` for logging, ``reset()`` per step."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.calls = 0
        self.cache_hits = 0
        self.errors: Counter[str] = Counter()
        self._count: Counter[str] = Counter()
        self._tool_errors: Counter[str] = Counter()
        self._latency: dict[str, deque[float]] = {}

    def record(self, result: ToolResult, *, known_tool: bool, cached: bool) -> None:
        self.calls += 1
        self.cache_hits += cached
        if result.error:
            self.errors[result.error] += 1
        if not known_tool:  # names the model made up would grow the table without bound
            return
        self._count[result.name] += 1
        self._tool_errors[result.name] += result.error is not None
        self._latency.setdefault(result.name, deque(maxlen=LATENCY_WINDOW)).append(result.latency_s)

    def snapshot(self) -> dict[str, Any]:
        """A plain, JSON-ready dict: totals, errors by kind, and per tool its count, errors and p50/p90/p99 (s)."""
        tools = {}
        for name, window in sorted(self._latency.items()):
            ordered = sorted(window)
            tools[name] = {
                "count": self._count[name],
                "errors": self._tool_errors[name],
                **{f"p{q}": _percentile(ordered, q) for q in (50, 90, 99)},
            }
        return {"calls": self.calls, "cache_hits": self.cache_hits, "errors": dict(self.errors), "tools": tools}


def _percentile(ordered: list[float], q: int) -> float:
    """Nearest-rank percentile of a sorted, non-empty list."""
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


class ToolExecutor:
    """Runs tool calls with timeouts, concurrency limits, retries, an optional cache and schema checks.

    ``backoff_s`` is the wait before the first retry of a transient error; it doubles on each retry.
    """

    def __init__(self, config: ToolsConfig | None = None, *, backoff_s: float = 0.1):
        self.config = config or ToolsConfig()
        self.backoff_s = backoff_s
        self.metrics = ToolMetrics()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._global: asyncio.Semaphore | None = None
        self._per_tool: dict[tuple[str | None, str], asyncio.Semaphore] = {}
        self._cache: dict[tuple[str | None, str, str], asyncio.Task[_Outcome]] = {}

    async def run(self, calls: list[ToolCall], tools: Mapping[str, Tool]) -> list[ToolResult]:
        """One result per call, in order; the calls run concurrently."""
        return list(await asyncio.gather(*(self.run_one(call, tools) for call in calls)))

    async def run_one(self, call: ToolCall, tools: Mapping[str, Tool]) -> ToolResult:
        """The result of one call; failures come back as results with ``error`` set."""
        start = time.perf_counter()
        self._bind_loop()
        tool = tools.get(call.name) if call.error is None else None
        cached = False
        try:
            if call.error is not None:
                outcome = _Outcome(f"Error: could not read the tool call: {call.error}", "malformed")
            elif tool is None:
                available = ", ".join(sorted(tools)) or "none"
                outcome = _Outcome(f"Error: unknown tool {call.name!r}; available tools: {available}", "unknown_tool")
            elif (problem := _schema_problem(tool, call.arguments)) is not None:
                outcome = _Outcome(f"Error: invalid arguments for tool {tool.name!r}: {problem}", "schema")
            elif self.config.cache:
                outcome, cached = await self._cached(tool, call.arguments)
            else:
                outcome = await self._attempts(tool, call.arguments)
        except Exception as exc:  # a bug here or an unusable tool schema must still answer the model
            log.debug("tool call %r failed inside the executor", call.name, exc_info=True)
            outcome = _Outcome(f"Error: tool {call.name!r} could not be run: {type(exc).__name__}: {exc}", "exception")
        result = ToolResult(
            call_id=call.id,
            name=call.name,
            content=self._cut(outcome.content),
            error=outcome.error,
            latency_s=time.perf_counter() - start,
        )
        self.metrics.record(result, known_tool=tool is not None, cached=cached)
        return result

    # --- one call ----------------------------------------------------------------------------------

    async def _cached(self, tool: Tool, arguments: dict[str, Any]) -> tuple[_Outcome, bool]:
        """Identical calls share one run, also while it is in flight; failures are not kept."""
        canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        key = (tool.plugin, tool.name, canonical)
        task = self._cache.get(key)
        hit = task is not None
        if task is None:
            task = asyncio.ensure_future(self._attempts(tool, arguments))
            self._cache[key] = task

            def forget_failure(done: asyncio.Task[_Outcome]) -> None:
                if done.cancelled() or done.exception() is not None or done.result().error is not None:
                    self._cache.pop(key, None)

            task.add_done_callback(forget_failure)
        # Shielded: one caller being cancelled must not cancel the run that others wait for.
        return await asyncio.shield(task), hit

    async def _attempts(self, tool: Tool, arguments: dict[str, Any]) -> _Outcome:
        timeout = tool.timeout_s if tool.timeout_s is not None else self.config.timeout_s
        tries = self.config.retries + 1
        for attempt in range(tries):
            try:
                value = await self._limited(tool, arguments, timeout)
            except TransientToolError as exc:
                if attempt + 1 < tries:
                    await asyncio.sleep(self.backoff_s * 2**attempt)
                    continue
                times = f"{tries} times" if tries > 1 else "once"
                return _Outcome(f"Error: tool {tool.name!r} failed {times} with a transient error: {exc}", "transient")
            except asyncio.TimeoutError:
                return _Outcome(f"Error: tool {tool.name!r} timed out after {float(timeout)!r} s", "timeout")
            except Exception as exc:
                raised = exc.__cause__ if isinstance(exc, _OwnTimeout) else exc
                log.debug("tool %r raised", tool.name, exc_info=raised)
                return _Outcome(f"Error: tool {tool.name!r} failed: {type(raised).__name__}: {raised}", "exception")
            return _Outcome(_render(value))
        raise AssertionError("unreachable: the last attempt always returns")

    async def _limited(self, tool: Tool, arguments: dict[str, Any], timeout: float) -> Any:
        # The tool's own slot first: a call waiting for a busy tool must not hold a global slot.
        tool_limit, global_limit = self._limits(tool)
        async with tool_limit or _NO_LIMIT, global_limit:
            return await asyncio.wait_for(self._call(tool, arguments), timeout)

    async def _call(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        try:
            value = tool.fn(**arguments) if tool.is_async else await _in_thread(tool.fn, arguments, tool.name)
            return await value if inspect.isawaitable(value) else value
        except asyncio.TimeoutError as exc:  # the tool's own (an HTTP client's), not the executor's deadline
            raise _OwnTimeout() from exc

    def _bind_loop(self) -> None:
        """Make the semaphores in the running loop (asyncio objects belong to one loop), anew if it changed."""
        loop = asyncio.get_running_loop()
        if self._global is None or self._loop is not loop:
            self._loop = loop
            self._global = asyncio.Semaphore(self.config.max_concurrency)
            self._per_tool.clear()
            self._cache = {k: t for k, t in self._cache.items() if t.done()}

    def _limits(self, tool: Tool) -> tuple[asyncio.Semaphore | None, asyncio.Semaphore]:
        assert self._global is not None, "run_one binds the loop first"
        if tool.max_concurrency is None:
            return None, self._global
        key = (tool.plugin, tool.name)
        if key not in self._per_tool:
            self._per_tool[key] = asyncio.Semaphore(tool.max_concurrency)
        return self._per_tool[key], self._global

    def _cut(self, content: str) -> str:
        limit = self.config.max_output_chars
        if len(content) <= limit:
            return content
        return f"{content[:limit]}\n[output truncated: {len(content) - limit} more characters dropped]"


class _OwnTimeout(Exception):
    """Carries a TimeoutError the tool raised itself, so it is not mistaken for the executor's timeout."""


class _NoLimit:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_LIMIT = _NoLimit()


def _schema_problem(tool: Tool, arguments: Any) -> str | None:
    """Every way ``arguments`` breaks the tool's schema, each naming its argument; ``None`` if valid."""
    validator_class = jsonschema.validators.validator_for(tool.parameters)
    errors = sorted(validator_class(tool.parameters).iter_errors(arguments), key=jsonschema.exceptions.relevance)
    if not errors:
        return None
    parts = []
    for error in errors:
        path = ".".join(str(p) for p in error.absolute_path)
        parts.append(f"argument {path!r}: {error.message}" if path else error.message)
    return "; ".join(parts)


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


async def _in_thread(fn: Any, arguments: dict[str, Any], name: str) -> Any:
    """Run ``fn`` in a fresh daemon thread: one stuck past its timeout cannot block a pool or the exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(ok: bool, value: Any) -> None:
        if future.done():  # cancelled at the timeout: the late answer is dropped
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, context.run(fn, **arguments)
        except Exception as exc:  # handed to the awaiting coroutine, which turns it into a result
            ok, value = False, exc
        except BaseException as exc:  # sys.exit() in a tool must not end the run
            ok, value = False, RuntimeError(f"the tool raised {exc!r}")
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop closed while the tool ran
            pass

    # _thread, not threading.Thread: threading's start() blocks the event loop until the new thread
    # runs (about 1 ms each under load, measured in benchmarks/loop_scheduling.py); these threads are
    # not joined at exit either, like daemon threads.
    _thread.start_new_thread(work, ())
    return await future
