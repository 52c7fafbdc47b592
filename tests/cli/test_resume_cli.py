"""A resume needs only the run folder (issue 33, item 2): ``--resume`` continues the run as recorded in
its ``config.yaml``, overrides it was started with included, whatever CONFIG says now; overrides given
with the resume go through the changed-config check; and the command a stopped run prints is run here
verbatim. The run is real: a tiny model built here, GRPO on CPU, stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlfcore.config import load_config
from tests.support import ROOT
from tests.support.rlf import run_rlf

PLUGIN = """
import time

from rlfcore import Score, hookimpl


@hookimpl
def compute_score(sample):
    time.sleep(0.05)  # a plain def scorer, slow enough that SIGTERM lands mid-run (often in it)
    return Score(value=float(sample.response.startswith("A")))
"""

FILE_STEPS = 30
"""``trainer.steps`` in the file: a resume that read the file again would train this far."""


def _project(root: Path) -> Path:
    sub = root / "project"
    sub.mkdir()
    (sub / "plugin.py").write_text(PLUGIN)
    rows = [{"id": f"r{i}", "prompt": f"Say something about {i}."} for i in range(8)]
    (sub / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (sub / "run.yaml").write_text(
        "local_plugins: [plugin.py]\nseed: 3\nmodel:\n  path: model\n"
        "  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 16, num_layers: 1, num_heads: 2, "
        "num_kv_heads: 1, intermediate_size: 32}\n"
        "data: {train: rows.jsonl}\nrollout: {n: 2, max_turns: 1, sampling: {max_tokens: 4}}\n"
        f"trainer: {{steps: {FILE_STEPS}, prompts_per_step: 2, checkpoint_every: 1, samples_per_step: 0}}\n"
        "engine: {device: cpu}\n"
    )
    return sub / "run.yaml"


def _steps(run: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]


def _stopped_run(root: Path) -> tuple[Path, str]:
    """Start ``rlf train project/run.yaml trainer.steps=12 --run-dir run`` in ``root``, stop it with SIGTERM
    after its second step, and return the run folder and the resume command it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLF_")}
    env["PYTHONPATH"] = str(ROOT)
    argv = [sys.executable, "-m", "rlfcore", "train", "project/run.yaml", "trainer.steps=12", "--run-dir", "run"]
    child = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 240
    while not (root / "run" / "checkpoints" / "step_000002" / "trainer.pt").exists():
        assert child.poll() is None and time.monotonic() < deadline, "the run ended before its second step"
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    output, _ = child.communicate(timeout=120)
    printed = re.search(r"Resume with: (.+?) \(it starts at step \d+\)", output)
    assert printed, output
    return root / "run", printed.group(1)


@pytest.mark.slow
def test_the_printed_resume_command_continues_the_recorded_run_and_a_bare_resume_too(tmp_path):
    _project(tmp_path)
    run, command = _stopped_run(tmp_path)
    stopped_at = _steps(run)[-1]
    assert 2 <= stopped_at < 12
    assert (run / "config.yaml").read_text().startswith("# rlf-source: ")
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["steps"] == 12

    words = shlex.split(command)
    assert words[:2] == ["rlf", "train"], command
    out = run_rlf(*words[1:], cwd=tmp_path)  # verbatim, from where the run started
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Resuming with the run's recorded config" in out.stderr
    assert _steps(run) == list(range(1, 13))  # the recorded 12, not the file's 30
    assert json.loads((run / "summary.json").read_text())["steps"] == 12
    assert yaml.safe_load((run / "config.yaml").read_text())["trainer"]["steps"] == 12

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()  # no CONFIG, another folder: the record still finds the model, data and plugin
    more = run_rlf("train", "--run-dir", str(run), "--resume", "trainer.steps=13", cwd=elsewhere)
    assert more.returncode == 0, more.stdout + more.stderr
    assert "trainer.steps: 12 -> 13" in more.stderr and _steps(run) == list(range(1, 14))

    refused = run_rlf("train", "--run-dir", str(run), "--resume", "trainer.steps=14", "rollout.n=4", cwd=elsewhere)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "rollout.n: 2 -> 4" in refused.stderr and "--allow-config-change" in refused.stderr
    assert _steps(run)[-1] == 13


def test_a_saved_config_reads_its_paths_from_the_original_folder(tmp_path):
    config = _project(tmp_path)
    loaded, _ = load_config(config, ["trainer.steps=4"])
    loaded.save(tmp_path / "saved.yaml")
    again, manager = load_config(tmp_path / "saved.yaml")
    assert again.source == config.resolve() and again.base_dir == config.parent.resolve()
    assert again.path(again.data.train) == config.parent.resolve() / "rows.jsonl"
    assert again.trainer.steps == 4 and "plugin" in manager.infos
    assert again.resolved() == loaded.resolved()


def test_resume_without_config_names_what_it_needs(tmp_path):
    out = run_rlf("train", "--run-dir", str(tmp_path / "nothing"), "--resume", cwd=tmp_path)
    assert out.returncode == 2
    assert f"--resume without CONFIG reads {tmp_path / 'nothing' / 'config.yaml'}, which does not exist" in out.stderr
    bare = run_rlf("train", cwd=tmp_path)
    assert bare.returncode == 2 and "Missing argument 'CONFIG'" in bare.stderr
