"""Run-scoped plugin state: each plugin's ``ctx.stash`` is one store for the whole run, the same in
its setup, turn, reward and shutdown hooks, apart from every other plugin's, and dropped after
``shutdown``. The real runtime, loop and reward pipeline run; a scripted engine plays the model."""

from __future__ import annotations

import asyncio
import threading

import pytest

from rlfcore import hookimpl
from rlfcore.chat import ByteChatTokenizer
from rlfcore.context import SetupContext
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.rewards import RewardPipeline
from rlfcore.stash import Stash, StashKey
from rlfcore.testing import make_runtime
from rlfcore.tools import tool

CLIENT = StashKey[list[str]]("client")


class Client:
    """A plugin that starts a 'client' lazily in the first hook that needs it and closes it in shutdown."""

    def __init__(self) -> None:
        self.stashes: list[tuple[str, Stash]] = []
        self.closed: list[list[str]] = []

    def _client(self, ctx, where: str) -> list[str]:
        self.stashes.append((where, ctx.stash))
        client = ctx.stash.start(CLIENT, list)
        client.append(where)
        return client

    @hookimpl
    def register_tools(self, ctx):
        self._client(ctx, "register_tools")

        @tool
        def echo(text: str) -> str:
            """Echo."""
            return text

        return [echo]

    @hookimpl
    def build_observation(self, results, ctx):
        self._client(ctx, "build_observation")

    @hookimpl
    def compute_score(self, sample, ctx):
        self._client(ctx, "compute_score")
        return 1.0

    @hookimpl
    def shutdown(self, ctx):
        self.stashes.append(("shutdown", ctx.stash))
        self.closed.append(ctx.stash.pop(CLIENT, []))


def test_one_store_per_plugin_for_the_whole_run_closed_by_shutdown():
    a, b = Client(), Client()
    runtime = make_runtime({"plugins": ["a", "b"]}, {"a": a, "b": b})
    tok = ByteChatTokenizer()
    call = '<tool_call>\n{"name": "echo", "arguments": {"text": "hi"}}\n</tool_call>'
    rows = [normalize_row({"id": env, "prompt": "go", "env": env}, i) for i, env in enumerate(("a", "b"))]

    async def main():
        async with runtime:
            out = await Rollout(runtime, ScriptedEngine(tok, {"a": [call, "done"], "b": [call, "done"]}), tok).run(
                rows, n=2
            )
            await RewardPipeline(runtime).score(out)
        return out

    out = asyncio.run(main())
    assert [t.reward for t in out] == [1.0] * 4 and all(t.error is None for t in out)
    for plugin in (a, b):
        stores = {id(s) for _, s in plugin.stashes}
        assert len(stores) == 1, plugin.stashes  # one store: setup, every trajectory, scoring, shutdown
        assert plugin.stashes[0][0] == "register_tools" and plugin.stashes[-1][0] == "shutdown"
        [closed] = plugin.closed  # shutdown ran once and found what the hooks started
        assert closed == ["register_tools"] + ["build_observation"] * 2 + ["compute_score"] * 2
    assert a.stashes[0][1] is not b.stashes[0][1]  # apart from the other plugin's
    assert runtime._stashes == {}  # dropped after shutdown
    asyncio.run(runtime.aclose())
    assert len(a.closed) == 1  # closing again calls no shutdown


def test_the_stash_is_typed_and_starts_a_value_once_across_threads():
    stash = Stash()
    key, other = StashKey[int]("count"), StashKey[int]("count")
    assert stash.setdefault(key, 1) == 1 and stash.setdefault(key, 2) == 1
    assert other not in stash and stash.get(other, None) is None  # keys are told apart by identity
    with pytest.raises(KeyError, match=r"nothing stashed under StashKey\('count'\)"):
        stash[other]
    started = []
    barrier = threading.Barrier(4)

    def start():
        barrier.wait()
        return stash.start(POOL, lambda: started.append(1) or "pool")

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert started == [1] and stash[POOL] == "pool" and stash.pop(POOL, None) == "pool" and POOL not in stash


POOL = StashKey[str]("pool")


def test_a_context_outside_a_run_has_a_store_of_its_own():
    ctx = SetupContext(plugin="p")
    ctx.stash[POOL] = "x"
    assert SetupContext(plugin="p").stash.get(POOL, None) is None and ctx.stash[POOL] == "x"


def test_the_tutorials_state_examples_run_a_session_per_trajectory_and_close_the_runs_client():
    """docs/plugin-tutorial.md section 11, run: its two examples as one local plugin."""
    import types

    from rlfcore.rewards import RewardPipeline
    from tests.support.docs import code_blocks, read_doc

    section = read_doc("plugin-tutorial.md").split("## 11. State")[1]
    module = types.ModuleType("tutorial_state")
    for block in code_blocks(section, "python"):
        exec(block, module.__dict__)
    module.register_tools = hookimpl(lambda: [module.note])
    runtime = make_runtime({"plugins": ["tut"]}, {"tut": module})
    tok = ByteChatTokenizer()
    call = '<tool_call>\n{"name": "note", "arguments": {"text": "second"}}\n</tool_call>'
    rows = [
        normalize_row({"id": r, "prompt": "note", "extra": {"notes": [f"{r} first"]}}, i) for i, r in enumerate("ab")
    ]

    async def main():
        out = await Rollout(runtime, ScriptedEngine(tok, {"a": [call, "done"], "b": [call, "done"]}), tok).run(
            rows, n=1
        )
        await RewardPipeline(runtime).score(out)
        client = runtime.stash("tut")[module.CLIENT]
        open_before = not client.is_closed
        await runtime.aclose()
        return out, client, open_before

    out, client, open_before = asyncio.run(main())
    assert [[m["content"] for m in t.messages if m["role"] == "tool"] for t in out] == [
        ["a first\nsecond"],
        ["b first\nsecond"],
    ]
    assert open_before and client.is_closed
