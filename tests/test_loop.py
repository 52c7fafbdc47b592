"""The multi-turn loop with a real tokenizer (bytes + Qwen-style template) and a scripted policy.

The scripted engine stands in for a model: these tests are about tokens, masks, routing and timing,
which do not depend on what a model would say. The same loop runs a real model in test_eval.py.
"""

from __future__ import annotations

import asyncio
import functools
import json
import operator
import time
import zlib

from rlfcore import Done, Score, hookimpl
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.base import Engine, Generation, SamplingParams
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.testing import make_runtime, rollout
from rlfcore.tools import tool
from rlfcore.ui.tokens import mismatch_at


def call(name: str, **args) -> str:
    """A call written exactly as the chat template renders one, so a full rendering can match it."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


class Calculator:
    """An environment plugin with fast, slow and failing tools."""

    @hookimpl
    def register_tools(self, ctx):
        @tool
        def add(a: int, b: int) -> int:
            """Add two integers."""
            return a + b

        @tool
        async def slow(seconds: float) -> str:
            """Wait, then answer."""
            await asyncio.sleep(seconds)
            return "done"

        @tool
        def boom() -> str:
            """Always fails."""
            raise RuntimeError("the tool broke")

        return [add, slow, boom]

    @hookimpl
    def compute_score(self, sample):
        return Score(value=float(sample.response == str(sample.ground_truth)), components={"exact": 1.0})


CONFIG = {"plugins": ["calc"], "tools": {"timeout_s": 0.3}}


def test_mask_covers_exactly_the_generated_tokens_over_three_turns_with_parallel_calls():
    script = {
        "q": [
            "Let me add." + "\n" + call("add", a=1, b=2) + "\n" + call("add", a=3, b=4),
            call("add", a=3, b=7),
            "10",
        ]
    }
    [t] = rollout(
        CONFIG, [{"id": "q", "prompt": "What is 1+2+3+4?", "ground_truth": "10"}], script, {"calc": Calculator()}
    )
    tok = ByteChatTokenizer()
    assert t.stop_reason == "answer" and t.num_turns == 3 and t.tool_calls == 3 and t.tool_errors == 0
    generated = [i for i, m in zip(t.response_ids, t.response_mask) if m == 1]
    eos = tok.eos_token_ids[0]
    assert generated == functools.reduce(operator.iadd, (tok.encode(text) + [eos] for text in script["q"]), [])
    # the masked-out tokens are exactly the observations: tool results and the next generation prompt
    observed = tok.decode([i for i, m in zip(t.response_ids, t.response_mask) if m == 0])
    assert observed.count("<tool_response>") == 3 and "\n3\n" in observed and "\n7\n" in observed
    assert observed.count("<|im_start|>assistant\n") == 2
    assert len(t.logprobs) == len(t.response_ids)
    # token-exact: a full rendering of the messages reproduces the sequence, and the check says so
    assert t.template_mismatch is None
    full = tok.encode(tok.render(t.messages, [x.schema() for x in _tools()], add_generation_prompt=False))
    assert full[: len(t.prompt_ids) + len(t.response_ids)] == t.prompt_ids + t.response_ids
    # the messages are OpenAI chat format with the calls and results
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "tool", "assistant", "tool", "assistant"]
    assert t.messages[1]["content"] == "Let me add."
    assert t.messages[1]["tool_calls"][1]["function"]["arguments"] == {"a": 3, "b": 4}
    assert t.reward == 1.0 and t.reward_components["exact"] == 1.0


def _tools():
    from rlfcore.context import SetupContext

    return Calculator().register_tools(SetupContext(plugin="calc"))


class UserReplies:
    """An environment that answers as the user (a game, a simulated customer)."""

    @hookimpl
    def register_tools(self, ctx):
        return [_tools()[0]]

    @hookimpl
    def build_observation(self, results):
        return [{"role": "user", "content": "result: " + r.content} for r in results]


def test_a_template_that_drops_earlier_reasoning_is_reported_and_the_sequence_keeps_what_the_model_saw():
    script = {"q": ["<think>plan A</think>\n" + call("add", a=2, b=2), "<think>so 4</think>\n4"]}
    [t] = rollout({"plugins": ["env"]}, [{"id": "q", "prompt": "2+2?"}], script, {"env": UserReplies()})
    tok = ByteChatTokenizer()
    assert t.stop_reason == "answer"
    # the model saw its own first reasoning when it wrote the second turn: it stays in the sequence
    assert "plan A" in tok.decode(t.response_ids)
    # Qwen3-style templates drop reasoning before the last user turn: the check points at it
    assert t.template_mismatch is not None and "plan A" in t.template_mismatch
    assert " (in assistant turn 1): " in t.template_mismatch
    generated = tok.decode([i for i, m in zip(t.response_ids, t.response_mask) if m == 1])
    assert generated == "<think>plan A</think>\n" + call("add", a=2, b=2) + "<|im_end|><think>so 4</think>\n4<|im_end|>"


def test_a_turn_the_template_renders_differently_is_reported_at_its_first_token_naming_the_turn():
    """Two calls written back to back, where the template puts a newline between them: the check runs
    once, at the end, and still finds the second turn's departure at its token; switched off, nothing."""
    second = call("add", a=3, b=4) + call("add", a=5, b=6)
    script = {"q": [call("add", a=1, b=2), second, "done"]}
    rows = [{"id": "q", "prompt": "Add up."}]
    [t] = rollout(CONFIG, rows, script, {"calc": Calculator()})
    tok = ByteChatTokenizer()
    assert t.stop_reason == "answer" and t.tool_calls == 3 and t.tool_errors == 0
    starts = [k for k, m in enumerate(t.response_mask) if m == 1 and (k == 0 or t.response_mask[k - 1] == 0)]
    at = len(t.prompt_ids) + starts[1] + len(tok.encode(call("add", a=3, b=4)))
    assert t.template_mismatch is not None
    assert t.template_mismatch.startswith(f"token {at} (in assistant turn 2): rollout has '<tool_call>"), (
        t.template_mismatch
    )
    assert "a full rendering has '\\n<tool_call>" in t.template_mismatch
    assert mismatch_at(t.template_mismatch, 1 << 20) == at  # where rlf ui's token view marks it
    [unchecked] = rollout({**CONFIG, "rollout": {"check_template": False}}, rows, script, {"calc": Calculator()})
    assert unchecked.response_ids == t.response_ids and unchecked.template_mismatch is None


def test_the_template_check_runs_on_every_trajectory_or_on_one_per_group():
    """``group`` (the default) checks each group's first sample, ``true`` all of them; a caller running
    samples one at a time (verl's agent loop) gets one in ``n`` by a hash of the trajectory's id."""
    script = {"q": [call("add", a=1, b=2), call("add", a=3, b=4) + call("add", a=5, b=6), "done"]}
    rows = [{"id": "q", "prompt": "Add up."}]
    every = rollout({**CONFIG, "rollout": {"n": 4, "check_template": True}}, rows, script, {"calc": Calculator()})
    assert [t.template_mismatch is not None for t in every] == [True] * 4
    grouped = rollout({**CONFIG, "rollout": {"n": 4}}, rows, script, {"calc": Calculator()})
    assert [t.template_mismatch is not None for t in grouped] == [True, False, False, False]
    assert [t.response_ids for t in grouped] == [t.response_ids for t in every]

    runtime = make_runtime({**CONFIG, "rollout": {"n": 4}}, {"calc": Calculator()})
    try:
        tok = ByteChatTokenizer()
        loop = Rollout(runtime, ScriptedEngine(tok, script), tok)
        ids = [f"q#{k:02x}" for k in range(32)]
        one_by_one = [runtime.run(loop.trajectory(normalize_row(rows[0]), i)) for i in ids]
    finally:
        runtime.close()
    checked = [t.template_mismatch is not None for t in one_by_one]
    assert checked == [zlib.crc32(i.encode()) % 4 == 0 for i in ids] and 0 < sum(checked) < 32


def test_a_rollout_longer_than_its_full_rendering_is_reported_where_the_rendering_ends():
    """A template that leaves assistant messages out: the rollout's tokens run on past its rendering."""
    tok = ByteChatTokenizer(
        "{% for m in messages %}{% if m.role != 'assistant' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    runtime = make_runtime({"plugins": []})
    loop = Rollout(runtime, ScriptedEngine(tok, {"q": ["4"]}), tok)
    [t] = asyncio.run(loop.run([normalize_row({"id": "q", "prompt": "2+2?"})], n=1))
    seq = len(t.prompt_ids) + len(t.response_ids)
    ends = len(t.prompt_ids) - len(tok.encode("<|im_start|>assistant\n"))
    assert t.stop_reason == "no_tool_call" and t.template_mismatch == (
        f"a full rendering ends at token {ends}, the rollout at {seq} (it goes on in the prompt)"
    )


def test_failures_become_observations_and_metrics():
    script = {
        "q": [
            call("slow", seconds=2.0)
            + call("boom")
            + call("nope")
            + "<tool_call>{bad json</tool_call>"
            + call("add", a="x", b=1),
            "ok",
        ]
    }
    [t] = rollout(CONFIG, [{"id": "q", "prompt": "go"}], script, {"calc": Calculator()})
    tool_msgs = [m["content"] for m in t.messages if m["role"] == "tool"]
    assert len(tool_msgs) == 5 and t.tool_errors == 5
    assert t.tool_error_kinds == {"timeout": 1, "exception": 1, "unknown_tool": 1, "malformed": 1, "schema": 1}
    assert "timed out" in tool_msgs[0] and "the tool broke" in tool_msgs[1]
    assert t.stop_reason == "answer" and t.error is None


def test_unreadable_calls_are_observed_or_end_the_trajectory():
    script = {"q": [call("add", a=1, b=2) + "<tool_call>{bad json</tool_call>", "3"]}
    row = [{"id": "q", "prompt": "go"}]
    [seen] = rollout(CONFIG, row, script, {"calc": Calculator()})
    assert seen.stop_reason == "answer" and seen.num_turns == 2 and seen.tool_error_kinds == {"malformed": 1}
    stop = {**CONFIG, "rollout": {"unreadable_calls": "stop"}}
    [ended] = rollout(stop, row, script, {"calc": Calculator()})
    assert ended.stop_reason == "unreadable_call" and ended.num_turns == 1 and ended.tool_calls == 0
    assert [m["role"] for m in ended.messages] == ["user", "assistant"] and ended.response_mask == [1] * len(
        ended.response_ids
    )
    assert ended.reward == 0.0  # its last message is the broken call, not an answer


def test_stop_reasons_and_explicit_truncation():
    rows = [{"id": "a", "prompt": "x"}, {"id": "b", "prompt": "x"}, {"id": "c", "prompt": "x"}]
    script = {"a": [call("add", a=1, b=1)] * 10, "b": ["plain answer"], "c": ["y" * 500]}
    cfg = {**CONFIG, "rollout": {"max_turns": 3, "sampling": {"max_tokens": 200}}}
    a, b, c = rollout(cfg, rows, script, {"calc": Calculator()})
    assert a.stop_reason == "max_turns" and a.num_turns == 3 and a.tool_calls == 2
    assert b.stop_reason == "no_tool_call" and not b.truncated
    assert c.stop_reason == "max_tokens" and c.truncated and sum(c.response_mask) == 200  # the turn's own limit
    [e] = rollout(
        {**CONFIG, "rollout": {"max_response_tokens": 120, "sampling": {"max_tokens": 200}}},
        [{"id": "e", "prompt": "x"}],
        {"e": ["y" * 500]},
        {"calc": Calculator()},
    )
    assert e.stop_reason == "max_response_tokens" and e.truncated and sum(e.response_mask) == 120
    [d] = rollout(
        {**CONFIG, "rollout": {"max_total_tokens": 50}},
        [{"id": "d", "prompt": "long " * 50}],
        {"d": ["x"]},
        {"calc": Calculator()},
    )
    assert d.stop_reason == "max_total_tokens" and d.truncated and d.response_ids == []
    assert "prompt has" in d.error  # the prompt (and its system message) is never cut silently


class Game:
    """An environment whose episode ends on a move: the tool returns :class:`rlfcore.Done`."""

    @hookimpl
    def register_tools(self, ctx):
        @tool
        def move(square: int) -> object:
            """Play a square; the game ends on square 9."""
            return Done({"board": f"played {square}", "over": True}) if square == 9 else f"played {square}"

        return [move]


def test_a_tool_that_returns_done_ends_the_trajectory_after_its_observation():
    """The environment said its episode is over: the last observation is kept (its tokens masked 0)
    and no further turn is generated, whatever the model would have said; stop reason ``done``."""
    script = {"g": [call("move", square=1), call("move", square=9), "never generated"]}
    [t] = rollout({"plugins": ["game"]}, [{"id": "g", "prompt": "play"}], script, {"game": Game()})
    assert t.stop_reason == "done" and not t.truncated and t.error is None and t.template_mismatch is None
    assert t.num_turns == 2 and t.tool_calls == 2
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant", "tool"]
    assert json.loads(t.messages[-1]["content"]) == {"board": "played 9", "over": True}
    assert t.response_mask[-1] == 0  # the record ends with the observation, which is not trained on


class Guessing:
    """An environment that answers turns without calls (``respond``): higher or lower until the number
    is named, with a session that counts the guesses; it also offers a tool, which answers as usual."""

    @hookimpl
    def register_tools(self, ctx):
        @tool
        def hint() -> str:
            """A hint."""
            return "between 1 and 9"

        return [hint]

    @hookimpl
    def open_session(self, row, ctx):
        return {"guesses": 0}

    @hookimpl
    async def respond(self, messages, ctx):
        ctx.session["guesses"] += 1
        guess, target = messages[-1]["content"].strip(), 7
        if guess == "quit":
            return None
        if guess == str(target):
            return Done([{"role": "user", "content": f"Right, in {ctx.session['guesses']}."}])
        if guess == "give up":
            return Done([])
        return [{"role": "user", "content": "Higher." if int(guess) < target else "Lower."}]


def test_respond_answers_turns_without_calls_until_the_environment_is_done():
    """Each turn without calls gets the environment's reply as its observation (loss mask 0, rendered
    by the template, which the incremental tokens match); a tool call in between is answered by the
    tool; ``Done(messages)`` appends its last messages and ends the episode with stop reason done."""
    script = {"g": ["3", call("hint"), "8", "7", "never generated"]}
    config = {"plugins": ["guess"], "rollout": {"max_turns": 5}}
    [t] = rollout(config, [{"id": "g", "prompt": "guess"}], script, {"guess": Guessing()})
    assert t.stop_reason == "done" and t.error is None and t.template_mismatch is None
    assert t.num_turns == 4 and t.tool_calls == 1
    assert [(m["role"], m["content"]) for m in t.messages if m["role"] != "assistant"] == [
        ("user", "guess"),
        ("user", "Higher."),
        ("tool", "between 1 and 9"),
        ("user", "Lower."),
        ("user", "Right, in 3."),
    ]
    tok = ByteChatTokenizer()
    generated = [i for i, m in zip(t.response_ids, t.response_mask) if m == 1]
    eos = tok.eos_token_ids[0]
    assert generated == functools.reduce(operator.iadd, (tok.encode(x) + [eos] for x in script["g"][:4]), [])
    assert "Lower." in tok.decode([i for i, m in zip(t.response_ids, t.response_mask) if m == 0])


def test_respond_ends_a_trajectory_by_done_none_or_the_turn_limit():
    rows = [{"id": i, "prompt": "guess"} for i in "abcd"]
    script = {"a": ["give up", "x"], "b": ["quit", "x"], "c": ["1", "2", "3", "4"], "d": ["1", "2", "7", "x"]}
    a, b, c, d = rollout({"plugins": ["guess"], "rollout": {"max_turns": 3}}, rows, script, {"guess": Guessing()})
    assert a.stop_reason == "done" and a.num_turns == 1 and a.messages[-1]["role"] == "assistant"
    assert a.response_mask[-1] == 1  # Done([]) adds nothing after the turn
    assert b.stop_reason == "no_tool_call" and b.num_turns == 1
    assert c.stop_reason == "max_turns" and c.num_turns == 3 and c.messages[-1]["content"] == "3"
    assert d.stop_reason == "done" and d.num_turns == 3 and d.messages[-1]["content"] == "Right, in 3."


class BadReply:
    @hookimpl
    def respond(self, messages, ctx):
        return "Higher."


def test_a_respond_that_returns_no_messages_is_the_trajectorys_error():
    [t] = rollout({"plugins": ["bad"]}, [{"id": "q", "prompt": "guess"}], {"q": ["3"]}, {"bad": BadReply()})
    assert t.stop_reason == "error" and "respond returned str" in t.error


def test_system_prompt_is_added_and_rows_in_verl_layout_are_accepted():
    row = {
        "prompt": [{"role": "user", "content": "hi"}],
        "data_source": "calc",
        "reward_model": {"ground_truth": "hello"},
        "extra_info": {"index": 7},
    }
    [t] = rollout(
        {**CONFIG, "rollout": {"system_prompt": "Be brief."}}, [row], {"7": ["hello"]}, {"calc": Calculator()}
    )
    assert t.row_id == "7" and t.env == "calc" and t.messages[0] == {"role": "system", "content": "Be brief."}
    assert t.reward == 1.0


class Other:
    @hookimpl
    def register_tools(self, ctx):
        @tool
        def lookup(key: str) -> str:
            """Look a key up."""
            return key.upper()

        return [lookup]

    @hookimpl
    def compute_score(self, sample):
        return 0.25


def test_per_sample_routing_tools_and_rewards():
    plugins = {"calc": Calculator(), "other": Other()}
    rows = [
        {"id": "r1", "env": "calc", "prompt": "p", "ground_truth": "5"},
        {"id": "r2", "env": "other", "prompt": "p"},
    ]
    script = {"r1": [call("lookup", key="k"), "5"], "r2": [call("lookup", key="k"), "K"]}
    r1, r2 = rollout({"plugins": ["calc", "other"]}, rows, script, plugins)
    tok = ByteChatTokenizer()
    assert '"add"' in tok.decode(r1.prompt_ids) and '"lookup"' not in tok.decode(r1.prompt_ids)
    assert '"lookup"' in tok.decode(r2.prompt_ids) and '"add"' not in tok.decode(r2.prompt_ids)
    assert r1.tool_error_kinds == {"unknown_tool": 1} and r2.tool_errors == 0
    assert r1.reward == 1.0 and r2.reward == 0.25


class Broken(Engine):
    async def generate(self, prompt_ids, params, request_id=""):
        if request_id.startswith("bad"):
            raise ConnectionError("server went away")
        return Generation(
            token_ids=ByteChatTokenizer().encode("fine") + [ByteChatTokenizer().eos_token_ids[0]],
            logprobs=None,
            finish_reason="stop",
        )


def test_an_engine_failure_ends_one_trajectory_only():
    runtime = make_runtime(CONFIG, {"calc": Calculator()})
    tok = ByteChatTokenizer()
    rows = [normalize_row({"id": "bad", "prompt": "x"}), normalize_row({"id": "good", "prompt": "x"})]
    bad, good = asyncio.run(Rollout(runtime, Broken(), tok).run(rows))
    assert bad.stop_reason == "error" and "server went away" in bad.error
    assert good.stop_reason == "no_tool_call" and good.response == "fine"


def test_a_slow_tool_does_not_hold_up_other_trajectories():
    runtime = make_runtime(CONFIG | {"tools": {"timeout_s": 5}}, {"calc": Calculator()})
    tok = ByteChatTokenizer()
    script = {"slow": [call("slow", seconds=1.0), "ok"], "fast": [call("add", a=1, b=1)] * 3 + ["2"]}
    engine = ScriptedEngine(tok, script, latency_s=0.02)
    done: dict[str, float] = {}
    t0 = time.perf_counter()
    rows = [normalize_row({"id": "slow", "prompt": "x"}), normalize_row({"id": "fast", "prompt": "x"})]
    asyncio.run(
        Rollout(runtime, engine, tok).run(rows, on_done=lambda t: done.setdefault(t.row_id, time.perf_counter() - t0))
    )
    assert done["fast"] < 0.6 and done["slow"] >= 1.0


def test_parallel_calls_of_one_turn_run_concurrently():
    runtime = make_runtime(
        CONFIG | {"tools": {"timeout_s": 5}, "rollout": {"sampling": {"max_tokens": 1024}}}, {"calc": Calculator()}
    )
    tok = ByteChatTokenizer()
    engine = ScriptedEngine(tok, {"q": ["".join(call("slow", seconds=0.2) for _ in range(8)), "ok"]})
    [t] = asyncio.run(Rollout(runtime, engine, tok).run([normalize_row({"id": "q", "prompt": "x"})]))
    assert t.tool_calls == 8 and t.tool_errors == 0
    assert t.tools_s < 0.2 * 8 / 2  # about 0.2 s, generously bounded well below serial time (1.6 s)


def test_engine_sees_the_configured_sampling_parameters_every_turn():
    seen: list[SamplingParams] = []

    class Recorder(ScriptedEngine):
        async def generate(self, prompt_ids, params, request_id=""):
            seen.append(params)
            return await super().generate(prompt_ids, params, request_id)

    runtime = make_runtime(
        CONFIG | {"rollout": {"sampling": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 64}}}, {"calc": Calculator()}
    )
    tok = ByteChatTokenizer()
    engine = Recorder(tok, {"q": [call("add", a=1, b=2), call("add", a=1, b=2), "3"]})
    asyncio.run(Rollout(runtime, engine, tok).run([normalize_row({"id": "q", "prompt": "x"})]))
    assert len(seen) == 3 and all(p.temperature == 0.7 and p.top_p == 0.9 and p.max_tokens == 64 for p in seen)
    assert all(tok.eos_token_ids[0] in p.stop_token_ids for p in seen)


class Sized:
    """Two plugins in one environment, each reading its own settings in the same hook chain."""

    def __init__(self, name):
        self.name = name
        self.seen = []

    @hookimpl
    def register_config_schema(self):
        from pydantic import BaseModel

        class Settings(BaseModel):
            label: str = "default"

        return Settings

    @hookimpl
    def parse_tool_calls(self, text, ctx):
        self.seen.append(ctx.settings.label)  # and declines, so the default parser answers


def test_each_plugin_sees_its_own_settings_in_a_shared_environment():
    first, second = Sized("first"), Sized("second")
    config = {
        "plugins": ["first", "second"],
        "envs": {"both": ["first", "second"]},
        "first": {"label": "one"},
        "second": {"label": "two"},
    }
    rollout(config, [{"id": "q", "prompt": "x"}], {"q": ["done"]}, {"first": first, "second": second})
    assert first.seen == ["one"] and second.seen == ["two"]


def test_rollouts_freeze_older_objects_only_while_they_run_and_leave_a_caller_s_freeze_alone():
    import gc

    from rlfcore.loop import _older_objects_frozen

    assert gc.get_freeze_count() == 0
    with _older_objects_frozen():
        assert gc.get_freeze_count() > 0
        with _older_objects_frozen():  # overlapping runs: the last one to end hands them back
            pass
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with _older_objects_frozen():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_rollouts_on_two_threads_keep_the_freeze_while_either_runs(monkeypatch):
    import gc
    import threading

    from rlfcore import loop

    class SlowUnfreeze:
        """The real gc, with an unfreeze slow enough for a run on another thread to start meanwhile."""

        def __init__(self):
            self.unfreezing = threading.Event()

        def __getattr__(self, name):
            return getattr(gc, name)

        def unfreeze(self):
            self.unfreezing.set()
            time.sleep(0.2)
            gc.unfreeze()

    slow = SlowUnfreeze()
    monkeypatch.setattr(loop, "gc", slow)
    assert gc.get_freeze_count() == 0

    def first_run():
        with loop._older_objects_frozen():
            pass

    ended = threading.Thread(target=first_run)
    ended.start()
    assert slow.unfreezing.wait(5)
    with loop._older_objects_frozen():  # starts while the first run is still handing the objects back
        ended.join()
        assert gc.get_freeze_count() > 0  # not left unfrozen by the first run's late unfreeze
    assert gc.get_freeze_count() == 0


class Steps(Rollout):
    """The token loop, recording the states its stop rule is asked about."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.asked: list[str] = []

    def stop_reason(self, state, p):
        self.asked.append(state.value)
        return super().stop_reason(state, p)


def test_each_turn_is_generate_parse_invoke_observe_and_the_stop_rule_is_the_only_way_out():
    runtime = make_runtime(CONFIG, {"calc": Calculator()})
    tok = ByteChatTokenizer()
    script = {"q": [call("add", a=1, b=2), "3"], "cut": ["y" * 300]}
    loop = Steps(runtime, ScriptedEngine(tok, script), tok)
    try:
        [answered] = runtime.run(loop.run([normalize_row({"id": "q", "prompt": "1+2?"})], n=1))
        asked_answered, loop.asked = loop.asked, []
        [cut] = runtime.run(loop.run([normalize_row({"id": "cut", "prompt": "go on"})], n=1))
    finally:
        runtime.close()
    turn = ["generate", "parse", "invoke", "observe"]
    assert asked_answered == ["prompt", *turn, *turn[:3]] and answered.stop_reason == "answer"
    # a cut turn is not parsed for calls; the rule ends it where it would have invoked them
    assert loop.asked == ["prompt", *turn[:3]] and cut.stop_reason == "max_tokens" and cut.truncated
    assert cut.messages[-1] == {"role": "assistant", "content": "y" * 256}


def test_an_observation_that_does_not_fit_ends_the_trajectory_before_it_joins():
    tok = ByteChatTokenizer()
    text = call("add", a=1, b=2)
    generated = len(tok.encode(text)) + 1  # and the end-of-turn token
    cfg = {**CONFIG, "rollout": {"max_response_tokens": generated + 3, "sampling": {"max_tokens": 200}}}
    [t] = rollout(cfg, [{"id": "q", "prompt": "1+2?"}], {"q": [text, "3"]}, {"calc": Calculator()})
    assert t.stop_reason == "max_response_tokens" and t.truncated and t.num_turns == 1
    assert t.tool_calls == 1  # the call ran; its result had no room
    assert [m["role"] for m in t.messages] == ["user", "assistant"] and t.response_mask == [1] * generated
