"""Backends behind one interface: ``rlf train --backend NAME`` picks one, and each refuses, naming
it, what it cannot honour (before anything starts) instead of ignoring it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlfcore.backends import BACKENDS, get_backend
from rlfcore.backends.base import Backend, BackendError, ClusterOptions, TrainRequest
from rlfcore.cli import main

CONFIG = """
model:
  path: model
  init: {texts: [rows.jsonl], vocab_size: 300, hidden_size: 16, num_layers: 1, num_heads: 2, num_kv_heads: 1, intermediate_size: 32}
data: {train: rows.jsonl}
trainer: {steps: 3, prompts_per_step: 2}
"""


def _project(tmp_path: Path, config: str = CONFIG) -> Path:
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"id": f"r{i}", "prompt": f"Say {i}."}) + "\n" for i in range(5))
    )
    (tmp_path / "run.yaml").write_text(config)
    return tmp_path / "run.yaml"


def _rlf(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(list(args))
    out, err = capsys.readouterr()
    return int(stopped.value.code or 0), out, err


def test_every_backend_is_a_backend_under_its_name():
    for name in BACKENDS:
        backend = get_backend(name)
        assert isinstance(backend, Backend) and backend.name == name
    with pytest.raises(KeyError, match="known: local, verl"):
        get_backend("slurm")


@pytest.mark.parametrize(
    "args, named",
    [
        (["--gpus", "8"], "--gpus 8"),
        (["--nodes", "2", "--ray-address", "head:6379"], "--nodes 2, --ray-address head:6379"),
        (["--rollout", "sglang"], "--rollout sglang"),
        (["--tp", "2"], "--tp 2"),
        (["--", "trainer.logger=[console]"], "-- trainer.logger=[console]"),
    ],
)
def test_the_local_backend_refuses_cluster_options_naming_them(tmp_path, capsys, args, named):
    config = _project(tmp_path)
    code, _, err = _rlf(capsys, "train", str(config), "--run-dir", str(tmp_path / "run"), *args)
    assert code == 2 and named in err and "local backend" in err and "verl" in err, err
    assert not (tmp_path / "run").exists() and not (tmp_path / "model").exists()  # nothing started


def test_the_verl_backend_refuses_resume_from_naming_it(tmp_path):
    checkpoint = tmp_path / "run" / "checkpoints" / "step_000002"
    checkpoint.mkdir(parents=True)
    request = TrainRequest(str(_project(tmp_path)), tmp_path / "run", resume=True, resume_from=checkpoint)
    with pytest.raises(BackendError, match=r"--resume-from .*step_000002 is for --backend local; use --resume"):
        get_backend("verl").prepare(request)


def test_a_local_dry_run_checks_the_run_and_starts_nothing(tmp_path, capsys):
    config = _project(tmp_path)
    code, out, err = _rlf(capsys, "train", str(config), "--run-dir", str(tmp_path / "run"), "--dry-run")
    assert code == 0, err
    assert "data.train: 5 rows; 3 GRPO steps of 2 prompts" in out
    assert "built from model.init when the run starts" in out and "nothing started" in out
    assert "prompts_per_step: 2" in out  # the resolved config
    assert not (tmp_path / "run").exists() and not (tmp_path / "model").exists()


def test_a_local_dry_run_fails_as_the_run_would(tmp_path, capsys):
    config = _project(tmp_path, "model: {path: nowhere}\ndata: {train: rows.jsonl}\n")
    code, _, err = _rlf(capsys, "train", str(config), "--run-dir", str(tmp_path / "run"), "--dry-run")
    assert code == 2 and "model.path" in err and "nowhere" in err, err
    (tmp_path / "held" / "checkpoints").mkdir(parents=True)
    request = TrainRequest(str(_project(tmp_path)), tmp_path / "held")
    backend = get_backend("local")
    with pytest.raises(ValueError, match="already holds a run: pass --resume"):
        backend.dry_run(backend.prepare(request), echo=lambda line: None)


def test_cluster_options_name_only_what_was_set():
    assert ClusterOptions().set_options() == {}
    assert ClusterOptions(gpus_per_node=4, rollout="sglang").set_options() == {"--gpus": 4, "--rollout": "sglang"}
