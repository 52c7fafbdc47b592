"""`rlf train` of agent programs on the tiny model: examples/agent-calculator (an OpenAI SDK tool
loop, shortened for CI) and an agent whose every episode has two segments, both trained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import AGENT_PROGRAMS, ROOT
from tests.support.rlf import run_rlf

EXAMPLE = ROOT / "examples" / "agent-calculator"
SHORT = [
    "sft.steps=20",
    "sft.batch_size=8",
    "trainer.steps=2",
    "trainer.prompts_per_step=2",
    "rollout.n=4",
    "model.init.hidden_size=32",
    "model.init.num_layers=1",
    "model.init.intermediate_size=64",
]

pytestmark = pytest.mark.slow


def train(tmp_path: Path, *overrides: str) -> list[dict]:
    out = run_rlf(
        "train",
        str(EXAMPLE / "run.yaml"),
        "--run-dir",
        str(tmp_path / "run"),
        f"model.path={tmp_path / 'model'}",
        *SHORT,
        *overrides,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    metrics = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    return [json.loads(x) for x in (tmp_path / "run" / "samples" / "step_000002.jsonl").read_text().splitlines()]


def test_the_agent_calculator_example_trains_through_the_endpoint(tmp_path):
    samples = train(tmp_path)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tmp_path / "model")
    for s in samples:
        assert s["stop_reason"] in ("answer", "agent_error", "max_response_tokens", "max_total_tokens"), s["error"]
        assert s["segment_reason"] == "first request" and s["generated_tokens"] > 0
        # the agent's own tool is in the prompt, as the agent sent it
        assert '"name": "calculate"' in tok.decode(s["prompt_ids"]) or "calculate" in tok.decode(s["prompt_ids"])
        assert len(s["logprobs"]) == len(s["response_ids"]) == len(s["response_mask"])


def test_every_segment_of_an_episode_trains(tmp_path):
    samples = train(tmp_path, f"agent.entry={AGENT_PROGRAMS}:forgetful_agent")
    for s in samples:
        assert s["stop_reason"] == "answer", s["error"]
        assert s["segment_reason"] == "the history was rewritten at message 0 (system)"
        [first] = s["segments"]
        assert first["reason"] == "first request" and sum(first["response_mask"]) > 0


@pytest.mark.parametrize("agent", ["openai_agents_sdk", "qwen_agent_assistant"])
def test_real_agent_libraries_train_with_rlf_train(tmp_path, agent):
    """The OpenAI Agents SDK's Runner and qwen-agent's Assistant, unchanged, through `rlf train`: the
    tiny model says little of sense after 20 SFT steps, but every episode is recorded and trained."""
    pytest.importorskip("agents" if agent == "openai_agents_sdk" else "qwen_agent")
    samples = train(tmp_path, f"agent.entry={AGENT_PROGRAMS}:{agent}", "agent.timeout_s=30")
    assert samples
    for s in samples:
        assert s["segment_reason"] is not None and s["generated_tokens"] > 0, s["error"]
        assert s["stop_reason"] in ("answer", "agent_error", "max_response_tokens", "max_total_tokens"), s["error"]
