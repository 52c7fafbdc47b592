"""Every run ends: a plugin whose opener, release or ``shutdown`` (async or plain) never returns fails
its trajectory (or is abandoned at the run's end) with a warning naming it, and the run closes within
its deadlines; so does one that leaves an ``asyncio.to_thread`` call running, and the process still
exits; a ``CancelledError`` a plugin raises itself fails its trajectory instead of ending the run.

Each run goes through the real loop, sessions and runtime (``rlfcore.testing``), and the last ones
in a fresh process, through ``rlfcore.testing`` or the real ``rlf eval`` and ``rlf train``. A run that
hangs fails its test (it runs in a thread joined with a time limit, or in a process with one) instead
of hanging it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rlfcore import hookimpl
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.runloop import RunLoop
from rlfcore.testing import make_runtime, rollout
from tests.support import ROOT

TIMEOUTS = {"session_timeout_s": 0.3, "shutdown_timeout_s": 0.5}
ROWS = [
    {"id": "a", "prompt": "x", "extra": {"hang": True}},
    {"id": "b", "prompt": "x", "extra": {}},
]
SCRIPT = {"a": ["done"], "b": ["done"]}
BOUND_S = 10.0
"""Far more than any deadline here adds up to (about 2 s), far less than for ever."""


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """What the hung plugins' threads wait on: set once the test is over, so none outlives it."""
    event = threading.Event()
    yield event
    event.set()


def ends_within(seconds: float, run: Callable[[], Any]) -> Any:
    """``run()``'s answer, or a failure if it has not returned within ``seconds``."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = run()
        except BaseException as exc:  # handed to the test below
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"the run had not ended {seconds} s later"
    if "error" in out:
        raise out["error"]
    return out["value"]


def run_rows(plugin: object, tools: dict[str, float] = TIMEOUTS, script: dict = SCRIPT) -> list:
    config = {"plugins": ["hangs"], "tools": tools}
    return ends_within(BOUND_S, lambda: rollout(config, ROWS, script, {"hangs": plugin}, score=False))


class Stuck:
    """A session whose ``close()`` never returns."""

    def __init__(self, gate: threading.Event):
        self.gate = gate

    def close(self) -> None:
        self.gate.wait()


class HungOpener:
    """A plain ``open_session`` that never returns for a row marked ``hang``."""

    def __init__(self, gate: threading.Event):
        self.gate = gate

    @hookimpl
    def open_session(self, row, ctx):
        if row["extra"].get("hang"):
            self.gate.wait()


class HungClose(HungOpener):
    @hookimpl
    def open_session(self, row, ctx):
        return Stuck(self.gate) if row["extra"].get("hang") else None


def test_a_sync_opener_that_never_returns_fails_its_trajectory_and_the_run_still_ends(gate, caplog):
    started = time.perf_counter()
    a, b = run_rows(HungOpener(gate))
    assert a.stop_reason == "error" and "plugin 'hangs': open_session took longer than" in a.error
    assert b.error is None and b.stop_reason == "no_tool_call"
    assert time.perf_counter() - started < BOUND_S
    assert "plugin 'hangs': open_session: still running in its thread" in caplog.text
    assert "Python cannot stop a thread" in caplog.text


def test_a_sync_close_that_never_returns_is_recorded_and_the_run_still_ends(gate, caplog):
    a, b = run_rows(HungClose(gate))
    assert a.error is None and "plugin 'hangs': releasing its session took longer than" in a.session_error
    assert b.session_error is None
    assert "plugin 'hangs': releasing its session (Stuck.close): still running in its thread" in caplog.text


class Shutdowns:
    """An async ``shutdown`` that never returns (``stubborn``: not even when cancelled), or raises
    ``CancelledError`` itself; and one that works, to show the others still run."""

    def __init__(self, how: str):
        self.how = how
        self.calls = 0

    @hookimpl
    async def shutdown(self, ctx):
        self.calls += 1
        if self.how == "hangs":
            await asyncio.Event().wait()
        elif self.how == "stubborn":
            while True:
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    pass
        elif self.how == "cancels":
            raise asyncio.CancelledError("its own")


def _shut_down(how: str) -> tuple[Shutdowns, Shutdowns]:
    bad, good = Shutdowns(how), Shutdowns("works")
    config = {"plugins": ["bad", "good"], "envs": {"main": ["good"]}, "tools": TIMEOUTS}
    ends_within(BOUND_S, lambda: rollout(config, ROWS[1:], SCRIPT, {"bad": bad, "good": good}, score=False))
    return bad, good


def test_an_async_shutdown_that_never_returns_is_cancelled_at_its_deadline(caplog):
    bad, good = _shut_down("hangs")
    assert bad.calls == 1 and good.calls == 1
    assert "plugin 'bad': shutdown did not return within tools.shutdown_timeout_s (0.5 s)" in caplog.text


def test_a_shutdown_that_ignores_its_cancellation_is_abandoned_by_name(caplog):
    bad, good = _shut_down("stubborn")
    assert bad.calls == 1 and good.calls == 1
    assert "still running 0.5 s after a second cancellation, abandoned: plugin 'bad': shutdown" in caplog.text


def test_a_cancelled_error_raised_by_a_shutdown_is_its_failure_and_the_others_still_run(caplog):
    bad, good = _shut_down("cancels")
    assert bad.calls == 1 and good.calls == 1
    assert "plugin 'bad' failed to shut down" in caplog.text


class Plain:
    """A plain ``def shutdown`` that notes its call in ``calls`` and, ``stuck``, never returns (until
    the test is over)."""

    def __init__(self, name: str, calls: list[str], gate: threading.Event, stuck: bool = False):
        self.name, self.calls, self.gate, self.stuck = name, calls, gate, stuck

    @hookimpl
    def shutdown(self, ctx):
        self.calls.append(self.name)
        if self.stuck:
            self.gate.wait()


class LeavesAThread(Plain):
    """An async ``shutdown`` that awaits an ``asyncio.to_thread`` call that never returns (until the
    test is over): cancelled at its deadline, it leaves the call running."""

    @hookimpl
    async def shutdown(self, ctx):
        self.calls.append(self.name)
        await asyncio.to_thread(self.gate.wait)


def _close_timed(plugins: dict[str, object]) -> float:
    """Seconds the runtime's close took after a rollout (the last of ``plugins`` shuts down first)."""
    config = {"plugins": list(plugins), "envs": {"main": [next(iter(plugins))]}, "tools": TIMEOUTS}
    runtime = make_runtime(config, plugins)
    runtime.run(_roll_out_one(runtime))
    started = time.perf_counter()
    ends_within(BOUND_S, runtime.close)
    return time.perf_counter() - started


async def _roll_out_one(runtime) -> None:
    tok = ByteChatTokenizer()
    await Rollout(runtime, ScriptedEngine(tok, SCRIPT), tok).run([normalize_row(ROWS[1])])


def test_a_plain_shutdown_that_never_returns_is_abandoned_at_its_deadline_and_the_next_runs(gate, caplog):
    calls: list[str] = []
    took = _close_timed({"good": Plain("good", calls, gate), "stuck": Plain("stuck", calls, gate, stuck=True)})
    assert calls == ["stuck", "good"]
    assert took < TIMEOUTS["shutdown_timeout_s"] + 2
    assert (
        "plugin 'stuck': shutdown did not return within tools.shutdown_timeout_s (0.5 s); a plain def, in a thread "
        "of its own; threads cannot be killed: abandoned"
    ) in caplog.text


def test_a_shutdown_that_leaves_a_to_thread_call_ends_and_the_call_is_named(gate, caplog):
    calls: list[str] = []
    took = _close_timed({"good": Plain("good", calls, gate), "leaves": LeavesAThread("leaves", calls, gate)})
    assert calls == ["leaves", "good"]
    assert took < 2 * TIMEOUTS["shutdown_timeout_s"] + 2  # its shutdown's deadline, then the executor's
    assert "plugin 'leaves': shutdown did not return within tools.shutdown_timeout_s (0.5 s); cancelled" in caplog.text
    assert (
        "still running in asyncio's default executor (asyncio.to_thread, run_in_executor) 0.5 s later: "
        "threading.Event.wait (called by plugin 'leaves': shutdown); threads cannot be killed: abandoned"
    ) in caplog.text


class CancelsItself:
    """An async opener, or a session's ``aclose``, that raises ``CancelledError`` though nothing
    cancelled the trajectory (a plugin's bug: a cancelled inner task's error let through)."""

    def __init__(self, where: str):
        self.where = where

    @hookimpl
    async def open_session(self, row, ctx):
        if not row["extra"].get("hang"):
            return None
        if self.where == "open":
            raise asyncio.CancelledError("its own")
        return Refuses()


class Refuses:
    async def aclose(self) -> None:
        raise asyncio.CancelledError("its own")


def test_a_cancelled_error_raised_by_an_async_opener_fails_only_its_trajectory():
    a, b = run_rows(CancelsItself("open"))
    assert a.stop_reason == "error"
    assert a.error == (
        "SessionError: plugin 'hangs': open_session failed: CancelledError: its own (raised by the plugin's own code)"
    )
    assert b.error is None and b.stop_reason == "no_tool_call"


def test_a_cancelled_error_raised_by_aclose_is_recorded_as_a_failed_release():
    a, b = run_rows(CancelsItself("aclose"))
    assert a.error is None and a.stop_reason == "no_tool_call"
    assert a.session_error == (
        "plugin 'hangs': releasing its session failed: CancelledError: its own (raised by the plugin's own code)"
    )
    assert b.session_error is None


class Waits:
    """An async opener that waits until it is cancelled, and says so."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.cancelled = False

    @hookimpl
    async def open_session(self, row, ctx):
        self.entered.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_a_trajectory_cancelled_while_its_async_opener_runs_is_still_cancelled():
    """Only a plugin's own CancelledError is contained: a real cancellation goes through, and on to
    the opener, which is no longer left running unawaited until the run's end."""
    waits = Waits()
    runtime = make_runtime({"plugins": ["hangs"], "tools": {"session_timeout_s": 60}}, {"hangs": waits})

    async def main() -> None:
        tok = ByteChatTokenizer()
        loop = Rollout(runtime, ScriptedEngine(tok, SCRIPT), tok)
        task = asyncio.ensure_future(loop.trajectory(normalize_row(ROWS[1]), "b#0"))
        await asyncio.to_thread(waits.entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(100):  # the opener's cancellation is delivered on the loop's next rounds
            if waits.cancelled:
                break
            await asyncio.sleep(0.01)
        assert waits.cancelled, "the opener of a cancelled trajectory was left running"

    try:
        runtime.run(main())
    finally:
        runtime.close()


def test_a_run_loop_abandons_a_task_that_ignores_cancellation_and_names_it(caplog):
    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass

    runner = RunLoop(timeout_s=0.2)
    task = runner.loop.create_task(stubborn())
    runner.run(asyncio.sleep(0))
    started = time.perf_counter()
    ends_within(BOUND_S, runner.close)
    assert time.perf_counter() - started < 2 * 0.2 + 1
    assert not task.done()
    assert "abandoned: test_a_run_loop_abandons_a_task_that_ignores_cancellation_and_names_it.<locals>.stubborn" in (
        caplog.text
    )


def test_the_run_loops_executor_queues_calls_past_its_limit_and_runs_them_all(gate, caplog):
    """As asyncio's own default executor: at most its limit of calls at once, the rest queued, run as
    threads free up; its threads are not threading's (nothing joins them at exit); calls that have
    answered are not named as left behind."""
    running, most = 0, 0
    lock = threading.Lock()

    def call(i: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        gate.wait()
        with lock:
            running -= 1
        return i

    limit = min(32, (os.cpu_count() or 1) + 4)  # ThreadPoolExecutor's default

    async def main() -> list[int]:
        calls = asyncio.gather(*(asyncio.to_thread(call, i) for i in range(limit + 3)))
        for _ in range(500):
            if most >= limit:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # time for a call past the limit to start, were it let
        threads = [t.name for t in threading.enumerate()]
        gate.set()
        return most, threads, await calls

    def run() -> tuple[int, list[str], list[int]]:
        with RunLoop(timeout_s=5) as runner:
            return runner.run(main())

    most_at_once, threads, answers = ends_within(BOUND_S, run)
    assert most_at_once == limit and answers == list(range(limit + 3))
    assert not any(name.startswith("asyncio") for name in threads)
    assert "default executor" not in caplog.text


# --- the whole command, in a fresh process -----------------------------------------------------------

HANG_PLUGIN = """
import asyncio, threading
from rlfcore import Score, hookimpl


@hookimpl
def open_session(row, ctx):
    if row["extra"].get("hang"):
        threading.Event().wait()  # never returns
    return None


@hookimpl
async def shutdown(ctx):
    await asyncio.Event().wait()  # never returns


@hookimpl
def compute_score(sample):
    return Score(value=1.0)
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    return build_tiny(["Say something about 1. done"] * 10, tmp_path_factory.mktemp("tiny") / "model", vocab_size=300)


def _project(tmp_path: Path, tiny: Path, rows: list[dict] = ROWS, plugins: dict[str, str] | None = None) -> Path:
    """A run of the tiny model on ``rows``, with ``plugins`` (file name: source; the one of
    ``HANG_PLUGIN`` without it); ``hang`` is the rows' environment."""
    plugins = plugins or {"hang.py": HANG_PLUGIN}
    for name, source in plugins.items():
        (tmp_path / name).write_text(source)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text(
        f"local_plugins: [{', '.join(plugins)}]\nmodel:\n  path: {tiny}\n"
        "data: {train: rows.jsonl, eval: rows.jsonl, default_env: hang}\n"
        "rollout: {n: 2, max_turns: 1, sampling: {max_tokens: 4}}\n"
        "trainer: {steps: 1, prompts_per_step: 2, checkpoint_every: 10, samples_per_step: 0}\n"
        f"engine: {{device: cpu}}\ntools: {json.dumps(TIMEOUTS)}\n"
    )
    return tmp_path / "run.yaml"


def _python(args: list[str], cwd: Path, timeout_s: float = 180) -> subprocess.CompletedProcess:
    """``python ARGS`` in a fresh process, failed (and killed) if it has not ended ``timeout_s`` later."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    try:
        return subprocess.run(
            [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"python {' '.join(args)} had not ended {timeout_s} s later; stderr: {exc.stderr!r}")


def _rlf(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return _python(["-m", "rlfcore", *args], cwd)


LEFT_BEHIND = """
import asyncio, json, sys, threading
from rlfcore import hookimpl
from rlfcore.testing import rollout


class Stuck:
    @hookimpl
    def shutdown(self, ctx):
        threading.Event().wait()  # never returns


class Leaves:
    @hookimpl
    async def shutdown(self, ctx):
        await asyncio.to_thread(threading.Event().wait)  # never returns


config = {"plugins": ["stuck", "leaves"], "envs": {"main": ["stuck"]}, "tools": json.loads(sys.argv[1])}
out = rollout(config, [{"id": "b", "prompt": "x"}], {"b": ["done"]}, {"stuck": Stuck(), "leaves": Leaves()})
print(json.dumps([t.stop_reason for t in out]))
"""

WARNINGS = (
    "plugin 'stuck': shutdown did not return within tools.shutdown_timeout_s (0.5 s); a plain def, in a thread of its "
    "own; threads cannot be killed: abandoned",
    "plugin 'leaves': shutdown did not return within tools.shutdown_timeout_s (0.5 s); cancelled",
    "still running in asyncio's default executor (asyncio.to_thread, run_in_executor) 0.5 s later: "
    "threading.Event.wait (called by plugin 'leaves': shutdown); threads cannot be killed: abandoned, and the "
    "process exits without waiting for them",
)


def test_a_process_whose_plugins_leave_hung_threads_at_shutdown_still_exits(tmp_path):
    """A plain shutdown that never returns, and an async one that leaves an ``asyncio.to_thread`` call
    that never returns: the run ends, prints its results, and the interpreter exits past both threads."""
    done = _python(["-c", LEFT_BEHIND, json.dumps(TIMEOUTS)], tmp_path, timeout_s=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '["no_tool_call"]'
    for warning in WARNINGS:
        assert warning in done.stderr


@pytest.mark.slow
def test_rlf_eval_with_a_hung_opener_and_shutdown_ends_with_its_results(tiny, tmp_path):
    _project(tmp_path, tiny)
    done = _rlf(["eval", "run.yaml", "--out", "out.jsonl"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    hung = [r for r in records if r["row_id"] == "a"]
    assert len(records) == 4 and len(hung) == 2
    assert all("open_session took longer than tools.session_timeout_s" in r["error"] for r in hung)
    assert "plugin 'hang': shutdown did not return within tools.shutdown_timeout_s (0.5 s)" in done.stderr
    assert "plugin 'hang': open_session: still running in its thread" in done.stderr


@pytest.mark.slow
def test_rlf_train_with_a_hung_opener_and_shutdown_ends_with_a_summary(tiny, tmp_path):
    _project(tmp_path, tiny)
    done = _rlf(["train", "run.yaml", "--run-dir", "run"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 1
    assert "plugin 'hang': shutdown did not return within tools.shutdown_timeout_s (0.5 s)" in done.stderr
    assert "plugin 'hang': open_session: still running in its thread" in done.stderr


@pytest.mark.slow
def test_rlf_eval_whose_every_opener_hangs_exits_1_naming_the_plugin(tiny, tmp_path):
    _project(tmp_path, tiny, ROWS[:1])
    done = _rlf(["eval", "run.yaml", "--out", "out.jsonl"], tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "plugin 'hang': open_session took longer than tools.session_timeout_s (0.3 s)" in done.stderr
    assert "plugin 'hang': open_session: still running in its thread" in done.stderr


LEAVES_A_THREAD = """
import asyncio, threading
from rlfcore import Score, hookimpl


@hookimpl
async def shutdown(ctx):
    await asyncio.to_thread(threading.Event().wait)  # never returns


@hookimpl
def compute_score(sample):
    return Score(value=1.0)
"""

STUCK = """
import threading
from rlfcore import hookimpl


@hookimpl
def shutdown(ctx):
    threading.Event().wait()  # never returns
"""


@pytest.mark.slow
def test_rlf_train_whose_plugins_leave_hung_threads_at_shutdown_exits_with_a_summary(tiny, tmp_path):
    _project(tmp_path, tiny, ROWS[1:], {"hang.py": LEAVES_A_THREAD, "stuck.py": STUCK})
    done = _rlf(["train", "run.yaml", "--run-dir", "run"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 1
    for warning in WARNINGS:
        assert warning.replace("'leaves'", "'hang'") in done.stderr
