"""Per-trajectory tool sessions: opened from the row, seen by every call and hook of that trajectory,
released when it ends, fails or is cancelled, within ``tools.session_timeout_s``.

The real loop, executor and reward pipeline run here; the scripted engine stands in for a model
(what a model would say does not matter to a session's life).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from rlfcore import hookimpl
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.testing import make_runtime, rollout
from rlfcore.tools import tool


def call(name: str, **args) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


class Box:
    """A session: the row's secret, and whether it was released."""

    def __init__(self, secret: str, log: list[str], fail_close: bool = False):
        self.secret, self.log, self.fail_close = secret, log, fail_close
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.log.append(f"closed {self.secret}")
        if self.fail_close:
            raise OSError("the sandbox would not stop")


class Boxes:
    """An environment whose ``peek`` tool reads the trajectory's own box; hooks see it as ctx.session."""

    def __init__(self, fail_open: str | None = None, hang_open_s: float = 0.0, fail_close: bool = False):
        self.log: list[str] = []
        self.boxes: list[Box] = []
        self.seen_in_hooks: list[tuple[str, str]] = []
        self.fail_open, self.hang_open_s, self.fail_close = fail_open, hang_open_s, fail_close

    @hookimpl
    def register_tools(self):
        @tool
        def peek(prefix: str, session: Box) -> str:
            """Show the secret of this trajectory's box."""
            return f"{prefix}{session.secret}"

        return [peek]

    @hookimpl
    def open_session(self, row, ctx):
        secret = row["extra"]["secret"]
        if secret == self.fail_open:
            raise RuntimeError(f"no box for {secret}")
        if self.hang_open_s:
            time.sleep(self.hang_open_s)
        box = Box(secret, self.log, self.fail_close)
        self.boxes.append(box)
        return box

    @hookimpl
    def build_observation(self, results, ctx):
        if ctx.session is not None:
            self.seen_in_hooks.append((ctx.sample_id, ctx.session.secret))
        # and returns None: the core builds the tool messages

    @hookimpl
    def compute_score(self, sample):
        return float(sample.response == sample.extra["secret"])


CONFIG = {"plugins": ["boxes"], "rollout": {"n": 2}, "tools": {"session_timeout_s": 0.5}}
ROWS = [
    {"id": "a", "prompt": "peek", "extra": {"secret": "A"}},
    {"id": "b", "prompt": "peek", "extra": {"secret": "B"}},
]
SCRIPT = {"a": [call("peek", prefix="="), "A"], "b": [call("peek", prefix="="), "B"]}


def _tool_outputs(t) -> list[str]:
    return [m["content"] for m in t.messages if m["role"] == "tool"]


def test_each_trajectory_gets_its_own_session_and_every_one_is_released():
    env = Boxes()
    out = rollout(CONFIG, ROWS, SCRIPT, {"boxes": env})
    assert [t.row_id for t in out] == ["a", "a", "b", "b"]
    for t in out:
        assert _tool_outputs(t) == [f"={t.row_id.upper()}"], t.messages
        assert t.error is None and t.session_error is None and t.reward == 1.0
    assert len(env.boxes) == 4 and all(b.closed for b in env.boxes)  # one per trajectory, not per row
    assert sorted(env.seen_in_hooks) == [("a#0", "A"), ("a#1", "A"), ("b#0", "B"), ("b#1", "B")]


def test_a_failing_open_is_that_trajectorys_error_and_the_others_run():
    env = Boxes(fail_open="B")
    a0, a1, b0, b1 = rollout(CONFIG, ROWS, SCRIPT, {"boxes": env})
    assert a0.error is None and a1.error is None and a0.reward == 1.0
    for t in (b0, b1):
        assert t.stop_reason == "error" and t.num_turns == 0
        assert "plugin 'boxes': open_session failed: RuntimeError: no box for B" in t.error
    assert all(b.closed for b in env.boxes) and len(env.boxes) == 2


def test_a_hanging_open_times_out_on_that_trajectory_and_its_late_session_is_still_released():
    env = Boxes(hang_open_s=0.8)  # over the 0.5 s session timeout
    started = time.perf_counter()
    [t] = rollout({**CONFIG, "rollout": {"n": 1}}, ROWS[:1], SCRIPT, {"boxes": env}, score=False)
    assert time.perf_counter() - started < 0.8 + 0.5  # the trajectory did not wait for the open
    assert t.stop_reason == "error" and "open_session took longer than tools.session_timeout_s (0.5 s)" in t.error
    deadline = time.monotonic() + 5
    while not env.boxes and time.monotonic() < deadline:  # the thread ends after the loop has moved on
        time.sleep(0.05)
    assert len(env.boxes) == 1


def test_a_failing_release_is_recorded_and_the_trajectory_keeps_its_reward():
    env = Boxes(fail_close=True)
    out = rollout(CONFIG, ROWS, SCRIPT, {"boxes": env})
    for t in out:
        assert t.error is None and t.reward == 1.0
        assert t.session_error == "plugin 'boxes': releasing its session failed: OSError: the sandbox would not stop"
        assert "session_error" in t.record()
    assert len(env.log) == 4


class BrokenEngine(ScriptedEngine):
    """Fails on the second turn, as a crashed inference server would."""

    async def generate(self, prompt_ids, params, request_id=""):
        if self._turns[request_id] == 1:
            raise ConnectionError("the server went away")
        return await super().generate(prompt_ids, params, request_id)


def _run(runtime, engine, row):
    tok = ByteChatTokenizer()
    return Rollout(runtime, engine(tok, SCRIPT), tok).trajectory(normalize_row(row), f"{row['id']}#0")


def test_the_session_is_released_when_the_engine_fails_mid_trajectory():
    env = Boxes()
    runtime = make_runtime(CONFIG, {"boxes": env})
    t = asyncio.run(_run(runtime, BrokenEngine, ROWS[0]))
    assert t.stop_reason == "error" and "the server went away" in t.error and t.tool_calls == 1
    assert [b.closed for b in env.boxes] == [True]


class Waits(Boxes):
    """Boxes whose only tool waits until the trajectory is cancelled."""

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()

    @hookimpl
    def register_tools(self):
        @tool
        async def wait(session: Box) -> str:
            """Wait for ever."""
            self.entered.set()
            await asyncio.sleep(60)
            return session.secret

        return [wait]


def test_the_session_is_released_when_the_trajectory_is_cancelled_during_a_tool_call():
    slow = Waits()
    runtime = make_runtime({**CONFIG, "tools": {"timeout_s": 60}}, {"boxes": slow})
    script = {"a": [call("wait"), "A"]}

    async def main():
        tok = ByteChatTokenizer()
        task = asyncio.ensure_future(
            Rollout(runtime, ScriptedEngine(tok, script), tok).trajectory(normalize_row(ROWS[0]), "a#0")
        )
        await asyncio.to_thread(slow.entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert [b.closed for b in slow.boxes] == [True]


class Keyed(Boxes):
    """Boxes whose sessions share results by secret (``cache_key``), or never (no key)."""

    def __init__(self, keyed: bool):
        super().__init__()
        self.keyed, self.calls = keyed, 0

    @hookimpl
    def register_tools(self):
        @tool
        def peek(prefix: str, session: Box) -> str:
            """Show the secret, counting the runs."""
            self.calls += 1
            return f"{prefix}{session.secret}"

        return [peek]

    @hookimpl
    def open_session(self, row, ctx):
        box = Box(row["extra"]["secret"], self.log)
        if self.keyed:
            box.cache_key = box.secret  # type: ignore[attr-defined]
        self.boxes.append(box)
        return box


@pytest.mark.parametrize("keyed", [False, True])
def test_the_result_cache_never_mixes_sessions_and_shares_one_key(keyed):
    env = Keyed(keyed)
    cfg = {**CONFIG, "tools": {"cache": True}}
    runtime = make_runtime(cfg, {"boxes": env})
    tok = ByteChatTokenizer()

    async def main():
        loop = Rollout(runtime, ScriptedEngine(tok, SCRIPT), tok)
        async with runtime:
            return await loop.run([normalize_row(r, i) for i, r in enumerate(ROWS)])

    out = asyncio.run(main())
    assert [_tool_outputs(t) for t in out] == [["=A"], ["=A"], ["=B"], ["=B"]]  # same arguments, own results
    # four sessions: four runs without a key; with one, a run per secret (in flight or cached)
    assert env.calls == (2 if keyed else 4) and runtime.executor.metrics.cache_hits == (2 if keyed else 0)


class NoSession(Boxes):
    @hookimpl
    def open_session(self, row, ctx):
        return None


def test_a_tool_whose_plugin_opened_no_session_gets_none_and_its_error_reaches_the_model():
    [t] = rollout({**CONFIG, "rollout": {"n": 1}}, ROWS[:1], SCRIPT, {"boxes": NoSession()}, score=False)
    [output] = _tool_outputs(t)
    assert t.tool_error_kinds == {"exception": 1} and t.error is None
    assert "AttributeError" in output and "'NoneType' object has no attribute 'secret'" in output


def test_the_session_parameter_is_not_in_the_models_schema():
    @tool
    def peek(prefix: str, session: Box, times: int = 1) -> str:
        """Peek.

        Args:
            prefix: Put before the secret.
        """
        return prefix * times + session.secret

    assert peek.takes_session
    assert peek.parameters["properties"] == {
        "prefix": {"type": "string", "description": "Put before the secret."},
        "times": {"default": 1, "type": "integer"},
    }
    assert peek.parameters["required"] == ["prefix"]
    assert peek.fn(session=Box("S", []), prefix="=", times="2") == "==S"  # validated without the session


def test_the_documented_example_gives_two_trajectories_of_one_batch_their_own_database(tmp_path):
    """docs/hooks.md's open_session example, run: two rows on two real SQLite files in one batch."""
    import sqlite3
    import types

    from tests.support.docs import code_blocks, hook_sections, read_doc

    module = types.ModuleType("db_example")
    exec(code_blocks(hook_sections(read_doc("hooks.md"))["open_session"], "python")[1], module.__dict__)
    rows = []
    for city in ("Paris", "Lima"):
        path = tmp_path / f"{city}.db"
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE t (city TEXT)")
            db.execute("INSERT INTO t VALUES (?)", (city,))
        db.close()
        rows.append({"id": city, "prompt": "Which city?", "extra": {"db": str(path)}})
    script = {r["id"]: [call("sql", query="SELECT city FROM t"), r["id"]] for r in rows}
    out = rollout({"plugins": ["db"], "rollout": {"n": 2}}, rows, script, {"db": module}, score=False)
    assert [_tool_outputs(t) for t in out] == [["Paris"], ["Paris"], ["Lima"], ["Lima"]]
    assert all(t.error is None and t.session_error is None for t in out)
