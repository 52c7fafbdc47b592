"""The default tool executor: runs the calls of a turn concurrently, and turns every failure into a result.

One executor serves every trajectory of a run, so its limits are global: at most
``ToolsConfig.max_concurrency`` calls run at once across all trajectories, and a tool's own
``max_concurrency`` caps that tool (a rate-limited API, a single database). The model must always get
an answer it can read, so nothing here raises: unknown tools, unreadable calls, bad arguments,
exceptions, timeouts and exhausted retries all come back as a :class:`ToolResult` with ``error`` set.

Sync tools run in a worker thread (:mod:`rlfcore.threads`), so they never block the event loop.
Python cannot kill a thread, and an async tool may ignore its cancellation: a call past its timeout
is answered with a timeout error at once, but whatever still runs keeps its concurrency slots until
it ends, so the limits count everything that executes. A call that cannot get a slot within its own
timeout while such overrunning calls hold slots is a timeout error too, so hung tools never stall a
step. An exception of any kind a tool raises (``SystemExit``, ``KeyboardInterrupt``,
``CancelledError`` included) is that call's error result; the traceback goes into
:attr:`ToolResult.traceback`, never to the model.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import time
import traceback
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from rlfcore.schema import ToolsConfig
from rlfcore.schemas import argument_problems
from rlfcore.surrogates import replaced
from rlfcore.threads import Raised, start_in_thread
from rlfcore.tools import SESSION
from rlfcore.types import Done, Tool, ToolCall, ToolErrorKind, ToolResult, TransientToolError

if TYPE_CHECKING:
    from rlfcore.sessions import OpenSession

log = logging.getLogger(__name__)

_CacheKey = tuple[str | None, str, str, str]
"""(plugin, tool, session key, canonical arguments)."""

LATENCY_WINDOW = 10_000
"""Latency percentiles are over each tool's most recent calls, so memory stays flat in long runs."""


@dataclass
class _Outcome:
    content: str
    error: ToolErrorKind | None = None
    traceback: str | None = None
    cut: bool = False
    """``content`` is already what the model sees (a cached result)."""
    done: bool = False
    """The tool returned :class:`~rlfcore.types.Done`."""


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


def show_tracebacks() -> None:
    """Print the traceback of each failing tool call on stderr as it happens (``rlf --debug``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)


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
        # Made once: a run has one event loop (rlfcore.runloop), which they bind to on first wait.
        self._global = asyncio.Semaphore(self.config.max_concurrency)
        self._per_tool: dict[tuple[str | None, str], asyncio.Semaphore] = {}
        self._cache: LRUCache[_CacheKey, _Outcome] = LRUCache(maxsize=self.config.cache_size)
        self._in_flight: dict[_CacheKey, asyncio.Task[_Outcome]] = {}
        self.overrunning = 0
        """Calls answered with a timeout whose thread or task still runs (and holds its slots)."""

    async def run(
        self, calls: list[ToolCall], tools: Mapping[str, Tool], sessions: Mapping[str, OpenSession] | None = None
    ) -> list[ToolResult]:
        """One result per call, in order; the calls run concurrently. ``sessions`` (by plugin) are the
        calling trajectory's, handed to the tools that take one (``ctx.sessions`` in a hook)."""
        if len(calls) == 1:  # nothing to run beside it: no task
            return [await self.run_one(calls[0], tools, sessions)]
        return list(await asyncio.gather(*(self.run_one(call, tools, sessions) for call in calls)))

    async def run_one(
        self, call: ToolCall, tools: Mapping[str, Tool], sessions: Mapping[str, OpenSession] | None = None
    ) -> ToolResult:
        """The result of one call; failures come back as results with ``error`` set."""
        start = time.perf_counter()
        tool = tools.get(call.name) if call.error is None else None
        session = (sessions or {}).get(tool.plugin or "") if tool is not None and tool.takes_session else None
        cached = False
        try:
            if call.error is not None:
                outcome = _Outcome(f"Error: could not read the tool call: {call.error}", "malformed")
            elif tool is None:
                available = ", ".join(sorted(tools)) or "none"
                outcome = _Outcome(f"Error: unknown tool {call.name!r}; available tools: {available}", "unknown_tool")
            elif (problem := argument_problems(tool.parameters, call.arguments)) is not None:
                outcome = _Outcome(f"Error: invalid arguments for tool {tool.name!r}: {problem}", "schema")
            else:
                arguments = call.arguments
                if tool.takes_session:  # None without one (its plugin opened none, or no trajectory calls)
                    arguments = {**arguments, SESSION: session.value if session is not None else None}
                if self.config.cache:
                    outcome, cached = await self._cached(tool, arguments, session.key if session is not None else "")
                else:
                    outcome = await self._attempts(tool, arguments)
        except Exception as exc:  # a bug here or an unusable tool schema must still answer the model
            log.debug("tool call %r failed inside the executor", call.name, exc_info=True)
            outcome = _Outcome(
                f"Error: tool {call.name!r} could not be run: {type(exc).__name__}: {exc}",
                "exception",
                traceback.format_exc(),
            )
        result = ToolResult(
            call_id=call.id,
            name=call.name,
            content=replaced(outcome.content if outcome.cut else self._cut(outcome.content)),
            error=outcome.error,
            latency_s=time.perf_counter() - start,
            traceback=outcome.traceback,
            done=outcome.done,
        )
        self.metrics.record(result, known_tool=tool is not None, cached=cached)
        return result

    # --- one call ----------------------------------------------------------------------------------

    async def _cached(self, tool: Tool, arguments: dict[str, Any], session: str) -> tuple[_Outcome, bool]:
        """Identical calls (in one session, for a tool that takes one) share one run, also while it is
        in flight. Successes are kept as the model saw them (cut), the least recently used dropped past
        ``tools.cache_size``; failures are not kept."""
        model_args = {k: v for k, v in arguments.items() if k != SESSION} if tool.takes_session else arguments
        canonical = json.dumps(model_args, sort_keys=True, ensure_ascii=True, separators=(",", ":"))
        key = (tool.plugin, tool.name, session, canonical)
        kept = self._cache.get(key)
        if kept is not None:
            return kept, True
        task = self._in_flight.get(key)
        hit = task is not None
        if task is None:
            task = asyncio.ensure_future(self._attempts(tool, arguments))
            self._in_flight[key] = task

            def keep_success(done: asyncio.Task[_Outcome]) -> None:
                self._in_flight.pop(key, None)
                if done.cancelled() or done.exception() is not None or done.result().error is not None:
                    return
                self._cache[key] = _Outcome(self._cut(done.result().content), cut=True)

            task.add_done_callback(keep_success)
        # Shielded: one caller being cancelled must not cancel the run that others wait for.
        return await asyncio.shield(task), hit

    async def _attempts(self, tool: Tool, arguments: dict[str, Any]) -> _Outcome:
        # A loop, not tenacity: every tool call passes here, and a per-call AsyncRetrying costs ~25 us of CPU.
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
            except _NoSlot as exc:
                return _Outcome(f"Error: tool {tool.name!r} timed out after {float(timeout)!r} s {exc}", "timeout")
            except asyncio.TimeoutError:
                return _Outcome(f"Error: tool {tool.name!r} timed out after {float(timeout)!r} s", "timeout")
            except Exception as exc:
                raised = exc.__cause__ if isinstance(exc, (_OwnTimeout, Raised)) and exc.__cause__ else exc
                log.debug("tool %r raised", tool.name, exc_info=raised)
                trace = "".join(traceback.format_exception(type(raised), raised, raised.__traceback__))
                return _Outcome(
                    f"Error: tool {tool.name!r} failed: {type(raised).__name__}: {raised}", "exception", trace
                )
            if isinstance(value, Done):
                return _Outcome(_render(value.content), done=True)
            return _Outcome(_render(value))
        raise AssertionError("unreachable: the last attempt always returns")

    async def _limited(self, tool: Tool, arguments: dict[str, Any], timeout: float) -> Any:
        """Run the call in its slots; the slots are given back when it really ends, which for a call
        past its timeout (a hung thread, a task ignoring cancellation) is after it was answered."""
        # The tool's own slot first: a call waiting for a busy tool must not hold a global slot.
        held: list[asyncio.Semaphore] = []
        try:
            for limit in self._limits(tool):
                if limit is not None:
                    await self._acquire(limit, timeout)
                    held.append(limit)
        except BaseException:
            for limit in held:
                limit.release()
            raise
        run = _Run(self, held)
        if tool.is_async:
            run.watch(asyncio.ensure_future(_guarded(self._call(tool, arguments))))
        else:  # no task: the thread's answer settles the call's future on the loop
            start_in_thread(tool.fn, arguments, run.settle)
        timer = asyncio.get_running_loop().call_later(timeout, run.expire)
        try:
            return await run.answer
        except asyncio.CancelledError:
            if run.answer.cancelled():  # the trajectory itself was cancelled (not a tool's own cancellation)
                run.stop()
            raise
        finally:
            timer.cancel()

    async def _acquire(self, limit: asyncio.Semaphore, timeout: float) -> None:
        """Wait for a slot as long as it takes while the calls holding them run within their time; a
        wait past ``timeout`` while overrunning calls hold slots is :class:`_NoSlot`."""
        if not limit.locked():  # a free slot is taken at once: no task and no timer for the wait
            await limit.acquire()
            return
        while True:
            try:
                await asyncio.wait_for(limit.acquire(), timeout)
                return
            except asyncio.TimeoutError:
                if self.overrunning:
                    raise _NoSlot(
                        f"waiting for a free slot: {self.overrunning} earlier calls are still running past their timeout"
                    ) from None

    async def _call(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        try:
            value = tool.fn(**arguments)
            return await value if inspect.isawaitable(value) else value
        except asyncio.TimeoutError as exc:  # the tool's own (an HTTP client's), not the executor's deadline
            raise _OwnTimeout() from exc

    def _limits(self, tool: Tool) -> tuple[asyncio.Semaphore | None, asyncio.Semaphore]:
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


class _Run:
    """One call past its slots: the future its caller awaits, answered by the tool's task or thread or
    by the timeout, whichever comes first; the slots go back when the tool really ends, later than its
    answer for a call past its timeout (a hung thread, a task ignoring cancellation)."""

    __slots__ = ("answer", "executor", "held", "overran", "task")

    def __init__(self, executor: ToolExecutor, held: list[asyncio.Semaphore]):
        self.executor = executor
        self.held = held
        self.answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Future[Any] | None = None
        self.overran = False

    def watch(self, task: asyncio.Future[Any]) -> None:
        self.task = task
        task.add_done_callback(self._task_done)

    def settle(self, ok: bool, value: Any) -> None:
        """A sync tool's thread ended (on the loop). A sync function that returned an awaitable is
        awaited in a task, still in the call's slots and time."""
        if ok and inspect.isawaitable(value):
            if not self.answer.done():
                self.watch(asyncio.ensure_future(_guarded(_awaited(value))))
                return
            close = getattr(value, "close", None)  # answered already (timed out, cancelled): never run
            if close is not None:
                close()
        if not ok and isinstance(value, asyncio.TimeoutError):  # the tool's own, not the deadline
            wrapped = _OwnTimeout()
            wrapped.__cause__ = value
            ok, value = False, wrapped
        self._ended()
        if not self.answer.done():
            if ok:
                self.answer.set_result(value)
            else:
                self.answer.set_exception(value)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._ended()
        if task.cancelled():
            if not self.answer.done():
                self.answer.cancel()
            return
        error = task.exception()  # retrieved either way: a late failure is not an unhandled-task warning
        if not self.answer.done():
            if error is None:
                self.answer.set_result(task.result())
            else:
                self.answer.set_exception(error)

    def _ended(self) -> None:
        for limit in self.held:
            limit.release()
        self.held = []
        if self.overran:
            self.executor.overrunning -= 1

    def expire(self) -> None:
        """The call's timeout: answered now; an async tool may ignore its cancellation, and a thread
        cannot be stopped: both keep their slots until they end."""
        if self.answer.done():
            return
        self.overran = True
        self.executor.overrunning += 1
        self.answer.set_exception(asyncio.TimeoutError())
        self.stop()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


async def _awaited(value: Any) -> Any:
    try:
        return await value
    except asyncio.TimeoutError as exc:
        raise _OwnTimeout() from exc


class _OwnTimeout(Exception):
    """Carries a TimeoutError the tool raised itself, so it is not mistaken for the executor's timeout."""


class _NoSlot(Exception):
    """No slot came free within the call's timeout while overrunning calls held slots."""


async def _guarded(call: Coroutine[Any, Any, Any]) -> Any:
    """``await call``, with anything but the cancellation of this task turned into :class:`Raised`."""
    task = asyncio.current_task()
    try:
        return await call
    except asyncio.CancelledError as exc:
        if task is not None and _cancel_requested(task):
            raise
        raise Raised() from exc
    except Exception:
        raise
    except BaseException as exc:
        raise Raised() from exc


def _cancel_requested(task: asyncio.Task[Any]) -> bool:
    cancelling: Callable[[], int] | None = getattr(task, "cancelling", None)  # Python 3.11+
    return True if cancelling is None else cancelling() > 0


def _render(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)
