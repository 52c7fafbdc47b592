"""Plain code awaited from the event loop (rlfcore.threads): its answer or its error comes back, a
``BaseException`` it raises does not end the run, threads are reused, and a cancelled wait ends at
once while the thread it cannot stop runs on."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import threading

import pytest

from rlfcore.threads import Raised, in_thread

WHO = contextvars.ContextVar("who", default="nobody")


async def test_the_answer_comes_back_from_a_reused_worker_thread_in_the_callers_context():
    WHO.set("caller")

    def where(tag: str) -> tuple[str, int, str]:
        return tag, threading.get_ident(), WHO.get()

    first = await in_thread(where, {"tag": "a"}, name="test")
    second = await in_thread(where, {"tag": "b"}, name="test")
    assert first[0] == "a" and first[2] == "caller" and first[1] != threading.get_ident()
    assert second[1] == first[1]  # the thread that answered first is free and serves the next call


async def test_an_error_is_raised_as_itself_and_a_base_exception_arrives_wrapped():
    def fails() -> None:
        raise ValueError("bad input")

    def exits() -> None:
        raise SystemExit(3)

    with pytest.raises(ValueError, match="bad input"):
        await in_thread(fails, {}, name="test")
    with pytest.raises(Raised) as raised:
        await in_thread(exits, {}, name="test")
    assert isinstance(raised.value.__cause__, SystemExit) and raised.value.__cause__.code == 3


async def test_a_cancelled_wait_ends_at_once_names_the_call_and_drops_the_late_answer(caplog):
    release, started, ending = threading.Event(), threading.Event(), threading.Event()

    def stuck() -> str:
        started.set()
        release.wait(10)
        ending.set()
        return "late"

    errors: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, context: errors.append(context))
    waiting = asyncio.ensure_future(in_thread(stuck, {}, name="plugin 'slow': close"))
    await asyncio.to_thread(started.wait, 5)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(waiting, 1)  # ends now, not when the thread does
    assert "plugin 'slow': close: still running in its thread when cancelled" in caplog.text
    release.set()
    await asyncio.to_thread(ending.wait, 5)
    await asyncio.sleep(0.1)  # the late answer reaches the loop and is dropped without an error
    assert errors == [] and not any(r.levelno >= logging.ERROR for r in caplog.records)
