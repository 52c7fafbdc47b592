"""``rlf eval`` end to end: a tiny local model built here (no hub), a tool plugin, a dataset, JSONL out."""

from __future__ import annotations

import functools
import json
import operator
from pathlib import Path

import pytest

from tests.support.rlf import run_rlf
from tests.support.samples import ADDER_PLUGIN

TEXTS = [
    "What is 2 plus 3? The answer is 5.",
    '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>',
] * 20


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from rlfcore.tinymodel import build_tiny

    return build_tiny(TEXTS, tmp_path_factory.mktemp("tiny") / "model", vocab_size=300)


def test_eval_with_a_tiny_local_model(tiny, tmp_path):
    (tmp_path / "adder.py").write_text(ADDER_PLUGIN)
    rows = [{"id": f"q{i}", "prompt": f"What is {i} plus 1?", "ground_truth": str(i + 1)} for i in range(5)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "run.yaml").write_text(
        f"local_plugins: [adder.py]\nmodel:\n  path: {tiny}\ndata:\n  eval: data.jsonl\n"
        "rollout:\n  n: 2\n  max_turns: 2\n  sampling:\n    max_tokens: 24\n    seed: 1\nengine:\n  device: cpu\n"
    )
    out = run_rlf(
        "eval", str(tmp_path / "run.yaml"), "--limit", "3", "--out", str(tmp_path / "out.jsonl"), cwd=tmp_path
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["row_id"] for x in lines} == {"q0", "q1", "q2"}
    for x in lines:
        for key in (
            "id",
            "env",
            "messages",
            "num_turns",
            "stop_reason",
            "tool_calls",
            "tool_errors",
            "reward",
            "reward_components",
            "prompt_tokens",
            "response_tokens",
            "generated_tokens",
        ):
            assert key in x
        assert x["env"] == "adder" and x["messages"][0]["content"].startswith("What is")
        assert len(x["response_ids"]) == len(x["response_mask"]) == len(x["logprobs"]) == x["response_tokens"]
        assert all(lp <= 0 for lp, m in zip(x["logprobs"], x["response_mask"]) if m)
    assert "reward" in out.stdout and "trajectories" in out.stdout


def test_token_exact_with_a_trained_bpe_tokenizer(tiny, tmp_path):
    """The loop on a real BPE tokenizer: generated tokens verbatim, observations from template diffs."""
    import asyncio

    from rlfcore.chat import load_tokenizer
    from rlfcore.data import normalize_row
    from rlfcore.engines.scripted import ScriptedEngine
    from rlfcore.loop import Rollout
    from rlfcore.testing import make_runtime

    (tmp_path / "adder.py").write_text(ADDER_PLUGIN)
    (tmp_path / "run.yaml").write_text("local_plugins: [adder.py]\n")
    runtime = make_runtime(tmp_path / "run.yaml")
    tok = load_tokenizer(str(tiny))
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
    script = {"q": [call, "Next.\n" + call + "\n" + call, "5"]}
    [t] = asyncio.run(
        Rollout(runtime, ScriptedEngine(tok, script), tok).run([normalize_row({"id": "q", "prompt": "2+3?"})])
    )
    assert t.stop_reason == "answer" and t.tool_calls == 3
    eos = tok.eos_token_ids[0]
    assert [i for i, m in zip(t.response_ids, t.response_mask) if m] == functools.reduce(
        operator.iadd, (tok.encode(s) + [eos] for s in script["q"]), []
    )
    assert t.template_mismatch is None
