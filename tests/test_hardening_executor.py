"""Faulty tools: whatever a tool does, the executor answers each call and its limits hold.

All real: real threads, real asyncio tasks; the "faults" are ordinary Python tools that raise,
hang, ignore cancellation or answer with 5 MB.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from rlfcore.config import ToolsConfig
from rlfcore.executor import ToolExecutor
from rlfcore.types import Tool, ToolCall


def executor(**settings) -> ToolExecutor:
    return ToolExecutor(ToolsConfig(**settings), backoff_s=0.01)


class Custom(BaseException):
    pass


@pytest.mark.parametrize(
    "exc", [SystemExit(3), KeyboardInterrupt(), asyncio.CancelledError(), Custom("x"), GeneratorExit()]
)
async def test_any_exception_of_an_async_tool_is_an_error_result(exc):
    async def bad() -> str:
        await asyncio.sleep(0)
        raise exc

    async def good() -> str:
        await asyncio.sleep(0.05)
        return "fine"

    tools = {"bad": Tool("bad", "", {}, bad), "good": Tool("good", "", {}, good)}
    results = await executor().run([ToolCall("bad", {}), ToolCall("good", {})], tools)
    assert [r.error for r in results] == ["exception", None]
    assert results[0].content.startswith(f"Error: tool 'bad' failed: {type(exc).__name__}")
    assert results[1].content == "fine"


@pytest.mark.parametrize("exc", [SystemExit(3), KeyboardInterrupt(), Custom("x")])
async def test_any_exception_of_a_sync_tool_is_an_error_result(exc):
    def bad() -> str:
        raise exc

    [result] = await executor().run([ToolCall("bad", {})], {"bad": Tool("bad", "", {}, bad)})
    assert result.error == "exception" and type(exc).__name__ in result.content


async def test_the_traceback_is_kept_for_the_author_not_shown_to_the_model():
    def lookup(key: str) -> str:
        return {"a": "1"}[key]

    [result] = await executor().run([ToolCall("lookup", {"key": "b"})], {"lookup": Tool("lookup", "", {}, lookup)})
    assert result.content == "Error: tool 'lookup' failed: KeyError: 'b'"
    assert (
        "Traceback" in result.traceback
        and __file__ in result.traceback
        and 'return {"a": "1"}[key]' in result.traceback
    )


async def test_an_async_tool_that_swallows_cancellation_is_a_timeout_on_time():
    ended = asyncio.Event()

    async def stubborn() -> str:
        for _ in range(30):
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue
        ended.set()
        return "late success"

    async def returns_anyway() -> str:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            pass
        return "not a success"

    tools = {"stubborn": Tool("stubborn", "", {}, stubborn), "anyway": Tool("anyway", "", {}, returns_anyway)}
    ex = executor(timeout_s=0.2)
    start = time.perf_counter()
    results = await ex.run([ToolCall("stubborn", {}), ToolCall("anyway", {})], tools)
    elapsed = time.perf_counter() - start
    assert [r.error for r in results] == ["timeout", "timeout"] and elapsed < 0.6
    assert ex.overrunning == 1  # the stubborn one still runs, holding its slot
    await asyncio.wait_for(ended.wait(), 5)
    await asyncio.sleep(0)
    assert ex.overrunning == 0


async def test_hung_sync_threads_stay_within_max_concurrency():
    release = threading.Event()
    lock = threading.Lock()
    running = [0, 0]  # now, most at once

    def hang() -> str:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        release.wait(10)
        with lock:
            running[0] -= 1
        return "late"

    tools = {"hang": Tool("hang", "", {}, hang), "quick": Tool("quick", "", {}, lambda: "ok")}
    ex = executor(timeout_s=0.1, max_concurrency=3)
    threads_before = threading.active_count()
    try:
        start = time.perf_counter()
        results = await ex.run([ToolCall("hang", {})] * 40, tools)
        elapsed = time.perf_counter() - start
        peak_threads = threading.active_count() - threads_before
    finally:
        release.set()
    assert {r.error for r in results} == {"timeout"} and elapsed < 3
    assert running[1] == 3 and peak_threads <= 3  # before: 40 threads at once against a limit of 3
    assert sum("waiting for a free slot" in r.content for r in results) == 37
    for _ in range(200):
        [after] = await ex.run([ToolCall("quick", {})], tools)
        if after.error is None:
            break
        await asyncio.sleep(0.01)
    assert after.content == "ok"


async def test_cache_keeps_what_the_model_saw_and_evicts_the_least_recently_used():
    runs: list[str] = []

    def big(key: str) -> str:
        runs.append(key)
        return key * 5_000_000

    tools = {"big": Tool("big", "", {}, big)}
    ex = executor(cache=True, cache_size=2, max_output_chars=100)
    first = await ex.run([ToolCall("big", {"key": k}) for k in "ab"], tools)
    again = await ex.run([ToolCall("big", {"key": "a"})], tools)  # a hit: "a" becomes the most recent
    await ex.run([ToolCall("big", {"key": "c"})], tools)  # evicts "b"
    await ex.run([ToolCall("big", {"key": k}) for k in "ac"], tools)
    # "a" and "b" of the first call run side by side, so their order is not fixed.
    assert sorted(runs) == ["a", "b", "c"] and runs[2] == "c" and ex.metrics.cache_hits == 3
    assert again[0].content == first[0].content and len(first[0].content) < 200
    # Kept as cut: two entries of ~150 characters, not two of 5 MB (before: every output, whole, forever).
    assert sum(len(o.content) for o in ex._cache.values()) < 400
    await ex.run([ToolCall("big", {"key": "b"})], tools)
    assert sorted(runs[:2]) == ["a", "b"] and runs[2:] == ["c", "b"]


def test_the_trajectory_record_keeps_the_tool_traceback_and_debug_prints_it(capsys):
    """Through the real loop (scripted policy, byte tokenizer): the record has the traceback, the
    tool message only the short text; ``show_tracebacks`` (``rlf --debug``) prints it on stderr."""
    import json
    import logging

    from rlfcore import hookimpl
    from rlfcore.executor import log, show_tracebacks
    from rlfcore.testing import rollout
    from rlfcore.tools import tool

    class Env:
        @hookimpl
        def register_tools(self, ctx):
            @tool
            def boom() -> str:
                """Always fails."""
                return {"a": 1}["b"]

            return [boom]

    before = (list(log.handlers), log.level)
    show_tracebacks()
    try:
        script = {"q": ['<tool_call>\n{"name": "boom", "arguments": {}}\n</tool_call>', "ok"]}
        [t] = rollout({"plugins": ["env"]}, [{"id": "q", "prompt": "go"}], script, {"env": Env()})
    finally:
        log.handlers[:], _ = before[0], log.setLevel(before[1])
    [message] = [m["content"] for m in t.messages if m["role"] == "tool"]
    assert message == "Error: tool 'boom' failed: KeyError: 'b'"
    [entry] = json.loads(json.dumps(t.record()))["tool_tracebacks"]
    assert entry["tool"] == "boom" and entry["turn"] == 0 and 'return {"a": 1}["b"]' in entry["traceback"]
    assert 'return {"a": 1}["b"]' in capsys.readouterr().err
    assert logging.getLogger("rlfcore.executor").level == before[1]
