"""Run folders that cannot mix: one process per folder, a resume that keeps the run's record, metrics
and checkpoints that a killed or starved process leaves whole.

The runs are real (a tiny Qwen3 built here, two GRPO steps on CPU, a checkpoint at step 2); the
second process is a real one holding the folder's lock; the full disk is ``torch.save`` failing with
ENOSPC after writing part of its file.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlfcore.backends.local import rundir
from rlfcore.backends.local.checkpoint import CheckpointError
from rlfcore.backends.local.local import LocalTrainer
from rlfcore.backends.local.lock import RunDirError, RunDirInUse, RunLock
from rlfcore.backends.local.model import load_policy
from rlfcore.backends.local.resume import ConfigChanged, check_resume_config, describe
from rlfcore.backends.local.run import train
from rlfcore.backends.local.rundir import RunDir
from rlfcore.config import load_config
from rlfcore.schema import RunConfig
from tests.support import ROOT
from tests.support.rlf import run_rlf

PLUGIN = """
from rlfcore import Score, hookimpl


@hookimpl
def compute_score(sample):
    return Score(value=float(sample.response.startswith("A")))
"""

HOLD = """
import sys
from pathlib import Path
from rlfcore.backends.local.lock import RunLock

with RunLock(Path(sys.argv[1])):
    print("held", flush=True)
    sys.stdin.readline()
"""

SHAPED = """
from pydantic import BaseModel
from rlfcore import hookimpl


class Settings(BaseModel):
    depth: int = 2
    style: str = "plain"


@hookimpl
def register_config_schema():
    return Settings
"""


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A project folder with a finished 2-step run in ``run/`` (checkpoint at step 2)."""
    folder = tmp_path_factory.mktemp("project")
    (folder / "plugin.py").write_text(PLUGIN)
    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(8)]
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "other.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    (folder / "run.yaml").write_text(
        "local_plugins: [plugin.py]\nseed: 3\nmodel:\n  path: model\n"
        "  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 32, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 64}\n"
        "data: {train: rows.jsonl}\nrollout: {n: 2, max_turns: 1, sampling: {max_tokens: 4, temperature: 1.0}}\n"
        "trainer: {steps: 2, prompts_per_step: 2, lr: 0.01, checkpoint_every: 2, samples_per_step: 0}\nengine: {device: cpu}\n"
    )
    _train(folder, folder / "run")
    return folder


def _train(folder: Path, run: Path, *overrides: str, **kwargs) -> dict:
    config, manager = load_config(folder / "run.yaml", list(overrides))
    return train(config, manager, run, **kwargs)


def _copy(finished: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished / "run", run)
    return run


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def holder():
    """Start a second process holding a folder's lock; yields (start, child) and ends the child."""
    children: list[subprocess.Popen] = []

    def start(folder: Path) -> subprocess.Popen:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        child = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        children.append(child)
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        return child

    yield start
    for child in children:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


# --- defect 5: one process per run folder ------------------------------------------------------------


def test_a_second_run_on_a_held_folder_is_refused_naming_the_holder_and_writes_nothing(finished, tmp_path, holder):
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    child = holder(fresh)
    before = _snapshot(fresh)
    with pytest.raises(RunDirInUse, match=rf"in use by another rlf process \(pid {child.pid}\)"):
        _train(finished, fresh)
    assert _snapshot(fresh) == before  # no config.yaml, no metrics: only the holder's lock file
    assert before == {".rlf.lock": f"{child.pid}\n".encode()}

    child.send_signal(signal.SIGKILL)  # a killed holder leaves no lock behind: the kernel drops it
    child.wait(timeout=30)
    with RunLock(fresh) as lock:
        assert (fresh / ".rlf.lock").read_text() == f"{os.getpid()}\n" and lock.fd is not None


@pytest.mark.slow
def test_rlf_train_resume_on_a_held_folder_exits_2_and_leaves_the_run_alone(finished, tmp_path, holder):
    run = _copy(finished, tmp_path)
    child = holder(run)
    before = _snapshot(run)
    out = run_rlf("train", str(finished / "run.yaml"), "trainer.steps=3", "--run-dir", str(run), "--resume")
    assert out.returncode == 2, out.stdout + out.stderr
    assert f"pid {child.pid}" in out.stderr and str(run) in out.stderr
    assert _snapshot(run) == before


# --- defect 6: a resume keeps the run's record, and applies the changes it accepts --------------------


def test_resume_refuses_config_changes_that_break_the_run_listing_each(finished, tmp_path):
    run = _copy(finished, tmp_path)
    before = _snapshot(run)
    changed = ("rollout.n=4", "model.init.hidden_size=64", "data.train=other.jsonl", "seed=4", "trainer.kl_coef=0.1")
    with pytest.raises(ConfigChanged) as caught:
        _train(finished, run, "trainer.steps=3", "trainer.lr=0.001", *changed, resume=True)
    message = str(caught.value)
    for line in (
        "rollout.n: 2 -> 4",
        "model.init.hidden_size: 32 -> 64",
        'data.train: "rows.jsonl" -> "other.jsonl"',
        "seed: 3 -> 4",
        "trainer.kl_coef: 0.0 -> 0.1",
    ):
        assert f"  {line}\n" in message, message
    assert "trainer.lr" not in message and "trainer.steps" not in message  # accepted changes are not listed
    assert "--allow-config-change" in message and str(run / "config.yaml") in message
    assert _snapshot(run) == before  # config.yaml keeps the recorded values


def test_resume_applies_a_new_learning_rate_and_weight_decay_to_the_restored_optimizer(
    finished, tmp_path, monkeypatch, capsys
):
    run = _copy(finished, tmp_path)
    restored: list[tuple[float, float, list[float]]] = []
    original = LocalTrainer.restore

    def spy(self: LocalTrainer, checkpoint: Path) -> None:
        original(self, checkpoint)
        group = self.optimizer.param_groups[0]
        restored.append((group["lr"], group["weight_decay"], self.scheduler.get_last_lr()))

    monkeypatch.setattr(LocalTrainer, "restore", spy)
    _train(finished, run, "trainer.steps=3", "trainer.lr=0.001", "trainer.weight_decay=0.05", resume=True)
    assert restored == [(pytest.approx(0.001), pytest.approx(0.05), [pytest.approx(0.001)])]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert metrics[1]["lr"] == pytest.approx(0.01) and metrics[2]["lr"] == pytest.approx(0.001)
    recorded = yaml.safe_load((run / "config.yaml").read_text())["trainer"]
    assert recorded["lr"] == 0.001 and recorded["steps"] == 3
    assert "trainer.lr: 0.01 -> 0.001" in capsys.readouterr().err


def test_allow_config_change_resumes_with_the_new_values(finished, tmp_path):
    run = _copy(finished, tmp_path)
    summary = _train(finished, run, "trainer.steps=3", "rollout.n=3", resume=True, allow_config_change=True)
    assert summary["steps"] == 3 and _steps(run) == [1, 2, 3]
    assert yaml.safe_load((run / "config.yaml").read_text())["rollout"]["n"] == 3


@pytest.mark.slow
def test_rlf_train_resume_with_a_changed_group_size_exits_2(finished, tmp_path):
    run = _copy(finished, tmp_path)
    out = run_rlf(
        "train", str(finished / "run.yaml"), "trainer.steps=3", "rollout.n=4", "--run-dir", str(run), "--resume"
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "rollout.n: 2 -> 4" in out.stderr and "--allow-config-change" in out.stderr
    assert yaml.safe_load((run / "config.yaml").read_text())["rollout"]["n"] == 2


def _older_record(tmp_path: Path, *overrides: str, drop: tuple[str, ...]) -> tuple[Path, RunConfig]:
    """A run folder whose ``config.yaml`` is the default config's record, less the dotted paths in
    ``drop`` (as an rlf written before those settings existed records it), and the config a resume of it
    gives: the same one with ``overrides``. Its plugin ``shaped`` has a section of its own."""
    (tmp_path / "shaped.py").write_text(SHAPED)
    (tmp_path / "run.yaml").write_text("local_plugins: [shaped.py]\ndata: {train: rows.jsonl}\n")
    record = load_config(tmp_path / "run.yaml")[0].resolved()
    for name in drop:
        *sections, key = name.split(".")
        owner = record
        for part in sections:
            owner = owner[part]
        del owner[key]
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    return run, load_config(tmp_path / "run.yaml", list(overrides))[0]


OLDER = ("tools.shutdown_timeout_s", "engine.max_response_bytes", "rollout.n", "shaped.depth", "sft", "agent")


def test_resume_takes_a_setting_the_record_lacks_at_its_default_as_unchanged(tmp_path):
    """A run recorded before a setting existed resumes when the setting keeps its default, at a leaf,
    a whole section or a plugin's field."""
    run, config = _older_record(tmp_path, drop=OLDER)
    assert check_resume_config(run, config, allow_change=False) == []


def test_a_setting_the_record_lacks_with_another_value_is_still_a_change(tmp_path):
    """Only a setting at its default is taken for the older run's behaviour; any other value is listed
    as ``(not set) -> value``, refused unless resumable, leaf by leaf inside a section the record lacks."""
    changed = ("engine.max_response_bytes=1048576", "rollout.n=4", "shaped.depth=5", "sft.steps=7", "trainer.lr=0.5")
    run, config = _older_record(tmp_path, *changed, drop=(*OLDER, "trainer.lr"))
    with pytest.raises(ConfigChanged) as caught:
        check_resume_config(run, config, allow_change=False)
    message = str(caught.value)
    for line in (
        "engine.max_response_bytes: (not set) -> 1048576",
        "rollout.n: (not set) -> 4",
        "shaped.depth: (not set) -> 5",
        "sft.steps: (not set) -> 7",
    ):
        assert f"  {line}\n" in message, message
    assert message.count(" -> ") == 4, message  # nothing else: sft's other fields and the accepted lr
    accepted = describe(check_resume_config(run, config, allow_change=True))
    assert "trainer.lr: (not set) -> 0.5" in accepted and accepted.count(" -> ") == 5, accepted


# --- defect 7: a torn last line of metrics.jsonl -----------------------------------------------------


def test_resume_drops_a_torn_last_metrics_line_with_a_warning(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "reward_me')  # a process killed while writing step 3's line
    summary = _train(finished, run, "trainer.steps=3", resume=True)
    assert summary["steps"] == 3 and _steps(run) == [1, 2, 3]  # every line whole, none glued to the torn one
    assert "metrics.jsonl: dropped its last line, written only in part (22 bytes)" in capsys.readouterr().err


def test_drop_torn_line_keeps_a_whole_last_line_and_a_damaged_middle_line_is_named(tmp_path):
    folder = RunDir(tmp_path)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}')  # whole, only its newline missing
    assert folder.drop_torn_line() is None
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "re{"step": 2}\n{"step": 3}\n')
    with pytest.raises(RunDirError, match=r"metrics.jsonl, line 2: not a JSON line"):
        folder.metrics()


# --- defect 11: no partial checkpoint survives --------------------------------------------------------


def test_a_full_disk_while_saving_leaves_no_partial_checkpoint(finished, tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run")
    model, tokenizer = load_policy(finished / "run" / "checkpoints" / "step_000002" / "model", "cpu")
    real_save = rundir.torch.save

    def full_disk(obj: object, path: Path) -> None:
        real_save(obj, path)
        Path(path).write_bytes(Path(path).read_bytes()[:100])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(rundir.torch, "save", full_disk)
    with pytest.raises(
        CheckpointError, match=r"could not save the checkpoint .*step_000003 \(OSError: .*No space left"
    ):
        run.save_checkpoint("step_000003", model, tokenizer, {"step": 3})
    assert list(run.checkpoints.iterdir()) == []  # neither step_000003 nor .step_000003.tmp


def test_a_partial_checkpoint_left_by_a_killed_run_is_cleared_at_the_next_start(finished, tmp_path, capsys):
    run = _copy(finished, tmp_path)
    partial = run / "checkpoints" / ".step_000003.tmp"
    (partial / "model").mkdir(parents=True)
    (partial / "model" / "model.safetensors").write_bytes(b"\0" * 10)
    _train(finished, run, "trainer.steps=3", resume=True)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002", "step_000003"]
    assert f"removed {partial}" in capsys.readouterr().err


def test_a_run_that_fails_or_stops_still_writes_its_summary(finished, tmp_path, monkeypatch) -> None:
    """Before: a step that raised (every sample of it failed, a plugin broke) left no summary.json, so
    the run's folder could not say how it ended. Now it says failed, with the error, or stopped (a
    signal) with how to resume; the UI shows the same."""
    from rlfcore.signals import Interrupted
    from rlfcore.ui.runs import status

    def broken(*_args, **_kwargs):
        raise RuntimeError("every sample of step 1 failed: plugin 'x': open_session timed out")

    monkeypatch.setattr(LocalTrainer, "run", broken)
    with pytest.raises(RuntimeError, match="every sample"):
        _train(finished, tmp_path / "failed")
    summary = json.loads((tmp_path / "failed" / "summary.json").read_text())
    assert summary["status"] == "failed" and "every sample of step 1 failed" in summary["error"]
    assert status(tmp_path / "failed") == "failed"

    def stopped(*_args, **_kwargs):
        raise Interrupted(signal.SIGTERM, "Interrupted during step 3: resume with: rlf train ... --resume")

    monkeypatch.setattr(LocalTrainer, "run", stopped)
    run = _copy(finished, tmp_path)
    with pytest.raises(Interrupted):
        _train(finished, run, "trainer.steps=4", resume=True)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "stopped" and "--resume" in summary["error"] and summary["steps"] == 2
    assert status(run) == "resumable"  # a stopped run with a checkpoint, not "finished"
