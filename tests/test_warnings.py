"""Runs that cannot learn, or measure little, say why and what to change; a whole failed step stops the run.

The trainer runs in process on a tiny Qwen3 model built here (no hub); warnings are read from stderr.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.diagnostics import trajectory_warnings
from rlfcore.failures import RunFailed
from rlfcore.loop import Trajectory
from rlfcore.testing import make_manager

CONSTANT = """
from rlfcore import hookimpl


@hookimpl
def compute_score(sample):
    return 0.5
"""

BROKEN = """
from rlfcore import hookimpl


@hookimpl
def compute_score(sample):
    raise RuntimeError("scorer bug")
"""


def _train(tmp_path: Path, plugin: str, overrides: list[str]):
    from rlfcore.backends.local.run import train
    from rlfcore.config import load_config

    (tmp_path / "plugin.py").write_text(plugin)
    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "run.yaml").write_text(
        "local_plugins: [plugin.py]\nmodel:\n  path: model\n  init: {texts: [rows.jsonl], vocab_size: 280, hidden_size: 16, "
        "num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 32}\ndata: {train: rows.jsonl}\n"
        "rollout: {n: 2, max_turns: 1, sampling: {max_tokens: 4}}\n"
        "trainer: {steps: 2, prompts_per_step: 2, checkpoint_every: 10, samples_per_step: 0}\nengine: {device: cpu}\n"
    )
    config, manager = load_config(tmp_path / "run.yaml", overrides, manager=make_manager())
    return train(config, manager, tmp_path / "run")


def test_n_1_and_sft_without_steps_are_warned_once_with_what_to_change(tmp_path, capsys):
    (tmp_path / "demos.jsonl").write_text(
        json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}) + "\n"
    )
    summary = _train(tmp_path, CONSTANT, ["rollout.n=1", "sft.data=demos.jsonl"])
    err = capsys.readouterr().err
    assert "warning: sft.data is set (demos.jsonl) but sft.steps is 0, so SFT is skipped: set sft.steps" in err
    assert err.count("zero reward variance in every group") == 1  # step 1 only, not every step
    assert (
        "warning: step 1: zero reward variance in every group: all advantages are 0 and the step learns nothing "
        "(active_fraction 0); rollout.n is 1, so each group has one sample: set rollout.n to 4 or more" in err
    )
    assert summary["steps_without_signal"] == 2


def test_a_constant_reward_is_named_as_the_cause(tmp_path, capsys):
    _train(tmp_path, CONSTANT, [])
    assert "every trajectory scored 0.5: the reward is constant; check compute_score" in capsys.readouterr().err


def test_a_step_whose_every_sample_failed_stops_the_run_with_the_cause(tmp_path):
    with pytest.raises(RunFailed) as info:
        _train(tmp_path, BROKEN, [])
    msg = str(info.value)
    assert msg.startswith(
        "step 1: every trajectory failed, nothing was measured. 4 of 4 trajectories failed: reward RuntimeError ×4"
    )
    assert "first: reward: compute_score failed: RuntimeError: scorer bug" in msg
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def _traj(i: int, **kw) -> Trajectory:
    return Trajectory(id=f"r{i // 2}#{i % 2}", row_id=f"r{i // 2}", env=None, messages=[], **kw)


def test_failing_tools_and_truncation_are_warned():
    from rlfcore.config import RunConfig

    config = RunConfig()
    trajs = [
        _traj(i, tool_calls=2, tool_errors=2, tool_error_kinds={"timeout": 2}, truncated=True, reward=float(i))
        for i in range(4)
    ]
    found = dict(trajectory_warnings(trajs, config, groups=True))
    assert "zero_variance" not in found
    assert found["tool_errors"].startswith("tool error rate 1.00 (8 of 8 calls failed: timeout ×8)")
    assert found["truncated"].startswith("every trajectory was truncated (rollout.max_response_tokens 1024")
    trajs[0].truncated, trajs[0].tool_errors = False, 0
    assert set(dict(trajectory_warnings(trajs, config, groups=True))) == {"tool_errors"}  # 6 of 8 still fail
