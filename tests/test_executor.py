"""The default tool executor: concurrency, limits, timeouts, failures as results, retries, cache, metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from types import SimpleNamespace

from rlfcore.builtins.executor import invoke_tools
from rlfcore.config import ToolsConfig
from rlfcore.context import TurnContext
from rlfcore.executor import ToolExecutor
from rlfcore.tools import tool
from rlfcore.types import Tool, ToolCall, TransientToolError


@tool
async def nap(i: int) -> str:
    """Sleep 200 ms asynchronously."""
    await asyncio.sleep(0.2)
    return f"slept {i}"


@tool
def sync_nap(i: int) -> str:
    """Sleep 200 ms in a thread."""
    time.sleep(0.2)
    return f"slept {i}"


def executor(**settings) -> ToolExecutor:
    return ToolExecutor(ToolsConfig(**settings), backoff_s=0.01)


async def test_calls_of_a_turn_run_concurrently_and_keep_their_order():
    for t in (nap, sync_nap):
        calls = [ToolCall(t.name, {"i": i}, id=f"c{i}") for i in range(8)]
        start = time.perf_counter()
        results = await executor().run(calls, {t.name: t})
        elapsed = time.perf_counter() - start
        assert elapsed < 1.0, f"{t.name}: 8 calls of 200 ms took {elapsed:.2f} s"
        assert [r.content for r in results] == [f"slept {i}" for i in range(8)]
        assert [r.call_id for r in results] == [f"c{i}" for i in range(8)]
        assert all(r.ok and r.latency_s >= 0.19 for r in results)


async def test_sync_tools_do_not_block_the_event_loop():
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    await executor().run([ToolCall("sync_nap", {"i": 0})], {"sync_nap": sync_nap})
    task.cancel()
    assert ticks >= 5


class InFlight:
    """Counts how many calls run at once."""

    def __init__(self) -> None:
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def enter(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self.lock:
            self.now -= 1


async def test_global_limit_is_shared_across_trajectories():
    seen = InFlight()

    async def work() -> str:
        seen.enter()
        await asyncio.sleep(0.02)
        seen.leave()
        return "ok"

    def sync_work() -> str:
        seen.enter()
        time.sleep(0.02)
        seen.leave()
        return "ok"

    tools = {"a": Tool("a", "", {}, work), "s": Tool("s", "", {}, sync_work)}
    ex = executor(max_concurrency=3)
    turns = [[ToolCall("a", {}), ToolCall("s", {}), ToolCall("a", {})] for _ in range(6)]
    results = await asyncio.gather(*(ex.run(calls, tools) for calls in turns))
    assert all(r.ok for turn in results for r in turn)
    assert seen.peak == 3


async def test_per_tool_limit():
    seen = InFlight()

    async def work() -> str:
        seen.enter()
        await asyncio.sleep(0.02)
        seen.leave()
        return "ok"

    tools = {"db": Tool("db", "", {}, work, max_concurrency=2)}
    await executor(max_concurrency=10).run([ToolCall("db", {})] * 8, tools)
    assert seen.peak == 2


async def test_timeouts_become_results_and_hung_calls_keep_their_slot():
    release = threading.Event()

    finished: list[str] = []

    def hang() -> str:
        release.wait(5)
        finished.append("hang")
        return "late"

    async def slow() -> str:
        await asyncio.sleep(5)
        return "late"

    def quick() -> str:
        return "ok"

    tools = {
        "hang": Tool("hang", "", {}, hang, timeout_s=0.1),
        "slow": Tool("slow", "", {}, slow),
        "quick": Tool("quick", "", {}, quick),
    }
    ex = executor(timeout_s=0.2, max_concurrency=1)
    try:
        start = time.perf_counter()
        results = await ex.run([ToolCall("hang", {}), ToolCall("slow", {}), ToolCall("quick", {})], tools)
        elapsed = time.perf_counter() - start
        hung_thread_still_running = not finished
    finally:
        release.set()
    assert [r.error for r in results] == ["timeout", "timeout", "timeout"]
    assert results[0].content == "Error: tool 'hang' timed out after 0.1 s"
    # One slot, held by the hung thread (max_concurrency counts what really runs): the others were
    # answered at their own timeout, saying why, instead of waiting 5 s.
    assert results[1].content.startswith("Error: tool 'slow' timed out after 0.2 s waiting for a free slot: 1 ")
    assert hung_thread_still_running and elapsed < 2.0
    for _ in range(100):  # the thread ended: its slot is free again
        [after] = await ex.run([ToolCall("quick", {})], tools)
        if after.error is None:
            break
    assert after.content == "ok" and ex.overrunning == 0


async def test_a_sync_tool_that_returns_an_awaitable_is_awaited_in_its_slot_and_time():
    async def later(value: str) -> str:
        await asyncio.sleep(0.05)
        return value

    def defers() -> object:
        return later("awaited")

    def defers_too_long() -> object:
        return later("never seen")

    tools = {"defers": Tool("defers", "", {}, defers), "long": Tool("long", "", {}, defers_too_long, timeout_s=0.01)}
    ex = executor(timeout_s=1.0, max_concurrency=1)
    [done] = await ex.run([ToolCall("defers", {})], tools)
    assert (done.content, done.error) == ("awaited", None)
    start = time.perf_counter()
    [late] = await ex.run([ToolCall("long", {})], tools)
    assert late.error == "timeout" and time.perf_counter() - start < 0.04  # answered at its timeout
    await asyncio.sleep(0.01)  # its awaitable was cancelled, as an async tool's is: the slot is free
    assert ex.overrunning == 0
    [again] = await ex.run([ToolCall("defers", {})], tools)
    assert again.content == "awaited"


async def test_a_cancelled_trajectory_leaves_a_sync_call_its_slot_until_the_thread_ends():
    release = threading.Event()

    def hang() -> str:
        release.wait(5)
        return "late"

    tools = {"hang": Tool("hang", "", {}, hang), "quick": Tool("quick", "", {}, lambda: "ok")}
    ex = executor(timeout_s=5.0, max_concurrency=1)
    task = asyncio.ensure_future(ex.run([ToolCall("hang", {})], tools))
    await asyncio.sleep(0.05)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert ex._global.locked()  # the thread still runs: its slot is taken
    release.set()
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not ex._global.locked():
            break
    [after] = await ex.run([ToolCall("quick", {})], tools)
    assert after.content == "ok"


async def test_failures_become_results_of_their_kind():
    @tool
    def add(a: int, b: int = 0) -> int:
        """Add."""
        return a + b

    def boom() -> str:
        raise ValueError("disk on fire")

    async def own_timeout() -> str:
        raise TimeoutError("upstream took too long")

    tools = {"add": add, "boom": Tool("boom", "", {}, boom), "own": Tool("own", "", {}, own_timeout)}
    calls = [
        ToolCall("nope", {}, id="1"),
        ToolCall("", {}, id="2", raw="<tool_call>{oops", error="invalid JSON at char 1"),
        ToolCall("add", {"a": "three", "c": 1}, id="3"),
        ToolCall("boom", {}, id="4"),
        ToolCall("own", {}, id="5"),
        ToolCall("add", {"a": 2, "b": 3}, id="6"),
    ]
    results = await executor().run(calls, tools)
    assert [r.error for r in results] == ["unknown_tool", "malformed", "schema", "exception", "exception", None]
    assert results[0].content == "Error: unknown tool 'nope'; available tools: add, boom, own"
    assert "invalid JSON at char 1" in results[1].content
    assert "argument 'a': 'three' is not of type 'integer'" in results[2].content
    assert "'c' was unexpected" in results[2].content
    assert results[3].content == "Error: tool 'boom' failed: ValueError: disk on fire"
    assert results[4].content == "Error: tool 'own' failed: TimeoutError: upstream took too long"
    assert results[5].content == "5" and results[5].ok
    assert all(r.latency_s >= 0 for r in results)


def flaky(failures: int) -> tuple[Tool, list[int]]:
    attempts: list[int] = []

    async def fetch() -> str:
        attempts.append(1)
        if len(attempts) <= failures:
            raise TransientToolError("server busy")
        return "page"

    return Tool("fetch", "", {}, fetch), attempts


async def test_transient_errors_are_retried_within_the_budget():
    t, attempts = flaky(failures=2)
    [result] = await executor(retries=2).run([ToolCall("fetch", {})], {"fetch": t})
    assert (result.content, result.error, len(attempts)) == ("page", None, 3)

    t, attempts = flaky(failures=3)
    [result] = await executor(retries=2).run([ToolCall("fetch", {})], {"fetch": t})
    assert result.error == "transient" and len(attempts) == 3
    assert result.content == "Error: tool 'fetch' failed 3 times with a transient error: server busy"


async def test_cache_shares_identical_calls_and_forgets_failures():
    runs: list[dict] = []

    async def lookup(q: str, n: int = 1) -> dict:
        runs.append({"q": q, "n": n})
        await asyncio.sleep(0.05)
        if q == "bad":
            raise ValueError("no")
        return {"q": q, "n": n}

    tools = {"lookup": Tool("lookup", "", {}, lookup)}
    ex = executor(cache=True)
    first = await ex.run([ToolCall("lookup", {"q": "x", "n": 2}), ToolCall("lookup", {"n": 2, "q": "x"})], tools)
    second = await ex.run([ToolCall("lookup", {"q": "x", "n": 2}), ToolCall("lookup", {"q": "y"})], tools)
    assert [json.loads(r.content) for r in first + second] == [{"q": "x", "n": 2}] * 3 + [{"q": "y", "n": 1}]
    assert runs == [{"q": "x", "n": 2}, {"q": "y", "n": 1}]
    assert ex.metrics.cache_hits == 2

    await ex.run([ToolCall("lookup", {"q": "bad"})], tools)
    [again] = await ex.run([ToolCall("lookup", {"q": "bad"})], tools)
    assert again.error == "exception" and len(runs) == 4  # the failure was not cached

    uncached = executor()
    await uncached.run([ToolCall("lookup", {"q": "x", "n": 2})] * 2, tools)
    assert len(runs) == 6


async def test_long_outputs_are_cut_with_a_note():
    def big() -> str:
        return "a" * 150

    [result] = await executor(max_output_chars=100).run([ToolCall("big", {})], {"big": Tool("big", "", {}, big)})
    assert result.content.startswith("a" * 100 + "\n")
    assert "a" * 101 not in result.content
    assert "50 more characters" in result.content


async def test_results_render_dicts_and_lists_as_json_and_others_with_str():
    def value(kind: str):
        return {"dict": {"ü": 1}, "list": [1, "two"], "int": 7, "none": None}[kind]

    t = Tool("value", "", {}, value)
    results = await executor().run(
        [ToolCall("value", {"kind": k}) for k in ("dict", "list", "int", "none")], {"value": t}
    )
    assert [r.content for r in results] == ['{"ü": 1}', '[1, "two"]', "7", "None"]


async def test_metrics_count_calls_errors_and_latency():
    def boom() -> str:
        raise RuntimeError("x")

    tools = {"nap": nap, "boom": Tool("boom", "", {}, boom)}
    ex = executor()
    await ex.run(
        [ToolCall("nap", {"i": 1}), ToolCall("nap", {"i": 2}), ToolCall("boom", {}), ToolCall("ghost", {})], tools
    )
    snap = ex.metrics.snapshot()
    assert snap["calls"] == 4
    assert snap["errors"] == {"exception": 1, "unknown_tool": 1}
    assert set(snap["tools"]) == {"nap", "boom"}  # made-up names stay out of the per-tool table
    assert snap["tools"]["nap"]["count"] == 2 and snap["tools"]["nap"]["errors"] == 0
    assert 0.19 <= snap["tools"]["nap"]["p50"] <= snap["tools"]["nap"]["p90"] <= snap["tools"]["nap"]["p99"] < 1.0
    assert snap["tools"]["boom"]["errors"] == 1
    json.dumps(snap)
    ex.metrics.reset()
    assert ex.metrics.snapshot() == {"calls": 0, "cache_hits": 0, "errors": {}, "tools": {}}


async def test_executor_works_again_in_a_new_event_loop():
    ex = executor(max_concurrency=2)
    ok = await ex.run([ToolCall("nap", {"i": 1})], {"nap": nap})
    in_other_loop = await asyncio.to_thread(asyncio.run, ex.run([ToolCall("nap", {"i": 2})], {"nap": nap}))
    assert ok[0].content == "slept 1" and in_other_loop[0].content == "slept 2"


async def test_builtin_invoke_tools_uses_the_runtime_executor():
    ex = executor()
    ctx = TurnContext(
        sample_id="s", env=None, turn=0, messages=[], tools={"nap": nap}, runtime=SimpleNamespace(executor=ex)
    )
    [result] = await invoke_tools([ToolCall("nap", {"i": 3})], ctx)
    assert result.content == "slept 3" and ex.metrics.calls == 1


async def test_sync_tools_reuse_a_finished_call_s_thread_and_a_stuck_one_holds_only_its_own():
    """A thread whose call ended serves the next call (no thread start per call); while one call is
    stuck, the next gets a thread of its own at once, and the stuck thread is not handed out again."""
    release = threading.Event()
    seen: list[int] = []

    @tool
    def where(block: bool) -> str:
        """Report the thread; block until released when asked."""
        seen.append(threading.get_ident())
        if block:
            release.wait(5)
        return "ok"

    ex = executor(timeout_s=0.3)
    tools = {"where": where}
    for _ in range(3):
        assert (await ex.run([ToolCall("where", {"block": False})], tools))[0].content == "ok"
    assert len(set(seen)) == 1  # one thread for three calls in a row
    stuck = await ex.run([ToolCall("where", {"block": True})], tools)
    assert stuck[0].error == "timeout"
    start = time.perf_counter()
    after = await ex.run([ToolCall("where", {"block": False}), ToolCall("where", {"block": False})], tools)
    assert [r.content for r in after] == ["ok", "ok"] and time.perf_counter() - start < 0.25
    assert seen[4] != seen[3] and seen[5] != seen[3]  # the stuck thread serves nobody
    release.set()
    for _ in range(100):
        if ex.overrunning == 0:
            break
        await asyncio.sleep(0.01)
    assert ex.overrunning == 0
