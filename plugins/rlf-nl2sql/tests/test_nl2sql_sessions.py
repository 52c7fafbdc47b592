"""Each trajectory queries its own database through its session (``open_session``), with no
``invoke_tools`` of the plugin's own; the session's connection is closed when the trajectory ends,
fails or is cancelled. Real SQLite files: Chinook and GeoQuery's geography from ../shared/data."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest
import rlf_nl2sql.plugin
from rlf_nl2sql.tools import DatabaseSession

from rlfcore.testing import ByteChatTokenizer, Rollout, ScriptedEngine, make_runtime, normalize_row, rollout

TABLES = "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name LIMIT 3"


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture
def databases(shared_data):
    return {
        "chinook": shared_data / "nl2sql" / "chinook" / "Chinook_Sqlite.sqlite",
        "geography": shared_data / "nl2sql" / "geoquery" / "geography.sqlite",
    }


@pytest.fixture
def sessions(monkeypatch) -> list[DatabaseSession]:
    """Every session the plugin opens in the test, to check that each was closed."""
    opened: list[DatabaseSession] = []
    real = DatabaseSession.for_row.__func__

    def recorded(cls, locator, row):
        opened.append(real(cls, locator, row))
        return opened[-1]

    monkeypatch.setattr(DatabaseSession, "for_row", classmethod(recorded))
    return opened


def _rows(databases) -> list[dict]:
    return [{"id": name, "prompt": "Which tables?", "extra": {"db": str(path)}} for name, path in databases.items()]


def _expected(path) -> str:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        names = [r[0] for r in db.execute(TABLES)]
    return "\n".join(["name", *names, f"({len(names)} rows)"])


@pytest.mark.parametrize("cache", [False, True])
def test_two_trajectories_of_one_batch_query_their_own_real_databases(databases, sessions, cache):
    assert not hasattr(rlf_nl2sql.plugin, "invoke_tools")  # the core's executor runs the tools
    script = {name: [call("sql", query=TABLES), "```sql\nSELECT 1\n```"] for name in databases}
    config = {"plugins": ["nl2sql"], "rollout": {"n": 2}, "tools": {"cache": cache}}
    out = rollout(config, _rows(databases), script, score=False)
    assert [t.row_id for t in out] == ["chinook", "chinook", "geography", "geography"]
    for t in out:
        [result] = [m["content"] for m in t.messages if m["role"] == "tool"]
        assert result == _expected(databases[t.row_id]) and t.tool_errors == 0, result
    assert _expected(databases["chinook"]) != _expected(databases["geography"])
    assert len(sessions) == 4 and not any(s.is_open for s in sessions)  # one per trajectory, each closed


class FailsOnTurn2(ScriptedEngine):
    """A server that goes away after the first turn (``hang``: stops answering instead)."""

    def __init__(self, tokenizer, policy, hang: asyncio.Event | None = None):
        super().__init__(tokenizer, policy)
        self.hang = hang

    async def generate(self, prompt_ids, params, request_id=""):
        if self._turns[request_id] == 1:
            if self.hang is not None:
                self.hang.set()
                await asyncio.sleep(60)
            raise ConnectionError("the server went away")
        return await super().generate(prompt_ids, params, request_id)


def test_the_connection_is_closed_when_the_trajectory_fails_or_is_cancelled(databases, sessions):
    runtime = make_runtime({"plugins": ["nl2sql"]})
    tok = ByteChatTokenizer()
    [row, _] = _rows(databases)
    script = {row["id"]: [call("sql", query=TABLES), "done"]}

    async def failing():
        return await Rollout(runtime, FailsOnTurn2(tok, script), tok).trajectory(normalize_row(row), f"{row['id']}#0")

    t = asyncio.run(failing())
    assert t.stop_reason == "error" and "the server went away" in t.error and t.tool_errors == 0
    assert len(sessions) == 1 and sessions[0].path == databases["chinook"] and not sessions[0].is_open

    async def cancelled():
        hang = asyncio.Event()
        loop = Rollout(runtime, FailsOnTurn2(tok, script, hang), tok)
        task = asyncio.ensure_future(loop.trajectory(normalize_row(row), f"{row['id']}#1"))
        await hang.wait()
        assert sessions[1].is_open  # the first turn's query opened it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled())
    assert len(sessions) == 2 and not sessions[1].is_open


def test_the_runs_verifier_lives_in_the_stash_and_shutdown_stops_its_pool(databases):
    from rlf_nl2sql.plugin import VERIFIER

    from rlfcore.testing import RewardPipeline

    assert not hasattr(rlf_nl2sql.plugin, "_verifier")  # no cache that outlives the run
    runtime = make_runtime({"plugins": ["nl2sql"], "nl2sql": {"verify_pool": "thread", "verify_workers": 2}})
    gold = "SELECT COUNT(*) FROM Artist"
    row = {"id": "c", "prompt": "How many artists?", "ground_truth": gold, "extra": {"db": str(databases["chinook"])}}
    tok = ByteChatTokenizer()

    async def main():
        loop = Rollout(runtime, ScriptedEngine(tok, {"c": [f"```sql\n{gold}\n```"]}), tok)
        out = await loop.run([normalize_row(row)], n=2)
        await RewardPipeline(runtime).score(out)
        verifier = runtime.stash("nl2sql")[VERIFIER]
        pool = verifier._executor
        await runtime.aclose()
        return out, verifier, pool

    out, verifier, pool = asyncio.run(main())
    assert [t.reward for t in out] == [1.0, 1.0]
    assert pool is not None and pool._shutdown and verifier._executor is None  # one pool for the run, stopped
