"""Agent programs through rlf's endpoint: the real OpenAI SDK talks HTTP to the real server on
loopback; a scripted engine stands in for the model where the test is about tokens and episodes
(the tiny model trains through the same path in test_agents_train.py)."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from rlfcore import Score, hookimpl
from rlfcore.agents.rollout import AgentRollout
from rlfcore.chat import ByteChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Trajectory
from rlfcore.rewards import RewardPipeline
from rlfcore.testing import make_runtime
from tests.support import AGENT_PROGRAMS
from tests.support.agent_programs import ADD

TOK = ByteChatTokenizer()
EOS = TOK.eos_token_ids[0]


def call(name: str, **args: Any) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


class Exact:
    @hookimpl
    def compute_score(self, sample: Any) -> Score:
        return Score(value=float(sample.response.strip() == str(sample.ground_truth)))


def run_agent(
    agent: str | list[str],
    script: Any,
    rows: list[dict[str, Any]] | None = None,
    latency_s: float = 0.0,
    rollout: dict[str, Any] | None = None,
    reward: dict[str, Any] | None = None,
    **agent_cfg: Any,
) -> list[Trajectory]:
    cfg: dict[str, Any] = {"plugins": ["exact"], "rollout": {"n": 1, "max_response_tokens": 400, **(rollout or {})}}
    if reward is not None:
        cfg["reward"] = reward
    way = {"command": agent} if isinstance(agent, list) else {"entry": f"{AGENT_PROGRAMS}:{agent}"}
    cfg["agent"] = {**way, **agent_cfg}
    runtime = make_runtime(cfg, {"exact": Exact()})
    rows = rows or [{"id": "q", "prompt": "What is 2+3?", "ground_truth": "5"}]
    engine = ScriptedEngine(TOK, script, latency_s=latency_s)
    engine.generated: list[list[int]] = []  # type: ignore[misc]
    generate = engine.generate

    async def recording(prompt_ids: list[int], params: Any, request_id: str = "") -> Any:
        gen = await generate(prompt_ids, params, request_id)
        engine.generated.append(gen.token_ids)  # type: ignore[attr-defined]
        return gen

    engine.generate = recording  # type: ignore[method-assign]

    async def go() -> list[Trajectory]:
        loop = AgentRollout(runtime, engine, TOK)
        trajs = await loop.run([normalize_row(dict(r), i) for i, r in enumerate(rows)])
        await RewardPipeline(runtime).score(trajs)
        return trajs

    try:
        trajs = runtime.run(go())
    finally:
        runtime.close()
    for t in trajs:
        t.extra["generated"] = engine.generated  # type: ignore[attr-defined]
    return trajs


def generated_tokens(t: Trajectory) -> list[int]:
    return [i for i, m in zip(t.response_ids, t.response_mask) if m]


def test_an_openai_sdk_tool_loop_is_recorded_token_for_token():
    script = {"q": [call("add", a=2, b=3), "5"]}
    [t] = run_agent("sdk_agent", script)
    assert t.stop_reason == "answer" and t.error is None and t.reward == 1.0, t.error
    assert t.num_turns == 2 and t.tool_calls == 1 and t.segments == [] and t.segment_reason == "first request"
    # the mask covers exactly what the engine generated, in order
    assert generated_tokens(t) == [i for g in t.extra["generated"] for i in g]
    assert generated_tokens(t) == TOK.encode(script["q"][0]) + [EOS] + TOK.encode("5") + [EOS]
    # and the whole sequence is the template's rendering of the conversation, tools included
    full = TOK.encode(TOK.render(t.messages, [ADD], add_generation_prompt=False))
    assert full[: len(t.prompt_ids) + len(t.response_ids)] == t.prompt_ids + t.response_ids
    assert t.template_mismatch is None
    observed = TOK.decode([i for i, m in zip(t.response_ids, t.response_mask) if not m])
    assert "<tool_response>\n5\n</tool_response>" in observed
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant"]


def test_streamed_answers_give_the_same_tokens():
    script = {"q": [call("add", a=2, b=3), "5"]}
    [plain] = run_agent("sdk_agent", script)
    [streamed] = run_agent("streaming_agent", script)
    assert streamed.stop_reason == "answer" and streamed.reward == 1.0, streamed.error
    assert (streamed.prompt_ids, streamed.response_ids, streamed.response_mask) == (
        plain.prompt_ids,
        plain.response_ids,
        plain.response_mask,
    )


def test_a_rewritten_history_starts_a_segment_that_shares_the_reward():
    script = {"q": [call("add", a=2, b=3), "5"]}
    [t] = run_agent("summarising_agent", script)
    assert t.stop_reason == "answer" and t.reward == 1.0
    assert t.segment_reason == "the history was rewritten at message 0 (user)"
    [first] = t.segments
    assert first["reason"] == "first request"
    assert [i for i, m in zip(first["response_ids"], first["response_mask"]) if m] == TOK.encode(script["q"][0]) + [EOS]
    assert generated_tokens(t) == TOK.encode("5") + [EOS]
    assert len(t.sequences()) == 2 and t.template_mismatch is None


def test_requests_side_by_side_and_n_choices_are_segments_of_one_episode():
    [t] = run_agent("fanout_agent", lambda rid, prompt: "four", latency_s=0.3)  # the first two overlap
    assert t.stop_reason == "answer", t.error
    reasons = sorted([t.segment_reason or "", *(s["reason"] for s in t.segments)])
    beside, again = "a request beside one still being answered", "the same request again"
    assert reasons == [beside, "choice 2 of 2", "first request", again]
    # four generations, each trained once
    assert sum(sum(s.response_mask) for s in t.sequences()) == 4 * len(TOK.encode("four") + [EOS])


def test_an_agent_program_run_by_command_gets_its_endpoint_from_the_environment():
    script = {"q": [call("add", a=2, b=3), "5"]}
    [t] = run_agent([sys.executable, str(AGENT_PROGRAMS)], script)
    assert t.stop_reason == "answer" and t.answer == "5" and t.reward == 1.0, t.error
    assert generated_tokens(t) == TOK.encode(script["q"][0]) + [EOS] + TOK.encode("5") + [EOS]


@pytest.mark.parametrize(
    ("agent", "reason", "says"),
    [
        ("crashing_agent", "agent_error", "RuntimeError: the agent's own bug"),
        ("wrong_model_agent", "agent_error", "model 'gpt-4o' does not exist here: this endpoint serves 'policy'"),
        ("endless_agent", "max_requests", None),
    ],
)
def test_a_misbehaving_agent_ends_only_its_episode_and_keeps_what_was_recorded(agent, reason, says):
    rows = [
        {"id": "q", "prompt": "What is 2+3?", "ground_truth": "5"},
        {"id": "r", "prompt": "2+2?", "ground_truth": "4"},
    ]
    script = lambda rid, prompt: "4"  # noqa: E731
    bad, good = run_agent(agent, script, rows, max_requests=3)
    assert bad.stop_reason == reason and (says is None or says in (bad.error or "")), bad.error
    if agent != "wrong_model_agent":
        assert generated_tokens(bad) == TOK.encode("4") + [EOS]  # what it did before it failed is kept
    assert good.stop_reason in ("answer", reason)  # the same agent's other episode ran on its own


def test_a_hanging_agent_is_stopped_at_its_time():
    t0 = time.monotonic()
    [t] = run_agent("hanging_agent", lambda rid, prompt: "4", timeout_s=1.0)
    assert t.stop_reason == "agent_timeout" and "agent.timeout_s (1 s)" in (t.error or "")
    assert generated_tokens(t) == TOK.encode("4") + [EOS] and time.monotonic() - t0 < 30


def test_a_hanging_agent_program_is_killed_with_its_children():
    [t] = run_agent([sys.executable, str(AGENT_PROGRAMS), "hang"], lambda rid, prompt: "4", timeout_s=2.0)
    assert t.stop_reason == "agent_timeout"
    time.sleep(0.2)
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == "import time; time.sleep(3600)"]
    assert not left, "a child of the killed agent program outlived it"


def _cmdline(proc: Path) -> str:
    try:
        return proc.joinpath("cmdline").read_bytes().split(b"\0")[2].decode()
    except (OSError, IndexError):
        return ""


def test_qwen_agents_assistant_trains_through_the_endpoint_unchanged():
    pytest.importorskip("qwen_agent")
    prompts: list[str] = []

    def policy(_request_id: str, prompt: str) -> str:
        prompts.append(prompt)
        return call("add", a=2, b=3) if len(prompts) == 1 else "5"

    [t] = run_agent("qwen_agent_assistant", policy)
    assert t.stop_reason == "answer" and t.answer == "5" and t.reward == 1.0, t.error
    assert "add" in prompts[0] and "Add two integers." in prompts[0]  # its own tool prompt reached the model
    assert "5" in prompts[1]  # and the tool's result came back in the second request
    for seq in t.sequences():  # every segment holds exactly what was generated
        assert len(seq.response_ids) == len(seq.response_mask) == len(seq.logprobs)
    generated = [i for s in t.sequences() for i, m in zip(s.response_ids, s.response_mask) if m]
    assert generated == [i for g in t.extra["generated"] for i in g]
    # qwen-agent resends its history as rlf answered it: one segment, the template's own rendering
    assert t.segments == [] and t.segment_reason == "first request" and t.template_mismatch is None


def test_the_openai_agents_sdk_trains_through_the_endpoint_unchanged():
    pytest.importorskip("agents")
    script = {"q": [call("add", a=2, b=3), "5"]}
    [t] = run_agent("openai_agents_sdk", script)
    assert t.stop_reason == "answer" and t.answer == "5" and t.reward == 1.0, t.error
    assert t.messages[0] == {"role": "system", "content": "Use the add tool for sums."}
    assert [m["role"] for m in t.messages[1:]] == ["user", "assistant", "tool", "assistant"]
    assert t.segments == [] and t.template_mismatch is None
    assert generated_tokens(t) == TOK.encode(script["q"][0]) + [EOS] + TOK.encode("5") + [EOS]


def test_the_endpoint_refuses_what_it_cannot_serve_with_openais_error_shape():
    [t] = run_agent("probing_agent", lambda rid, prompt: "4")
    assert t.stop_reason == "answer", t.error
    assert json.loads(t.answer or "{}") == {
        "no key": [401, "missing_api_key"],
        "unknown key": [401, "invalid_api_key"],
        "another model": [404, "model_not_found"],
        "no messages": [400, "invalid_messages"],
        "forced call": [400, "unsupported_tool_choice"],
        "bad role": [400, "invalid_messages"],
        "not JSON": [400, "invalid_json"],
        "models": [200, "policy"],
    }
    assert t.num_turns == 1  # none of the refused requests reached the policy


def test_a_key_of_an_ended_episode_gets_409():
    from rlfcore.agents.gateway import Gateway, RequestError

    class Episode:
        ended = None

    gateway = Gateway("127.0.0.1", "policy")
    key = gateway.add(Episode())  # type: ignore[arg-type]
    gateway.remove(key, "answer")
    with pytest.raises(RequestError) as refused:
        gateway.episode(f"Bearer {key}")
    assert refused.value.status == 409 and "ended (answer)" in refused.value.message


@pytest.mark.parametrize(("mode", "checked"), [(True, 3), ("group", 1), (False, 0)])
def test_check_template_checks_the_episodes_its_mode_names(monkeypatch, mode, checked):
    """``rollout.check_template``: every episode (true), one per group (group, the default), none (false),
    as for rlf's own loop; an agent's group once checked only its first episode whatever the mode."""
    seen: list[str] = []
    real = AgentRollout.check_template

    def counting(self: AgentRollout, segments: Any) -> str | None:
        seen.append("checked")
        return real(self, segments)

    monkeypatch.setattr(AgentRollout, "check_template", counting)
    trajs = run_agent("sdk_agent", {"q": [call("add", a=2, b=3), "5"] * 3}, rollout={"n": 3, "check_template": mode})
    assert len(trajs) == 3 and all(t.stop_reason == "answer" for t in trajs), [t.error for t in trajs]
    assert len(seen) == checked


def test_an_answer_generated_after_its_episode_ended_is_not_recorded():
    """The agent is stopped (agent.timeout_s) while its second request is generated: the answer that
    comes after the trajectory was filled in is refused, and the trajectory keeps what it had."""
    agent = {"entry": f"{AGENT_PROGRAMS}:sdk_agent", "timeout_s": 1.0}
    runtime = make_runtime({"plugins": ["exact"], "rollout": {"n": 1}, "agent": agent}, {"exact": Exact()})
    script = {"q": [call("add", a=2, b=3), "5"]}
    engine = ScriptedEngine(TOK, script)
    generate, calls = engine.generate, []

    async def slow_second(prompt_ids: list[int], params: Any, request_id: str = "") -> Any:
        calls.append(request_id)
        if len(calls) == 2:
            await asyncio.sleep(2.0)
        return await generate(prompt_ids, params, request_id)

    engine.generate = slow_second  # type: ignore[method-assign]

    async def go() -> tuple[Trajectory, list[int]]:
        row = normalize_row({"id": "q", "prompt": "What is 2+3?", "ground_truth": "5"}, 0)
        [t] = await AgentRollout(runtime, engine, TOK).run([row])
        kept = list(t.response_ids)
        await asyncio.sleep(2.5)  # the second answer is generated meanwhile
        return t, kept

    try:
        t, kept = runtime.run(go())
    finally:
        runtime.close()
    assert len(calls) == 2 and t.stop_reason == "agent_timeout"
    assert t.response_ids == kept
    assert generated_tokens(t) == TOK.encode(script["q"][0]) + [EOS]


@pytest.mark.parametrize("spare", [0, 1])
def test_max_response_tokens_bounds_what_the_whole_episode_generates(spare: int):
    """The summarising agent starts a fresh context for its second request. The episode's budget is
    what it generated in every context: with ``spare`` tokens left, the second answer is cut there
    (the agent takes it as its answer); with none, the request is refused as a full context and the
    episode ends on the limit."""
    script = {"q": [call("add", a=2, b=3), "5"]}
    first = len(TOK.encode(script["q"][0])) + 1
    [t] = run_agent("summarising_agent", script, rollout={"max_response_tokens": first + spare})
    generated = [i for s in t.sequences() for i, m in zip(s.response_ids, s.response_mask) if m]
    assert len(generated) == first + spare
    if spare:
        assert t.stop_reason == "answer" and generated_tokens(t) == TOK.encode("5")  # no end-of-turn: cut
    else:
        assert t.stop_reason == "max_response_tokens" and t.truncated and t.segments == []


def test_an_agent_reports_its_own_reward_to_the_endpoint():
    """``POST /v1/rlf/reward`` with the episode's key: the ``agent`` reward component, weighed like any
    other; a body that is not a finite number is refused with 400."""
    [t] = run_agent("self_judging_agent", lambda rid, prompt: "5", reward={"weights": {"agent": 2.0}})
    assert t.answer == "5 400 200" and t.agent_reward == 0.75
    assert t.reward_components["agent"] == 0.75 and t.reward == 1.5
    assert t.record()["agent_reward"] == 0.75  # kept, so rlf rescore composes it again
