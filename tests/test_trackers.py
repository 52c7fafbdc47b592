"""``trainer.loggers``: each tracker is the real library, offline, and what it wrote is read back with
that library's own reader (TensorBoard's event accumulator, MLflow's client on its local file store,
Trackio's local database) or, for W&B's offline run file, its documented record format."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rlfcore.trackers import Trackers
from tests.support import ROOT
from tests.support.rlf import run_rlf
from tests.support.trackers import CONFIG, log_a_run


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trackers = Trackers.open(["tensorboard"], tmp_path, "rlf", CONFIG)
    log_a_run(trackers)
    trackers.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["reward_mean", "sft/loss", "tool_use"]  # numbers only
    assert [(e.step, e.value) for e in events.Scalars("reward_mean")] == [(1, 0.25), (2, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("sft/loss")] == [(1, 2.5), (2, 1.5)]


def test_mlflow_local_file_store_read_back_and_resumed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    trackers = Trackers.open(["mlflow"], tmp_path, "rlf-test", CONFIG)
    log_a_run(trackers)
    trackers.close()
    run_id = json.loads((tmp_path / "trackers.json").read_text())["mlflow"]
    resumed = Trackers.open(["mlflow"], tmp_path, "rlf-test", CONFIG)  # --resume: the same MLflow run
    resumed.log({"step": 3, "reward_mean": 1.0}, 3)
    resumed.close()

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    run = client.get_run(run_id)
    assert run.info.run_name == tmp_path.name and run.info.status == "FINISHED"
    assert run.data.params["trainer.lr"] == "0.001"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "reward_mean")] == [
        (1, 0.25),
        (2, 0.75),
        (3, 1.0),
    ]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "sft/loss")] == [(1, 2.5), (2, 1.5)]
    assert client.get_experiment(run.info.experiment_id).name == "rlf-test"


def test_a_tracker_that_fails_mid_run_is_dropped_with_a_warning(tmp_path, monkeypatch, capsys):
    import shutil

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    trackers = Trackers.open(["mlflow", "tensorboard"], tmp_path, "rlf-test", CONFIG)
    trackers.log({"reward_mean": 0.5}, 1)
    shutil.rmtree(tmp_path / "mlruns")  # the store is gone, as a server that went down
    trackers.log({"reward_mean": 0.6}, 2)
    trackers.log({"reward_mean": 0.7}, 3)
    trackers.close()
    err = capsys.readouterr().err
    assert err.count("warning: tracker mlflow failed and is dropped for this run (Exception: ") == 1
    assert "mlruns' does not exist.); metrics.jsonl keeps every step" in err
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("reward_mean")] == [1, 2, 3]  # the others keep logging


def _wandb_records(path: Path) -> list[bytes]:
    """The records of a W&B ``.wandb`` file: a 7-byte header, then LevelDB's log format (32 KiB
    blocks of chunks, each a 4-byte checksum, 2-byte length, 1-byte type: full, first, middle, last)."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    records, pos, pending = [], 7, b""
    while pos + 7 <= len(data):
        room = 32768 - pos % 32768
        if room < 7:  # a block's tail too short for a header is padding
            pos += room
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        pending += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            records.append(pending)
            pending = b""
    return records


@pytest.mark.slow
def test_wandb_offline_run_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    trackers = Trackers.open(["wandb"], tmp_path, "rlf-test", CONFIG)
    log_a_run(trackers)
    trackers.close()
    run_id = json.loads((tmp_path / "trackers.json").read_text())["wandb"]
    [file] = (tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb")

    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + 30  # W&B's service process may still be flushing the file after finish()
    while True:
        rows, runs = [], []
        for data in _wandb_records(file):
            record = pb.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "history":
                rows.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
            elif kind == "run":
                runs.append((record.run.project, record.run.display_name))
        if (runs and len(rows) >= 4) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert runs and runs[0] == ("rlf-test", tmp_path.name), runs
    grpo = [(r["step"], r["reward_mean"]) for r in rows if "reward_mean" in r]
    sft = [(r["sft/step"], r["sft/loss"]) for r in rows if "sft/loss" in r]
    assert grpo == [(1, 0.25), (2, 0.75)] and sft == [(1, 2.5), (2, 1.5)]


@pytest.mark.slow
def test_trackio_local_database_read_back(tmp_path):
    """In its own process: Trackio reads TRACKIO_DIR once, when it is imported."""
    script = textwrap.dedent(
        f"""
        import json
        from pathlib import Path
        from rlfcore.trackers import Trackers
        from tests.support.trackers import CONFIG, log_a_run
        trackers = Trackers.open(["trackio"], Path({str(tmp_path)!r}), "rlf-test", CONFIG)
        log_a_run(trackers)
        trackers.close()
        from trackio.sqlite_storage import SQLiteStorage
        print(json.dumps(SQLiteStorage.get_logs("rlf-test", {tmp_path.name!r})))
        """
    )
    env = {"TRACKIO_DIR": str(tmp_path / "trackio"), "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stdout + out.stderr
    logs = json.loads(out.stdout.strip().splitlines()[-1])
    assert [(r["step"], r["reward_mean"]) for r in logs if "reward_mean" in r] == [(1, 0.25), (2, 0.75)]
    assert [(r["step"], r["sft/loss"]) for r in logs if "sft/loss" in r] == [(1, 2.5), (2, 1.5)]
    assert (tmp_path / "trackio" / "rlf-test.db").exists()


def test_a_tracker_that_is_not_installed_is_a_config_error_naming_the_package(tmp_path):
    """``sys.modules[name] = None`` makes a package unimportable, as if it were not installed."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import sys\nsys.modules['wandb'] = None\nsys.modules['mlflow'] = None\n"
    )
    (tmp_path / "run.yaml").write_text("trainer: {loggers: [tensorboard, wandb, mlflow]}\n")
    out = run_rlf("config", str(tmp_path / "run.yaml"), site=tmp_path / "site", cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert (
        "trainer.loggers[1]: tracker 'wandb' needs the wandb package, which is not installed: pip install wandb "
        "(or pip install 'rlfcore[trackers]')"
    ) in out.stderr
    assert "trainer.loggers[2]: tracker 'mlflow' needs the mlflow-skinny package" in out.stderr
    assert "loggers[0]" not in out.stderr  # tensorboard is installed
    bad = run_rlf("config", str(tmp_path / "run.yaml"), "trainer.loggers=[neptune]", cwd=tmp_path)
    assert bad.returncode == 2 and "trainer.loggers[0]" in bad.stderr and "'tensorboard'" in bad.stderr
