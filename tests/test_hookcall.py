"""Hooks are called in one place, through pluggy: wrappers and call monitoring see every answer, the
binding and sync/async rules declared with each spec hold, and ``RLF_TRACE_PLUGINS`` logs each call."""

from __future__ import annotations

import asyncio
import io
import re

import pytest

from rlfcore import hookimpl
from rlfcore.conformance import SYNC_ONLY, check
from rlfcore.context import SetupContext
from rlfcore.hookcall import HookCallError, call_impl
from rlfcore.hookspecs import HOOK_NAMES, RULES
from rlfcore.hooktrace import trace_hook_calls
from rlfcore.testing import _rollout, make_manager, make_runtime, rollout

ROWS = [{"id": "q", "prompt": "What is six times seven?", "ground_truth": "42"}]
SCRIPT = {"q": ["<answer>42</answer>"]}


class Scorer:
    """An environment plugin whose score is async, so the trace must time the awaited work."""

    @hookimpl
    def verify_tool(self, sample):
        return None  # nothing to verify

    @hookimpl
    async def compute_score(self, sample):
        await asyncio.sleep(0.05)
        return 0.25


class ScoreSync:
    """An environment plugin with a plain scorer."""

    @hookimpl
    def compute_score(self, sample):
        return 0.5


class Doubler:
    """Another plugin's wrapper around every ``compute_score`` implementation."""

    def __init__(self):
        self.seen: list[object] = []

    @hookimpl(wrapper=True)
    def compute_score(self, sample):
        answer = yield
        self.seen.append(answer)
        return None if answer is None else 1.0

    @hookimpl(wrapper=True)
    def judge(self, samples):
        answers = yield
        self.seen.append(("judge", answers))
        return answers


class Judge:
    @hookimpl
    def judge(self, samples):
        return [0.75 for _ in samples]


def test_a_wrapper_of_another_plugin_sees_and_replaces_each_answer():
    doubler = Doubler()
    config = {
        "plugins": ["calc", "doubler", "judge"],
        "envs": {"main": ["calc"]},
        "reward": {"weights": {"score": 1.0}},
    }
    [traj] = rollout(config, ROWS, SCRIPT, {"calc": ScoreSync(), "doubler": doubler, "judge": Judge()})
    # the environment's answer (the built-in exact match never ran), then the one judge's answer, once:
    # the wrapper wraps implementations and is never called as one itself
    assert doubler.seen == [0.5, ("judge", [[0.75]])]
    assert traj.reward == 1.0 and traj.reward_error is None and traj.reward_components["judge.judge"] == 0.75


def test_monitoring_sees_each_implementation_with_the_plugin_that_answered():
    calls: list[tuple[str, list[str]]] = []
    runtime = make_runtime({"plugins": ["calc"]}, {"calc": ScoreSync()})
    runtime.plugins.pm.add_hookcall_monitoring(
        lambda hook, impls, kwargs: calls.append((hook, [i.plugin_name for i in impls])), lambda *a: None
    )
    asyncio.run(_rollout(runtime, ROWS, SCRIPT, score=True))
    assert ("parse_tool_calls", ["rlf.parsers"]) in calls
    assert ("compute_score", ["calc"]) in calls  # first result: the built-in default was not asked
    assert ("compute_score", ["rlf.scoring"]) not in calls
    assert ("shutdown", ["calc"]) not in calls  # calc implements no shutdown


def test_unwrapped_unmonitored_calls_skip_pluggy_and_answer_the_same(monkeypatch):
    """With no wrapper and no monitor nothing can tell a pluggy call from a direct one, so the core
    calls the implementation itself; a wrapper or a monitor puts the calls back through pluggy."""
    from rlfcore import hookcall

    through: list[str] = []
    real = hookcall._caller
    monkeypatch.setattr(hookcall, "_caller", lambda m, hook, *a: through.append(hook) or real(m, hook, *a))
    answers = []
    for plugins in ({"calc": ScoreSync()}, {"calc": ScoreSync(), "doubler": Doubler()}):
        through.clear()
        runtime = make_runtime({"plugins": list(plugins), "envs": {"main": ["calc"]}}, plugins)
        [traj] = asyncio.run(_rollout(runtime, ROWS, SCRIPT, score=True))
        answers.append(traj.reward_components["score"])
        if len(plugins) == 1:
            assert through == []
        else:
            assert "compute_score" in through and "parse_tool_calls" not in through  # only the wrapped hook
    through.clear()
    runtime = make_runtime({"plugins": ["calc"]}, {"calc": ScoreSync()})
    runtime.plugins.pm.add_hookcall_monitoring(lambda *a: None, lambda *a: None)
    [traj] = asyncio.run(_rollout(runtime, ROWS, SCRIPT, score=True))
    assert {"parse_tool_calls", "compute_score"} <= set(through)
    assert answers == [0.5, 1.0] and traj.reward_components["score"] == 0.5


def test_past_their_bound_the_least_recently_used_hook_callers_are_dropped(monkeypatch):
    """A wrapped call's pluggy caller is made once and kept; past ``_MAX_CALLERS`` only the one used
    least recently is made anew, not every one."""
    from rlfcore import hookcall

    monkeypatch.setattr(hookcall, "_MAX_CALLERS", 2)
    manager = make_manager({"calc": ScoreSync(), "doubler": Doubler(), "judge": Judge()})
    [score] = [i for i in manager.pm.hook.compute_score.get_hookimpls() if i.plugin_name == "calc"]
    [judge] = [i for i in manager.pm.hook.judge.get_hookimpls() if i.plugin_name == "judge"]
    [wraps] = [i for i in manager.pm.hook.compute_score.get_hookimpls() if i.plugin_name == "doubler"]
    first = hookcall._caller(manager, "compute_score", score, [])
    second = hookcall._caller(manager, "compute_score", score, [wraps])
    assert hookcall._caller(manager, "compute_score", score, []) is first  # kept, and now used last
    hookcall._caller(manager, "judge", judge, [])  # a third: the least recently used one goes
    assert hookcall._caller(manager, "compute_score", score, []) is first
    assert hookcall._caller(manager, "compute_score", score, [wraps]) is not second


def test_trace_lines_name_plugin_hook_duration_and_outcome():
    class Broken:
        @hookimpl
        def verify_tool(self, sample):
            raise ValueError("no database")

    out = io.StringIO()
    runtime = make_runtime(
        {"plugins": ["calc", "broken"], "envs": {"a": ["calc"], "b": ["broken"]}},
        {"calc": Scorer(), "broken": Broken()},
    )
    trace_hook_calls(runtime.plugins.pm, stream=out)
    rows = [{**ROWS[0], "env": "a"}, {"id": "r", "prompt": "x", "env": "b", "ground_truth": "1"}]
    [ok, failed] = asyncio.run(_rollout(runtime, rows, {"q": SCRIPT["q"], "r": ["<answer>1</answer>"]}, score=True))
    lines = out.getvalue().splitlines()
    score = next(line for line in lines if line.startswith("rlf-trace: compute_score plugin=calc "))
    ms = float(re.search(r" ([\d.]+) ms ", score).group(1))
    assert ms >= 45 and score.endswith(" ok")  # the awaited sleep, not the coroutine's creation
    assert any(
        re.fullmatch(r"rlf-trace: verify_tool plugin=broken [\d.]+ ms raised ValueError: no database", x) for x in lines
    )
    assert any(re.fullmatch(r"rlf-trace: verify_tool plugin=calc [\d.]+ ms returned None", x) for x in lines)
    assert any(re.fullmatch(r"rlf-trace: parse_tool_calls plugin=rlf.parsers [\d.]+ ms ok", x) for x in lines)
    assert ok.reward == 0.25 and "no database" in (failed.reward_error or "")


def test_an_async_implementation_of_a_sync_only_hook_is_named():
    class AsyncParsers:
        @hookimpl
        async def register_parsers(self, ctx):
            return {}

    with pytest.raises(HookCallError, match="plugin 'late': register_parsers may not be async"):
        make_runtime({"plugins": ["late"]}, {"late": AsyncParsers()})
    report = check("late", make_manager({"late": AsyncParsers()}))
    assert not report.ok and "register_parsers may not be async" in report.render()


def test_a_call_must_pass_every_argument_of_the_spec():
    manager = make_manager({})
    [impl] = [i for i in manager.impls("compute_score") if i.plugin_name == "rlf.scoring"]
    with pytest.raises(
        HookCallError,
        match=r"compute_score called with the wrong arguments \(missing: ctx, verification; unknown: text\)",
    ):
        asyncio.run(call_impl(manager, "compute_score", impl, sample=None, text="x"))


def test_a_setup_context_is_rebound_to_each_implementing_plugin():
    seen = {}

    class Probe:
        def __init__(self, name):
            self.name = name

        @hookimpl
        def register_examples(self, ctx):
            seen[self.name] = ctx.plugin
            return []

    manager = make_manager({"one": Probe("one"), "two": Probe("two")})
    for name in ("one", "two"):
        [impl] = [i for i in manager.impls("register_examples", [name]) if i.plugin_name == name]
        asyncio.run(call_impl(manager, "register_examples", impl, ctx=SetupContext(plugin="")))
    assert seen == {"one": "one", "two": "two"}


def test_every_hook_declares_its_rule_beside_its_spec():
    import rlfcore.hookspecs as specs

    declared = [name for name in dir(specs) if hasattr(getattr(specs, name), "rlf_spec")]
    assert sorted(declared) == sorted(HOOK_NAMES) == sorted(RULES)
    assert set(SYNC_ONLY) == {
        "register_config_schema",
        "register_parsers",
        "register_engines",
        "register_examples",
        "register_commands",
    }
    for name in HOOK_NAMES:
        assert getattr(specs, name).rlf_spec["firstresult"] == RULES[name].firstresult


def test_rlf_eval_with_rlf_trace_plugins_prints_each_hook_call(tmp_path):
    """The real command on the embedded calculator (its real MCP server); rlfcore.testing's OpenAIServer
    stands in for the model's chat API on loopback (its calculator model), writing tool calls as text so ``parse_tool_calls`` reads them."""
    from rlfcore.testing import OpenAIServer
    from tests.support import ROOT
    from tests.support.rlf import run_rlf

    with OpenAIServer() as server:
        out = run_rlf(
            "eval",
            str(ROOT / "examples" / "calculator" / "run.yaml"),
            "--greedy",
            "--limit",
            "2",
            "--out",
            str(tmp_path / "out.jsonl"),
            "--engine",
            "openai-chat",
            f"engine.base_url={server.base_url}",
            "engine.chat_tools=text",
            env={"RLF_TRACE_PLUGINS": "1"},
            cwd=ROOT,
        )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [x for x in out.stderr.splitlines() if x.startswith("rlf-trace: ")]
    shape = re.compile(r"rlf-trace: (\w+) plugin=([\w.,-]+) [\d.]+ ms (ok|returned None|raised .+)")
    calls = [shape.fullmatch(x).groups() for x in lines]
    assert ("register_tools", "mcp", "ok") in calls
    assert calls.count(("parse_tool_calls", "rlf.parsers", "ok")) == 4  # two rows, a call turn and an answer turn each
    assert calls.count(("invoke_tools", "rlf.executor", "ok")) == 2
    assert calls.count(("build_observation", "rlf.observation", "ok")) == 2
    assert calls.count(("compute_score", "rlf.scoring", "ok")) == 2
    assert ("judge", "mcp", "ok") not in calls  # mcp implements no judge: nothing is called on it
    quiet = run_rlf("plugins", "list", env={"RLF_TRACE_PLUGINS": "0"}, cwd=ROOT)
    assert quiet.returncode == 0 and "rlf-trace:" not in quiet.stderr


def test_a_cancelled_async_call_is_traced_as_cancelled():
    class Slow:
        @hookimpl
        async def invoke_tools(self, calls, ctx):
            await asyncio.sleep(10)

    manager = make_manager({"slow": Slow()})
    manager.enable(["slow"])
    out = io.StringIO()
    undo = trace_hook_calls(manager.pm, stream=out)
    [impl] = [i for i in manager.impls("invoke_tools", ["slow"]) if i.plugin_name == "slow"]

    async def cancel_soon():
        task = asyncio.ensure_future(call_impl(manager, "invoke_tools", impl, calls=[], ctx=None))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_soon())
    undo()
    assert re.fullmatch(r"rlf-trace: invoke_tools plugin=slow [\d.]+ ms raised CancelledError\n", out.getvalue())
