"""The default tool executor: runs the calls of a turn concurrently, and turns every failure into a result.

One executor serves every trajectory of a run, so its limits are global: at most
``ToolsConfig.max_concurrency`` calls run at once across all trajectories, and a tool's own
``max_concurrency`` caps that tool (a rate-limited API, a single database). The model must always get
an answer it can read, so nothing here raises: unknown tools, unreadable calls, bad arguments,
exceptions, timeouts and exhausted retries all come back as a :class:`ToolResult` with ``error`` set.

Sync tools run in a thread of their own (kept for a later call once theirs ends), so they never
block the event loop. Python cannot kill a thread, and an async tool may ignore its cancellation: a
call past its timeout is answered with a timeout error at once, but whatever still runs keeps its
concurrency slots until it ends, so the limits
count everything that executes. A call that cannot get a slot within its own timeout while such
overrunning calls hold slots is a timeout error too, so hung tools never stall a step. An exception
of any kind a tool raises (``SystemExit``, ``KeyboardInterrupt``, ``CancelledError`` included) is
that call's error result; the traceback goes into :attr:`ToolResult.traceback`, never to the model.
"""

from __future__ import annotations

import _thread
import asyncio
import contextvars
import inspect
import json
import logging
import math
import os
import time
import traceback
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jsonschema

from rlfcore.config import ToolsConfig
from rlfcore.surrogates import replaced
from rlfcore.tools import SESSION
from rlfcore.types import Tool, ToolCall, ToolErrorKind, ToolResult, TransientToolError

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
        self._cache: OrderedDict[_CacheKey, _Outcome] = OrderedDict()
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
            elif (problem := _schema_problem(tool, call.arguments)) is not None:
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
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key], True
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
                while len(self._cache) > self.config.cache_size:
                    self._cache.popitem(last=False)

            task.add_done_callback(keep_success)
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
            except _NoSlot as exc:
                return _Outcome(f"Error: tool {tool.name!r} timed out after {float(timeout)!r} s {exc}", "timeout")
            except asyncio.TimeoutError:
                return _Outcome(f"Error: tool {tool.name!r} timed out after {float(timeout)!r} s", "timeout")
            except Exception as exc:
                raised = exc.__cause__ if isinstance(exc, (_OwnTimeout, _Raised)) and exc.__cause__ else exc
                log.debug("tool %r raised", tool.name, exc_info=raised)
                trace = "".join(traceback.format_exception(type(raised), raised, raised.__traceback__))
                return _Outcome(
                    f"Error: tool {tool.name!r} failed: {type(raised).__name__}: {raised}", "exception", trace
                )
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
            _start_in_thread(tool.fn, arguments, run.settle)
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


class _Raised(Exception):
    """Carries a ``BaseException`` a tool raised (``SystemExit``, ``KeyboardInterrupt``, its own
    ``CancelledError``), which would otherwise end the task, the event loop or the process."""


class _NoSlot(Exception):
    """No slot came free within the call's timeout while overrunning calls held slots."""


async def _guarded(call: Coroutine[Any, Any, Any]) -> Any:
    """``await call``, with anything but the cancellation of this task turned into :class:`_Raised`."""
    task = asyncio.current_task()
    try:
        return await call
    except asyncio.CancelledError as exc:
        if task is not None and _cancel_requested(task):
            raise
        raise _Raised() from exc
    except Exception:
        raise
    except BaseException as exc:
        raise _Raised() from exc


def _cancel_requested(task: asyncio.Task[Any]) -> bool:
    cancelling: Callable[[], int] | None = getattr(task, "cancelling", None)  # Python 3.11+
    return True if cancelling is None else cancelling() > 0


_VALIDATORS: dict[int, tuple[dict[str, Any], Any, Callable[[Any], bool] | None]] = {}
_MAX_VALIDATORS = 1024


def _validator(schema: dict[str, Any]) -> tuple[Any, Callable[[Any], bool] | None]:
    """One validator per schema object, built once: building one costs more than validating a call;
    with it the schema's quick check, if it has one."""
    entry = _VALIDATORS.get(id(schema))
    if entry is None or entry[0] is not schema:  # the schema is held, so its id is not reused meanwhile
        if len(_VALIDATORS) >= _MAX_VALIDATORS:
            _VALIDATORS.clear()
        entry = (schema, jsonschema.validators.validator_for(schema)(schema), _quick_check(schema))
        _VALIDATORS[id(schema)] = entry
    return entry[1], entry[2]


_QUICK_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}
"""The exact Python types a quick check accepts for each JSON type (anything else, ``1.0`` for an
integer or a ``str`` subclass, is left to jsonschema)."""
_QUICK_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties", "title", "description"}
_QUICK_PROPERTY_KEYS = {"type", "default", "title", "description"}


def _quick_check(schema: dict[str, Any]) -> Callable[[Any], bool] | None:
    """For the schema ``@tool`` writes for scalar arguments (an object of typed properties, some
    required, maybe no others), a check that says True only of arguments jsonschema accepts, in a
    few dict lookups; ``None`` for any other schema. A False goes to jsonschema, which finds the errors."""
    if set(schema) - _QUICK_OBJECT_KEYS or schema.get("type") != "object":
        return None
    properties, required = schema.get("properties", {}), schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or not isinstance(closed, bool):
        return None
    types: dict[str, tuple[type, ...]] = {}
    for name, prop in properties.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if not isinstance(kind, str) or kind not in _QUICK_TYPES or set(prop) - _QUICK_PROPERTY_KEYS:
            return None
        types[name] = _QUICK_TYPES[kind]
    need = tuple(required)

    def check(arguments: Any) -> bool:
        if type(arguments) is not dict:
            return False
        for name in need:  # a loop, not all() over a generator: this runs on every call
            if name not in arguments:
                return False
        for name, value in arguments.items():
            allowed = types.get(name)
            if allowed is None:
                if closed is False:
                    return False
            elif type(value) not in allowed:
                return False
        return True

    return check


def _schema_problem(tool: Tool, arguments: Any) -> str | None:
    """Every way ``arguments`` breaks the tool's schema, each naming its argument; ``None`` if valid."""
    validator, quick = _validator(tool.parameters)
    if quick is not None and quick(arguments):
        return None
    errors = sorted(validator.iter_errors(arguments), key=jsonschema.exceptions.relevance)
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


class _Workers:
    """Threads for sync tools, kept for the next call once a call ends, a new one started whenever
    none is free: a tool stuck past its timeout holds its own thread and nothing else, as a fresh
    thread per call would, without a thread start on every call (the largest part of the loop's CPU
    per call in benchmarks/loop_scheduling.py). A thread idle for ``IDLE_S`` ends.

    ``_thread``, not ``threading.Thread``: threading's ``start()`` blocks the event loop until the new
    thread runs (about 1 ms each under load, measured in benchmarks/loop_scheduling.py); these threads
    are not joined at exit either, like daemon threads."""

    IDLE_S = 10.0

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()
        self._idle: list[_Worker] = []

    def submit(self, job: _Job) -> None:
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            _thread.start_new_thread(_Worker(self, job).serve, ())
            return
        worker.job = job
        worker.go.release()

    def forget(self) -> None:
        """In a forked child: the parent's threads are not there."""
        self._lock = _thread.allocate_lock()
        self._idle = []

    def offer(self, worker: _Worker) -> None:
        """``worker`` is free for the next call (before it hands its answer over, so the call that
        answer lets go on finds it free)."""
        with self._lock:
            self._idle.append(worker)

    def rest(self, worker: _Worker) -> bool:
        """Wait for the next call; False when none came in ``IDLE_S`` and the worker should end."""
        if worker.go.acquire(timeout=self.IDLE_S):
            return True
        with self._lock:
            if worker in self._idle:
                self._idle.remove(worker)
                return False
        worker.go.acquire()  # taken by a call as the wait ran out: its job is on the way
        return True


_Job = Callable[[], Callable[[], None]]
"""A call to run in a worker thread; it returns how to hand its answer over."""


class _Worker:
    def __init__(self, pool: _Workers, job: _Job):
        self.pool = pool
        self.job: _Job | None = job
        self.go = _thread.allocate_lock()
        self.go.acquire()

    def serve(self) -> None:
        while True:
            self._run()
            if not self.pool.rest(self):
                return

    def _run(self) -> None:
        """The job, let go of once it ran (it holds the call's loop, arguments and answer)."""
        job, self.job = self.job, None
        hand_over = job() if job is not None else None  # never raises: every outcome is an answer
        self.pool.offer(self)
        if hand_over is not None:
            hand_over()


class _Inbox:
    """Sync tools' answers for one event loop, handed over in batches: the answers that arrive
    before the loop gets to them cost one wake-up of the loop together, not one each."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.answers: deque[tuple[Callable[[bool, Any], None], bool, Any]] = deque()
        self.woken = False

    def put(self, settle: Callable[[bool, Any], None], ok: bool, value: Any) -> None:
        """From a tool's thread."""
        self.answers.append((settle, ok, value))
        if not self.woken:  # two threads may both wake the loop: the second finds nothing left
            self.woken = True
            self.loop.call_soon_threadsafe(self.deliver)

    def deliver(self) -> None:
        """On the loop: every answer there is, including any that arrive meanwhile."""
        self.woken = False
        while self.answers:
            settle, ok, value = self.answers.popleft()
            try:
                settle(ok, value)
            except Exception as exc:  # as the loop reports a failing callback, and on to the next
                self.loop.call_exception_handler({"message": "settling a tool's answer failed", "exception": exc})


_INBOXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Inbox] = weakref.WeakKeyDictionary()


def _inbox(loop: asyncio.AbstractEventLoop) -> _Inbox:
    inbox = _INBOXES.get(loop)
    if inbox is None:
        inbox = _INBOXES[loop] = _Inbox(loop)
    return inbox


_WORKERS = _Workers()
os.register_at_fork(after_in_child=_WORKERS.forget)


def _start_in_thread(fn: Any, arguments: dict[str, Any], answer: Callable[[bool, Any], None]) -> None:
    """Run ``fn(**arguments)`` in a worker thread; ``answer(ok, value)`` is called on the running loop
    when it ends (``ok`` False: ``value`` is what it raised, a ``BaseException`` wrapped in
    :class:`_Raised`)."""
    context = contextvars.copy_context()

    def work() -> Callable[[], None]:
        ok: bool
        value: Any
        try:
            ok, value = True, context.run(fn, **arguments)
        except Exception as exc:  # handed to the awaiting coroutine, which turns it into a result
            ok, value = False, exc
        except BaseException as exc:  # sys.exit() in a tool must not end the run
            wrapped = _Raised()
            wrapped.__cause__ = exc
            ok, value = False, wrapped

        def hand_over() -> None:
            try:
                inbox.put(answer, ok, value)
            except RuntimeError:  # the loop closed while the tool ran
                pass

        return hand_over

    inbox = _inbox(asyncio.get_running_loop())
    _WORKERS.submit(work)


async def _in_thread(fn: Any, arguments: dict[str, Any], name: str) -> Any:
    """Run ``fn`` in a thread of its own: one stuck past its timeout cannot block a pool or the exit.

    Cancelled, it ends at once: Python cannot stop the thread, which is left running (``name`` says
    whose it is in the warning) and whose late answer is dropped. Waiting for it here would make a
    hung plugin hold up the close of the run's loop for ever."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            if ok:
                future.set_result(value)
            else:
                future.set_exception(value)

    _start_in_thread(fn, arguments, settle)
    try:
        return await future
    except asyncio.CancelledError:
        if future.cancelled():  # not answered yet: the thread still runs
            log.warning(
                "%s: still running in its thread when cancelled (the run is ending); Python cannot stop a thread, "
                "so it is left running and the run goes on without it",
                name,
            )
        raise
