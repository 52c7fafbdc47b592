"""Damaged checkpoints (a truncated ``trainer.pt`` or ``model.safetensors``): resuming fails with an
error naming the file and offering the last intact checkpoint, and ``--resume-from`` continues from it.

The run is real (a tiny Qwen3 built here, four GRPO steps on CPU, checkpoints at steps 2 and 4); the
damage is a truncation, as a full disk or a copy cut short leaves.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlfcore.backends.local.checkpoint import CheckpointError, damage, last_intact
from rlfcore.backends.local.run import train
from rlfcore.config import load_config
from tests.support.rlf import run_rlf

PLUGIN = """
from rlfcore import Score, hookimpl


@hookimpl
def compute_score(sample):
    return Score(value=float(sample.response.startswith("A")))
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A project folder with a finished 4-step run in ``run/``."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "plugin.py").write_text(PLUGIN)
    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(8)]
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "run.yaml").write_text(
        "local_plugins: [plugin.py]\nseed: 3\nmodel:\n  path: model\n"
        "  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
        "data: {train: rows.jsonl}\nrollout: {n: 2, max_turns: 1, sampling: {max_tokens: 4, temperature: 1.0}}\n"
        "trainer: {steps: 4, prompts_per_step: 2, lr: 0.01, checkpoint_every: 2, samples_per_step: 0}\nengine: {device: cpu}\n"
    )
    _train(folder, folder / "run", resume=False)
    return folder


def _train(folder: Path, run: Path, steps: int = 4, **kwargs) -> dict:
    config, manager = load_config(folder / "run.yaml", [f"trainer.steps={steps}"])
    return train(config, manager, run, **kwargs)


def _damaged_copy(finished: Path, tmp_path: Path, file: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished / "run", run)
    target = run / "checkpoints" / "step_000004" / file
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    return run


@pytest.mark.parametrize("file", ["trainer.pt", "model/model.safetensors"])
def test_a_truncated_checkpoint_is_named_and_the_intact_one_offered(finished, tmp_path, file):
    run = _damaged_copy(finished, tmp_path, file)
    with pytest.raises(CheckpointError) as caught:
        _train(finished, run, steps=5, resume=True)
    message = str(caught.value)
    assert str(run / "checkpoints" / "step_000004" / file) in message
    assert f"--resume-from {run / 'checkpoints' / 'step_000002'}" in message


def test_resume_from_the_intact_checkpoint_continues_the_run(finished, tmp_path):
    run = _damaged_copy(finished, tmp_path, "trainer.pt")
    summary = _train(finished, run, steps=5, resume_from=run / "checkpoints" / "step_000002")
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 5 and steps == [1, 2, 3, 4, 5]
    assert damage(run / "checkpoints" / "step_000004") is None  # saved again, whole, over the damaged one


def test_damage_reads_headers_only_and_finds_no_intact_checkpoint_when_all_are_broken(finished, tmp_path):
    checkpoints = finished / "run" / "checkpoints"
    assert damage(checkpoints / "step_000002") is None and damage(checkpoints / "step_000004") is None
    run = _damaged_copy(finished, tmp_path, "model/model.safetensors")
    weights = run / "checkpoints" / "step_000002" / "model" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:4])
    found = sorted((run / "checkpoints").glob("step_*"))
    assert last_intact(found, run / "checkpoints" / "step_000004") is None
    assert "shorter than a safetensors header" in (damage(found[0]) or "")
    with pytest.raises(CheckpointError, match="no earlier checkpoint is intact"):
        _train(finished, run, steps=5, resume=True)


@pytest.mark.slow
def test_rlf_train_resume_reports_the_damaged_file(finished, tmp_path):
    run = _damaged_copy(finished, tmp_path, "trainer.pt")
    out = run_rlf(
        "train", str(finished / "run.yaml"), "trainer.steps=5", "--run-dir", str(run), "--resume", cwd=finished
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "CheckpointError" in out.stderr and str(run / "checkpoints" / "step_000004" / "trainer.pt") in out.stderr
    assert "--resume-from" in out.stderr
