"""A verl run's curves in ``rlf ui``: lines written by verl's own FileLogger (the class verl's
``file`` logger uses, run here with verl's real metric names) read back in rlf's names, live."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("starlette")
tracking = pytest.importorskip("verl.utils.tracking")

from rlfcore.backends.verl import METRICS_FILE  # noqa: E402
from rlfcore.rundata.metrics import from_verl  # noqa: E402

TOKEN = "ui-test-token-0123456789"


def verl_step(step: int) -> dict[str, object]:
    """One step's metrics in verl 0.9.1's names (metric_utils, the actor's losses, marked_timer), numpy
    scalars included as verl logs them."""
    return {
        "critic/score/mean": np.float32(0.25 * step),
        "critic/score/max": 1.0,
        "response_length/mean": 40.0 + step,
        "response_length/clip_ratio": 0.0,
        "actor/pg_loss": -0.1 * step,
        "actor/grad_norm": 2.0,
        "actor/kl_loss": 0.01 * step,
        "actor/ppo_kl": 0.5,
        "actor/pg_clipfrac": 0.05,
        "tool_call_counts/mean": np.float64(1.5),
        "timing_s/gen": 3.0,
        "timing_s/reward": 0.5,
        "timing_s/update_actor": 2.0,
        "timing_s/step": 6.0,
        "perf/max_memory_allocated_gb": 12.0,
    }


@pytest.fixture()
def verl_logger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """verl's FileLogger writing a verl run folder's metrics file, where the backend points it."""
    run = tmp_path / "runs" / "verl-run"
    (run / "verl").mkdir(parents=True)
    (run / "verl" / "config.yaml").write_text("trainer: {}\n")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(run / METRICS_FILE))
    logger = tracking.FileLogger("rlf", "run")
    yield run, logger
    logger.finish()


def test_file_logger_lines_get_rlf_names_and_keep_the_rest(verl_logger) -> None:
    run, logger = verl_logger
    logger.log(verl_step(2), step=2)
    line = json.loads((run / METRICS_FILE).read_text().splitlines()[0])
    row = from_verl(line)
    assert row["step"] == 2 and row["reward_mean"] == 0.5 and row["response_length"] == 42.0
    assert (row["loss"], row["grad_norm"], row["kl"], row["clip_frac"]) == (-0.2, 2.0, 0.02, 0.05)
    assert row["tool_calls_per_trajectory"] == 1.5
    assert (row["rollout_s"], row["score_s"], row["train_s"], row["step_s"]) == (3.0, 0.5, 2.0, 6.0)
    assert row["actor/ppo_kl"] == 0.5 and row["perf/max_memory_allocated_gb"] == 12.0  # unmapped: verl's names
    assert "critic/score/mean" not in row and "timing_s/gen" not in row
    assert from_verl({"step": 3, "data": {"actor/ppo_kl": 0.4}})["kl"] == 0.4  # no KL loss: the policy KL
    assert from_verl({"step": 4, "data": "junk"}) == {"step": 4}


def test_run_page_and_metrics_feed_draw_a_verl_run_live(verl_logger) -> None:
    from starlette.testclient import TestClient

    from rlfcore.ui import create_app

    run, logger = verl_logger
    logger.log(verl_step(1), step=1)
    with TestClient(
        create_app(run.parent, poll_ms=500, token=TOKEN), base_url="http://127.0.0.1", headers={"X-RLF-Token": TOKEN}
    ) as client:
        table = client.get("/runs-table").text
        row = table.split('data-run="verl-run"')[1].split("</tr>")[0]
        assert "verl" in row and "running" in row and "0.250" in row
        page = client.get("/run?run=verl-run")
        assert page.status_code == 200 and 'id="charts"' in page.text
        first = client.get("/api/metrics?run=verl-run&file=metrics.jsonl").json()
        assert [(r["step"], r["reward_mean"]) for r in first["rows"]] == [(1, 0.25)]
        logger.log(verl_step(2), step=2)
        more = client.get(f"/api/metrics?run=verl-run&offset={first['offset']}").json()
        assert [(r["step"], r["rollout_s"]) for r in more["rows"]] == [(2, 3.0)]  # only the appended line
        assert more["offset"] == (run / METRICS_FILE).stat().st_size
        assert client.get(f"/api/metrics?run=verl-run&offset={more['offset']}").json()["rows"] == []


def test_a_resumed_verl_run_keeps_the_curves_of_its_kept_steps(verl_logger) -> None:
    """verl's file logger truncates its file on start: ``--resume`` sets the checkpointed steps aside first."""
    from starlette.testclient import TestClient

    from rlfcore.backends.verl.launch import keep_metrics
    from rlfcore.ui import create_app

    run, logger = verl_logger
    for step in (1, 2, 3):
        logger.log(verl_step(step), step=step)
    logger.finish()
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2\n")
    keep_metrics(run, resume=True)
    assert not (run / METRICS_FILE).exists()
    resumed = tracking.FileLogger("rlf", "run")  # what verl opens when the resumed run starts
    try:
        resumed.log(verl_step(3), step=3)
        with TestClient(
            create_app(run.parent, poll_ms=500, token=TOKEN),
            base_url="http://127.0.0.1",
            headers={"X-RLF-Token": TOKEN},
        ) as client:
            first = client.get("/api/metrics?run=verl-run").json()
            assert [r["step"] for r in first["rows"]] == [1, 2, 3]
            resumed.log(verl_step(4), step=4)
            more = client.get(f"/api/metrics?run=verl-run&offset={first['offset']}").json()
            assert [r["step"] for r in more["rows"]] == [4]
            row = client.get("/runs-table").text.split('data-run="verl-run"')[1].split("</tr>")[0]
            assert "<td>4</td>" in row and "1.000" in row  # the runs list reads the current file's last line
    finally:
        resumed.finish()
    keep_metrics(run, resume=True)  # resumed again from step 2: step 3 and 4 are run again
    assert [json.loads(line)["step"] for line in (run / "verl_metrics.earlier.jsonl").read_text().splitlines()] == [
        1,
        2,
    ]
    keep_metrics(run, resume=False)  # a fresh run starts its curves anew
    assert not (run / "verl_metrics.earlier.jsonl").exists() and not (run / METRICS_FILE).exists()
