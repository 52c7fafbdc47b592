"""The embedded default (examples/calculator), shortened for CI: the same config and data, a real MCP
calculator server through rlf-mcp, a tiny model built from the example's text, SFT then GRPO.

The full run is README's main command; here a few steps show every stage works together.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tests.support import ROOT
from tests.support.rlf import run_rlf

EXAMPLE = ROOT / "examples" / "calculator"


def test_calculator_example_runs_end_to_end(tmp_path):
    pytest.importorskip("rlf_mcp", reason="rlf-mcp is not installed (pip install -e plugins/rlf-mcp)")
    for name in ("run.yaml", "questions.jsonl", "demos.jsonl", "eval.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    out = run_rlf(
        "train",
        str(tmp_path / "run.yaml"),
        "--run-dir",
        str(tmp_path / "run"),
        "sft.steps=20",
        "sft.batch_size=8",
        "trainer.steps=2",
        "trainer.prompts_per_step=2",
        "rollout.n=4",
        "model.init.hidden_size=32",
        "model.init.num_layers=1",
        "model.init.intermediate_size=64",
        "trainer.loggers=[tensorboard]",
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = tmp_path / "run"
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and (run / "reward_curve.png").exists()
    # the prompts list the MCP server's tool
    sample = json.loads((run / "samples" / "step_000001.jsonl").read_text().splitlines()[0])
    assert sample["env"] == "mcp"
    # trainer.loggers: [tensorboard] writes event files TensorBoard reads back, SFT and GRPO apart
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert [(e.step, round(e.value, 6)) for e in events.Scalars("reward_mean")] == [
        (m["step"], round(m["reward_mean"], 6)) for m in metrics
    ]
    assert len(events.Scalars("sft/loss")) == 20
