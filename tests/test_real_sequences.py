"""Token-exact sequences with the real Qwen3 (both revisions, thinking on and off), Qwen2.5,
Llama-3.1 and SmolLM2 tokenizers and chat templates (:mod:`rlfcore.realmodels`; SmolLM2's template
is rlf's own, its model having none with tools).

Many scripted trajectories per family run through the real loop; for each: no ``error`` stop, the
loss mask is exactly the generated tokens, the template check finds nothing (or, where Qwen3's
template drops earlier ``<think>`` blocks, only that), SFT on the recorded messages rebuilds the very
same tokens, and verl 0.9.1's continuous-token builder for the family gives the same tokens and mask.
The policy is scripted (no model can generate these formats on a CPU in seconds); the tokenizers,
templates, parsers, tools and verl builders are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from rlfcore import hookimpl
from rlfcore.chat import HFChatTokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.base import Generation
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Rollout
from rlfcore.sequences import OWN_TOKENIZATION, REASONING_DROPPED, SequenceBuilder, TemplateError
from rlfcore.testing import make_runtime
from rlfcore.tools import tool
from tests.support.docs import read_doc


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


class Arithmetic:
    @hookimpl
    def register_tools(self, ctx):
        return [add, mul]


class FollowUp(Arithmetic):
    """The same tools, but every tool turn is answered with a new user query (a user reply)."""

    @hookimpl
    def build_observation(self, results, ctx):
        return [{"role": "user", "content": "Now double it, please."}]


@dataclass
class Case:
    """A family under test: its tokenizer, parser, template variables and verl's model type."""

    family: str
    parser: str
    model_type: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    thinking: bool = False
    parallel: bool = True  # several calls in one turn (Llama 3.1's template allows one)


CASES = {
    "qwen3": Case("qwen3", "qwen3", "qwen3", thinking=True),
    "qwen3-nothink": Case("qwen3", "qwen3", "qwen3", {"enable_thinking": False}),
    "qwen3-original": Case("qwen3-original", "qwen3", "qwen3", thinking=True),
    "qwen3-original-nothink": Case("qwen3-original", "qwen3", "qwen3", {"enable_thinking": False}),
    "qwen2.5": Case("qwen2.5", "hermes", "qwen2"),
    "qwen3-coder": Case("qwen3-coder", "qwen3-coder", "qwen3_moe"),
    "llama3.1": Case("llama3.1", "llama3-json", "llama", parallel=False),
    # rlf's ChatML-with-tools template (rlfcore/models), on its real model_type: verl's default builder for
    # llama drops ChatML's newline after <|im_end|>, and rlf's bridge (chatml_aware) takes Qwen's instead.
    "smollm2": Case("smollm2", "hermes", "llama"),
}
TRAJECTORIES = 12
"""Per family; the closing figures in docs/models.md count these."""


def _call(case: Case, name: str, args: dict[str, int]) -> str:
    if case.family == "qwen3-coder":
        params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if case.family.startswith("llama"):
        return json.dumps({"name": name, "parameters": args})
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": args}) + "\n</tool_call>"


def _turn(case: Case, thought: str, content: str, calls: list[str]) -> str:
    """One assistant turn as the family's model writes it."""
    body = content
    if calls and case.family.startswith("llama"):
        body = calls[0]  # a Llama 3.1 call turn is the JSON object alone; its template keeps no text
    elif calls and case.family == "qwen3-coder":
        body = (content + "\n\n" if content else "") + "\n".join(calls)  # its template's spacing
    elif calls:
        body = (content + "\n" if content else "") + "\n".join(calls)
    if case.thinking:
        return f"<think>\n{thought}\n</think>\n\n{body}"
    return body


def scripts(case: Case, n: int, seed: int = 0) -> dict[str, list[str]]:
    """``n`` scripted trajectories: 0-3 tool turns of 1-2 calls, with and without text, then an answer."""
    rng = random.Random(f"{case.family}/{seed}")
    out = {}
    for k in range(n):
        turns = []
        for t in range(rng.randint(0, 3)):
            calls = [
                _call(case, rng.choice(["add", "mul"]), {"a": rng.randint(0, 99), "b": rng.randint(0, 99)})
                for _ in range(rng.randint(1, 2) if case.parallel else 1)
            ]
            content = rng.choice(["", "Let me compute that.", "I will use the tool."])
            turns.append(_turn(case, f"Step {t}: I need a tool.", content, calls))
        turns.append(_turn(case, "I have what I need.", f"The answer is {rng.randint(0, 9999)}.", []))
        out[f"r{k}"] = turns
    return out


def _runtime(case: Case, plugin: object | None = None):
    plugins: dict[str, object] = {"arith": plugin or Arithmetic()}
    config = {
        "plugins": list(plugins),
        "model": {"chat_template_kwargs": case.kwargs},
        "rollout": {
            "n": 1,
            "parser": case.parser,
            "max_turns": 6,
            "max_response_tokens": 4096,
            "max_total_tokens": 8192,
        },
    }
    return make_runtime(config, plugins=plugins)


def _roll(hf, case: Case, script: dict[str, list[str]], tokens=None, plugin=None):
    tok = HFChatTokenizer(hf, case.kwargs)
    runtime = _runtime(case, plugin)  # closed when the rollout ends; the tool schemas are kept
    loop = Rollout(runtime, ScriptedEngine(tok, script), tok, tokens)
    rows = [normalize_row({"id": rid, "prompt": "What is 17 plus 25, times 3?"}, i) for i, rid in enumerate(script)]

    async def go():
        async with runtime:
            trajs = await loop.run(rows)
            return [t.schema() for t in runtime.tools_for(trajs[0].env).values()], trajs

    return (tok, *asyncio.run(go()))


def _verl_builder(hf, case: Case):
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    from rlfcore.backends.verl.bridge import ContinuousTokens, chatml_aware

    inferred = create_continuous_token_builder(hf, hf_model_type=case.model_type, chat_template_kwargs=case.kwargs)
    return ContinuousTokens(chatml_aware(inferred, hf, case.kwargs))  # what RlfAgentLoop uses


def _generated(tok, script: list[str], turns: int) -> list[int]:
    """The tokens the scripted model generated: each turn's text and its end-of-turn token."""
    out: list[int] = []
    for text in script[:turns]:
        out += tok.encode(text) + [tok.eos_token_ids[0]]
    return out


@pytest.fixture(scope="module", params=list(CASES))
def rolled(request, real_models):
    case = CASES[request.param]
    hf = real_models.tokenizer(case.family)
    script = scripts(case, TRAJECTORIES)
    tok, schemas, trajs = _roll(hf, case, script)
    return request.param, case, hf, tok, schemas, script, trajs


def test_rollouts_are_exact_for_every_family(rolled):
    """No error stop, every tool turn parsed and run, the mask is exactly the generated tokens, and a
    full rendering of the recorded messages is the rollout's token sequence (thinking on), or differs
    only in the empty ``<think>`` blocks Qwen3's template leaves out of earlier turns (thinking off)."""
    _name, case, _hf, tok, _schemas, script, trajs = rolled
    assert len(trajs) == TRAJECTORIES
    for t in trajs:
        assert t.stop_reason in ("answer", "no_tool_call"), (t.id, t.stop_reason, t.error)
        expected_calls = sum(max(s.count("<tool_call>"), s.count('"name"')) for s in script[t.row_id][:-1])
        assert t.tool_calls == expected_calls and t.tool_errors == 0, (t.id, t.messages)
        masked = [i for i, m in zip(t.response_ids, t.response_mask) if m]
        assert masked == _generated(tok, script[t.row_id], t.num_turns)
        chain = t.tool_calls > 0
        if case.kwargs.get("enable_thinking") is False and chain:
            assert t.template_mismatch is not None and t.template_mismatch.startswith(REASONING_DROPPED), (
                t.template_mismatch
            )
        else:
            assert t.template_mismatch is None, (t.id, t.template_mismatch)
    assert sum(t.tool_calls for t in trajs) > TRAJECTORIES  # the scripts exercise tool chains


def test_recorded_messages_carry_reasoning_and_object_arguments(rolled):
    """Reasoning is in ``reasoning_content`` (Qwen3), never in ``content``; call arguments are objects."""
    _name, case, _hf, _tok, _schemas, _script, trajs = rolled
    assistant = [m for t in trajs for m in t.messages if m["role"] == "assistant"]
    assert all("<think>" not in m["content"] and "<tool_call>" not in m["content"] for m in assistant)
    if case.thinking:
        assert all(m.get("reasoning_content", "").startswith(("Step", "I have")) for m in assistant)
    else:
        assert not any("reasoning_content" in m for m in assistant)
    calls = [c for m in assistant for c in m.get("tool_calls", [])]
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)


def test_sft_on_recorded_messages_rebuilds_the_rollout(rolled):
    """``SequenceBuilder.conversation`` on a trajectory's messages gives its tokens and mask exactly."""
    _name, _case, _hf, tok, schemas, _script, trajs = rolled
    sb = SequenceBuilder(tok)
    for t in trajs:
        seq = sb.conversation(t.messages, schemas)
        assert seq.prompt_ids == t.prompt_ids
        assert seq.response_ids == t.response_ids, t.id
        assert seq.response_mask == t.response_mask, t.id


def test_verl_continuous_token_builder_agrees(rolled):
    """verl's builder for the family (Qwen's for Qwen3/Qwen2.5, the default one for Llama) gives the
    same prompt, tokens and mask as rlf's own builder for the same trajectories."""
    _name, case, hf, _tok, _schemas, script, trajs = rolled
    _, _, verls = _roll(hf, case, script, tokens=_verl_builder(hf, case))
    for ours, theirs in zip(trajs, verls):
        assert theirs.stop_reason == ours.stop_reason and theirs.error is None
        assert theirs.prompt_ids == ours.prompt_ids
        assert theirs.response_ids == ours.response_ids, ours.id
        assert theirs.response_mask == ours.response_mask, ours.id


@pytest.mark.parametrize("family", ["qwen3", "qwen3-original"])
def test_a_new_user_query_drops_reasoning_as_documented(real_models, family):
    """After a user reply, Qwen3's template leaves the earlier turn's thinking out of a full rendering;
    the rollout keeps what the model generated and the check reports exactly that, nothing else. verl
    builds the same tokens."""
    case = CASES[family]
    hf = real_models.tokenizer(family)
    script = {"u0": [_turn(case, "Add first.", "", [_call(case, "add", {"a": 1, "b": 2})]),
                     _turn(case, "Double 3.", "It is 6.", [])]}  # fmt: skip
    tok, _, (t,) = _roll(hf, case, script, plugin=FollowUp())
    assert t.stop_reason == "answer" and t.template_mismatch.startswith(REASONING_DROPPED)
    assert "Add first." in tok.decode(t.response_ids)  # kept as generated
    assert [m["role"] for m in t.messages[-3:]] == ["assistant", "user", "assistant"]
    _, _, (v,) = _roll(hf, case, script, tokens=_verl_builder(hf, case), plugin=FollowUp())
    assert (v.prompt_ids, v.response_ids, v.response_mask) == (t.prompt_ids, t.response_ids, t.response_mask)


def test_a_turn_the_model_split_otherwise_is_reported_as_its_own_tokenization(real_models):
    """A real model sometimes generates a text in tokens its tokenizer would not choose (the HumanEval
    eval of SmolLM2 did in 4 of 164 turns): the rollout keeps them, and the check says so by name."""
    case = CASES["smollm2"]
    tok = HFChatTokenizer(real_models.tokenizer("smollm2"), case.kwargs)
    ids = tok.encode("It is") + tok.encode(" ") + tok.encode("done.")  # " done" is one token to the tokenizer
    assert tok.decode(ids) == "It is done." and tok.encode("It is done.") != ids

    class Splitting(ScriptedEngine):
        async def generate(self, prompt_ids: list[int], params: Any, request_id: str = "") -> Generation:
            return Generation([*ids, *tok.eos_token_ids[:1]], [0.0] * (len(ids) + 1), "stop")

    runtime = _runtime(case)
    loop = Rollout(runtime, Splitting(tok, {}), tok)

    async def go() -> list[Any]:
        async with runtime:
            return await loop.run([normalize_row({"id": "q", "prompt": "Are you done?"}, 0)])

    [t] = asyncio.run(go())
    assert t.stop_reason == "no_tool_call" and t.response_ids == [*ids, *tok.eos_token_ids[:1]]
    assert t.template_mismatch.startswith(f"{OWN_TOKENIZATION} ("), t.template_mismatch
    assert "(in assistant turn 1)" in t.template_mismatch


def test_template_errors_name_template_message_and_difference(real_models):
    """A template that rewrites earlier turns cannot be used incrementally: the error says which
    template, which message and where the renderings part."""
    hf = real_models.tokenizer("qwen2.5")
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "More"},
    ]
    hf.chat_template = hf.chat_template.replace(  # each turn's header counts the messages: earlier turns change
        "'<|im_start|>' + message.role + '\\n' + message.content",
        "'<|im_start|>' + message.role + (messages|length|string) + '\\n' + message.content",
    )
    sb = SequenceBuilder(HFChatTokenizer(hf))
    with pytest.raises(TemplateError) as err:
        sb.assistant_ids(history, {"role": "assistant", "content": "Sure."}, None)
    text = str(err.value)
    assert "qwen2.5" in text and "chat template" in text and "assistant message 3" in text and "versus" in text


def test_models_page_names_every_family_tested():
    """docs/models.md lists each tested family's template by the digest rlf's errors name it with."""

    from rlfcore.chat import template_digest
    from rlfcore.realmodels import FAMILIES, template

    page = read_doc("models.md")
    for case in CASES.values():
        digest = template_digest(template(FAMILIES[case.family].template))
        assert f"`{digest}`" in page and f"`{case.parser}`" in page, (case.family, digest)
